/*
 * rt_dispatch.c - what a hit writes into the trace file: kprw_trace_hit (the general
 * path: filters, triggers, fetch programs), kprw_trace_event and kprw_trace_exit (a
 * jump-optimized point's event or return event with nothing else) and their
 * kprw_hot forms (one cache line per point), the records a hit's triggers add (stack
 * traces, synthetic events), violations and trace_printk text; and, at start-up,
 * which points take which path (kprw_fastev_init, kprw_spev_init, kprw_hot_init,
 * kprw_pf_update). Records are written with rt_ring.h.
 */
#include "rt.h"
#include "rt_ring.h"
#include "rt_hot.h"
#include "optfast.h"

/* synth_write writes a synthetic event's record (KPRW_REC_SYNTH): its fields, n u64,
 * and the site of the hit whose trigger generated it */
static __attribute__((noinline)) void synth_write(u32 id, u64 site, const u64 *data, u32 n, struct kprw_tctx *c)
{
	if (!kprw_rt.trace || __atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED))
		return;
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(n * 8, 0, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, n * 8, KPRW_NO_PROBE, 0, 1, KPRW_REC_SYNTH, id, site, 0, &w);
	kprw_memcpy(d, data, n * 8);
	commit(rec, n * 8, KPRW_CREC_COMMITTED);
}

/* kprw_trace_synth writes the record of a synthetic event an onmatch() or onmax()
 * trace action generated (rt_hist.c), or keeps it in the hit's queue until the hit's
 * own record is written (synth_flush) */
void kprw_trace_synth(u32 id, u64 site, const u64 *data, u32 n, const struct kprw_fenv *e)
{
	struct kprw_synthq *q = e->synthq;
	if (n > KPRW_HIST_MAXVARS)
		return;
	if (q && q->n < KPRW_SYNTHQ) {
		q->r[q->n].id = id;
		q->r[q->n].nfields = n;
		q->r[q->n].site = site;
		kprw_memcpy(q->r[q->n].data, data, n * 8);
		q->n++;
		return;
	}
	synth_write(id, site, data, n, kprw_tctx_get());
}

/* synth_flush writes the synthetic events' records a hit's triggers queued */
static inline __attribute__((always_inline)) void synth_flush(struct kprw_synthq *q, struct kprw_tctx *c)
{
	for (u32 k = 0; unlikely(k < q->n); k++)
		synth_write(q->r[k].id, q->r[k].site, q->r[k].data, q->r[k].nfields, c);
	q->n = 0;
}

/* a record of up to this many bytes of data is fetched on the stack when its event has a
 * filter, so that a filtered-out hit writes nothing (with strings: the thread's scratch
 * buffer) */
#define FILTER_STACK 256

/* trace_hit is kprw_trace_hit's body, inlined twice: without a filter or triggers (flt
 * and tg NULL, their code and buffer folded away, so the frame on the probed thread's
 * stack, a goroutine's too, stays small) and with them. With a filter or conditional
 * triggers the data is fetched where it can be seen before anything is written (the
 * scratch buffer, or this frame for a fixed size up to FILTER_STACK) and a refused hit
 * writes nothing; where neither can hold it, the record is judged where it was written
 * and a refused one is committed as KPRW_REC_DISCARD. Triggers run in the kernel's
 * order: unconditional ones before anything else, conditional ones on the fetched data
 * before the record is written, traceoff after it (written or not). */
