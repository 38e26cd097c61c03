/*
 * rt_opt.c - jump-optimized probes: the C side of the detour (src/optprobe.S).
 *
 * kprewrite_rt_optcall(regs, idx) is called by a detour with the probed thread's
 * registers as struct pt_regs (sp = the stack pointer at the probe address) on an
 * aligned stack below the red zone. It is reached only for armed points (the gate), so
 * it goes straight to the work: the reentrancy guard of the thread's context (a hit
 * while this thread runs a handler of ours, on any path, counts in nmissed and runs
 * nothing, but for an event alone at its point hit by a signal handler: nestable),
 * then the probes exactly as the int3 path runs them (kprw_run_probes: the
 * same handlers, ip = site + 1, trace records with ip = site, kretprobe entries whose
 * return address hijack is the same code). What handlers change is written back:
 *   - general registers always; arithmetic flags (CF PF AF ZF SF OF) too, as on the
 *     int3 path;
 *   - a pre handler returning non-zero resumes at regs->ip with every register, sp and
 *     the flags from pt_regs, skipping the DCR (kprobes' "redirection"; the kernel's
 *     optprobes ignore it, we do it right);
 *   - a changed regs->sp is honoured the same way, with ip = the DCR copy.
 * Those, and DF set at the probe (the template clears it), return 1 and the template
 * leaves through iretq; the common case returns 0 and it restores by popping.
 */
#include "rt.h"
#include "rt_ring.h"
#include "rt_hot.h"

#include "optfast.h"

