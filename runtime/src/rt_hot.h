/*
 * rt_hot.h - the record path of a jump-optimized point's KPRW_HOT_EVENT or
 * KPRW_HOT_EXIT line (rt_trace.h's struct kprw_hot), inlined into the detour's C side
 * (rt_opt.c's kprewrite_rt_optcall): a hot event's hit makes no call from the detour's
 * body to its record's commit (issue 49); what is rare (controls changed, a filter or
 * triggers, a plan longer than the line holds, a new block) goes out of line to
 * rt_dispatch.c's general paths and rt_ring.c. Included after rt.h and rt_ring.h.
 */
#ifndef KPRW_RT_HOT_H
#define KPRW_RT_HOT_H

#pragma GCC visibility push(hidden)

/* entry_sp_word is the word an entry record of a function with a return event carries:
 * the stack pointer (the word the return address is in) lets readers end the calls a
 * longjmp or a missed return left open; bit 0: that word holds the return trampoline
 * already, this entry is a tail call from a return-probed frame (this hit's own return
 * events run after its records) */
static inline __attribute__((always_inline)) u64 entry_sp_word(const struct pt_regs *regs)
{
	return (u64)regs->sp | (*(const u64 *)regs->sp == (u64)(uptr)kprewrite_rt_rettramp);
}

/* closed: whether a record of event e may be written now: 0 yes; 1 no, tracing is off
 * (traceoff) or the event is soft-disabled (enable_event/disable_event, --disable with
 * triggers); 2 no, a live event switched off (src/rt_live.c): its probe is off, its
 * site being put back or kept by a fork child, so the hit is none. One load of the
 * event's word decides both, so a switch in between cannot split them. */
static inline __attribute__((always_inline)) int closed(u32 e)
{
	const u32 *ctl = kprw_rt.ev_ctl;
	if (unlikely(__atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED) != 0))
		return 1;
	if (ctl && e < kprw_rt.nevents && unlikely(__atomic_load_n(&ctl[e], __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED))
		return (kprw_rt.events[e].flags & KPRW_EF_LIVE) ? 2 : 1;
	return 0;
}

/* closed_result is what a record path returns for a closed hit (closed's c): 0, so that
 * the caller counts the hit, or 1 for a live event's, which counts none */
#define closed_result(c) ((c) - 1)

/* copy_regs8 copies a kprw_hot line's fetches that are all 8-byte registers
 * (KPRW_HOT_REGS8) into a record's data d */
static inline __attribute__((always_inline)) void copy_regs8(u8 *d, u32 nops, const struct kprw_fplan_op *ops,
							      const struct pt_regs *regs)
{
	const u64 *r = (const u64 *)regs;
	for (u32 i = 0; i < (nops & KPRW_HOT_NOPS); i++)
		__builtin_memcpy(d + ops[i].dest, &r[ops[i].reg], 8);
}

/* hot_site is line h's site (link-time) */
static inline __attribute__((always_inline)) u64 hot_site(const struct kprw_hot *h)
{
	return kprw_rt.hot_base + h->site_off;
}

/* emit_record writes a record of type at site (link-time), of event e, whose data (dlen bytes) is
 * fetched already, or NULL to fetch with the plan into the record; with ret, the word
 * (a return's return address, an entry's stack pointer) */
static inline __attribute__((always_inline)) int emit_record_ops(u32 pi, u32 e, u32 nops,
								 const struct kprw_fplan_op *ops,
								 const struct pt_regs *regs, struct kprw_tctx *c,
								 u32 dlen, const void *data, u8 type, u64 site, int ret,
								 u64 word)
{
	struct who w;
	who(&w, c);
	int ext = need_ext(w.now);
	struct kprw_crec *rec = reserve(rec_size(dlen, ret, ext), c, &w);
	if (unlikely(!rec))
		return 0;
	u8 *d = fill(rec, dlen, pi, ret, ext, type, ext ? kprw_rt.events[e].id : 0, site, word, &w);
	if (data) {
		kprw_memcpy(d, data, dlen);
	} else if (nops & KPRW_HOT_REGS8) { /* (a kprw_hot line's) */
		copy_regs8(d, nops, ops, regs);
	} else if (dlen) {
		kprw_fetch_ops_into(nops, ops, regs, d, kprw_fast_ok(c));
	}
	commit(rec, dlen, KPRW_CREC_COMMITTED);
	return (int)kprw_rt.rec_hits;
}

