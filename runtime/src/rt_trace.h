/* rt_trace.h - the trace file: opened and mapped by rt_tracefile.c, its record area
 * given out in blocks by rt_ring.c (rt_ring.h writes a record), a hit's records written
 * by rt_dispatch.c; included by rt.h */
#ifndef KPRW_RT_TRACE_H
#define KPRW_RT_TRACE_H
#ifndef KPRW_RT_H
#error "included by rt.h"
#endif

/* kprw_trace_open's flags (KPREWRITE_TRACE_PREFAULT, KPREWRITE_APPEND, KPREWRITE_QUIET) */
#define KPRW_OPEN_PREFAULT 0x1 /* the whole record area ready at start-up */
#define KPRW_OPEN_APPEND 0x2   /* a new run appends to the file there, not moves it to FILE.old */
#define KPRW_OPEN_QUIET 0x4    /* a new run does not say where its trace goes */
void kprw_trace_open(const char *path, u64 size, int flags, int records);
/* the record area is ready in the file below kprw_trace_ready; kprw_trace_grow readies it
 * for a block ending at end, -1 when the disk is full (rt_tracefile.c) */
extern u64 kprw_trace_ready;
int kprw_trace_grow(u64 end);
int kprw_trace_ready_to(u64 to);
int kprw_trace_retire(void); /* rt_ahead.c's thread: a step of the area far below the mark given back */
/* kprw_refused says whether a system call's result is a seccomp filter's refusal (EPERM,
 * EACCES, ENOSYS): a sandbox the program put itself under, not the call's own failure */
static inline int kprw_refused(long r)
{
	return r == -1 || r == -13 || r == -38;
}
void kprw_trace_said_full(void); /* rt_tracefile.c: the record area is full, once */
/* rt_ahead.c: a thread of our own readies the area ahead of a direct trace's writers */
int kprw_ahead_prepare(void);
int kprw_ahead_pending(void);
void kprw_ahead(u64 end);
int kprw_ahead_owned(void);
void kprw_ahead_ring(u64 to);
u64 kprw_ring_ready(u64 from, u64 to); /* rt_ring.c */
extern u32 kprw_ahead_tid; /* its thread, which runs no code of the program's */
int kprw_trace_fault(uptr addr);
/* rt_tracefile.c: extent k of a ring that grows by extents, appended and mapped, or mapped */
int kprw_ring_extend(u64 k);
int kprw_ring_map(u64 k);
/* kprw_trace_hit writes probe pi's record; 1 when the record is the hit (written, into
 * a file where this image has its counters: the caller does not count it), else 0 (the
 * caller counts the hit) */
int kprw_trace_records_late(void); /* rt_tracefile.c: records started after start-up */
int kprw_trace_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip, const u8 *edata, u32 elen,
		   struct kprw_tctx *c);
void kprw_trace_violation(const struct kprw_point *pt, struct kprw_tctx *c);
int kprw_trace_event(u32 pi, const struct pt_regs *regs, struct kprw_tctx *c);
int kprw_trace_exit(u32 pi, struct pt_regs *regs, u64 ret_ip, struct kprw_tctx *c);
void kprw_fastev_init(void);
void kprw_pf_update(void);
extern u64 kprewrite_rt_pf_ctlgen; /* rt_dispatch.c: what inline filters read */
void kprw_spev_init(void);

/* kprw_hot is what the record path of a jump-optimized point needs, in one cache line
 * (kprw_rt.hot, one per point, start-up: kprw_hot_init): a program with thousands of
 * hot points (python3.11 with every function probed) would otherwise touch the point's,
 * the probe's, the event's and the plan's lines, one miss each, for every record. */