/* optprobe.S's fast path reads these by number (optfast.h) */
#define OF(s, f, v) _Static_assert(__builtin_offsetof(struct s, f) == (v), "optfast.h: " #s "." #f)
OF(kprw_rt, state, OF_RT_STATE);
OF(kprw_rt, npoints, OF_RT_NPOINTS);
OF(kprw_rt, disable_all, OF_RT_DISABLE_ALL);
OF(kprw_rt, keymode, OF_RT_KEYMODE);
OF(kprw_rt, has_rdpid, OF_RT_HAS_RDPID);
OF(kprw_rt, has_prefetchw, OF_RT_HAS_PREFETCHW);
OF(kprw_rt, clk_tsc, OF_RT_CLK_TSC);
OF(kprw_rt, trace_data, OF_RT_TRACE_DATA);
OF(kprw_rt, rec_hits, OF_RT_REC_HITS);
OF(kprw_rt, rec_ext, OF_RT_REC_EXT);
OF(kprw_rt, ts_base, OF_RT_TS_BASE);
OF(kprw_rt, hot, OF_RT_HOT);
OF(kprw_rt, ev_ctl, OF_RT_EV_CTL);
OF(kprw_rt, tracing_off, OF_RT_TRACING_OFF);
OF(kprw_rt, ctl_gen, OF_RT_CTL_GEN);
OF(kprw_rt, ctl_seen, OF_RT_CTL_SEEN);
OF(kprw_rt, live_lists, OF_RT_LIVE_LISTS);
OF(kprw_rt, tcb_slot, OF_RT_TCB_SLOT);
OF(kprw_rt, rec_fast, OF_RT_REC_FAST);
OF(kprw_rt, fast_cfg, OF_RT_FAST_CFG);
OF(kprw_rt, rec_full, OF_RT_REC_FULL);
OF(kprw_rt, cpu_rseq, OF_RT_CPU_RSEQ);
OF(kprw_rt, trace, OF_RT_TRACE);
OF(kprw_trace_hdr, lost, OF_TRACE_LOST);
OF(kprw_stats, lost, OF_STATS_LOST);
OF(kprw_rt, sw_gen, OF_RT_SW_GEN);
OF(kprw_rt, ctr_base, OF_RT_CTR_BASE);
OF(kprw_rt, ctr_stride, OF_RT_CTR_STRIDE);
OF(kprw_hot, rpi, OF_HOT_RPI);
OF(kprw_hot, rs, OF_HOT_RS);
OF(kprw_hot, re, OF_HOT_RE);
OF(kprw_hot, rplain, OF_HOT_RPLAIN);
OF(kprw_hot, rdeleg, OF_HOT_RDELEG);
OF(kprw_hot, ropen, OF_HOT_ROPEN);
OF(kprw_hot, open, OF_HOT_OPEN);
OF(kprw_rt, probes, OF_RT_PROBES);
OF(kprw_probe, point, 0);
OF(kprw_stats, rettramps, OF_STATS_RETTRAMPS);
OF(kprw_rstack, key, 0);
OF(kprw_rstack, n, OF_RS_N);
OF(kprw_rstack, e, OF_RS_E);
OF(kprw_rent, K, 0);
OF(kprw_rent, ret, 8);
OF(kprw_rent, real, 16);
OF(kprw_rent, pi, 24);
OF(kprw_rent, flags, 28);
OF(kprw_probe_state, flags, OF_STATE_FLAGS);
OF(kprw_hot, pi, OF_HOT_PI);
OF(kprw_hot, e, OF_HOT_E);
OF(kprw_hot, dlen, OF_HOT_DLEN);
OF(kprw_hot, kind, OF_HOT_KIND);
OF(kprw_hot, deleg, OF_HOT_KIND + 1);
OF(kprw_hot, spev, OF_HOT_KIND + 2);
OF(kprw_hot, nops, OF_HOT_KIND + 3);
OF(kprw_hot, op, OF_HOT_OP);
OF(kprw_fplan_op, reg, OF_OP_REG);
OF(kprw_fplan_op, slot, OF_OP_SLOT);
OF(kprw_fplan_op, dest, OF_OP_DEST);
OF(kprw_tctx, key, 0);
OF(kprw_tctx, tid, OF_TCTX_TID);
OF(kprw_tctx, busy, OF_TCTX_BUSY);
OF(kprw_tctx, comm_ns, OF_TCTX_COMM_NS);
OF(kprw_tctx, comm_dl, OF_TCTX_COMM_DL);
OF(kprw_tblk, nrec, OF_TBLK_NREC);
OF(kprw_tblk, nret, OF_TBLK_NRET);
OF(kprw_tblk, tc_tsc, OF_TBLK_TSC);
OF(kprw_tblk, tc_span, OF_TBLK_TSPAN);
OF(kprw_tblk, tc_mult, OF_TBLK_TMULT);
OF(kprw_tblk, tc_rel, OF_TBLK_TREL);
OF(kprw_tblk, tc_seq, OF_TBLK_TSEQ);
OF(kprw_tshare, tid_live, OF_TSH_LIVE);
OF(kprw_tshare, tid_off, OF_TSH_OFF);
OF(kprw_stats, records, OF_STATS_RECORDS);
OF(kprw_crec, rlen, 0);
OF(kprw_crec, commit, 2);
OF(kprw_crec, cpu, 4);
OF(kprw_crec, ts_hi, 6);
OF(kprw_crec, ts_lo, 8);
OF(kprw_crec, probe, 12);
#undef OF
_Static_assert(sizeof(struct kprw_probe_state) == 1 << SH_STATE, "optfast.h: SH_STATE");
_Static_assert(sizeof(struct kprw_hot) == 1 << SH_HOT, "optfast.h: SH_HOT");
_Static_assert(sizeof(struct kprw_fplan_op) == SZ_OP, "optfast.h: SZ_OP");
_Static_assert(sizeof(struct kprw_tctx) == 1 << SH_TCTX && sizeof(struct kprw_tblk) == 1 << SH_TCTX, "optfast.h: SH_TCTX");
_Static_assert(sizeof(struct kprw_tctx) * KPRW_NTCTX == FC_TCTX_BYTES && FC_TCB_TID == KPRW_GLIBC_TID && FC_TCB_SELF == KPRW_GLIBC_SELF &&
		       sizeof(kprw_rt.tcb_slot) == 4 && FC_TCB_SLOT == KPRW_TCB_SLOT && sizeof(kprw_rt.fast_cfg) == 4 &&
		       sizeof(kprw_rt.rec_full) == 4,
	       "optfast.h: the TCB's word");