/* kprw_trace_event_hot is kprw_trace_event for a KPRW_HOT_EVENT point, from its kprw_hot
 * line instead of the point's, probe's, event's and plan's: what can change while the
 * program runs (controls, filters, triggers) sends it to kprw_trace_event. */
static inline __attribute__((always_inline)) int kprw_trace_event_hot(const struct kprw_hot *h,
								      const struct pt_regs *regs,
								      struct kprw_tctx *c)
{
	if (unlikely(__atomic_load_n(&h->deleg, __ATOMIC_RELAXED) ||
		     __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen))
		return kprw_trace_event(h->pi, regs, c);
	int cl = closed(h->e);
	if (cl)
		return closed_result(cl); /* the caller counts the hit */
	if (unlikely(h->nops == KPRW_HOT_PLAN))
		return kprw_trace_event(h->pi, regs, c); /* a plan longer than the line holds */
	if (h->spev) {
		u64 word = entry_sp_word(regs);
		return emit_record_ops(h->pi, h->e, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KPROBE, hot_site(h),
				       1, word);
	}
	return emit_record_ops(h->pi, h->e, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KPROBE, hot_site(h), 0, 0);
}

/* kprw_trace_exit_hot is kprw_trace_exit for a KPRW_HOT_EXIT point, as
 * kprw_trace_event_hot is kprw_trace_event */
static inline __attribute__((always_inline)) int kprw_trace_exit_hot(const struct kprw_hot *h, struct pt_regs *regs,
								     u64 ret_ip, struct kprw_tctx *c)
{
	if (unlikely(__atomic_load_n(&h->deleg, __ATOMIC_RELAXED) || h->nops == KPRW_HOT_PLAN ||
		     (kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen)))
		return kprw_trace_exit(h->pi, regs, ret_ip, c);
	int cl = closed(h->e);
	if (cl)
		return closed_result(cl); /* the caller counts the hit */
	return emit_record_ops(h->pi, h->e, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KRETPROBE, hot_site(h), 1,
			       ret_ip);
}

/* hot_fast_tctx is the calling thread's context when the fast path may use it as it is:
 * found at its hash's own slot, no handler of ours running on the thread, its tid still
 * the TCB's; NULL sends the hit to the full path, which finds, renews or claims it */
static inline __attribute__((always_inline)) struct kprw_tctx *hot_fast_tctx(void)
{
	u64 k = kprw_tkey();
	struct kprw_tctx *c = &kprw_tctx_tab[kprw_tctx_hash(k) & (KPRW_NTCTX - 1)];
	u32 live = __atomic_load_n(&kprw_tid_live, __ATOMIC_ACQUIRE);
	if (unlikely(k == 0 || (k & KPRW_KEY_TID) || __atomic_load_n(&c->key, __ATOMIC_RELAXED) != k || c->busy ||
		     !live || !kprw_tctx_tcb_holds(c, live)))
		return NULL;
	return c;
}

/* line_open says whether a record of probe pi's event e may be written on the fast path
 * as far as the process's switches go: the probe and the event switched on, no control
 * changed since this process applied them, tracing on, records that count their hits
 * and name their event by probe (the clock is its callers') */
static inline __attribute__((always_inline)) int line_open(u32 pi, u32 e)
{
	if (unlikely(kprw_rt.disable_all || (kprw_rt.state[pi].flags & (KPRW_SF_DISABLED | KPRW_SF_UNREG)) ||
		     !kprw_rt.rec_hits || kprw_rt.rec_ext || !kprw_rt.ctl_gen))
		return 0;
	return likely(__atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) == kprw_rt.ctl_seen &&
		      !__atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED) &&
		      !(kprw_rt.ev_ctl && __atomic_load_n(&kprw_rt.ev_ctl[e], __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED));
}

/* hot_line_open is line_open for a kprw_hot line's probe pi and event e, which keeps in
 * *open the header's sw_gen it was found open under: read before the switches, so that
 * a change after it (which bumps sw_gen: kprw_sw_bump) leaves the word stale and the
 * next hit looks again. optprobe.S's fast path compares the two words and reads no
 * switch (issue 49: the probe's state and the event's soft-disable word were two cache
 * lines more a record in a program with thousands of hot points). */