static inline __attribute__((always_inline)) int trace_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip,
							   const u8 *edata, u32 elen, struct kprw_tctx *c,
							   const struct kprw_fprog *flt, const struct kprw_evtrig *tg)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	const struct kprw_event *ev = NULL;
	const u8 *prog = NULL;
	struct who w;

	if (p->event < kprw_rt.nevents)
		ev = &kprw_rt.events[p->event];
	if (!kprw_rt.trace) {
		kprw_trace_lost();
		return 0;
	}
	int cond = tg && tg->cond, norec = 0;
	const struct kprw_hit hit = {pi, regs, c, 0};
	if (tg && !cond)
		kprw_triggers_run(tg, NULL);
	int cl = (flt || tg) ? closed(p->event) : 0;
	if (cl) { /* (without either, kprw_trace_hit checked) */
		if (!cond)
			return closed_result(cl); /* the caller counts the hit */
		/* conditional triggers still see the hit (the kernel's temp buffer); the record
		 * is not written when tracing is off, and not when the event is soft-disabled
		 * after its triggers ran */
		norec = __atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED) != 0;
	}
	/* a hit its filter or triggers may end takes the clock when it is to be written,
	 * unless they read the time or the name (which the clock keeps fresh), or the
	 * event's data may hold the name (data of no fixed size: $comm is a string) */
	u32 needs = (flt ? flt->needs : 0) | (tg ? tg->needs : 0);
	if ((flt || cond) && !(needs & (KPRW_FNEED_TS | KPRW_FNEED_COMM)) && kprw_rt.ev_fixed && ev &&
	    kprw_rt.ev_fixed[p->event] >= 0)
		who_noclock(&w, c);
	else
		who(&w, c);
	u32 dlen = 0;
	int fast = kprw_fast_ok(c);
	const u8 *once = NULL; /* the record's data, fetched into the thread's scratch buffer */
	if (ev && ev->fetch_len) {
		prog = (const u8 *)RT_ADDR(ev->fetch);
		/* a fixed size is known without running the program: it runs once, into the
		 * record; else once into the scratch buffer (each memory read once), or, with
		 * none, measured first (strings are read to find their length) */
		long fixed = kprw_rt.ev_fixed ? kprw_rt.ev_fixed[p->event] : kprw_fetch_fixed_size(prog, ev->fetch_len);
		if (fixed >= 0) {
			dlen = (u32)fixed; /* 0: no arguments, nothing to run */
		} else if (c && kprw_rt.scratch) {
			u8 *buf = kprw_rt.scratch + (uptr)(c - kprw_tctx_tab) * KPRW_MAX_REC_DATA;
			long m = kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, buf, KPRW_MAX_REC_DATA,
						fast);
			if (m > 0)
				dlen = (u32)m;
			once = buf;
		} else {
			long m = kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, NULL,
						KPRW_MAX_REC_DATA, fast);
			if (m > 0)
				dlen = (u32)m;
		}
	}
	struct kprw_fenv fe;
	u8 tmp[FILTER_STACK];
	u32 tt = 0;
	struct kprw_synthq sq;
	sq.n = 0;
	if (flt || cond) {
		filter_env(&fe, needs, w.tid, w.comm, ev->id, kprw_rt.points[p->point].site + kprw_rt.bias, ret_ip, w.now);
		fe.regs = regs; /* stacktrace keys */
		fe.fast = fast;
		if (!once && dlen <= sizeof tmp && kprw_rt.ev_fixed) {
			if (dlen && kprw_rt.ev_plan && kprw_rt.ev_plan[p->event].n != ~0u && elen == 0)
				kprw_fetch_plan_run(&kprw_rt.ev_plan[p->event], regs, tmp, fast);
			else if (dlen && kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, tmp, dlen, fast) < 0)
				kprw_memset(tmp, 0, dlen);
			once = tmp;
		}
		if (once || norec) {
			fe.data = once;
			fe.dlen = once ? dlen : 0; /* no buffer and no record: conditions see no data */
			fe.synthq = &sq;
			if (cond)
				tt = kprw_triggers_run(tg, &fe);
			fe.synthq = NULL;
			int keep = !norec && !(cond && closed(p->event)) && (!flt || kprw_filter_match(flt, &fe));
			if (!keep) {
				synth_flush(&sq, c);
				if (tt)
					kprw_triggers_post(tg, tt, &hit);
				return 0; /* the caller counts the hit */
			}
			flt = NULL;
			cond = 0;
		}
	}
	who_clock(&w, c);
	int ret = type == KPRW_REC_KRETPROBE, ext = !ev || type > KPRW_REC_KRETPROBE || need_ext(w.now);
	u64 word = ret_ip;
	if (type == KPRW_REC_KPROBE && kprw_rt.spev && unlikely(kprw_rt.spev[p->point / 64] >> (p->point % 64) & 1)) {
		word = entry_sp_word(regs); /* the entry of a function with a return event */
		ret = 1;
	}
	struct kprw_crec *rec = reserve(rec_size(dlen, ret, ext), c, &w);
	if (!rec) {
		synth_flush(&sq, c);
		if (tt)
			kprw_triggers_post(tg, tt, &hit);
		return 0;
	}
	u8 *d = fill(rec, dlen, pi, ret, ext, type, ev ? ev->id : KPRW_NO_EVENT, kprw_rt.points[p->point].site, word,
		     &w);
	long got = 0;
	if (once) {
		kprw_memcpy(d, once, dlen);
		got = dlen;
	} else if (dlen && kprw_rt.ev_plan && kprw_rt.ev_plan[p->event].n != ~0u && elen == 0) {
		kprw_fetch_plan_into(&kprw_rt.ev_plan[p->event], regs, d, fast);
		got = dlen;
	} else if (dlen) {
		got = kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, d, dlen, fast);
		if (got < 0)
			got = 0;
		/* bytes past got are still zero */
	}
	if (flt || cond) {
		fe.data = d;
		fe.dlen = (u32)got;
		if (cond)
			tt = kprw_triggers_run(tg, &fe);
		if ((cond && closed(p->event)) || (flt && !kprw_filter_match(flt, &fe))) {
			commit(rec, (u32)got, KPRW_CREC_COMMITTED | KPRW_CREC_DISCARDED);
			if (tt)
				kprw_triggers_post(tg, tt, &hit);
			return 0;
		}
	}
	commit(rec, (u32)got, KPRW_CREC_COMMITTED);
	synth_flush(&sq, c);
	if (tt)
		kprw_triggers_post(tg, tt, &hit);
	return (int)kprw_rt.rec_hits;
}