_Static_assert(sizeof(struct kprw_crec) == 16, "optfast.h: the record's fixed part");
_Static_assert(OF_TCTX_BUSY == OF_TCTX_TID + 4 && sizeof(((struct kprw_tctx *)0)->tid) == 4 && sizeof(((struct kprw_tctx *)0)->busy) == 4,
	       "optprobe.S: TCTX_FIND compares tid and busy as one word");
_Static_assert(sizeof(struct kprw_rstack) == SZ_RSTACK && SZ_RSTACK == 1 << SH_RSTACK && SH_RSTACK >= SH_TCTX &&
		       sizeof(struct kprw_rent) == 1 << SH_RENT &&
		       FC_RSTACK_N == KPRW_RSTACK_N && sizeof(((struct kprw_rstack *)0)->n) == 4 &&
		       sizeof(struct kprw_probe) == SZ_PROBE && sizeof(((struct kprw_rent *)0)->flags) == 4,
	       "optfast.h: the return stack");
_Static_assert(sizeof(((struct kprw_probe_state *)0)->flags) == 4 && sizeof(kprw_rt.disable_all) == 4 &&
		       sizeof(kprw_rt.rec_hits) == 4 && sizeof(kprw_rt.rec_ext) == 4 && sizeof(kprw_rt.clk_tsc) == 4 && sizeof(kprw_rt.rec_fast) == 4 &&
		       sizeof(kprw_rt.keymode) == 4 && sizeof(kprw_rt.has_rdpid) == 4 &&
		       sizeof(kprw_rt.has_prefetchw) == 4 && sizeof(kprw_rt.npoints) == 4 && sizeof(kprw_rt.ctl_seen) == 4,
	       "optfast.h: the words the fast path compares are 32-bit");
_Static_assert(KPRW_HOT_OPS == 3, "optprobe.S: .Lseq writes at most three registers");
_Static_assert(FC_HOT_EVENT == KPRW_HOT_EVENT && FC_HOT_EXIT == KPRW_HOT_EXIT && FC_HOT_CALL == KPRW_HOT_CALL &&
		       FC_HOT_TAIL == KPRW_HOT_TAIL &&
		       FC_HOT_PLAN == KPRW_HOT_PLAN &&
		       FC_HOT_FAST == KPRW_HOT_FAST && FC_HOT_NOPS == KPRW_HOT_NOPS && FC_HOT_SEQ == KPRW_HOT_SEQ &&
		       FC_SF_OFF == (KPRW_SF_DISABLED | KPRW_SF_UNREG) && FC_CTL_SOFT_DISABLED == KPRW_CTL_SOFT_DISABLED &&
		       FC_KEY_FSBASE == KPRW_KEY_FSBASE && FC_KEY_FS0 == KPRW_KEY_FS0 && FC_COMM_REFRESH_NS == KPRW_COMM_REFRESH_NS &&
		       (1ull << FC_TS_FAST_BITS) < TS_MAX - 2 && FC_REC_END_SHIFT == REC_END_SHIFT && FC_REC_AHEAD == REC_AHEAD &&
		       FC_CREC_RET == KPRW_CREC_RET && FC_CREC_HIT == KPRW_CREC_HIT &&
		       FC_CREC_COMMITTED == KPRW_CREC_COMMITTED && FC_TCTX_HASH == 0x9E3779B97F4A7C15ull &&
		       FC_TCTX_HASH_SHIFT == 54 && KPRW_NTCTX == 1024 && KPRW_CREC_LEN >= 0x1fff,
	       "optfast.h: a constant differs");