static inline __attribute__((always_inline)) int hot_line_open(u32 pi, u32 e, u64 *open)
{
	u64 *g = kprw_rt.sw_gen;
	u64 gen = g ? __atomic_load_n(g, __ATOMIC_ACQUIRE) : 0;
	if (!line_open(pi, e))
		return 0;
	if (g && __atomic_load_n(open, __ATOMIC_RELAXED) != gen)
		__atomic_store_n(open, gen, __ATOMIC_RELAXED);
	return 1;
}

/* hot_open is line_open with the TSC clock, which the C fast paths read */
static inline __attribute__((always_inline)) int hot_open(u32 pi, u32 e)
{
	return kprw_rt.clk_tsc && line_open(pi, e);
}

/* inline_rec_open lets the detour of line h's point write its record itself
 * (KPRW_DF_INLINEREC, src/inlinerec.S) once hot_line_open found the line open: the
 * probe's iropen takes the generation under which it was (every time: optprobe.S's
 * paths serve the point without C while the line's open word holds, so the two words
 * must be renewed together), when the line is of the count-fixed shape the detour writes
 * (KPRW_HOT_SEQ: an EVENT line with no filter, trigger or spev word, 8-byte general
 * registers at 16, 24, 32). A switch since then bumped sw_gen: the word is stale at
 * once. The detour checks kprw_rt.fast_cfg itself. */