/* hist_hit is trace_hit for the hit of an event that writes no record now (switched
 * off, or tracing off) and whose triggers are all hist triggers reading neither the
 * time nor the name: the data fetched by its plan onto the stack, the histograms
 * updated, nothing else (a histogram's update is most of what such a hit costs) */
static __attribute__((noinline)) int hist_hit(u32 pi, struct pt_regs *regs, struct kprw_tctx *c,
					      const struct kprw_evtrig *tg, u32 e, u32 dlen)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	u8 tmp[FILTER_STACK];
	int fast = kprw_fast_ok(c);
	if (dlen)
		kprw_fetch_plan_run(&kprw_rt.ev_plan[e], regs, tmp, fast);
	struct kprw_fenv fe; /* no time, no name: the histograms read neither */
	filter_env(&fe, tg->needs, likely(c != NULL) ? kprw_tctx_tid_fast(c) : kprw_gettid(), NULL,
		   kprw_rt.events[e].id, kprw_rt.points[p->point].site + kprw_rt.bias, 0, 0);
	fe.data = tmp;
	fe.dlen = dlen;
	fe.regs = regs;
	fe.fast = fast;
	kprw_triggers_run(tg, &fe); /* (hist triggers only: none runs after the record) */
	return 0; /* the caller counts the hit */
}

static __attribute__((noinline)) int trace_hit_filtered(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip,
							 const u8 *edata, u32 elen, struct kprw_tctx *c)
{
	u32 e = kprw_rt.probes[pi].event;
	const struct kprw_fprog *flt = kprw_rt.ev_filter[e];
	const struct kprw_evtrig *tg = kprw_rt.ev_trig[e];
	if (!flt && tg && tg->histonly && type == KPRW_REC_KPROBE && !elen && kprw_rt.trace && kprw_rt.ev_fixed &&
	    !(tg->needs & (KPRW_FNEED_TS | KPRW_FNEED_COMM)) && closed(e)) {
		long fixed = kprw_rt.ev_fixed[e];
		if (fixed == 0 || (fixed > 0 && fixed <= FILTER_STACK && kprw_rt.ev_plan && kprw_rt.ev_plan[e].n != ~0u))
			return hist_hit(pi, regs, c, tg, e, (u32)fixed);
	}
	return trace_hit(pi, regs, type, ret_ip, edata, elen, c, flt, tg);
}

int kprw_trace_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip, const u8 *edata, u32 elen,
		   struct kprw_tctx *c)
{
	u32 e = kprw_rt.probes[pi].event;
	if (unlikely(kprw_rt.live_lists != NULL) && e < kprw_rt.nevents && (kprw_rt.events[e].flags & KPRW_EF_SPARE)) {
		kprw_live_hit(pi, regs, type, ret_ip, c); /* the events added at a prepared site (rt_livedef.c) */
		if (!kprw_rt.ev_ctl || (__atomic_load_n(&kprw_rt.ev_ctl[e], __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED))
			return 1; /* its own event (prepared/FUNC) is off: no hit of its own */
	}
	if (unlikely(kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen))
		kprw_ctl_sync(); /* filters or triggers changed while it runs (rt_ctl.c) */
	if (unlikely(e < kprw_rt.nevents && kprw_rt.ev_filter && (kprw_rt.ev_filter[e] || kprw_rt.ev_trig[e])))
		return trace_hit_filtered(pi, regs, type, ret_ip, edata, elen, c);
	int cl = kprw_rt.trace ? closed(e) : 0;
	if (cl)
		return closed_result(cl); /* the caller counts the hit */
	return trace_hit(pi, regs, type, ret_ip, edata, elen, c, NULL, NULL);
}

/* kprw_trace_stack writes the user stack of a hit (a stacktrace trigger): a record of
 * its own right after the event's, as the kernel's stack entry follows its event. The
 * walk goes into the thread's scratch buffer (free once the event's record is written),
 * or 16 frames on this stack without one. */
void kprw_trace_stack(const struct kprw_hit *hit)
{
	const struct kprw_probe *p = &kprw_rt.probes[hit->pi];
	struct kprw_tctx *c = hit->c;
	u64 small[16], *buf = small;
	u32 max = ARRAY_SIZE(small);
	if (!kprw_rt.trace)
		return;
	if (c && kprw_rt.scratch) {
		buf = (u64 *)(kprw_rt.scratch + (uptr)(c - kprw_tctx_tab) * KPRW_MAX_REC_DATA);
		max = KPRW_STACK_MAX;
	}
	u32 n = kprw_stack_walk(hit->regs, buf, max, kprw_fast_ok(c));
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(n * 8, 0, 1), c, &w);
	if (!rec)
		return;
	u32 id = hit->id ? hit->id : p->event < kprw_rt.nevents ? kprw_rt.events[p->event].id : KPRW_NO_EVENT;
	u8 *d = fill(rec, n * 8, KPRW_NO_PROBE, 0, 1, KPRW_REC_STACK, id, kprw_rt.points[p->point].site, 0, &w);
	kprw_memcpy(d, buf, n * 8);
	commit(rec, n * 8, KPRW_CREC_COMMITTED);
}

