/* rt_trigger.h - event triggers (rt_trigger.c) and run-time controls (rt_ctl.c),
 * included by rt.h */
#ifndef KPRW_RT_TRIGGER_H
#define KPRW_RT_TRIGGER_H
#ifndef KPRW_RT_H
#error "included by rt.h"
#endif

/* ---- event triggers (rt_trigger.c) ---- */
#define KPRW_TRIG_TRACEON 1 /* internal/evtrigger's commands */
#define KPRW_TRIG_TRACEOFF 2
#define KPRW_TRIG_ENABLE 3
#define KPRW_TRIG_DISABLE 4
#define KPRW_TRIG_STACKTRACE 5
#define KPRW_TRIG_SNAPSHOT 6
#define KPRW_TRIG_HIST 7
#define KPRW_TRIG_ENABLE_HIST 8 /* targets: the slots of histogram tables */
#define KPRW_TRIG_DISABLE_HIST 9
struct kprw_trig {
	u8 cmd, post;
	u16 ntargets;
	u32 slot;            /* its count in kprw_rt.trig_count (hist: its table's first word) */
	const u8 *targets;   /* ntargets little-endian u32 event indexes (unaligned) */
	const struct kprw_fprog *filter; /* its condition, NULL: none */
	const struct kprw_hist *hist;    /* KPRW_TRIG_HIST: the histogram's shape */
};
struct kprw_evtrig {
	u32 n, cond;         /* cond: the kernel's TRIGGER_COND (run after the data is fetched) */
	u32 needs;           /* KPRW_FNEED_* of the conditions */
	u32 histonly;        /* every trigger is a hist trigger (rt_dispatch.c's hist_hit) */
	struct kprw_trig t[];
};
u64 kprw_ctl_size(void);
void kprw_ctl_fill(u8 *p);
void kprw_ctl_attach(u8 *p);
void kprw_trig_init(void);
const struct kprw_evtrig *kprw_trig_decode(u32 e, const u8 *b, u32 len); /* e ~0u: a synthetic event's */
/* where a control file frame's new triggers may keep their counts and tables (slots of
 * trig_count): those from from on are new; a count below nslots, a table in [lo, hi) */
struct kprw_trig_bounds {
	u32 from, nslots, lo, hi;
};
int kprw_trig_check(const u8 *b, u32 len, const struct kprw_trig_bounds *bd);
void kprw_trig_counts(const u8 *b, u32 len, const struct kprw_trig_bounds *bd);
u32 kprw_trig_place_limit(void);
int kprw_trig_place(u8 *b, u32 len, u64 slot0, u64 *at, u64 end);
u32 kprw_trig_spare(void);
/* run-time controls (rt_ctl.c) */
void kprw_ctl_sync(void);
void kprw_ctl_install(long fd, struct kprw_trace_hdr *h);
/* kprw_hit is what a trigger that runs after the record needs of its hit: the probe,
 * the registers (ip the site, or a return probe's return address), the thread, and the
 * event id its records carry when it is not the probe's event's (an event added at run
 * time, src/rt_livedef.c; 0: the probe's) */
struct kprw_hit {
	u32 pi;
	const struct pt_regs *regs;
	struct kprw_tctx *c;
	u32 id;
};
u32 kprw_triggers_run(const struct kprw_evtrig *tg, const struct kprw_fenv *fe);
void kprw_triggers_post(const struct kprw_evtrig *tg, u32 tt, const struct kprw_hit *hit);
void kprw_snapshot(u64 ts); /* the trace file's snapshot at ts (0: now) */

#endif
