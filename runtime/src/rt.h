/* rt.h - internal declarations of the kprewrite runtime (freestanding: no libc). */
#ifndef KPRW_RT_H
#define KPRW_RT_H

#include "kprewrite_abi.h"

/* Everything here is hidden: references are PC-relative, never through a GOT. */
#pragma GCC visibility push(hidden)

typedef kprw_u8 u8;
typedef kprw_u16 u16;
typedef kprw_u32 u32;
typedef kprw_u64 u64;
typedef long long s64;
typedef unsigned long uptr;

#define NULL ((void *)0)
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- raw system calls ---- */
#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_fstat 5
#define SYS_mmap 9
#define SYS_mprotect 10
#define SYS_munmap 11
#define SYS_rt_sigaction 13
#define SYS_rt_sigprocmask 14
#define SYS_rt_sigreturn 15
#define SYS_sched_yield 24
#define SYS_madvise 28
#define SYS_getpid 39
#define SYS_getuid 102
#define SYS_getgid 104
#define SYS_geteuid 107
#define SYS_getegid 108
#define SYS_exit_group 231
#define SYS_flock 73
#define SYS_ftruncate 77
#define SYS_prctl 157
#define SYS_gettid 186
#define SYS_clock_gettime 228
#define SYS_tgkill 234
#define SYS_sched_getaffinity 204
#define SYS_getcpu 309
#define SYS_process_vm_readv 310
#define SYS_openat 257
#define O_RDONLY 0

static inline long sys0(long n)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
	return r;
}
static inline long sys1(long n, long a)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
	return r;
}
static inline long sys2(long n, long a, long b)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b) : "rcx", "r11", "memory");
	return r;
}
static inline long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}
static inline long sys4(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
}
static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}

/* ---- kernel ABI structures (x86-64) ---- */
#define SIGILL 4
#define SIGTRAP 5
#define SIGABRT 6
#define SIGBUS 7
#define SIGFPE 8
#define SIGSEGV 11
#define SIGBIT(s) (1ul << ((s) - 1))
/* the fault signals the fast reads take: a thread that blocks one reads by system call */
#define KPRW_FAULT_SIGS (SIGBIT(SIGBUS) | SIGBIT(SIGSEGV))
#define EFAULT 14
#define SS_DISABLE 2
#define KPRW_FAST_LO 0x10000ul        /* fast reads: from here (vm.mmap_min_addr's default) */
#define KPRW_FAST_HI 0x7ffffffff000ul /* to here (the 47-bit user half's end) */
#define SIG_DFL 0ul
#define SIG_IGN 1ul
#define SA_SIGINFO 0x4ul
#define SA_ONSTACK 0x08000000ul
#define SA_RESTORER 0x04000000ul
#define SA_NODEFER 0x40000000ul
#define SA_RESTART 0x10000000ul
#define SIG_UNBLOCK 1
#define SI_KERNEL 0x80
#define TRAP_BRKPT 1
#define TRAP_TRACE 2
#define X86_TF 0x100ul

struct k_sigaction {
	unsigned long handler;
	unsigned long flags;
	unsigned long restorer;
	unsigned long mask;
};

struct k_siginfo {
	int si_signo;
	int si_errno;
	int si_code;
	int pad;
	unsigned long si_addr;
	char rest[128 - 24];
};

struct k_sigcontext {
	unsigned long r8, r9, r10, r11, r12, r13, r14, r15;
	unsigned long di, si, bp, bx, dx, ax, cx, sp, ip, flags;
	unsigned short cs, gs, fs, ss;
	unsigned long err, trapno, oldmask, cr2, fpstate;
	unsigned long reserved1[8];
};

struct k_ucontext {
	unsigned long uc_flags;
	void *uc_link;
	void *ss_sp;
	int ss_flags;
	int pad;
	unsigned long ss_size;
	struct k_sigcontext mc;
	unsigned long sigmask;
};

struct k_timespec {
	long sec, nsec;
};

struct k_iovec {
	void *base;
	unsigned long len;
};

struct k_stat {
	unsigned long st_dev, st_ino, st_nlink;
	unsigned int st_mode, st_uid, st_gid, pad0;
	unsigned long st_rdev;
	long st_size, st_blksize, st_blocks;
	unsigned long rest[9];
};