static inline __attribute__((always_inline)) int emit_record(u32 pi, const struct kprw_probe *p,
							     const struct kprw_fplan *pl, const struct pt_regs *regs,
							     struct kprw_tctx *c, u32 dlen, const void *data, u8 type,
							     u64 site, int ret, u64 word)
{
	/* (dlen > 0 without data: a compiled plan, pl->n != ~0) */
	return emit_record_ops(pi, p->event, dlen && !data ? pl->n : 0, pl->op, regs, c, dlen,
			       data, type, site, ret, word);
}

/* emit_event writes the record of kprw_trace_event: data (dlen bytes) fetched already, or
 * NULL to fetch with the plan into the record */
static inline __attribute__((always_inline)) int emit_event(u32 pi, const struct kprw_probe *p,
							    const struct kprw_fplan *pl, const struct pt_regs *regs,
							    struct kprw_tctx *c, u32 dlen, const void *data)
{
	if (kprw_rt.spev && unlikely(kprw_rt.spev[p->point / 64] >> (p->point % 64) & 1)) {
		/* the entry of a function whose return events are recorded at its exits: the
		 * stack pointer, as kprw_trace_hit writes it */
		u64 word = entry_sp_word(regs);
		return emit_record(pi, p, pl, regs, c, dlen, data, KPRW_REC_KPROBE, regs->ip - kprw_rt.bias, 1, word);
	}
	return emit_record(pi, p, pl, regs, c, dlen, data, KPRW_REC_KPROBE, regs->ip - kprw_rt.bias, 0, 0);
}

/* trace_event_filtered is kprw_trace_event for an event with a filter: the plan fetches
 * into this frame (at most 8 * KPRW_PLAN_MAX bytes), the filter judges, and only an
 * accepted hit takes the clock and writes */
static __attribute__((noinline)) int trace_event_filtered(u32 pi, const struct kprw_probe *p,
							   const struct kprw_fplan *pl, const struct pt_regs *regs,
							   struct kprw_tctx *c, const struct kprw_fprog *flt)
{
	u32 dlen = pl->n == ~0u ? 0 : pl->fixed;
	u64 tmp[KPRW_PLAN_MAX];
	struct kprw_fenv fe;
	if (dlen) {
		kprw_memset(tmp, 0, dlen);
		kprw_fetch_plan_into(pl, regs, (u8 *)tmp, kprw_fast_ok(c));
	}
	if ((flt->needs & KPRW_FNEED_COMM) && unlikely(c->comm_ns == 0))
		kprw_tctx_comm(c, kprw_clock_fast());
	filter_env(&fe, flt->needs, kprw_tctx_tid_fast(c), c->comm, kprw_rt.events[p->event].id, regs->ip, 0, 0);
	fe.data = (const u8 *)tmp;
	fe.dlen = dlen;
	int cl = closed(p->event);
	if (cl)
		return closed_result(cl); /* the caller counts the hit */
	if (!kprw_filter_match(flt, &fe))
		return 0; /* the caller counts the hit */
	return emit_event(pi, p, pl, regs, c, dlen, tmp);
}

/* kprw_trace_event writes the record of probe pi, an event whose point is jump-optimized
 * and has it alone, whose arguments a compiled plan fetches (or that has none): the path
 * of kprw_trace_hit with what kprw_rt.fastev guarantees taken out (kprw_fastev_init).
 * regs->ip is the site. 1 when written (the hit), 0 when lost or filtered out (the
 * caller counts it). */
int kprw_trace_event(u32 pi, const struct pt_regs *regs, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	if (unlikely(__atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen)) {
		kprw_ctl_sync(); /* filters or triggers changed while it runs (rt_ctl.c) */
		if (kprw_rt.ev_trig[p->event]) /* triggers now: they run on kprw_trace_hit's path */
			return kprw_trace_hit(pi, (struct pt_regs *)regs, KPRW_REC_KPROBE, 0, NULL, 0, c);
	}
	int cl = closed(p->event);
	if (cl)
		return closed_result(cl); /* the caller counts the hit */
	const struct kprw_fplan *pl = &kprw_rt.ev_plan[p->event];
	const struct kprw_fprog *flt = kprw_rt.ev_filter[p->event];
	if (unlikely(flt != NULL))
		return trace_event_filtered(pi, p, pl, regs, c, flt);
	return emit_event(pi, p, pl, regs, c, pl->n == ~0u ? 0 : pl->fixed, NULL);
}

/* kprw_trace_exit writes the return record of probe pi, a return event without entry
 * data, at a KPRW_DF_EXIT point or from the return trampoline (regs as after the ret:
 * ip = ret_ip, the return address), on kprw_trace_event's path when its event has
 * nothing else (no filter or trigger, a compiled plan), else on kprw_trace_hit's. 1
 * when written (the hit). */