#define FLAGS_ARITH 0x8d5ul /* CF PF AF ZF SF OF */
#define FLAGS_DF 0x400ul

static long slow_exit(struct pt_regs *regs)
{
	unsigned long cs, ss;
	__asm__("mov %%cs, %0" : "=r"(cs));
	__asm__("mov %%ss, %0" : "=r"(ss));
	regs->cs = cs & 0xffff;
	regs->ss = ss & 0xffff;
	atomic_add(&kprewrite_rt_stats.optslow, 1);
	return 1;
}

/* nestable says whether a hit of an event alone at its point (kprw_rt.fastev) may write
 * its record although this thread is in a handler of ours: only a signal handler of the
 * program can run then, having interrupted ours (our handlers call no code of the
 * program; a C handler's can, and its hits stay missed, as a kprobe hit inside a
 * handler is). The record path is reentrant (reserve's xadd; fault-catching reads keep
 * no per-thread state), so the signal handler's events are recorded, as the kernel's
 * uprobes record them; triggers (added at run time) are not run there, and a few levels
 * bound the depth. */
static inline int nestable(const struct kprw_tctx *c, u32 event)
{
	return c->busy < 4 && c->ucall == NULL && !(kprw_rt.ev_trig && kprw_rt.ev_trig[event]);
}

static long exit_resume(const struct kprw_point *pt, struct pt_regs *regs);

/* exit_hit runs the return events of a KPRW_DF_EXIT point: the detour reached the
 * function's exit instruction (it ran the straight-line code before it), so the word at
 * sp is the return address. At a tail call's jmp (kretprobes) they hook it, as at the
 * entry. At a ret the registers are those of the return: the events' fetches see them
 * as the uprobe tracer's uretprobe handler does, after the ret (ip = the return
 * address, sp above it). Nothing in regs changes. With h, the point's KPRW_HOT_EXIT
 * line: its one return event at a ret, read from the line alone (the point's own line
 * only on the rare paths). */
static inline __attribute__((always_inline)) long exit_hit(const struct kprw_point *pt, const struct kprw_hot *h,
							    struct pt_regs *regs)
{
	unsigned long sp = regs->sp;
	u64 ret = *(const u64 *)sp;
	struct kprw_tctx *c = kprw_tctx_get();
	if (unlikely(!c || kprw_tctx_busy(c))) {
		kprw_miss_point(pt, regs);
		return exit_resume(pt, regs);
	}
	c->busy++;
	if (!h && kprw_rt.probes[pt->first_probe].type == KPRW_T_KRETPROBE) {
		regs->ip = RT_ADDR(pt->site); /* (as at an entry: its fetches read none) */
		kprw_run_return_events(pt, regs, c);
		c->busy--;
		return exit_resume(pt, regs);
	}
	if (unlikely(ret == (u64)(uptr)kprewrite_rt_rettramp)) {
		/* tail-called from a frame whose return events hook it: show the real one */
		u64 real = kprw_kretprobe_real_ret(sp);
		if (real)
			ret = real;
	}
	regs->ip = ret;
	regs->sp = sp + 8;
	u32 first = h ? h->pi : pt->first_probe, n = h ? 1 : pt->nprobes;
	for (u32 i = first; i < first + n; i++) {
		if (!kprw_probe_enabled(i))
			continue;
		if (unlikely(!kprw_rt.trace)) {
			kprw_count_hit(i);
			kprw_trace_lost();
		} else if (!(h ? kprw_trace_exit_hot(h, regs, ret, c) : kprw_trace_exit(i, regs, ret, c))) {
			kprw_count_hit(i); /* a written record is the hit */
		}
	}
	c->busy--;
	regs->sp = sp;
	return exit_resume(pt, regs);
}