/* ---- atomics ---- */
#define atomic_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define atomic_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define atomic_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define atomic_cas(p, o, n) \
	__atomic_compare_exchange_n((p), (o), (n), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* ---- runtime global state (rt_init.c) ---- */
/* A kretprobe's instance pool (rt_kretprobe.c): what its entry and return read to find
 * an instance, in one cache line (as separate per-probe arrays, four or five lines each
 * time, cold in a program with thousands of return probes) */
struct kprw_pool {
	u64 off;      /* byte offset of its first instance in ri_mem */
	u64 off_hi;   /* of its instance ri_lo (the second part of a larger maxactive) */
	u32 first;    /* index of its first instance */
	u32 first_hi; /* of its instance ri_lo */
	u32 count;    /* instances (its maxactive); 0: no kretprobe */
	u32 stride;   /* bytes per instance */
	u32 elen;     /* fetch-program entry data bytes per instance */
	u32 rs;       /* a trace-only return event: its frames may go on the return stack */
};

struct kprw_rt {
	const struct kprw_header *hdr;
	u64 bias;
	const struct kprw_point *points;
	const struct kprw_probe *probes;
	const struct kprw_event *events;
	struct kprw_probe_state *state;
	u32 npoints, nprobes, nevents;
	u32 nfree;         /* free live points after points[npoints - 1] (rt_live.c) */
	u32 secure;        /* AT_SECURE */
	u32 disable_all;   /* 1: KPREWRITE_DISABLE=all or KPRW_HF_DISABLE_ALL; | KPRW_DISARM */
	u32 debug;
	u32 ncpus;
	int init_done;     /* start-up's first part ran: probes fire (start_early) */
	int late_done;     /* and its second: signal guard, fast reads, C handlers (start_late) */
	int user_started;  /* C handler probes registered in the first part (no kprewrite_init) */
	u32 at_reloc;      /* the first part ran while the loader relocated the image */
	u32 proc_shared;   /* joined another image's runtime state (rt_proc.c) */
	const char *trace_path_shown; /* for KPREWRITE_DEBUG */
	u64 hwcap2;        /* AT_HWCAP2 */
	u64 at_vdso;       /* AT_SYSINFO_EHDR: the vDSO's ELF header (0: none) */
	u64 at_base;       /* AT_BASE: the dynamic linker's load address (0: static) */
	u64 at_entry;      /* AT_ENTRY: the executable's entry point */
	u32 library;       /* started from a shared library's DT_INIT (kprewrite_rt_lib_init) */
	u32 keymode;       /* KPRW_KEY_*: how rt_thread.c finds the thread pointer */
	u32 has_rdpid;     /* CPUID: rdpid reads the CPU number in ~1 ns */
	u32 has_prefetchw; /* CPUID: prefetchw (rt_ring.h's rec_at) */
	u32 valgrind;      /* kprw_valgrind's answer + 1, 0 before it is asked */
	u32 tsc_ok;        /* CPUID: invariant TSC, timestamps extrapolate from it */
	u32 clock_mode;    /* KPRW_CLOCK_*: the record clock (the trace file's; rt_clock.c) */
	u32 clk_tsc;       /* tsc_ok and the record clock is tsc: kprw_clock_fast's fast path */
	u32 clock_want;    /* KPRW_CLOCK_*: the clock a trace file this image creates takes */
	u32 reads_xmm;     /* some event's fetch reads %xmmN: int3 hits load the SSE registers */
	u32 opt_tmpl_len;  /* bytes of the detour template (the DCR copy follows) */
	u32 records_late;  /* every event live: records readied at the first switch on */
	unsigned long old_trap_handler; /* SIGTRAP disposition before ours */
	u32 fast_read;     /* fetches read with the fault-catching copy (rt_init.c, rt_fault.c) */
	u32 minsigstk;     /* AT_MINSIGSTKSZ: bytes a signal frame may need */
	u32 hstack_need;   /* signal stack a C handler hit needs: the hooks' stack plus the
	                      runtime's frames above the handler (0 = no check) */
	u8 *scratch;       /* per thread context, KPRW_MAX_REC_DATA bytes: records with strings
	                      are fetched once into it (rt_dispatch.c); NULL: measured, then fetched */
	/* counters: {hit, nmissed} of probe i at ctr_base + i*ctr_stride */
	u8 *ctr_base;
	u64 ctr_stride;
	/* trace file */
	struct kprw_trace_hdr *trace;
	u8 *trace_data;
	u64 trace_data_size;
	u64 trace_block;   /* the size of a thread's trace blocks after its first (rt_ring.c) */
	u64 image_id;      /* hdr->image_id, for records */
	u32 trace_image;   /* this image's entry in the trace file's images */
	u32 rec_hits;      /* it has one: records count their probes' hits */
	u32 rec_ext;       /* records carry their event id and site (KPRW_CREC_EXT): the
	                      file has no description of the image to name them by */
	u64 ts_base;       /* the trace header's ts_base */
	u64 *ring_queue;   /* ring mode (kprewrite record): the block queue; NULL: direct */
	u32 ring_nblocks;
	u32 ring_over;     /* overwrite mode: writers give the blocks they leave back */
	u64 *ring_mapped;  /* a bit per ring block this process made present (rt_ring.c) */
	u64 *fastev;       /* a bit per point: its hits take kprw_trace_event (rt_dispatch.c) */
	u64 *spev;         /* a bit per point with a return event: its entry records carry
	                      the stack pointer (rt_dispatch.c) */
	struct kprw_hot *hot; /* per point: its record path's data (rt_dispatch.c), NULL: none */
	s64 rseq_off;      /* this thread's rseq area from the thread pointer (rt_rseq.c), 0: none */
	u32 rseq_shards;   /* per-CPU counting: shards it needs, 0: count-only detours lock */
	u32 rseq_unverified; /* rseq_off taken before the thread library registered the area */
	u32 hits_per_cpu;  /* the image only counts (count-only detours and int3 probes of
	                      count-only events) and its shards are armed: int3 hits count in
	                      this CPU's shard too, so the file's counters are written only on
	                      a miss and start-up neither writes nor populates them (rt_tracefile.c) */
	u32 populate;      /* MADV_POPULATE_WRITE works (rt_ring.h) */
	/* the trace file's mappings (header and records, counter window, appended counters,
	 * shards, control area): a fault in one means the file shrank under us (rt_tracefile.c) */
	struct kprw_span { uptr addr; u64 len; } trace_maps[6];
	u32 ntrace_maps;
	u32 trace_detached; /* the mappings were replaced by memory: nothing reaches the file */
	const char *trace_path;
	/* kretprobe instances */
	u64 *ri_keys;      /* ri_total keys: address of the replaced return address, 0 = free */
	u8 *ri_mem;        /* instance memory */
	u32 ri_total;
	u32 ri_lo;         /* instances per probe in the first part (the default maxactive) */
	struct kprw_pool *ri_pool; /* per probe: its instances (zero for a probe that is no kretprobe) */
	long *ev_fixed;    /* per event: kprw_fetch_fixed_size of its program, computed once
	                      (NULL: computed per record) */
	struct kprw_fplan *ev_plan; /* per event: its compiled fetch plan, n = ~0u: none (an
	                         event that fetches nothing: n 0, fixed 0, never written) */
	const struct kprw_fprog **ev_filter; /* per event: its filter, decoded once; NULL: none (or
	                         malformed: every hit is recorded rather than lost) */
	const struct kprw_evtrig **ev_trig; /* per event: its triggers, decoded once; NULL: none
	                         (allocated with ev_filter) */
	u32 *ev_ctl;       /* per event: KPRW_CTL_* flags, in the trace file's control area
	                      (shared by every process of the file) or in memory; NULL: none */
	u64 *trig_count;   /* per trigger slot: fires left (~0: unlimited), after ev_ctl */
	u64 *user_regs;    /* per probe: two words, how a C handler registered it (KPRW_UR_*),
			      after trig_count (KPRW_TIF_USER); NULL: none */
	u32 trig_nslots;   /* slots of trig_count, the spare ones for run-time triggers included */
	u32 trig_limit;    /* slots enable_hist may switch: trig_nslots, raised to the trace file's
			      mapping when run-time controls are applied (rt_ctl.c) */
	u32 *tracing_off;  /* the trace header's tracing_off (set with trace) */
	/* run-time controls (rt_ctl.c): the header's ctl_gen (NULL: no trace file), the
	 * generation this process applied, and the filters and triggers as rewritten */
	u32 *ctl_gen;
	u32 ctl_seen;
	u32 ctl_lock;
	const struct kprw_fprog **ev_filter0;
	const struct kprw_evtrig **ev_trig0;
	/* synthetic events' histograms added at run time, by index (KPRW_CTL_SYNTH entries;
	 * NULL: none): KPRW_CTL_MAX_SYNTH pointers */
	const struct kprw_evtrig **synth_trig;
	/* and their filters set at run time (KPRW_CTL_MAX_SYNTH; NULL: none) */
	const struct kprw_synthflt *synth_filter;
	u64 trace_mapped;  /* bytes of the trace file's first mapping (the header's) */
	/* per probe: the events kprewrite probe added on a prepared site's placeholder
	 * (rt_livedef.c), NULL: none; the array is NULL in an image without such sites */
	struct kprw_livelist **live_lists;
	/* per probe: the struct kprobe register_kprobe() put on a prepared site's
	 * placeholder by its symbol_name (rt_user.c), NULL: none; spare_bound counts them */
	void **spare_user;
	u32 spare_bound;
	const char *ctl_path; /* KPREWRITE_CONTROL */
	u32 ctl_fresh;     /* this process made its image's control area: its words are the
	                      defaults as of trace->ctl_gen == ctl_fresh_gen (rt_live.c's cold) */
	u32 ctl_fresh_gen;
	u32 tables_late;   /* an idle image's tables (KPRW_HF_IDLE), taken unchecked at start-up:
	                      kprw_tables_check() checks them before they are read */
	u32 has;           /* KPRW_HAS_*: what the tables hold, from validate() (start-up passes
	                      over 10,000s of probes are skipped when they have nothing to do) */
	/* a ring that grows by extents appended to the file (kprw_trace_hdr.ring_ext_blocks;
	 * rt_ring.c): block b from ring_n0 on is at trace_data + ring_g0 + (b - ring_n0) *
	 * trace_block, in extent (b - ring_n0) / ring_ext_blocks, which this process maps at
	 * ring_grow_va + k * the extent's bytes once it needs it (a bit of ring_ext_mapped) */
	u32 ring_n0;       /* the blocks in the file's ring (all of them: ring_nblocks) */
	u32 ring_ext_blocks;
	u64 ring_g0;
	u64 *ring_ext;     /* the header's ext[]; NULL: the ring does not grow by extents */
	u64 *ring_ext_mapped;
	u8 *ring_grow_va;
	unsigned long trace_dev, trace_ino; /* the file mapped: an extent is mapped from it only */
	/* KPRW_TCB_SLOT when this thread's context is named in glibc's TCB (rt_thread.c's
	 * tcb_slot_check), else 0: the fast paths then find it at its hash's slot */
	u32 tcb_slot;
	u32 no_tcb_slot;   /* KPREWRITE_THREADKEY=hash */
	u32 rec_fast;      /* rec_hits && !rec_ext: the assembly fast paths' one test of both */
	u32 fast_cfg;      /* the configuration optprobe.S's configured paths assume holds
	                      (kprw_fast_pick): one test instead of one a thing */
	/* the trace header's sw_gen (a file of version 5 on: every writer of a switch bumps
	 * it; NULL: none): a kprw_hot line's open word holds the value under which
	 * hot_line_open found its event open (~0 until then); its hits compare the two */
	u64 *sw_gen;
	u64 hot_base;      /* a kprw_hot line's site is hot_base + its site_off (link-time) */
	/* the file's record area is used up for good (a file without a ring: its head past
	 * the area's end): a record that finds no room in its thread's block is lost, and
	 * optprobe.S's paths count it so without the C path (kprw_new_block) */
	u32 rec_full;
	/* kprewrite_rt_rseq_off while it is published (kprw_rseq_arm), else 0: where the
	 * configured paths (fast_cfg) read the CPU, the thread's rseq area's cpu_id, on
	 * every CPU (rdpid is missing on some, and on some VMs' CPU models) */
	u64 cpu_rseq;
};
#define KPRW_HAS_USER 0x1      /* KPRW_F_USER probes (C handlers) */
#define KPRW_HAS_KRET 0x2      /* KPRW_T_KRETPROBE probes */
#define KPRW_HAS_RECORDS 0x4   /* probes that write records (KPRW_F_TRACE, KPRW_F_USER, verify) */
#define KPRW_HAS_EVENTS 0x8    /* probes of event definitions */
#define KPRW_HAS_DISABLED 0x10 /* probes disabled in the tables or by KPREWRITE_DISABLE */
#define KPRW_HAS_TRAPS 0x20    /* points that are not jump-optimized (int3) */
#define KPRW_HAS_ISTEP 0x40    /* KPRW_PF_INT3STEP points */
#define KPRW_HAS_GATED 0x80    /* jump-optimized points with a gate (not count-only) */
#define KPRW_HAS_COUNT 0x100   /* count-only points */
#define KPRW_HAS_PREFILTER 0x200 /* detours with an inline filter (their refusals count per CPU) */
#define KPRW_HAS_LIVE_ON 0x400 /* live points with a probe that starts wanted (not soft-disabled) */

/* what start-up takes an idle image to hold (KPRW_HF_IDLE): live int3 and jump points,
 * prepared returns, gated live points, events that record once switched on */
#define KPRW_HAS_IDLE (KPRW_HAS_TRAPS | KPRW_HAS_EVENTS | KPRW_HAS_RECORDS | KPRW_HAS_KRET | KPRW_HAS_GATED)
int kprw_tables_check(void); /* rt_init.c: an idle image's tables, before the first read */

extern struct kprw_rt kprw_rt;
extern struct kprw_stats kprewrite_rt_stats;

/* kprw_sw_bump says that a switch which decides whether hits write records closed, its
 * new value stored already (a locked add orders the two): every process's kprw_hot
 * lines that found their events open before it look again (kprw_rt.sw_gen). A switch
 * that opens needs none: a line found its event closed keeps no claim. */
static inline void kprw_sw_bump(void)
{
	u64 *g = __atomic_load_n(&kprw_rt.sw_gen, __ATOMIC_RELAXED);
	if (g)
		__atomic_add_fetch(g, 1, __ATOMIC_SEQ_CST);
}
extern const volatile long long kprewrite_rt_hdr_rel;
extern void kprewrite_rt_rettramp(void);
extern void kprw_restorer(void);

#define RT_ADDR(vaddr) ((uptr)(kprw_rt.bias + (u64)(vaddr)))

/* ---- per-thread state (rt_thread.c) ---- */
#define KPRW_KEY_NONE 0
#define KPRW_KEY_FSBASE 1  /* rdfsbase */
#define KPRW_KEY_FS0 2     /* %fs:0, TLS is set up */
#define KPRW_KEY_PENDING 3 /* no TLS at start-up: ask ARCH_GET_FS until there is */
#define KPRW_KEY_GOM 4     /* a static Go program's thread: %fs:0 is 0, the key is g->m (rt_thread.c) */
#define KPRW_GO_G_M 0x30   /* runtime.g's m: after stack (16), stackguard0/1, _panic, _defer */
/* glibc's x86-64 TCB (struct pthread, tcbhead_t first): where rt_thread.c's
 * tcb_slot_check and optprobe.S's TCTX_FIND read and name a thread's context */
#define KPRW_GLIBC_SELF 0x10  /* tcbhead_t.self: the thread pointer */
#define KPRW_GLIBC_TID 0x2d0  /* struct pthread.tid (after the 0x2c0-byte tcbhead_t and list) */
#define KPRW_TCB_SLOT 0x278   /* the last word of tcbhead_t.__glibc_unused2 (0x80..0x280) */

/* A thread context: one per thread that hit a probe, found by the thread pointer. */
struct kprw_tctx {
	u64 key;      /* thread pointer (or 1<<63 | tid); 0 = free, 1 = being claimed */
	u32 tid;
	u32 busy;     /* handlers running on this thread: probes hit now are missed */
	u64 comm_ns;  /* when comm was read (0 = never) */
	char comm[16];
	void *ucall;  /* struct kprw_ucall of the C handler this thread runs (rt_user.c) */
	u32 slow_read; /* why this thread must read by system call now: KPRW_FAULT_SIGS bits
	                  blocked (a program's fault handler runs), KPRW_SLOW_STACK; see
	                  kprw_fast_ok */
	u32 pad0;
	u64 comm_dl;  /* comm_ns + KPRW_COMM_REFRESH_NS, 0 while comm_ns is: optprobe.S's
	                 NOW_CHECK compares the time with it, one compare, and a thread's
	                 copy of the clock ends before it (kprw_tclk_refresh) */
};             /* one cache line each; shared by the process's images (rt_proc.c) */
/* what a thread context holds for one image: its block of the trace file, which names
 * the image (rt_ring.c). kprw_tblk_tab[i] goes with kprw_tctx_tab[i]. A cache line
 * each, as the contexts: every record's xadd writes rec, and four threads' words in
 * one line (16 bytes each until issue 49) moved it between their CPUs on each
 * record; the fast path's TBLK is then the context's offset, no shift. */
struct kprw_tblk {
	u64 rec; /* this thread's block of the trace file's record area, in one word (rt_ring.h):
	            where its next record goes (an offset in the record area, bits 0..38) and
	            the block's end (in 4 KiB units, bits 39..63; 0 = none) */
	u64 nrec; /* records the fast paths (optprobe.S's, hot_record's) wrote since
	             kprw_new_block last added them to kprewrite_rt_stats.records (counted
	             here, on this thread's own line) */
	u64 nret; /* return trampolines kprw_rethook_fast ran since, for rettramps the same way */
	/* the thread's copy of the TSC clock for optprobe.S's fast paths (kprw_tclk_refresh,
	 * rt_clock.c): a record's time, less ts_base, is tc_rel + ((tsc - tc_tsc) * tc_mult
	 * >> 32) while tsc - tc_tsc < tc_span, a span that ends within kprw_clk's, before the
	 * thread's comm_dl and below the compact time's range: one compare stands for
	 * kprw_clk's seqlock and span and NOW_CHECK's comm and range tests (issue 49). Written
	 * by its thread only: tc_span is zeroed first and set last, and tc_seq bumped, so a
	 * fast path that a signal handler's refresh interrupted, or that interrupts one,
	 * declines */
	u64 tc_tsc;
	u64 tc_span; /* 0: none (the fast paths decline, the C path refreshes) */
	u64 tc_mult;
	u64 tc_rel;
	u32 tc_seq;
	u32 pad;
} __attribute__((aligned(64)));
/* struct kprw_tblk's rec: the record area ends below REC_AREA_MAX bytes */
#define REC_END_SHIFT 39
#define REC_NEXT_MASK ((1ull << REC_END_SHIFT) - 1)
#define REC_AREA_MAX (1ull << (64 - REC_END_SHIFT + 12)) /* 128 GiB */

static inline u64 rec_word(u64 next, u64 end)
{
	return (end >> 12) << REC_END_SHIFT | next;
}

static inline u64 rec_end(u64 word)
{
	return (word >> REC_END_SHIFT) << 12;
}

#define KPRW_SLOW_STACK 0x80000000u /* too little sigaltstack left for a fault's frame */
#define KPRW_SHORT_STACK 0x40000000u /* too little sigaltstack left for the C handlers */
/* the most stack the SIGTRAP handler uses below a C handler's frames (TestStackUsage in
 * runtime/object_test.go holds the whole handler to it) */
#define KPRW_SIGTRAP_STACK 1536
struct kprw_tctx *kprw_tctx_slow(u64 key);
int kprw_tctx_busy_slow(struct kprw_tctx *c);
u32 kprw_tctx_tid(struct kprw_tctx *c);
const char *kprw_tctx_comm(struct kprw_tctx *c, u64 now);

#define KPRW_MAX_STEP 4
struct kprw_step {
	u32 point;
	u32 saved_tf;
};
struct kprw_thread {
	u32 tid; /* 0 = free */
	u32 pid;
	u32 nstep; /* single-steps in flight (nested only through signal handlers) */
	u32 refs;  /* hits holding it: a hit inside a handler (missed) nests in another */
	struct kprw_step step[KPRW_MAX_STEP];
};
int kprw_thread_init(void);
u32 kprw_thread_keymode_fs0(void);
void kprw_tcb_slot_check(void);
void kprw_fast_pick(void); /* rt_opt.c: kprw_rt.fast_cfg from what it assumes */
u32 kprw_pid(void); /* cached getpid() */
struct kprw_thread *kprw_thread_find(u32 pid, u32 tid);
struct kprw_thread *kprw_thread_get(u32 pid, u32 tid);
void kprw_thread_put(struct kprw_thread *t);
void kprw_thread_idle(struct kprw_thread *t);

/* ---- helpers (rt_util.c) ---- */
void kprw_memcpy(void *d, const void *s, unsigned long n);
void kprw_memset(void *d, int c, unsigned long n);
unsigned long kprw_strlen(const char *s);
int kprw_strcmp(const char *a, const char *b);
int kprw_strncmp(const char *a, const char *b, unsigned long n);
void kprw_puts(const char *s);          /* to stderr, while fd 2 is the one at start-up */
void kprw_stderr_init(void);            /* rt_util.c: note fd 2 as the program's stderr */
int kprw_stderr_ok(void);               /* rt_util.c: fd 2 is still that file */
void kprw_put_hex(unsigned long v);
void kprw_put_dec(unsigned long v);
char *kprw_dec(char buf[24], unsigned long v); /* v in decimal at the end of buf: its start */
const char *kprw_stat_comm_end(const char *buf); /* rt_util.c: /proc stat lines */
int kprw_stat_field(const char *buf, int f, u64 *v);
void kprw_fatal(const char *msg, unsigned long v) __attribute__((noreturn));
u32 kprw_getpid(void);
void kprw_end_if_program_gone(void); /* rt_live.c: only runtime threads are left */
void kprw_trace_release_old(void);     /* rt_tracefile.c: the replaced FILE.old closed */
int kprw_live_running(void);           /* rt_live.c: the live-probe thread was started */
int kprw_live_gated(const struct kprw_point *pt); /* rt_live.c: its live events switch its gate */
u32 kprw_gettid(void);
u64 kprw_now_ns(void);   /* CLOCK_MONOTONIC by system call */
u32 kprw_cpu(void);
int kprw_valgrind(void); /* rt_util.c: running under valgrind (no rdpid, lsl or trap flag) */
/* ---- clock (rt_clock.c) ---- */
void kprw_clock_init(void);
void kprw_clock_set(u32 mode, u64 *counter); /* the record clock, KPRW_CLOCK_* */
u32 kprw_clock_want(const char *env, u32 hflags); /* the clock a new trace file takes */
u64 kprw_clock(void);    /* the record clock: kprw_clock_fast, not inlined */
u64 kprw_clock_ns(void); /* CLOCK_MONOTONIC ns, extrapolated from the TSC when it is invariant */
u64 kprw_clock_slow(void); /* kprw_clock when the inlined extrapolation cannot answer */
struct kprw_clk {
	u32 seq;  /* odd while a renewal writes */
	u32 lock;
	u64 tsc;  /* anchor */
	u64 ns;
	u64 mult; /* ns per tick << 32; 0 = not measured yet */
	u64 span; /* ticks after the anchor before the next renewal */
	u64 interval_ns;
};
extern struct kprw_clk kprw_clk;
extern u64 *kprw_clk_counter;
/* fault-safe reads: bytes read (partial when a fault stops them), or -EFAULT */
long kprw_read_user(void *dst, uptr src, unsigned long n); /* the mode this thread may use */
long kprw_read_mode(void *dst, uptr src, unsigned long n, int fast);
unsigned long kprw_copy_nofault(void *dst, const void *src, unsigned long n); /* nofault.S: bytes left */
int kprw_copy_fixup(struct k_sigcontext *mc); /* a fault in kprw_copy_nofault: resume at its fixup */
void *kprw_mmap_anon(unsigned long size);
void *kprw_mmap_wipe_on_fork(unsigned long size); /* zeroed in a fork child, or NULL */
#define KPRW_HUGE (2ul << 20) /* a 2 MiB page */
#define MADV_HUGEPAGE 14
void *kprw_mmap_dense(unsigned long size); /* on 2 MiB pages from 512 KiB */
unsigned long kprw_dense_len(unsigned long size);
void kprw_live_init(void); /* rt_live.c: live probes' start-up */
int kprw_live_only(void);   /* rt_live.c: every event is live (records may start late) */
void kprw_live_child(void); /* rt_live.c: a fork child starts its live-probe thread */
int kprw_live_records(void); /* rt_init.c: records started late, before the first arm */
int kprw_live_safepoint(const struct k_siginfo *si, struct k_ucontext *uc); /* rt_live.c */
void kprw_end_thread(void); /* rt_live.c: a runtime thread ends (the leader's status, if it exited) */
int kprw_trap_lost_int3(struct k_ucontext *uc); /* rt_trap.c */

/* a thread of the runtime's own (the live-probe thread, the trace file's readier): the
 * process's memory, files and signal actions, its own thread pointer (kprw_spawn_agent,
 * live.S, runs fn on stack_top and ends the thread when fn returns) */
#define KPRW_CLONE_RT_THREAD (0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000 | 0x80000) /* VM FS FILES SIGHAND THREAD SYSVSEM SETTLS */
#define KPRW_CLONE_TID (0x00100000 | 0x00200000) /* PARENT_SETTID CHILD_CLEARTID */
__attribute__((visibility("hidden"))) long kprw_spawn_agent(unsigned long flags, void *stack_top, void *tls, void (*fn)(void), u32 *tid);
int kprw_trap_int3(struct k_ucontext *uc, u32 pid, u32 tid); /* rt_trap.c (not static: the stack test sees its calls) */

/* ---- probes (rt_trap.c, rt_kretprobe.c; the trace file's records: rt_trace.h) ---- */
void kprw_sigtrap(int sig, struct k_siginfo *si, struct k_ucontext *uc);
void kprw_miss_point(const struct kprw_point *pt, struct pt_regs *regs); /* regs: the hit's, for a break_handler */
void kprw_kretprobe_entry(u32 pi, struct pt_regs *regs, struct kprw_tctx *c);
int kprw_kretprobe_init(void);
void kprw_rethook(struct pt_regs *regs);
u64 kprw_kretprobe_real_ret(uptr K); /* a trampoline's real return address at word K, 0: none */
/* rt_rstack.c: the return stack, trace-only hooked returns in a thread's own memory */
struct kprw_rent {
	u64 K;    /* the return-address word */
	u64 ret;  /* what it held: the return address, or the trampoline (a chain) */
	u64 real; /* the frame's real return address (a chain: its oldest entry's) */
	u32 pi;   /* the return probe */
	u32 flags;
};
#define KPRW_RSTACK_N 127 /* entries a thread: 4 KiB with the header and the tail */
#define KPRW_RS_CHAINED 1u /* an instance hooked this frame's word since: it returns first */
struct kprw_rstack {
	u64 key; /* the thread context's key when the entries were pushed */
	u32 n;
	u32 pad;
	struct kprw_rent e[KPRW_RSTACK_N];
	/* to 4096: a thread's header line (written at every push and pop) is not the line
	 * of the thread before's deepest entries, and the stack's address is a shift */
	u64 tail[2];
};
/* this image's, [KPRW_NTCTX] with kprw_tctx_tab's slots (optprobe.S pushes there too) */
extern struct kprw_rstack *kprw_rs_tab;
void kprw_rstack_init(void);
int kprw_rstack_push(struct kprw_tctx *c, u32 pi, uptr K);
int kprw_rstack_take(struct kprw_tctx *c, uptr K, int force, struct kprw_rent *out);
int kprw_rstack_take_any(uptr K, struct kprw_rent *out);
void kprw_rstack_chain(struct kprw_tctx *c, uptr K, int set);
void kprw_rstack_purge(struct kprw_tctx *c, uptr K);
u64 kprw_rstack_real(struct kprw_tctx *c, uptr K);
uptr kprw_rstack_lowest(struct kprw_tctx *c, uptr lo);
u64 kprw_rstack_unwind(struct kprw_tctx *c, uptr K, int *chained);
/* kprw_stack_walk writes the pcs of the user stack at regs (innermost first, at most max)
 * into out and returns how many; 0 without an unwind table (rt_stack.c) */
u32 kprw_stack_walk(const struct pt_regs *regs, u64 *out, u32 max, int fast);
/* ---- per-CPU counting of count-only detours (rt_rseq.c, rseq.S) ---- */
extern u64 kprewrite_rt_rseq_off; /* rseq.S: what count-only detours read */
void kprw_rseq_probe(int early);
void kprw_rseq_verify(void);
void kprw_rseq_arm(u8 *shards, u64 stride);
long kprewrite_rt_optcall(struct pt_regs *regs, u32 idx);
/* ---- signal guard (rt_sigguard.c) ---- */
void kprw_istep_init(void); /* rt_istep.c: int3-ended single-steps (KPRW_PF_INT3STEP) */
const struct kprw_point *kprw_istep_find(u64 vaddr);
const struct kprw_point *kprw_istep_within(u64 vaddr);
/* KPREWRITE_SIGGUARD: "off" wraps nothing; returns 1 when every signal function listed
 * was wrapped (or none is listed) */
int kprw_sigguard_init(const char *mode, int traps, int faults);
void kprw_sg_guard(unsigned long sigs); /* the signals whose dispositions the guard keeps */
void kprw_sg_initial(int sig, const struct k_sigaction *a); /* the disposition before ours */
void kprw_sg_deliver(int sig, struct k_siginfo *si, struct k_ucontext *uc); /* a signal not ours */
/* a static Go program's raw signal system calls (gosig.S; ABI0, not C: only their addresses) */
void kprw_go_rt_sigaction(void);
void kprw_go_rtsigprocmask(void);
int kprw_go_sigaction(long sig, const struct k_sigaction *n, struct k_sigaction *o, long size);
extern unsigned long kprw_go_sg_sigs;
extern u32 kprw_sg_wrapped;
/* a synthetic event's filter given at run time (set: it replaces the rewrite's; f NULL:
 * none) */
struct kprw_synthflt {
	const struct kprw_fprog *f;
	u64 set;
};
#include "rt_proc.h" /* the process's images (rt_proc.c) */
/* ---- fault signals (rt_fault.c) ---- */
void kprw_fault_install(unsigned long sigs); /* SIGBIT()s: our handler, the old ones recorded */
extern const char kprewrite_rt_optprobe_template[], kprewrite_rt_optprobe_template_end[];

#include "rt_fetch.h"   /* fetch programs (rt_fetch.c) */
#include "rt_filter.h"  /* event filters (rt_filter.c) */
#include "rt_hist.h"    /* hist triggers (rt_hist.c) */
#include "rt_trigger.h" /* event triggers (rt_trigger.c), run-time controls (rt_ctl.c) */
#include "rt_trace.h"   /* the trace file (rt_tracefile.c, rt_ring.c, rt_dispatch.c) */

/* ---- the hot path, inlined into every caller ---- */
extern struct kprw_tctx *kprw_tctx_tab;

#define KPRW_NTCTX 1024 /* power of two */
#define KPRW_TCTX_WINDOW 8 /* slots from the hash a fast lookup looks at */
#define KPRW_KEY_TID (1ull << 63)

/* kprw_tkey is the calling thread's key: its FS base (0: none usable; rt_thread.c). */
static inline u64 kprw_tkey(void)
{
	u64 k;
	if (likely(kprw_rt.keymode == KPRW_KEY_FSBASE)) {
		__asm__ volatile("rdfsbase %0" : "=r"(k)); /* (volatile: never run before the check: #UD without FSGSBASE) */
		return k;
	}
	/* (volatile: a %fs read must not be hoisted above the mode's check, where a thread
	 * without TLS yet, PENDING, would fault) */
	if (kprw_rt.keymode == KPRW_KEY_FS0) {
		__asm__ volatile("movq %%fs:0, %0" : "=r"(k));
		return k;
	}
	if (kprw_rt.keymode == KPRW_KEY_GOM) {
		__asm__ volatile("movq %%fs:0, %0" : "=r"(k));
		if (k)
			return k; /* a runtime thread's TCB (its own pointer) */
		u64 g;
		__asm__ volatile("movq %%fs:-8, %0" : "=r"(g)); /* Go's g, where its runtime keeps it */
		return g ? *(const volatile u64 *)(uptr)(g + KPRW_GO_G_M) : 0;
	}
	return 0;
}

/* kprw_tctx_hash is the slot of kprw_tctx_tab where key k's window starts */
static inline u32 kprw_tctx_hash(u64 k)
{
	return (u32)((k * 0x9E3779B97F4A7C15ull) >> 54); /* 10 bits: KPRW_NTCTX */
}

/* kprw_tcb_name names context c, keyed by the calling thread's pointer, in its TCB's
 * word for the next lookups (kprw_rt.tcb_slot), when the TCB has glibc's shape (self
 * at 0x10): a TLS block a raw clone set up is not written (optprobe.S's TCTX_FIND's
 * rule) */
static inline __attribute__((always_inline)) void kprw_tcb_name(struct kprw_tctx *c)
{
	if (!kprw_rt.tcb_slot)
		return;
	u64 self;
	__asm__ volatile("movq %%fs:%c1, %0" : "=r"(self) : "i"(KPRW_GLIBC_SELF));
	if (self == c->key)
		__asm__ volatile("movq %0, %%fs:(%1)" : : "r"(c), "r"((uptr)kprw_rt.tcb_slot) : "memory");
}

/* kprw_tctx_get is the calling thread's context, NULL only if the table is full of live
 * threads. */
static inline __attribute__((always_inline)) struct kprw_tctx *kprw_tctx_get(void)
{
	u64 k;
	if (likely(kprw_rt.tcb_slot)) {
		/* the context glibc's TCB names (rt_thread.c's kprw_tcb_slot_check): followed
		 * only when it points at a context of the table, taken when its key is this
		 * thread's */
		uptr named;
		__asm__ volatile("movq %%fs:(%2), %0\n\tmovq %%fs:0, %1" : "=&r"(named), "=r"(k) : "r"((uptr)kprw_rt.tcb_slot));
		struct kprw_tctx *c = (struct kprw_tctx *)named;
		if (likely(named - (uptr)kprw_tctx_tab < KPRW_NTCTX * sizeof *c &&
			   (named - (uptr)kprw_tctx_tab) % sizeof *c == 0 &&
			   __atomic_load_n(&c->key, __ATOMIC_RELAXED) == k))
			return c;
	} else {
		k = kprw_tkey();
	}
	if (likely(k != 0 && !(k & KPRW_KEY_TID))) {
		u32 h = kprw_tctx_hash(k);
		for (u32 i = 0; i < KPRW_TCTX_WINDOW; i++) {
			struct kprw_tctx *c = &kprw_tctx_tab[(h + i) & (KPRW_NTCTX - 1)];
			if (likely(__atomic_load_n(&c->key, __ATOMIC_RELAXED) == k)) {
				kprw_tcb_name(c);
				return c;
			}
		}
	}
	return kprw_tctx_slow(k);
}

/* kprw_tsc_ns is CLOCK_MONOTONIC ns extrapolated from the TSC (rt_clock.c), 0 when the
 * extrapolation cannot answer (a renewal is due or under way) */
static inline __attribute__((always_inline)) int kprw_tsc_ns(u64 *ns)
{
	u32 s = __atomic_load_n(&kprw_clk.seq, __ATOMIC_ACQUIRE);
	u64 at = __atomic_load_n(&kprw_clk.tsc, __ATOMIC_RELAXED);
	u64 an = __atomic_load_n(&kprw_clk.ns, __ATOMIC_RELAXED);
	u64 m = __atomic_load_n(&kprw_clk.mult, __ATOMIC_RELAXED);
	u64 span = __atomic_load_n(&kprw_clk.span, __ATOMIC_RELAXED);
	u32 lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	u64 t = (u64)hi << 32 | lo;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (likely(!(s & 1) && __atomic_load_n(&kprw_clk.seq, __ATOMIC_ACQUIRE) == s && m && t - at < span)) {
		*ns = an + (u64)(((unsigned __int128)(t - at) * m) >> 32);
		return 1;
	}
	return 0;
}

/* kprw_clock_fast is kprw_clock inlined: the record clock, for tsc the extrapolation
 * from the TSC; mono, counter and a TSC that cannot answer call kprw_clock_slow */
static inline __attribute__((always_inline)) u64 kprw_clock_fast(void)
{
	u64 ns;
	if (likely(kprw_rt.clk_tsc) && likely(kprw_tsc_ns(&ns)))
		return ns;
	return kprw_clock_slow();
}

/* kprw_cpu_fast is kprw_cpu inlined: rdpid where it exists, else the cpu_id of the
 * thread's rseq area (rt_rseq.c: found and verified at start-up, kept current by the
 * kernel at every return to user space after a migration), one load instead of lsl's
 * ~18 ns (a record's CPU cost more than its timestamp on a CPU without rdpid). A
 * thread whose area is not registered (cpu_id -1 or -2) and a process without one ask
 * kprw_cpu. (A thread made by raw clone without CLONE_SETTLS reads its creator's area:
 * its records show the CPU the creator last ran on.) */
static inline u32 kprw_cpu_fast(void)
{
	if (likely(kprw_rt.has_rdpid)) {
		unsigned long p;
		__asm__ volatile("rdpid %0" : "=r"(p));
		return (u32)(p & 0xfff);
	}
	u64 off = __atomic_load_n(&kprewrite_rt_rseq_off, __ATOMIC_RELAXED);
	if (likely(off != 0)) {
		u32 cpu; /* struct rseq's cpu_id, at 4 */
		__asm__ volatile("movl %%fs:4(%1), %0" : "=r"(cpu) : "r"(off));
		if (likely((int)cpu >= 0))
			return cpu & 0xfff;
	}
	return kprw_cpu();
}

/* the TCB offsets that hold the tid (rt_thread.c: bit i of kprw_tid_live = kprw_tid_off[i]
 * still holds), and the cached pid (0: ask kprw_pid) */
#define KPRW_TIDCAND 8
#define KPRW_COMM_REFRESH_NS 1000000ull /* a context's comm is re-read when older than 1 ms */
/* the process's thread contexts (rt_thread.c), in a MADV_WIPEONFORK mapping */
struct kprw_tshare {
	struct kprw_tctx c[KPRW_NTCTX];
	u32 pid;         /* cached getpid(); 0 in a fresh fork child */
	u32 far_claims;  /* contexts ever claimed outside their key's window */
	u32 tid_learned; /* a first sample of the TCB was taken */
	u32 tid_lock;
	u32 tid_live;    /* bit i: tid_off[i] still holds the tid */
	u32 tid_off[KPRW_TIDCAND];
};
extern struct kprw_tshare *kprw_tsh;
extern struct kprw_tblk *kprw_tblk_tab;
extern u32 *kprw_pid_cache;
#define kprw_tid_off (kprw_tsh->tid_off)
#define kprw_tid_live (kprw_tsh->tid_live)

/* kprw_tblk is this image's part of thread context c */
static inline struct kprw_tblk *kprw_tblk(const struct kprw_tctx *c)
{
	return &kprw_tblk_tab[c - kprw_tctx_tab];
}

/* kprw_tclk_refresh gives thread c's kprw_tblk a copy of the clock valid from now on
 * (rt_clock.c); kprw_tclk_check does it when the copy has ended by now (the record
 * clock's ns, tsc mode), for the C paths that write a record then (who, who_clock,
 * hot_record): optprobe.S's fast paths decline until it is renewed */
void kprw_tclk_refresh(struct kprw_tctx *c);
static inline __attribute__((always_inline)) void kprw_tclk_check(struct kprw_tctx *c, u64 now)
{
	const struct kprw_tblk *b = kprw_tblk(c);
	u64 span = __atomic_load_n(&b->tc_span, __ATOMIC_RELAXED);
	if (unlikely(kprw_rt.clk_tsc && (span == 0 || now - kprw_rt.ts_base >= b->tc_rel + ((span * b->tc_mult) >> 32))))
		kprw_tclk_refresh(c);
}

/* kprw_tctx_tcb_holds says whether the thread pointer's TCB still holds c's tid at
 * every offset of live (bits of kprw_tid_off) */
static inline int kprw_tctx_tcb_holds(const struct kprw_tctx *c, u32 live)
{
	for (u32 i = 0; live; i++, live >>= 1)
		if ((live & 1) && *(const volatile u32 *)(uptr)(c->key + (u64)(s64)(int)kprw_tid_off[i]) != c->tid)
			return 0;
	return 1;
}

/* kprw_tctx_tid_fast is kprw_tctx_tid when the context is still its thread's (one load
 * per surviving TCB offset), else the call that renews it */
static inline __attribute__((always_inline)) u32 kprw_tctx_tid_fast(struct kprw_tctx *c)
{
	u32 live = __atomic_load_n(&kprw_tid_live, __ATOMIC_ACQUIRE);
	if (likely(live && !(c->key & KPRW_KEY_TID) && kprw_tctx_tcb_holds(c, live)))
		return c->tid;
	return kprw_tctx_tid(c);
}

static inline u32 kprw_pid_fast(void)
{
	u32 *pc = kprw_pid_cache;
	u32 pid = likely(pc != NULL) ? __atomic_load_n(pc, __ATOMIC_RELAXED) : 0;
	return likely(pid) ? pid : kprw_pid();
}

/* kprw_tctx_busy says whether this thread runs a handler of ours (a hit now is missed). */
static inline int kprw_tctx_busy(struct kprw_tctx *c)
{
	return unlikely(c->busy) && kprw_tctx_busy_slow(c);
}

/* kprw_fast_ok says whether thread context c may read with the fault-catching copy now:
 * fast reads are on and SIGSEGV/SIGBUS reach our handler in this thread. */
static inline int kprw_fast_ok(const struct kprw_tctx *c)
{
	return kprw_rt.fast_read && c && !c->slow_read;
}

#define KPRW_DISARM 2u /* disable_all: the trace file's switch of every probe is off (rt_ctl.c) */
int kprw_disarm_recheck(void);
void kprw_disarm_sync(void);

static inline int kprw_probe_enabled(u32 i)
{
	u32 d = kprw_rt.disable_all;
	if (unlikely(d == KPRW_DISARM))
		d = !kprw_disarm_recheck(); /* (switched back on since?) */
	return !d && !(kprw_rt.state[i].flags & (KPRW_SF_DISABLED | KPRW_SF_UNREG));
}

static inline void kprw_count_hit(u32 i)
{
	if (unlikely(kprw_rt.hits_per_cpu)) {
		/* rseq.S: %rcx the rseq area's offset, %rdx the byte offset in a shard; the
		 * restartable sequence is exact in a signal handler too */
		u64 off = (u64)i * 8;
		__asm__ volatile("call kprewrite_rt_rseq_count"
				 : "+d"(off)
				 : "c"(kprewrite_rt_rseq_off)
				 : "cc", "memory");
		return;
	}
	atomic_add((u64 *)(kprw_rt.ctr_base + (u64)i * kprw_rt.ctr_stride), 1);
}

/* ---- C handlers (rt_user.c): probes with KPRW_F_USER ---- */
void kprw_user_missed(u32 i, int pool);
int kprw_user_pre(u32 i, struct pt_regs *regs);
int kprw_user_has_post(u32 i);
void kprw_user_post(u32 i, struct pt_regs *regs);
int kprw_user_entry(u32 i, struct kretprobe_instance *ri, struct pt_regs *regs);
void kprw_user_ret(u32 i, struct kretprobe_instance *ri, struct pt_regs *regs);
void kprw_user_prepare(void);  /* start-up: every KPRW_F_USER probe starts unregistered */
void kprw_user_start(void);    /* start-up: register them, or run kprewrite_init */
int kprw_user_has_init(void);  /* is there a kprewrite_init */
int kprw_user_any(void);       /* are there KPRW_F_USER probes */
int kprw_user_break(u32 i, struct pt_regs *regs); /* a reentrant hit taken by its break_handler */
void kprw_jprobe_enter(const struct pt_regs *regs, void *entry); /* user.S: a jprobe's entry called */
u32 kprw_user_current_probe(void); /* probe whose handler this thread runs, or ~0u */
/* a fault while this thread runs a C handler: handled (1), or not a handler's (0) */
int kprw_user_fault(int sig, struct k_siginfo *si, struct k_ucontext *uc);
int kprw_user_step_fault(const struct kprw_point *pt, struct pt_regs *regs, int trapnr);
int kprw_step_fault(struct k_ucontext *uc);

/* kprw_count_miss counts a hit that ran nothing (a handler was running on this thread);
 * a C handler probe's struct counts it too (kp->nmissed; rp->kp.nmissed). */
static inline void kprw_count_miss(u32 i)
{
	atomic_add((u64 *)(kprw_rt.ctr_base + (u64)i * kprw_rt.ctr_stride + 8), 1);
	if (unlikely(kprw_rt.probes[i].flags & KPRW_F_USER))
		kprw_user_missed(i, 0);
}

/* kprw_count_miss_pool counts a kretprobe entry that found no free instance (a C handler
 * kretprobe's rp->nmissed, as maxactive too low shows in the kernel). */
/* kprw_spare_user says whether probe i is a placeholder a C handler's struct kprobe was
 * registered on at run time (rt_user.c) */
static inline int kprw_spare_user(u32 i)
{
	return unlikely(kprw_rt.spare_bound != 0) && __atomic_load_n(&kprw_rt.spare_user[i], __ATOMIC_ACQUIRE) != NULL;
}

static inline void kprw_count_miss_pool(u32 i)
{
	atomic_add((u64 *)(kprw_rt.ctr_base + (u64)i * kprw_rt.ctr_stride + 8), 1);
	if (unlikely(kprw_rt.probes[i].flags & KPRW_F_USER) || kprw_spare_user(i))
		kprw_user_missed(i, 1);
}

static inline void *kprw_user_obj(const struct kprw_probe *p)
{
	return p->user ? (void *)RT_ADDR(p->user) : (void *)p;
}

int kprw_live_wants(u32 pi); /* rt_livedef.c: spare probe pi has events now */
int kprw_live_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip, struct kprw_tctx *c);
void kprw_livedef_init(void);
void kprw_livedef_sync(void);
int kprw_livedef_boot_wanted(void);
/* rt_liveboot.c: KPREWRITE_EVENTS added by the tool before main */
void kprw_live_boot(char **envp, const char *events, const char *tool, const char *path);
/* rt_live.c: the free live point placed at vaddr (link-time), NULL: none */
const struct kprw_point *kprw_free_find(u64 vaddr);
/* rt_livedef.c: what the newest live frame places at free point k (its point and
 * slot bytes), NULL: nothing */