int kprw_trace_exit(u32 pi, struct pt_regs *regs, u64 ret_ip, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	u32 e = p->event;
	if (unlikely(e >= kprw_rt.nevents || !kprw_rt.ev_plan || !kprw_rt.ev_fixed || !kprw_rt.ev_filter ||
		     (kprw_rt.events[e].flags & KPRW_EF_SPARE) ||
		     (kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen) ||
		     kprw_rt.ev_filter[e] || (kprw_rt.ev_trig && kprw_rt.ev_trig[e]) ||
		     (kprw_rt.events[e].fetch_len && (kprw_rt.ev_plan[e].n == ~0u || kprw_rt.ev_fixed[e] < 0))))
		return kprw_trace_hit(pi, regs, KPRW_REC_KRETPROBE, ret_ip, NULL, 0, c);
	int cl = closed(e);
	if (cl)
		return closed_result(cl); /* the caller counts the hit */
	const struct kprw_fplan *pl = &kprw_rt.ev_plan[e];
	return emit_record(pi, p, pl, regs, c, pl->n == ~0u ? 0 : pl->fixed, NULL, KPRW_REC_KRETPROBE,
			   kprw_rt.points[p->point].site, 1, ret_ip);
}

/* plain_event says whether probe p's event is one kprw_trace_event serves alone
 * (kprw_fastev_init's conditions, but the point's) */
static int plain_event(const struct kprw_probe *p)
{
	if (p->type != KPRW_T_KPROBE || p->flags != KPRW_F_TRACE || p->pre_handler || p->post_handler ||
	    p->event >= kprw_rt.nevents)
		return 0;
	const struct kprw_event *ev = &kprw_rt.events[p->event];
	if (ev->flags & KPRW_EF_SPARE) /* its events: kprw_trace_hit */
		return 0;
	if (ev->fetch_len && (kprw_rt.ev_plan[p->event].n == ~0u || kprw_rt.ev_fixed[p->event] < 0))
		return 0;
	return !(kprw_rt.ev_trig && kprw_rt.ev_trig[p->event]); /* triggers: kprw_trace_hit */
}

/* hooked_return says whether probe p is a return event (no handler of any kind) that
 * kprw_run_probes hooks after the point's other probes (kprw_run_return_events) */
static int hooked_return(const struct kprw_probe *p)
{
	return p->type == KPRW_T_KRETPROBE && p->flags == KPRW_F_TRACE && !p->entry_handler && !p->pre_handler &&
	       !p->post_handler && !p->ret_handler && p->event < kprw_rt.nevents && !(kprw_rt.events[p->event].flags & KPRW_EF_SPARE);
}

/* call_pair says whether point pt takes a KPRW_HOT_CALL line: the entry of a function
 * whose return event hooks the return address (a --calls pair the exits could not
 * take), with an event without fetches and that return event (*ev, *ret: their probes) */
static int call_pair(const struct kprw_point *pt, u32 *ev, u32 *ret)
{
	if (pt->nprobes != 2 || (pt->dflags & (KPRW_DF_EXIT | KPRW_DF_LIVE)))
		return 0;
	u32 a = pt->first_probe, b = a + 1;
	if (hooked_return(&kprw_rt.probes[a])) {
		a = b;
		b = pt->first_probe;
	}
	const struct kprw_probe *p = &kprw_rt.probes[a];
	if (!plain_event(p) || !hooked_return(&kprw_rt.probes[b]))
		return 0;
	u32 n = kprw_rt.ev_plan[p->event].n; /* no fetches: the line's ops hold rpi */
	if (n != 0 && n != ~0u)
		return 0;
	*ev = a;
	*ret = b;
	return 1;
}

/* ret_fields fills a CALL or TAIL line's part for its hooking return event, probe rpi
 * (hooked_return: its event < nevents) */
static void ret_fields(struct kprw_hot *h, u32 rpi)
{
	u32 re = kprw_rt.probes[rpi].event;
	const struct kprw_fplan *rpl = &kprw_rt.ev_plan[re];
	h->rpi = rpi;
	h->re = re;
	h->rplain = rpl->n == ~0u ? kprw_rt.events[re].fetch_len == 0 : rpl->n == 0 && rpl->fixed == 0;
	h->rdeleg = kprw_rt.ev_filter[re] || (kprw_rt.ev_trig && kprw_rt.ev_trig[re]);
	h->rs = kprw_rt.ri_pool && kprw_rt.ri_pool[rpi].rs;
}

/* tail_line makes h a KPRW_HOT_TAIL line: exit point pt at a tail call's jmp, whose one
 * probe rpi is a return event that hooks the return address there (hooked_return) */
static void tail_line(struct kprw_hot *h, const struct kprw_point *pt, u32 rpi)
{
	h->site_off = (u32)(pt->site - kprw_rt.hot_base);
	h->pi = rpi;
	h->e = kprw_rt.probes[rpi].event;
	ret_fields(h, rpi);
	h->kind = KPRW_HOT_TAIL;
}

