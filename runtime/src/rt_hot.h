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

/* emit_record writes a record of type at site (link-time) whose data (dlen bytes) is
 * fetched already, or NULL to fetch with the plan into the record; with ret, the word
 * (a return's return address, an entry's stack pointer) */
static inline __attribute__((always_inline)) int emit_record_ops(u32 pi, u32 evid, u32 nops,
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
	u8 *d = fill(rec, dlen, pi, ret, ext, type, evid, site, word, &w);
	if (data) {
		kprw_memcpy(d, data, dlen);
	} else if (nops & KPRW_HOT_REGS8) { /* (a kprw_hot line's) */
		const u64 *r = (const u64 *)regs;
		for (u32 i = 0; i < (nops & KPRW_HOT_NOPS); i++)
			__builtin_memcpy(d + ops[i].dest, &r[ops[i].reg], 8);
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
		return emit_record_ops(h->pi, h->evid, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KPROBE, h->site,
				       1, word);
	}
	return emit_record_ops(h->pi, h->evid, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KPROBE, h->site, 0, 0);
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
	return emit_record_ops(h->pi, h->evid, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KRETPROBE, h->site, 1,
			       ret_ip);
}

#pragma GCC visibility pop
#endif