/* exit_resume returns from exit_hit: the template's restore, or, when DF was set at the
 * exit (the template cleared it for the C code, and only iretq gives it back), the slow
 * exit into the copy of the exit instruction, as kprewrite_rt_optcall does */
static long exit_resume(const struct kprw_point *pt, struct pt_regs *regs)
{
	if (likely(!(regs->flags & FLAGS_DF)))
		return 0;
	regs->ip = RT_ADDR(pt->slot) + kprw_rt.opt_tmpl_len;
	return slow_exit(regs);
}

/* kprw_optcall_general is kprewrite_rt_optcall for a point without a kprw_hot line to serve
 * it: the probes as the int3 path runs them, or the return events of an exit */
static __attribute__((noinline)) long kprw_optcall_general(struct pt_regs *regs, u32 idx)
{
	if (unlikely(kprw_rt.points[idx].xmode != KPRW_X_OPTIMIZED))
		kprw_fatal("detour with a bad probepoint index:", idx);
	const struct kprw_point *pt = &kprw_rt.points[idx];
	unsigned long sp = regs->sp, flags = regs->flags;
	struct kprw_tctx *c;
	int any = 0, moved = 0;

	if (pt->dflags & KPRW_DF_EXIT)
		return exit_hit(pt, NULL, regs);
	regs->ip = RT_ADDR(pt->site) + 1; /* as after an int3, like the kernel's optimized_callback */
	c = kprw_tctx_get();
	if (unlikely(!c || kprw_tctx_busy(c))) {
		kprw_miss_point(pt, regs);
	} else {
		c->busy++;
		moved = kprw_run_probes(pt, regs, c, &any);
		c->busy--;
	}
	regs->flags = (flags & ~FLAGS_ARITH) | (regs->flags & FLAGS_ARITH);
	if (unlikely(moved))
		return slow_exit(regs);
	if (unlikely(regs->sp != sp || (flags & FLAGS_DF))) {
		regs->ip = RT_ADDR(pt->slot) + kprw_rt.opt_tmpl_len;
		return slow_exit(regs);
	}
	return 0;
}

/* hot_event_hit is the hit of a KPRW_HOT_EVENT point: an event alone at its point, no
 * handler, so nothing in regs can change; its record is written inline (rt_hot.h) */
static inline __attribute__((always_inline)) long hot_event_hit(const struct kprw_hot *h, struct pt_regs *regs)
{
	u32 i = h->pi;
	if (unlikely(!kprw_probe_enabled(i)))
		return 0;
	struct kprw_tctx *c = kprw_tctx_get();
	if (unlikely(!c || (kprw_tctx_busy(c) && !nestable(c, h->e)))) {
		kprw_count_miss(i);
		return 0;
	}
	c->busy++;
	regs->ip = RT_ADDR(hot_site(h)); /* what the event's fetches see, as on the other paths */
	if (!kprw_trace_event_hot(h, regs, c))
		kprw_count_hit(i); /* a written record is the hit */
	c->busy--;
	return 0;
}

/* hot_call_hit is the hit of a KPRW_HOT_CALL point, as kprw_run_probes runs its two
 * probes: the entry's record written inline, then the return address hooked for the
 * return event. What is rare (controls changed, live lists, the thread in a handler of
 * ours) takes kprw_optcall_general. */
static inline __attribute__((always_inline)) long hot_call_hit(const struct kprw_hot *h, struct pt_regs *regs, u32 idx)
{
	if (unlikely((kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen) ||
		     kprw_rt.live_lists))
		return kprw_optcall_general(regs, idx);
	struct kprw_tctx *c = kprw_tctx_get();
	if (unlikely(!c || kprw_tctx_busy(c)))
		return kprw_optcall_general(regs, idx); /* (counts the point's miss) */
	c->busy++;
	regs->ip = RT_ADDR(hot_site(h)); /* what the event's fetches see, as on the other paths */
	if (likely(kprw_probe_enabled(h->pi)) && !kprw_trace_event_hot(h, regs, c))
		kprw_count_hit(h->pi); /* a written record is the hit */
	regs->ip = RT_ADDR(hot_site(h)) + 1; /* as after an int3, for the entry work */
	if (likely(kprw_probe_enabled(h->rpi)))
		kprw_kretprobe_entry(h->rpi, regs, c);
	c->busy--;
	return 0;
}