/* fast_slot is where optprobe.S's fast path finds the pt_regs word reg in its own frame
 * (the registers it saved, %rcx the stub's), so that it copies a fetched register with
 * one load instead of a jump through its register table; 0: the frame does not hold it
 * (the callee-saved registers, which the fast path never changes: the table reads them) */
static u8 fast_slot(u8 reg)
{
#define PR(r) (__builtin_offsetof(struct pt_regs, r) / 8)
	switch (reg) {
	case PR(r11): return FF_R11;
	case PR(r10): return FF_R10;
	case PR(r9): return FF_R9;
	case PR(r8): return FF_R8;
	case PR(di): return FF_RDI;
	case PR(si): return FF_RSI;
	case PR(dx): return FF_RDX;
	case PR(ax): return FF_RAX;
	case PR(cx): return FF_RCX;
	default: return 0;
	}
#undef PR
}

/* seq_line says whether line h's record is what optprobe.S's .Lseq or .Lword writes
 * (KPRW_HOT_SEQ): an EVENT line's without the spev word, its fetches 8-byte registers of
 * the fast frame stored in order from the data's start (dlen 8 each), or none (.Lseq);
 * or the word alone, no fetch: an EXIT line's return address, an EVENT or CALL line's
 * stack pointer with spev (.Lword, .Lcallw: the records of --calls) */
static int seq_line(const struct kprw_hot *h)
{
	u32 n = h->nops & KPRW_HOT_NOPS;
	if (!(h->nops & KPRW_HOT_FAST) || h->nops == KPRW_HOT_PLAN || h->dlen != 8 * n)
		return 0;
	if (h->kind == KPRW_HOT_EXIT || ((h->kind == KPRW_HOT_EVENT || h->kind == KPRW_HOT_CALL) && h->spev))
		return n == 0;
	if (h->kind != KPRW_HOT_EVENT || (n && !(h->nops & KPRW_HOT_REGS8)))
		return 0;
	for (u32 j = 0; j < n; j++)
		if (h->op[j].slot == 0 || h->op[j].dest != 8 * j)
			return 0;
	return 1;
}

/* kprw_hot_init fills kprw_rt.hot (or, out of memory, takes kprw_rt.fastev away): a
 * KPRW_HOT_EVENT line for each kprw_rt.fastev point, a KPRW_HOT_CALL line for each
 * call_pair point,
 * a KPRW_HOT_TAIL line for each exit point at a tail call's jmp with one hooking return
 * event, a KPRW_HOT_EXIT line for each exit point at a ret whose one return event
 * kprw_trace_exit writes on its own path (no filter or trigger now, a compiled plan or
 * none). Start-up, after kprw_fastev_init and kprw_spev_init. */
void kprw_hot_init(void)
{
	if (!kprw_rt.ev_plan || !kprw_rt.ev_fixed || !kprw_rt.ev_filter || !kprw_rt.npoints)
		return;
	struct kprw_hot *hot = kprw_mmap_dense((u64)kprw_rt.npoints * sizeof *hot);
	if (!hot) {
		kprw_rt.fastev = NULL; /* its points take the general path (kprewrite_rt_optcall) */
		return;
	}
	kprw_rt.hot_base = kprw_rt.points[0].site; /* (the points are sorted by site) */
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		struct kprw_hot *h = &hot[k];
		u32 i = pt->first_probe, rpi = 0;
		h->open = ~0ull; /* (not found open yet: sw_gen never gets there) */
		h->ropen = ~0ull;
		if (pt->dflags & KPRW_DF_INLINEREC) /* (its detour's inline record: not yet) */
			__atomic_store_n(&kprw_rt.state[pt->first_probe].iropen, ~0ull, __ATOMIC_RELAXED);
		if (pt->xmode != KPRW_X_OPTIMIZED || (pt->nprobes != 1 && !call_pair(pt, &i, &rpi)) ||
		    pt->site - kprw_rt.hot_base > 0xffffffffull)
			continue;
		u32 e = kprw_rt.probes[i].event;
		if (e >= kprw_rt.nevents)
			continue;
		const struct kprw_event *ev = &kprw_rt.events[e];
		const struct kprw_fplan *pl = &kprw_rt.ev_plan[e];
		if (ev->flags & KPRW_EF_SPARE)
			continue;
		if (pt->dflags & KPRW_DF_EXIT) {
			if (kprw_rt.probes[i].type == KPRW_T_KRETPROBE) {
				/* a tail call's jmp: its return address is hooked */
				if (hooked_return(&kprw_rt.probes[i]) && !(pt->dflags & KPRW_DF_LIVE))
					tail_line(h, pt, i);
				continue;
			}
			if (ev->fetch_len && (pl->n == ~0u || kprw_rt.ev_fixed[e] < 0))
				continue;
			h->kind = KPRW_HOT_EXIT;
		} else if (pt->nprobes == 2) {
			h->kind = KPRW_HOT_CALL;
		} else if (kprw_rt.fastev && (kprw_rt.fastev[k / 64] >> (k % 64) & 1)) {
			h->kind = KPRW_HOT_EVENT;
		} else {
			continue;
		}
		h->site_off = (u32)(pt->site - kprw_rt.hot_base);
		h->pi = i;
		h->e = e;
		h->dlen = pl->n == ~0u ? 0 : pl->fixed;
		h->deleg = kprw_rt.ev_filter[e] || (kprw_rt.ev_trig && kprw_rt.ev_trig[e]);
		h->spev = kprw_rt.spev && (kprw_rt.spev[k / 64] >> (k % 64) & 1);
		h->nops = KPRW_HOT_PLAN;
		if (pl->n == ~0u) {
			h->nops = 0;
		} else if (pl->n <= KPRW_HOT_OPS) {
			h->nops = (u8)pl->n;
			kprw_memcpy(h->op, pl->op, pl->n * sizeof pl->op[0]);
			for (u32 j = 0; j < pl->n; j++)
				h->op[j].slot = fast_slot(pl->op[j].reg);
			/* gpr: general registers only (pt_regs' words before orig_ax), which
			 * optprobe.S's fast path reads where they are */
			u32 regs8 = pl->n > 0, gpr = 1;
			for (u32 j = 0; j < pl->n; j++) {
				regs8 &= pl->op[j].mem == 0 && pl->op[j].size == 8;
				gpr &= pl->op[j].reg < __builtin_offsetof(struct pt_regs, orig_ax) / 8;
			}
			if (regs8)
				h->nops |= KPRW_HOT_REGS8 | (gpr ? KPRW_HOT_FAST : 0);
		}
		if (h->nops == 0 && h->dlen == 0)
			h->nops = KPRW_HOT_FAST;
		if (seq_line(h))
			h->nops |= KPRW_HOT_SEQ;
		if (h->kind == KPRW_HOT_CALL) /* (nops 0: the event has no fetches) */
			ret_fields(h, rpi);
	}
	kprw_rt.hot = hot;
	kprw_fast_pick();
}