static inline __attribute__((always_inline)) void inline_rec_open(const struct kprw_hot *h)
{
	if (h->kind != KPRW_HOT_EVENT || likely(!(kprw_rt.points[h - kprw_rt.hot].dflags & KPRW_DF_INLINEREC)))
		return;
	u32 want = KPRW_HOT_FAST | KPRW_HOT_SEQ;
	if (h->deleg || h->spev || h->nops == KPRW_HOT_PLAN || (h->nops & want) != want ||
	    h->dlen != 8 * (h->nops & KPRW_HOT_NOPS))
		return;
	u64 *w = &kprw_rt.state[h->pi].iropen;
	u64 gen = __atomic_load_n(&h->open, __ATOMIC_RELAXED);
	u64 cur = __atomic_load_n(w, __ATOMIC_RELAXED);
	/* forward only (sw_gen only grows): a thread that read an older generation and
	 * stores after one that read the newer would leave the word stale while the line's
	 * holds, and optprobe.S's paths would never send the point back here to renew it */
	while (gen != ~0ull && (cur == ~0ull || cur < gen) &&
	       !__atomic_compare_exchange_n(w, &cur, gen, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

/* hot_fast_open is hot_open for line h's event, which also has no filter or trigger and
 * fetches 8-byte registers only; it keeps the line's open word (hot_line_open) */
static inline __attribute__((always_inline)) int hot_fast_open(const struct kprw_hot *h)
{
	u32 nops = h->nops;
	if (unlikely(h->deleg || (h->dlen && !(nops & KPRW_HOT_REGS8)) || nops == KPRW_HOT_PLAN))
		return 0;
	if (!hot_line_open(h->pi, h->e, (u64 *)&h->open))
		return 0;
	inline_rec_open(h);
	return kprw_rt.clk_tsc;
}

/* hot_record writes the record of probe pi (dlen bytes of data fetched by the line's
 * 8-byte register ops from regs; with ret, the word) for hot_fast_in and hot_ret_fast:
 * the TSC's extrapolation valid, the comm younger than its refresh, a time that needs
 * no ext part, room in the thread's block (fill writes the fixed part as every
 * record's). 0: written, the hit; 1: nothing done that matters (at most a place taken
 * past its block's end, which is never written: reserve's rule). */
static inline __attribute__((always_inline)) int hot_record(struct kprw_tctx *c, u32 pi, u32 dlen, u32 nops,
							const struct kprw_fplan_op *ops, const struct pt_regs *regs,
							int ret, u64 word)
{
	struct who w;
	if (unlikely(!kprw_tsc_ns(&w.now) || w.now - c->comm_ns > KPRW_COMM_REFRESH_NS || need_ext(w.now)))
		return 1;
	kprw_tclk_check(c, w.now); /* (optprobe.S's fast paths declined for it) */
	u32 size = rec_size(dlen, ret, 0);
	u64 rw = size;
	__asm__ volatile("xaddq %0, %1" : "+r"(rw), "+m"(kprw_tblk(c)->rec));
	u64 at = rw & REC_NEXT_MASK;
	if (unlikely(at + size > rec_end(rw)))
		return 1; /* (this place is never written: reserve's rule) */
	struct kprw_crec *rec = rec_at(at);
	u8 *d = fill(rec, dlen, pi, ret, 0, 0, 0, 0, word, &w);
	copy_regs8(d, nops, ops, regs);
	commit_hot(rec, dlen, KPRW_CREC_COMMITTED, c);
	return 0;
}

/* hot_fast_in writes the record of a KPRW_HOT_EVENT line's hit (exit 0) or a
 * KPRW_HOT_EXIT line's at a ret (exit 1), or a KPRW_HOT_CALL line's entry (exit 0), when
 * nothing is unusual, in about half the full path's instructions (issue 49: here the
 * work around the clock's read adds nearly its whole latency to a record;
 * docs/benchmarks.md): hot_fast_open, the thread's context c as hot_fast_tctx found it
 * (NULL: declined), the TSC's extrapolation valid, a time that needs no ext part, room
 * in the thread's block (fill writes the fixed part as every record's). Returns 0: the
 * record is written and is the hit; 1: nothing done that matters (at most a place
 * taken past its block's end, which is never written: reserve's rule), the full path
 * decides. */
static inline __attribute__((always_inline)) int hot_fast_in(const struct kprw_hot *h, struct pt_regs *regs, int exit,
							 struct kprw_tctx *c)
{
	if (!c || !hot_fast_open(h))
		return 1;
	u64 sp = regs->sp, word = 0;
	if (exit) {
		word = *(const u64 *)sp; /* the return address */
		if (unlikely(word == (u64)(uptr)kprewrite_rt_rettramp))
			return 1;
		regs->ip = word; /* what a return event's fetches see: after the ret */
		regs->sp = sp + 8;
	} else {
		if (h->spev)
			word = entry_sp_word(regs);
		regs->ip = RT_ADDR(hot_site(h));
	}
	int r = hot_record(c, h->pi, h->dlen, h->nops, h->op, regs, exit || h->spev, word);
	regs->sp = sp;
	return r;
}

/* hot_fast is hot_fast_in with the calling thread's context as hot_fast_tctx finds it */
static inline __attribute__((always_inline)) int hot_fast(const struct kprw_hot *h, struct pt_regs *regs, int exit)
{
	return hot_fast_in(h, regs, exit, hot_fast_tctx());
}

/* hot_call_fast is a KPRW_HOT_CALL line's hit in the steady state: the entry's record
 * by hot_fast_in, then the return address hooked (kprw_kretprobe_entry, with the
 * thread's busy raised as the general path raises it: the instance's set-up is not
 * run nested). 1: nothing done, the full path decides (live lists, or what hot_fast_in
 * declines: its entry record is then written there). */
static inline __attribute__((always_inline)) int hot_call_fast(const struct kprw_hot *h, struct pt_regs *regs)
{
	struct kprw_tctx *c = hot_fast_tctx();
	if (unlikely(kprw_rt.live_lists) || hot_fast_in(h, regs, 0, c))
		return 1;
	if (likely(kprw_probe_enabled(h->rpi))) {
		hot_line_open(h->rpi, h->re, (u64 *)&h->ropen); /* (for optprobe.S's RS_OK) */
		c->busy++;
		regs->ip = RT_ADDR(hot_site(h)) + 1; /* as after an int3, for the entry work */
		kprw_kretprobe_entry(h->rpi, regs, c);
		c->busy--;
	}
	return 0;
}

/* hot_ret_fast writes the return record of a KPRW_HOT_CALL line's hooked return (probe
 * pi, from kprw_rethook, the thread's busy raised there) on hot_record's way when
 * nothing is unusual: the line's return event without fetches, no filter or trigger
 * (rdeleg, kept by kprw_ctl_sync), switched on, no control changed, tracing on. 1:
 * nothing done, kprw_trace_exit decides. */
static inline __attribute__((always_inline)) int hot_ret_fast(const struct kprw_hot *h, u32 pi,
							  const struct pt_regs *regs, u64 shown, struct kprw_tctx *c)
{
	if ((h->kind != KPRW_HOT_CALL && h->kind != KPRW_HOT_TAIL) || h->rpi != pi)
		return 1;
	/* (the line's ropen kept whatever the event fetches: optprobe.S's RS_OK wants it) */
	int open = hot_line_open(pi, h->re, (u64 *)&h->ropen);
	if (!h->rplain || h->rdeleg || !open || !kprw_rt.clk_tsc)
		return 1;
	return hot_record(c, pi, 0, 0, NULL, regs, 1, shown);
}

#pragma GCC visibility pop
#endif