const struct kprw_point *kprw_livedef_free(u32 k, const u8 **slot);
void kprw_livedef_placed(u32 k); /* rt_livedef.c: free point k is placed: its list is published */
int kprw_livedef_any(void); /* rt_livedef.c: an event was added to this image */
void kprw_livedef_state(u32 pi, u64 s); /* rt_livedef.c: pi's events' sites are in state s (KPRW_LS_*) */
int kprw_live_kick(void); /* rt_live.c: the live-probe thread reconciles now (0), or there is none */
/* rt_usersite.c: register_kprobe() at a site no rewrite prepared (the embedded analysis) */
struct kprobe;
struct kretprobe;
int kprw_usersite_register(struct kprobe *kp, u8 type);
void kprw_usersite_release(u32 pi);
/* the point and slot a C handler wants at free point k, NULL: none (rt_live.c) */
const struct kprw_point *kprw_usersite_free(u32 k, const u8 **slot);


/* kprw_probe_live_off says whether probe i of pt is off for now although enabled: a
 * live point's probe hit while its event was being switched off (its site is being
 * put back), or a prepared site's placeholder without events added (rt_livedef.c) and
 * its own event (prepared/FUNC) off; nothing runs and nothing counts */
static inline int kprw_probe_live_off(const struct kprw_point *pt, u32 i)
{
	u32 e = kprw_rt.probes[i].event;
	if (e >= kprw_rt.nevents)
		return 0;
	u32 spare = kprw_rt.events[e].flags & KPRW_EF_SPARE;
	if (spare && kprw_live_wants(i))
		return 0;
	if (spare && !kprw_rt.ev_ctl)
		return 1; /* (its own event starts soft-disabled, and nothing can switch it) */
	return (spare || (pt->dflags & KPRW_DF_LIVE)) && kprw_rt.ev_ctl &&
	       (__atomic_load_n(&kprw_rt.ev_ctl[e], __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED);
}

/* kprw_run_return_events hijacks the return address for the enabled return events
 * (kretprobes without an entry handler: r: definitions) of pt: after the point's other probes, as
 * the kernel's uprobe handler chain prepares the uretprobe after every consumer ran, so
 * their fetches ($stack0, +0($stack)) still see the real return address. */
void kprw_run_return_events(const struct kprw_point *pt, struct pt_regs *regs, struct kprw_tctx *c);

/* kprw_run_probes runs every enabled probe of pt, in order, for the int3 and the detour
 * paths alike: kretprobe entry work (return events' after the others), hit count, trace
 * record, pre handler. regs->ip is site + 1 (as after an int3) for the handlers; the
 * fetch programs of trace records see ip = site, as the kernel's uprobe tracer shows it.
 * c->busy is held by the caller. Sets *any when some probe was enabled. Returns 1 when a
 * pre handler returned non-zero (resume at regs->ip: the rest of the probes, the
 * instruction and the post handlers are skipped, as in the kernel). */
static inline __attribute__((always_inline)) int
kprw_run_probes(const struct kprw_point *pt, struct pt_regs *regs, struct kprw_tctx *c, int *any)
{
	uptr site = RT_ADDR(pt->site);
	int rets = 0;
	if (unlikely(kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen))
		kprw_ctl_sync(); /* (the switch of every probe among the changes: C handlers too) */
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 i = pt->first_probe + k;
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (!kprw_probe_enabled(i))
			continue;
		if (unlikely((pt->dflags & KPRW_DF_LIVE) || kprw_rt.live_lists) && kprw_probe_live_off(pt, i))
			continue;
		*any = 1;
		if (p->type == KPRW_T_KRETPROBE) {
			if ((p->flags & KPRW_F_USER) || p->entry_handler || kprw_spare_user(i))
				kprw_kretprobe_entry(i, regs, c);
			else
				rets = 1;
			continue;
		}
		if (p->flags & KPRW_F_TRACE) {
			if (unlikely(!kprw_rt.trace)) {
				kprw_count_hit(i);
				kprw_trace_lost(); /* no trace file: inline, not a call per hit */
			} else {
				regs->ip = site;
				if (!kprw_trace_hit(i, regs, KPRW_REC_KPROBE, 0, NULL, 0, c))
					kprw_count_hit(i); /* a written record is the hit */
				regs->ip = site + 1;
			}
		} else {
			kprw_count_hit(i);
		}
		if (p->flags & KPRW_F_USER) {
			if (kprw_user_pre(i, regs)) {
				if (rets)
					kprw_run_return_events(pt, regs, c);
				return 1;
			}
		} else if (p->pre_handler) {
			int (*pre)(void *, struct pt_regs *) = (void *)RT_ADDR(p->pre_handler);
			if (pre(kprw_user_obj(p), regs)) {
				if (rets)
					kprw_run_return_events(pt, regs, c);
				return 1;
			}
		} else if (kprw_spare_user(i) && kprw_user_pre(i, regs)) { /* registered by name */
			if (rets)
				kprw_run_return_events(pt, regs, c);
			return 1;
		}
	}
	if (unlikely(rets))
		kprw_run_return_events(pt, regs, c);
	return 0;
}

#pragma GCC visibility pop
#endif