/* kprw_fastev_init marks the points kprw_trace_event may serve (kprw_rt.fastev, one bit
 * each): jump-optimized, one probe, a kprobe event with nothing else (no C handler, no
 * pre or post handler) whose arguments have a compiled plan or that has none. Start-up,
 * after the plans exist. */
void kprw_fastev_init(void)
{
	if (!kprw_rt.ev_plan || !kprw_rt.ev_fixed || !kprw_rt.ev_filter || !kprw_rt.npoints)
		return;
	u64 *bits = kprw_mmap_anon(((u64)kprw_rt.npoints + 63) / 64 * 8);
	if (!bits)
		return;
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		if (pt->xmode != KPRW_X_OPTIMIZED || pt->nprobes != 1 || (pt->dflags & KPRW_DF_EXIT))
			continue;
		if (plain_event(&kprw_rt.probes[pt->first_probe]))
			bits[k / 64] |= 1ull << (k % 64);
	}
	kprw_rt.fastev = bits;
}

/* kprewrite_rt_pf_ctlgen is what the inline filters of detours read (KPRW_DF_PREFILTER,
 * "Inline filters" in kprewrite_abi.h): 0, or the trace file's ctl_gen once every such
 * probe's pfgen says under which generation its inline filter is its event's filter. */
__attribute__((visibility("hidden"))) u64 kprewrite_rt_pf_ctlgen;
/* kprewrite_rt_trig_base is what inline histogram updates read (KPRW_DF_INLINEHIST): the
 * control area's slot 0, from which the event's switch word and its table are at offsets
 * the rewrite knows */
__attribute__((visibility("hidden"))) u64 kprewrite_rt_trig_base;

/* inline_hist_ok says whether the inline update of probe i's event e (a
 * KPRW_DF_INLINEHIST point) does what the runtime would: the event's filter and
 * triggers the rewrite's, its one trigger a plain histogram on a trace file */
static int inline_hist_ok(u32 i, u32 e)
{
	if (e >= kprw_rt.nevents || !kprw_rt.trace || !kprw_rt.ev_trig || !kprw_rt.ev_filter || !kprw_probe_enabled(i))
		return 0;
	const struct kprw_evtrig *tg = kprw_rt.ev_trig[e];
	if (kprw_rt.ev_filter[e] || !tg || (kprw_rt.ev_trig0 && kprw_rt.ev_trig0[e] != tg))
		return 0;
	return tg->n == 1 && tg->histonly && tg->t[0].cmd == KPRW_TRIG_HIST && !tg->t[0].filter && tg->t[0].hist &&
	       tg->t[0].hist->simple && tg->t[0].hist->nkeys == 1;
}

/* kprw_pf_update sets the pfgen of every probe with an inline filter: the generation of
 * the controls this process applied when the inline code decides as the runtime would
 * (the probe enabled, served by kprw_trace_event, its event's filter the rewrite's, no
 * trigger), ~0 when it does not; then publishes the trace file's ctl_gen. Start-up, and
 * kprw_ctl_sync after each change. An image with C handlers keeps the full path: a hit
 * inside a handler is a miss there, and only the runtime knows the thread is in one. */