/* kprw_optcall_hot serves a point from its kprw_hot line alone when it has one
 * (kprw_hot_init gives them to jump-optimized points only; a kprw_rt.fastev point always
 * has one), with no further call on a record's path; the rest is kprw_optcall_general's */
static __attribute__((noinline)) long kprw_optcall_hot(struct pt_regs *regs, u32 idx)
{
	if (unlikely(idx >= kprw_rt.npoints))
		kprw_fatal("detour with a bad probepoint index:", idx);
	const struct kprw_hot *h = kprw_rt.hot ? &kprw_rt.hot[idx] : NULL;
	u8 kind = h ? __atomic_load_n(&h->kind, __ATOMIC_RELAXED) : KPRW_HOT_NONE;
	if (kind == KPRW_HOT_EVENT && likely(!(regs->flags & FLAGS_DF)))
		return hot_event_hit(h, regs);
	if (kind == KPRW_HOT_EXIT)
		return exit_hit(&kprw_rt.points[idx], h, regs);
	if (kind == KPRW_HOT_CALL && likely(!(regs->flags & FLAGS_DF)))
		return hot_call_hit(h, regs, idx);
	return kprw_optcall_general(regs, idx);
}

/* kprw_fast_pick sets kprw_rt.fast_cfg when what optprobe.S's configured paths assume
 * holds: the hot table there, sw_gen's word, the thread's context named in glibc's TCB
 * (kprw_rt.tcb_slot), the rseq area's CPU (kprw_rt.cpu_rseq), prefetchw and the TSC
 * clock. Each is a test and a branch of every record of the general paths (the
 * configured ones test this word once): a record is paid by its instructions on a host
 * that runs them at half its rate in its slow minutes (issue 49). Each writer of those
 * calls it after its store; a thread that read the word just before a change still
 * checks what it reads (a TCB word is validated before use), and the clock's change has
 * the window the general paths' own test of clk_tsc has. */
void kprw_fast_pick(void)
{
	u32 f = kprw_rt.hot && kprw_rt.sw_gen && kprw_rt.tcb_slot == KPRW_TCB_SLOT && kprw_rt.cpu_rseq &&
		kprw_rt.has_prefetchw && kprw_rt.clk_tsc;
	__atomic_store_n(&kprw_rt.fast_cfg, f, __ATOMIC_RELEASE);
}

/* kprewrite_rt_optcall serves a KPRW_HOT_EVENT or KPRW_HOT_EXIT hit in the steady state
 * with hot_fast (rt_hot.h) and no other call, a KPRW_HOT_CALL hit with hot_call_fast
 * (the entry's record the same way, then the return address hooked); everything else,
 * and what they decline, is kprw_optcall_hot's */
__attribute__((visibility("hidden"))) long kprewrite_rt_optcall(struct pt_regs *regs, u32 idx)
{
	const struct kprw_hot *h = kprw_rt.hot;
	if (likely(h != NULL && idx < kprw_rt.npoints && !(regs->flags & FLAGS_DF))) {
		h += idx;
		u8 kind = __atomic_load_n(&h->kind, __ATOMIC_RELAXED);
		if ((kind == KPRW_HOT_EVENT || kind == KPRW_HOT_EXIT) && likely(!hot_fast(h, regs, kind == KPRW_HOT_EXIT)))
			return 0;
		if (kind == KPRW_HOT_CALL && likely(!hot_call_fast(h, regs)))
			return 0;
	}
	return kprw_optcall_hot(regs, idx);
}
