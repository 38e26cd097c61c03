/*
 * optfast.h - the layout optprobe.S's fast path reads: offsets into struct kprw_rt,
 * struct kprw_hot, the thread contexts, the clock and the record, as numbers the
 * assembler can use. rt_opt.c checks every one against the C definitions
 * (_Static_assert), so a change of a struct that moves a field fails the build.
 */
#ifndef KPRW_OPTFAST_H
#define KPRW_OPTFAST_H

/* struct kprw_rt */
#define OF_RT_STATE 40
#define OF_RT_NPOINTS 48
#define OF_RT_DISABLE_ALL 68
#define OF_RT_KEYMODE 148
#define OF_RT_HAS_RDPID 152
#define OF_RT_HAS_PREFETCHW 156
#define OF_RT_CLK_TSC 172
#define OF_RT_TRACE_DATA 248
#define OF_RT_REC_HITS 284
#define OF_RT_REC_EXT 288
#define OF_RT_TS_BASE 296
#define OF_RT_HOT 344
#define OF_RT_EV_CTL 552
#define OF_RT_TRACING_OFF 584
#define OF_RT_CTL_GEN 592
#define OF_RT_CTL_SEEN 600
#define OF_RT_LIVE_LISTS 648
#define OF_RT_TCB_SLOT 752
#define OF_RT_REC_FAST 760
#define OF_RT_FAST_CFG 764
#define OF_RT_SW_GEN 768
#define OF_RT_REC_FULL 784
#define OF_RT_CPU_RSEQ 792
#define OF_RT_TRACE 240
#define OF_TRACE_LOST 32        /* struct kprw_trace_hdr's lost */
#define OF_RT_PROBES 24
/* struct kprw_probe: 80 bytes, its point first */
#define SZ_PROBE 80
#define OF_RT_CTR_BASE 224
#define OF_RT_CTR_STRIDE 232
/* struct kprw_rstack: 4096 bytes (a shift of 12), its entries (struct kprw_rent, 32: a
 * shift of 5) from 16; KPRW_RSTACK_N of them */
#define SZ_RSTACK 4096
#define SH_RSTACK 12
#define OF_RS_N 8
#define OF_RS_E 16
#define SH_RENT 5
#define FC_RSTACK_N 127
/* struct kprw_probe_state: 32 bytes (a shift of 5), flags */
#define SH_STATE 5
#define OF_STATE_FLAGS 16
/* struct kprw_hot: 64 bytes (a shift of 6) */
#define SH_HOT 6
#define OF_HOT_PI 4
#define OF_HOT_OPEN 8
#define OF_HOT_E 16
#define OF_HOT_DLEN 20
#define OF_HOT_KIND 24 /* kind, deleg, spev, nops: one 32-bit word */
#define OF_HOT_OP 28
#define OF_HOT_RPI 28 /* CALL: the return event's probe */
#define OF_HOT_RE 32  /* CALL: its event */
#define OF_HOT_RPLAIN 36 /* CALL: it has no fetches */
#define OF_HOT_RDELEG 37 /* CALL: it has a filter or triggers */
#define OF_HOT_RS 38  /* CALL: its frames may go on the return stack */
#define OF_HOT_ROPEN 40 /* CALL, TAIL: open, for the return event */
/* struct kprw_fplan_op: 12 bytes */
#define SZ_OP 12
#define OF_OP_REG 1
#define OF_OP_SLOT 3
#define OF_OP_DEST 8
/* struct kprw_tctx: 64 bytes (a shift of 6); struct kprw_tblk: 64 too (the tctx offset) */
#define SH_TCTX 6
#define OF_TCTX_TID 8
#define OF_TCTX_BUSY 12
#define OF_TCTX_COMM_NS 16
#define OF_TCTX_COMM_DL 56
#define OF_TBLK_NREC 8          /* struct kprw_tblk's nrec */
#define OF_TBLK_NRET 16         /* struct kprw_tblk's nret */
#define OF_TBLK_TSC 24          /* struct kprw_tblk's tc_tsc, tc_span, tc_mult, tc_rel, tc_seq: */
#define OF_TBLK_TSPAN 32        /* the thread's copy of the clock (TCLK_NOW) */
#define OF_TBLK_TMULT 40
#define OF_TBLK_TREL 48
#define OF_TBLK_TSEQ 56
#define FC_TCTX_BYTES 65536 /* the table: KPRW_NTCTX contexts */
/* struct kprw_tshare */
#define OF_TSH_LIVE 65552
#define OF_TSH_OFF 65556
/* struct kprw_stats */
#define OF_STATS_RECORDS 48
#define OF_STATS_RETTRAMPS 32
#define OF_STATS_LOST 56

/* the fast path's frame: where FAST_SAVE and the stub leave the registers it saves */
#define FF_R11 8
#define FF_R10 16
#define FF_R9 24
#define FF_R8 32
#define FF_RDI 40
#define FF_RSI 48
#define FF_RDX 56
#define FF_RAX 64
#define FF_RCX 80

/* constants of rt.h, rt_trace.h, rt_ring.h and the ABI header */
#define FC_HOT_EVENT 1          /* KPRW_HOT_EVENT */
#define FC_HOT_EXIT 2           /* KPRW_HOT_EXIT */
#define FC_HOT_CALL 3           /* KPRW_HOT_CALL */
#define FC_HOT_TAIL 4           /* KPRW_HOT_TAIL */
#define FC_HOT_PLAN 0xff        /* KPRW_HOT_PLAN */
#define FC_HOT_FAST 0x20        /* KPRW_HOT_FAST */
#define FC_HOT_NOPS 0x0f        /* KPRW_HOT_NOPS */
#define FC_HOT_SEQ 0x10         /* KPRW_HOT_SEQ */
#define FC_SF_OFF 3             /* KPRW_SF_DISABLED | KPRW_SF_UNREG */
#define FC_CTL_SOFT_DISABLED 1  /* KPRW_CTL_SOFT_DISABLED */
#define FC_KEY_FSBASE 1         /* KPRW_KEY_FSBASE */
#define FC_KEY_FS0 2            /* KPRW_KEY_FS0 */
#define FC_TCTX_HASH 0x9E3779B97F4A7C15 /* kprw_tctx_hash: k * this >> 54 */
#define FC_TCTX_HASH_SHIFT 54
#define FC_TCB_TID 0x2d0        /* KPRW_GLIBC_TID: glibc's struct pthread tid */
#define FC_TCB_SELF 0x10        /* KPRW_GLIBC_SELF: tcbhead_t.self */
#define FC_TCB_SLOT 0x278       /* KPRW_TCB_SLOT: the TCB's word that names the context */
#define FC_COMM_REFRESH_NS 1000000 /* KPRW_COMM_REFRESH_NS */
#define FC_TS_FAST_BITS 47       /* a time below 1 << this needs no ext part (need_ext: TS_MAX - 2) */
#define FC_REC_END_SHIFT 39     /* REC_END_SHIFT */
#define FC_REC_AHEAD 1024       /* REC_AHEAD */
#define FC_CREC_RET 0x2000      /* KPRW_CREC_RET */
#define FC_CREC_HIT 0x8000      /* KPRW_CREC_HIT */
#define FC_CREC_COMMITTED 0x8000 /* KPRW_CREC_COMMITTED */

#endif