void kprw_pf_update(void)
{
	if (!kprw_rt.ctl_gen || (kprw_rt.has & KPRW_HAS_USER))
		return;
	u32 gen = __atomic_load_n(&kprw_rt.ctl_seen, __ATOMIC_ACQUIRE);
	__atomic_store_n(&kprewrite_rt_trig_base, (u64)(uptr)kprw_rt.trig_count, __ATOMIC_RELEASE);
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		if (pt->dflags & KPRW_DF_INLINEHIST) {
			u32 i = pt->first_probe;
			__atomic_store_n(&kprw_rt.state[i].pfgen, inline_hist_ok(i, kprw_rt.probes[i].event) ? gen : ~0u,
					 __ATOMIC_RELEASE);
			continue;
		}
		if (!(pt->dflags & KPRW_DF_PREFILTER))
			continue;
		u32 i = pt->first_probe, e = kprw_rt.probes[i].event, ok = 0;
		if (e < kprw_rt.nevents && kprw_rt.ev_filter && kprw_rt.fastev && (kprw_rt.fastev[k / 64] >> (k % 64) & 1))
			ok = kprw_probe_enabled(i) && kprw_rt.ev_filter[e] &&
			     (!kprw_rt.ev_filter0 || kprw_rt.ev_filter[e] == kprw_rt.ev_filter0[e]) &&
			     !(kprw_rt.ev_trig && kprw_rt.ev_trig[e]);
		__atomic_store_n(&kprw_rt.state[i].pfgen, ok ? gen : ~0u, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&kprewrite_rt_pf_ctlgen, (u64)(uptr)kprw_rt.ctl_gen, __ATOMIC_RELEASE);
}

/* kprw_spev_init marks the points whose entry records carry the stack pointer
 * (kprw_rt.spev): a return event (an r: definition, traced) at the point, or a
 * KPRW_DF_SPENTRY point. Start-up. */
void kprw_spev_init(void)
{
	u64 *bits = NULL;
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		if (pt->dflags & KPRW_DF_SPENTRY) {
			if (!bits && !(bits = kprw_mmap_anon(((u64)kprw_rt.npoints + 63) / 64 * 8)))
				return;
			bits[k / 64] |= 1ull << (k % 64);
			continue;
		}
		for (u32 j = 0; j < pt->nprobes; j++) {
			const struct kprw_probe *p = &kprw_rt.probes[pt->first_probe + j];
			if (p->type != KPRW_T_KRETPROBE || !(p->flags & KPRW_F_TRACE) || (p->flags & KPRW_F_USER) ||
			    p->entry_handler || p->event >= kprw_rt.nevents)
				continue;
			if (!bits && !(bits = kprw_mmap_anon(((u64)kprw_rt.npoints + 63) / 64 * 8)))
				return;
			bits[k / 64] |= 1ull << (k % 64);
			break;
		}
	}
	kprw_rt.spev = bits;
}

/* kprw_trace_violation counts a --verify-regions violation in the point's KPRW_T_VERIFY
 * probe and writes a record for the first KPRW_VIOLATION_RECORDS of them. */
void kprw_trace_violation(const struct kprw_point *pt, struct kprw_tctx *c)
{
	u32 pi = pt->first_probe;
	u64 n = atomic_add((u64 *)(kprw_rt.ctr_base + (u64)pi * kprw_rt.ctr_stride), 1);
	if (!kprw_rt.trace || n >= KPRW_VIOLATION_RECORDS)
		return;
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(8, 0, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, 8, KPRW_NO_PROBE, 0, 1, KPRW_REC_VIOLATION, KPRW_NO_EVENT, pt->site, 0, &w);
	kprw_memcpy(d, &pt->target, 8);
	commit(rec, 8, KPRW_CREC_COMMITTED);
}

/* kprw_trace_text writes a KPRW_REC_PRINTK record (trace_printk from a C handler): the
 * site of the probe whose handler wrote it (0 outside handlers), the caller's address,
 * and the data "func\0text". */
void kprw_trace_text(u64 site, u64 caller, const char *func, const char *text, u32 len,
		     struct kprw_tctx *c)
{
	if (!kprw_rt.trace) {
		atomic_add(&kprewrite_rt_stats.lost, 1);
		return;
	}
	u32 flen = (u32)kprw_strlen(func);
	if (flen > 63)
		flen = 63;
	if (len > KPRW_PRINTK_MAX)
		len = KPRW_PRINTK_MAX;
	u32 dlen = flen + 1 + len;
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(dlen, 1, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, dlen, KPRW_NO_PROBE, 1, 1, KPRW_REC_PRINTK, KPRW_NO_EVENT, site, caller, &w);
	kprw_memcpy(d, func, flen);
	d[flen] = 0;
	kprw_memcpy(d + flen + 1, text, len);
	commit(rec, dlen, KPRW_CREC_COMMITTED);
}