#define KPRW_HOT_OPS 3
enum { KPRW_HOT_NONE, KPRW_HOT_EVENT, KPRW_HOT_EXIT, KPRW_HOT_CALL, KPRW_HOT_TAIL };
typedef u64 kprw_u64_a4 __attribute__((aligned(4))); /* (in the union: op[] stays at 28) */
struct kprw_hot {
	u32 site_off; /* the point's site (link-time): kprw_rt.hot_base + site_off */
	u32 pi;    /* its one probe */
	u64 open;  /* the header's sw_gen when hot_line_open last found probe pi and event e
		      open (switched on, records hit, no control change, tracing on, the
		      event not soft-disabled); ~0: not yet. optprobe.S's fast path compares
		      it with sw_gen instead of reading those switches (each writer bumps
		      sw_gen after it: kprw_sw_bump) */
	u32 e;     /* the probe's event */
	u32 dlen;  /* its record's data: the plan's fixed size, 0 without a plan */
	u8 kind;   /* KPRW_HOT_*: EVENT, an event alone at its point (kprw_rt.fastev) that
		      kprw_trace_event serves; EXIT, a KPRW_DF_EXIT point at a ret with one
		      return event that kprw_trace_exit serves; CALL, an entry point with two
		      probes, an event without fetches EVENT would serve and a return event
		      that hooks the return address (rpi): a function of --calls whose exits
		      could not be taken; TAIL, a KPRW_DF_EXIT point at a tail call's jmp whose
		      one probe is such a return event (rpi: its frame is hooked there, no
		      record); NONE, none of them (the general path) */
	u8 deleg;  /* the event has a filter or triggers: kprw_trace_event or kprw_trace_exit
		      decides (set at start-up and by kprw_ctl_sync) */
	u8 spev;   /* entry records carry the stack pointer (kprw_rt.spev) */
	u8 nops;   /* fetches in op[] (| KPRW_HOT_REGS8), or KPRW_HOT_PLAN: the plan has more */
	union {
		struct kprw_fplan_op op[KPRW_HOT_OPS];
		struct { /* CALL (nops 0), TAIL: */
			u32 rpi;   /* the return event's probe */
			u32 re;    /* its event */
			u8 rplain; /* it has no fetches: hot_ret_fast may write its records */
			u8 rdeleg; /* it has a filter or triggers (kprw_ctl_sync keeps it) */
			u8 rs;     /* its frames may go on the return stack (optprobe.S pushes
				      them there: rt_rstack.c) */
			u8 rpad;
			kprw_u64_a4 ropen; /* open, for rpi and re */
		};
	};
};
#define KPRW_HOT_PLAN 0xff
#define KPRW_HOT_REGS8 0x40 /* nops: with the count in its low bits, every op is an 8-byte
			       register read (the common `%di`): copied without the general
			       fetch's per-op branches */
#define KPRW_HOT_FAST 0x20 /* nops: the line's record reads general registers only (struct
			      pt_regs' words r15..di: with REGS8), or nothing (no ops, no data):
			      optprobe.S's fast path may write it */
#define KPRW_HOT_SEQ 0x10 /* nops: with FAST, an EVENT line without spev whose record is the
			     fixed part and its ops' registers in order, 8 bytes each, every one
			     in the fast path's frame (op[].slot): dlen is 8 a fetch, so the
			     record's size, rlen and commit word follow from the count alone and
			     optprobe.S's .Lseq writes it without the general fast path's
			     decisions (issue 49); or an EXIT line, or an EVENT or CALL line
			     with spev, without fetches: the fixed part and the word (.Lword,
			     .Lcallw) */
#define KPRW_HOT_NOPS 0x0f
_Static_assert(sizeof(struct kprw_hot) == 64, "kprw_hot is a cache line");
void kprw_hot_init(void);
/* the record paths of the kprw_hot lines: rt_hot.h (inlined into rt_opt.c) */
/* records of no probe's event: a synthetic event's (rt_hist.c's trace actions), a
 * stacktrace trigger's, a C handler's trace_printk (rt_printf.c) */
void kprw_trace_synth(u32 id, u64 site, const u64 *data, u32 n, const struct kprw_fenv *e);
void kprw_trace_stack(const struct kprw_hit *hit); /* a KPRW_REC_STACK record */
void kprw_trace_text(u64 site, u64 caller, const char *func, const char *text, u32 len,
		     struct kprw_tctx *c);

/* kprw_trace_lost counts a record that could not be written (no trace file) in
 * kprewrite_rt_stats.lost, a diagnostic, with a plain add: a locked one costs ~4 ns a
 * hit on some CPUs (two threads losing records at the same instant may count one) */
static inline void kprw_trace_lost(void)
{
	__atomic_store_n(&kprewrite_rt_stats.lost, __atomic_load_n(&kprewrite_rt_stats.lost, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

#endif
