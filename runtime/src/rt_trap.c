/*
 * rt_trap.c - int3 probes: the SIGTRAP handler.
 *
 * A hit (int3, si_code SI_KERNEL, ip = site + 1):
 *   1. find the probepoint by binary search on site;
 *   2. find this thread's context (rt_thread.c); if it is busy (a handler of ours is
 *      running, on any path) or a single-step is in flight, the probes are missed:
 *      nmissed++, no handlers;
 *   3. build struct pt_regs from the ucontext (ip = site + 1, as the kernel's int3
 *      handler shows it), run each enabled probe's pre handler (and trace record, and
 *      the kretprobe entry work), copy the registers back;
 *   4. if a pre handler returned non-zero, resume at regs->ip (no step, no post);
 *      else execute the instruction: emulate it (then post handlers), or jump to the
 *      slot ("boost": copy + jmp back, one trap per hit), or single-step the copy with
 *      TF set and run the post handlers at the TRAP_TRACE trap, fixing ip back.
 * An int3 on an inner byte of a would-be DCR (KPRW_PF_INNER, --verify-regions) is a
 * violation: counted, recorded, and run from its slot (see kprewrite_abi.h).
 * Jump-optimized points (KPRW_X_OPTIMIZED) have no int3; rt_opt.c runs them with the
 * same kprw_run_probes.
 */
#include "rt.h"

static const struct kprw_point *find_point(u64 vaddr)
{
	u32 lo = 0, hi = kprw_rt.npoints;
	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2;
		u64 s = kprw_rt.points[mid].site;
		if (s == vaddr)
			return &kprw_rt.points[mid];
		if (s < vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return kprw_rt.nfree ? kprw_free_find(vaddr) : NULL; /* an int3 placed live (rt_live.c) */
}

static void regs_from_mc(struct pt_regs *r, const struct k_sigcontext *mc)
{
	r->r15 = mc->r15; r->r14 = mc->r14; r->r13 = mc->r13; r->r12 = mc->r12;
	r->bp = mc->bp; r->bx = mc->bx; r->r11 = mc->r11; r->r10 = mc->r10;
	r->r9 = mc->r9; r->r8 = mc->r8; r->ax = mc->ax; r->cx = mc->cx;
	r->dx = mc->dx; r->si = mc->si; r->di = mc->di; r->orig_ax = ~0ul;
	r->ip = mc->ip; r->cs = mc->cs; r->flags = mc->flags; r->sp = mc->sp; r->ss = mc->ss;
}

static void regs_to_mc(struct k_sigcontext *mc, const struct pt_regs *r)
{
	mc->r15 = r->r15; mc->r14 = r->r14; mc->r13 = r->r13; mc->r12 = r->r12;
	mc->bp = r->bp; mc->bx = r->bx; mc->r11 = r->r11; mc->r10 = r->r10;
	mc->r9 = r->r9; mc->r8 = r->r8; mc->ax = r->ax; mc->cx = r->cx;
	mc->dx = r->dx; mc->si = r->si; mc->di = r->di;
	mc->ip = r->ip; mc->sp = r->sp;
	/* handlers may change the arithmetic flags, not TF/IF/IOPL and friends */
	mc->flags = (mc->flags & ~0x8d5ul) | (r->flags & 0x8d5ul);
}

/* kprw_step.saved_tf: X86_TF as it was, and STEP_POST when the step's end runs the post
 * handlers (a hit whose pre handlers ran; a missed hit steps without them) */
#define STEP_POST 0x1u

static int point_has_post(const struct kprw_point *pt)
{
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 i = pt->first_probe + k;
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if ((p->post_handler || (((p->flags & KPRW_F_USER) || kprw_spare_user(i)) && kprw_user_has_post(i))) &&
		    kprw_probe_enabled(i))
			return 1;
	}
	return 0;
}

static void run_post(const struct kprw_point *pt, struct pt_regs *regs)
{
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 i = pt->first_probe + k;
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (p->type == KPRW_T_KPROBE && ((p->flags & KPRW_F_USER) || kprw_spare_user(i)) && kprw_probe_enabled(i)) {
			kprw_user_post(i, regs);
			continue;
		}
		if (p->type == KPRW_T_KPROBE && p->post_handler && kprw_probe_enabled(i)) {
			void (*post)(void *, struct pt_regs *, unsigned long) =
				(void *)RT_ADDR(p->post_handler);
			post(kprw_user_obj(p), regs, 0);
		}
	}
}

static int cond_true(u32 cc, unsigned long f)
{
	int cf = f & 1, pf = (f >> 2) & 1, zf = (f >> 6) & 1, sf = (f >> 7) & 1, of = (f >> 11) & 1;
	int r;
	switch (cc >> 1) {
	case 0: r = of; break;
	case 1: r = cf; break;
	case 2: r = zf; break;
	case 3: r = cf | zf; break;
	case 4: r = sf; break;
	case 5: r = pf; break;
	case 6: r = sf != of; break;
	default: r = zf | (sf != of); break;
	}
	return (cc & 1) ? !r : r;
}

/* emulate executes a relative branch, call or ret by editing the saved registers. */
static void emulate(const struct kprw_point *pt, struct k_sigcontext *mc)
{
	uptr next = RT_ADDR(pt->site) + pt->insn_len;
	uptr target = RT_ADDR(pt->target);
	int addr32 = pt->pflags & KPRW_PF_ADDR32;
	unsigned long cx = addr32 ? (mc->cx & 0xffffffffu) : mc->cx;
	int take = 0;

	switch (pt->emu_op) {
	case KPRW_EMU_NOP:
		break;
	case KPRW_EMU_JMP:
		take = 1;
		break;
	case KPRW_EMU_JCC:
		take = cond_true(pt->emu_cc & 15, mc->flags);
		break;
	case KPRW_EMU_CALL:
		mc->sp -= 8;
		*(unsigned long *)mc->sp = next;
		take = 1;
		break;
	case KPRW_EMU_RET:
		next = *(unsigned long *)mc->sp;
		mc->sp += 8 + pt->ret_imm;
		break;
	case KPRW_EMU_JRCXZ:
		take = cx == 0;
		break;
	case KPRW_EMU_LOOP:
	case KPRW_EMU_LOOPE:
	case KPRW_EMU_LOOPNE:
		cx--;
		if (addr32)
			mc->cx = (mc->cx & ~0xffffffffull) | (cx & 0xffffffffu);
		else
			mc->cx = cx;
		take = cx != 0;
		if (pt->emu_op == KPRW_EMU_LOOPE)
			take = take && (mc->flags & 0x40);
		else if (pt->emu_op == KPRW_EMU_LOOPNE)
			take = take && !(mc->flags & 0x40);
		break;
	}
	mc->ip = take ? target : next;
}

/* slow_read says why the fetches of this hit must read by system call: SIGSEGV/SIGBUS
 * blocked where the trap interrupted the program (its own fault handler running), or
 * this handler running on a sigaltstack without room for the frame of a fault (the
 * kernel would kill a thread whose fault frame overflows its sigaltstack). It also says
 * (KPRW_SHORT_STACK) when the sigaltstack has less room than the C handlers may use
 * (their measured stack, kprw_rt.hstack_need): they are then skipped as missed
 * (rt_user.c) rather than run past the stack's end into the program's memory. */
static u32 slow_read(const struct k_ucontext *uc)
{
	u32 r = (u32)(uc->sigmask & KPRW_FAULT_SIGS);
	uptr sp = (uptr)__builtin_frame_address(0), lo = (uptr)uc->ss_sp;
	if (!(uc->ss_flags & SS_DISABLE) && sp - lo < uc->ss_size) {
		if (sp - lo < kprw_rt.minsigstk + 2048)
			r |= KPRW_SLOW_STACK;
		if (sp - lo < kprw_rt.hstack_need)
			r |= KPRW_SHORT_STACK;
	}
	return r;
}

/* post_in_signal runs pt's post handlers from the SIGTRAP handler, on the registers of
 * the signal frame uc. */
static void post_in_signal(const struct kprw_point *pt, struct k_ucontext *uc, struct kprw_tctx *c)
{
	struct pt_regs regs;
	c->busy++;
	c->slow_read = slow_read(uc);
	regs_from_mc(&regs, &uc->mc);
	run_post(pt, &regs);
	regs_to_mc(&uc->mc, &regs);
	c->slow_read = (u32)(uc->sigmask & KPRW_FAULT_SIGS); /* the interrupted context's */
	c->busy--;
}

/* execute resumes the probed instruction after the pre handlers. t may be NULL (no
 * thread entry: then there are no post handlers to run and single-steps fall back to
 * boosting when the slot allows it). */
/* valgrind_no_post says once that post handlers do not run under valgrind */
static void valgrind_no_post(void)
{
	static u32 said;
	if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		return;
	kprw_puts("kprewrite: valgrind has no trap-flag single-step: the post handlers of int3 probes do not run under it\n");
}

static void execute(const struct kprw_point *pt, struct k_ucontext *uc,
		    struct kprw_thread *t, int post)
{
	struct k_sigcontext *mc = &uc->mc;
	if (pt->xmode == KPRW_X_EMULATE) {
		emulate(pt, mc);
		atomic_add(&kprewrite_rt_stats.emulated, 1);
		struct kprw_tctx *c;
		if (post && t && (c = kprw_tctx_get()) != NULL)
			post_in_signal(pt, uc, c);
		return;
	}
	if (pt->pflags & KPRW_PF_INT3STEP) {
		mc->ip = RT_ADDR(pt->slot); /* the copy, then the int3 that ends the step (istep_end) */
		return;
	}
	uptr slot = RT_ADDR(pt->slot);
	int want_step = pt->xmode == KPRW_X_SSTEP || post;
	int have_state = t && t->nstep < KPRW_MAX_STEP;
	if (unlikely(want_step) && kprw_valgrind()) {
		/* valgrind has no trap flag (the copy would run on unstepped): the slot's jmp
		 * back, which every stepped slot has, ends the copy instead; post handlers
		 * cannot run, and a copied call pushes the slot's address */
		if (post)
			valgrind_no_post();
		mc->ip = slot;
		atomic_add(&kprewrite_rt_stats.boosts, 1);
		return;
	}
	if (!(want_step && have_state) && !(pt->pflags & KPRW_PF_NOBOOST)) {
		mc->ip = slot; /* boost: the slot runs the copy and jumps back */
		atomic_add(&kprewrite_rt_stats.boosts, 1);
		return;
	}
	if (!have_state)
		kprw_fatal("no per-thread state to single-step the probe at", RT_ADDR(pt->site));
	struct kprw_step *s = &t->step[t->nstep++];
	s->point = (u32)(pt - kprw_rt.points);
	s->saved_tf = (u32)(mc->flags & X86_TF) | (post ? STEP_POST : 0);
	mc->flags |= X86_TF;
	mc->ip = slot;
}

void kprw_miss_point(const struct kprw_point *pt, struct pt_regs *regs)
{
	for (u32 k = 0; k < pt->nprobes; k++)
		if (kprw_probe_enabled(pt->first_probe + k) && !kprw_user_break(pt->first_probe + k, regs))
			kprw_count_miss(pt->first_probe + k);
}

/* violation handles an int3 on an inner byte of a would-be DCR (--verify-regions):
 * count it, record it, and run the original instruction(s) from that byte out of line. */
static void violation(const struct kprw_point *pt, struct k_sigcontext *mc)
{
	atomic_add(&kprewrite_rt_stats.violations, 1);
	kprw_trace_violation(pt, kprw_tctx_get());
	if (!pt->slot) {
		kprw_puts("kprewrite: --verify-regions: control reached ");
		kprw_put_hex(pt->site);
		kprw_puts(", inside an instruction of the region that the probe at ");
		kprw_put_hex(pt->target);
		kprw_puts(" would replace; it cannot be run out of line\n");
		struct k_sigaction sa = {0};
		sa.handler = SIG_DFL;
		sys4(SYS_rt_sigaction, SIGTRAP, (long)&sa, 0, 8);
		sys3(SYS_tgkill, kprw_pid(), kprw_gettid(), SIGTRAP);
		return;
	}
	mc->ip = RT_ADDR(pt->slot); /* the copy ends with a jmp past the region */
	atomic_add(&kprewrite_rt_stats.boosts, 1);
}

/* load_xmm makes the SSE registers the interrupted context's: a signal handler starts
 * with the FPU in its initial state, and %xmmN fetchargs read the live registers (the
 * runtime never touches them: -mgeneral-regs-only). sigreturn restores the frame's. */
static void load_xmm(const struct k_sigcontext *mc)
{
	const u8 *fx = (const u8 *)mc->fpstate; /* FXSAVE layout: xmm0 at byte 160 */
	if (!fx)
		return;
	__asm__ volatile("movdqu 160(%0), %%xmm0\n\tmovdqu 176(%0), %%xmm1\n\t"
			 "movdqu 192(%0), %%xmm2\n\tmovdqu 208(%0), %%xmm3\n\t"
			 "movdqu 224(%0), %%xmm4\n\tmovdqu 240(%0), %%xmm5\n\t"
			 "movdqu 256(%0), %%xmm6\n\tmovdqu 272(%0), %%xmm7\n\t"
			 "movdqu 288(%0), %%xmm8\n\tmovdqu 304(%0), %%xmm9\n\t"
			 "movdqu 320(%0), %%xmm10\n\tmovdqu 336(%0), %%xmm11\n\t"
			 "movdqu 352(%0), %%xmm12\n\tmovdqu 368(%0), %%xmm13\n\t"
			 "movdqu 384(%0), %%xmm14\n\tmovdqu 400(%0), %%xmm15"
			 :
			 : "r"(fx)
			 : "memory");
}

static void hit(const struct kprw_point *pt, struct k_ucontext *uc, u32 pid, u32 tid)
{
	struct k_sigcontext *mc = &uc->mc;
	struct kprw_thread *t = kprw_thread_get(pid, tid);
	struct kprw_tctx *c = kprw_tctx_get();
	int any = 0;

	atomic_add(&kprewrite_rt_stats.traps, 1);
	mc->ip = RT_ADDR(pt->site);
	if (!t || !c || kprw_tctx_busy(c) || t->nstep) {
		/* reentered: count, run nothing (but a break_handler), just execute the instruction */
		struct pt_regs r;
		regs_from_mc(&r, mc);
		r.ip = mc->ip + 1; /* (as every handler sees it: after the int3) */
		kprw_miss_point(pt, &r);
		execute(pt, uc, t, 0);
		kprw_thread_put(t);
		return;
	}

	struct pt_regs regs;
	regs_from_mc(&regs, mc);
	regs.ip = RT_ADDR(pt->site) + 1; /* as after the int3, like the kernel */
	if (kprw_rt.reads_xmm)
		load_xmm(mc);
	c->busy++;
	c->slow_read = slow_read(uc);
	int moved = kprw_run_probes(pt, &regs, c, &any);
	c->slow_read = (u32)(uc->sigmask & KPRW_FAULT_SIGS); /* the interrupted context's */
	c->busy--;
	if (moved) {
		/* the handler moved execution: no single-step, no post handler */
		regs_to_mc(mc, &regs);
		kprw_thread_put(t);
		return;
	}
	if (any) {
		regs.ip = mc->ip; /* unchanged ip means "execute the probed instruction" */
		regs_to_mc(mc, &regs);
	}
	execute(pt, uc, t, any && point_has_post(pt));
	kprw_thread_put(t);
}

/* step finishes a single-step: ip from the slot back to the original code. */
static void step(struct kprw_thread *t, struct k_ucontext *uc)
{
	struct k_sigcontext *mc = &uc->mc;
	struct kprw_step s = t->step[--t->nstep];
	const struct kprw_point *pt = &kprw_rt.points[s.point];
	uptr slot_end = RT_ADDR(pt->slot) + pt->slot_len;
	uptr next = RT_ADDR(pt->site) + pt->insn_len;

	atomic_add(&kprewrite_rt_stats.steps, 1);
	/* A step whose signal handler longjmp'd away leaves a stale record: if this trap is
	 * not at its slot end (and the copy cannot branch), look deeper. */
	while (mc->ip != slot_end && !(pt->pflags & KPRW_PF_BRANCH) && t->nstep > 0) {
		s = t->step[--t->nstep];
		pt = &kprw_rt.points[s.point];
		slot_end = RT_ADDR(pt->slot) + pt->slot_len;
		next = RT_ADDR(pt->site) + pt->insn_len;
	}
	if (mc->ip == slot_end)
		mc->ip = next;
	if ((pt->pflags & KPRW_PF_CALL) && *(unsigned long *)mc->sp == slot_end)
		*(unsigned long *)mc->sp = next;
	if ((pt->pflags & KPRW_PF_PUSHF) && !(s.saved_tf & X86_TF))
		*(unsigned long *)mc->sp &= ~X86_TF;
	if (!(s.saved_tf & X86_TF))
		mc->flags &= ~X86_TF;
	struct kprw_tctx *c;
	/* post handlers only for a hit whose pre handlers ran (not a missed one) */
	if ((s.saved_tf & STEP_POST) && point_has_post(pt) && (c = kprw_tctx_get()) != NULL)
		post_in_signal(pt, uc, c);
	kprw_thread_idle(t); /* the hit that stepped already gave its hold back */
}

/* istep_end ends a single-step at the int3 after its slot copy (KPRW_PF_INT3STEP,
 * rt_istep.c): ip back to the original code, then the post handlers, unless the hit was
 * missed: a missed hit ran inside a handler of ours (the thread is still busy at its
 * step's end, since the copy is one instruction) or during a trap-flag step. */
static void istep_end(const struct kprw_point *pt, struct k_ucontext *uc, u32 pid, u32 tid)
{
	struct k_sigcontext *mc = &uc->mc;
	struct kprw_tctx *c;
	atomic_add(&kprewrite_rt_stats.steps, 1);
	mc->ip = RT_ADDR(pt->site) + pt->insn_len;
	if (!point_has_post(pt) || (c = kprw_tctx_get()) == NULL || kprw_tctx_busy(c))
		return;
	struct kprw_thread *t = kprw_thread_find(pid, tid);
	if (t && t->nstep)
		return;
	post_in_signal(pt, uc, c);
}

/* in_copy says whether ip is in point pt's out-of-line copy */
static int in_copy(const struct kprw_point *pt, u64 ip)
{
	return pt->slot && ip >= RT_ADDR(pt->slot) && ip < RT_ADDR(pt->slot) + pt->slot_len;
}

/* step_fault_run runs the fault_handlers of pt's C handler probes (rt_user.c) on the
 * registers as at the probed instruction (ip its address, the trap flag as the program
 * had it): 1 when one handled the fault, and the frame then holds its registers */
static int step_fault_run(const struct kprw_point *pt, struct k_ucontext *uc, u32 saved_tf)
{
	struct kprw_tctx *c = kprw_tctx_get();
	if (!c || kprw_tctx_busy(c))
		return 0; /* the copy of a missed hit, inside a handler of ours */
	struct pt_regs regs;
	regs_from_mc(&regs, &uc->mc);
	regs.ip = RT_ADDR(pt->site);
	regs.flags = (regs.flags & ~X86_TF) | (saved_tf & X86_TF);
	c->busy++;
	c->slow_read = slow_read(uc);
	int handled = kprw_user_step_fault(pt, &regs, (int)uc->mc.trapno);
	c->slow_read = (u32)(uc->sigmask & KPRW_FAULT_SIGS);
	c->busy--;
	if (handled)
		regs_to_mc(&uc->mc, &regs);
	return handled;
}

/* kprw_step_fault handles a fault (rt_fault.c) of a probed instruction's copy while it
 * is single-stepped (a trap-flag step this thread has in flight, or an int3-step slot),
 * as kprobes.txt of 2.6 says: the fault_handlers of the point's C handler probes run
 * first. One returning non-zero handled it: the thread resumes at the registers it left
 * (ip left at the probed instruction retries the copy, still stepped; elsewhere the step
 * ends there, without post handlers). Else the fault is the program's, at the probed
 * instruction (ip back at the site, the trap flag as it had it, the step forgotten), as
 * the kernel shows a fault of a single-stepped kprobe: returns 0, and the program's
 * handler (or the default action) gets it. */
int kprw_step_fault(struct k_ucontext *uc)
{
	struct k_sigcontext *mc = &uc->mc;
	if (!kprw_rt.npoints && !kprw_rt.nfree)
		return 0;
	struct kprw_thread *t = kprw_thread_find(kprw_pid(), kprw_gettid());
	const struct kprw_point *pt = NULL;
	u32 saved_tf = (u32)(mc->flags & X86_TF);
	if (t && t->nstep && in_copy(&kprw_rt.points[t->step[t->nstep - 1].point], mc->ip)) {
		pt = &kprw_rt.points[t->step[t->nstep - 1].point];
		saved_tf = t->step[t->nstep - 1].saved_tf;
	} else if ((pt = kprw_istep_within(mc->ip - kprw_rt.bias)) == NULL) {
		return 0;
	}
	int tfstep = !(pt->pflags & KPRW_PF_INT3STEP);
	int handled = step_fault_run(pt, uc, saved_tf);
	if (handled && mc->ip == RT_ADDR(pt->site)) {
		mc->ip = RT_ADDR(pt->slot); /* the copy again, still stepped */
		if (tfstep)
			mc->flags |= X86_TF;
		return 1;
	}
	if (!handled)
		mc->ip = RT_ADDR(pt->site);
	if (tfstep) { /* the step is over */
		t->nstep--;
		if (!(saved_tf & X86_TF))
			mc->flags &= ~X86_TF;
		kprw_thread_idle(t);
	}
	return handled;
}

/* foreign_step: a SIGTRAP at the end of one of this image's slots with no step record.
 * A thread or fork child born from a single-stepped syscall (clone/fork) inherits TF and
 * has no step record: finish the step for it. */
static int foreign_step(struct k_ucontext *uc)
{
	struct k_sigcontext *mc = &uc->mc;
	for (u32 i = 0; i < kprw_rt.npoints + kprw_rt.nfree; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (pt->site && (pt->xmode == KPRW_X_SSTEP || pt->xmode == KPRW_X_BOOST) &&
		    mc->ip == RT_ADDR(pt->slot) + pt->slot_len) {
			mc->ip = RT_ADDR(pt->site) + pt->insn_len;
			mc->flags &= ~X86_TF;
			return 1;
		}
	}
	return 0;
}

/* kprw_trap_int3 handles an int3 trap at ip - 1 that is this image's: 1, else 0. */
int kprw_trap_int3(struct k_ucontext *uc, u32 pid, u32 tid)
{
	struct k_sigcontext *mc = &uc->mc;
	const struct kprw_point *pt = find_point(mc->ip - 1 - kprw_rt.bias);
	if (pt && (pt->pflags & KPRW_PF_INNER)) {
		mc->ip -= 1;
		violation(pt, mc);
		return 1;
	}
	if (pt && pt->xmode != KPRW_X_OPTIMIZED) {
		hit(pt, uc, pid, tid);
		return 1;
	}
	if (pt && (pt->dflags & (KPRW_DF_LIVE | KPRW_DF_REOPT))) {
		/* the int3 of a live jump site being written or un-optimized (rt_live.c):
		 * on through the detour, which runs the probes or, its gate closed, the
		 * DCR's copy */
		mc->ip = RT_ADDR(pt->slot);
		return 1;
	}
	if (!pt && (pt = kprw_istep_find(mc->ip - 1 - kprw_rt.bias)) != NULL) {
		istep_end(pt, uc, pid, tid);
		return 1;
	}
	return 0;
}

/* one_byte says whether op alone is a whole instruction (no prefix, ModRM or
 * immediate follows): then ip = site + 1 is also where that instruction ends. */
static int one_byte(u8 op)
{
	return (op >= 0x50 && op <= 0x5f) || (op >= 0x90 && op <= 0x99) || (op >= 0x9b && op <= 0x9f) ||
	       (op >= 0xa4 && op <= 0xa7) || (op >= 0xaa && op <= 0xaf) || (op >= 0x6c && op <= 0x6f) ||
	       op == 0xc3 || op == 0xc9 || op == 0xcb || op == 0xcf || op == 0xd7 || (op >= 0xec && op <= 0xef) ||
	       op == 0xf1 || op == 0xf4 || op == 0xf5 || (op >= 0xf8 && op <= 0xfd);
}

/* pushed says whether the top of the stack holds what `push` opcode op (0x50-0x57)
 * would have pushed: the thread ran the original push. */
static int pushed(u8 op, const struct k_sigcontext *mc)
{
	const unsigned long r[8] = {mc->ax, mc->cx, mc->dx, mc->bx, mc->sp + 8, mc->bp, mc->si, mc->di};
	return *(const unsigned long *)mc->sp == r[op - 0x50];
}

/* kprw_trap_lost_int3 handles, in a thread that takes our safepoint signal (rt_live.c),
 * the int3 it may have hit while that signal was pending: the kernel does not queue a
 * second SIGTRAP, so the int3's trap is merged into ours and the thread stands at
 * site + 1 as after any int3. Taken for a lost int3 when the site holds one of ours and
 * site + 1 cannot be where a thread ran the original instruction to (a live site whose
 * first instruction is one byte long: unless the last trap was no int3, or a push
 * already stands on the stack). 1 when it was one (handled as the int3 would be). */
int kprw_trap_lost_int3(struct k_ucontext *uc)
{
	struct k_sigcontext *mc = &uc->mc;
	uptr at = mc->ip - 1;
	const struct kprw_point *pt = find_point(at - kprw_rt.bias);
	if (!pt) {
		if (!kprw_istep_find(at - kprw_rt.bias))
			return 0;
	} else if (*(const volatile u8 *)at != 0xcc) {
		return 0;
	} else if ((pt->dflags & (KPRW_DF_LIVE | KPRW_DF_REOPT) || pt >= kprw_rt.points + kprw_rt.npoints) &&
		   one_byte(pt->orig[0])) { /* (a live site, or a free live point placed live) */
		u8 op = pt->orig[0];
		if (mc->trapno != 3 || (op >= 0x50 && op <= 0x57 && pushed(op, mc)))
			return 0;
	}
	return kprw_trap_int3(uc, kprw_pid(), kprw_gettid());
}

/* kprw_trap_own handles a SIGTRAP that is this image's (a hit at one of its int3s, the
 * end of one of its single-steps): 1, else 0 (another image's, or the program's). */
int kprw_trap_own(struct k_siginfo *si, struct k_ucontext *uc)
{
	if (!kprw_rt.npoints && !kprw_rt.nfree) /* (free live points: placed at run time) */
		return 0;
	u32 pid = kprw_pid(), tid = kprw_gettid();

	if (si->si_code == -1 && kprw_live_safepoint(si, uc)) /* SI_QUEUE */
		return 1;
	if (si->si_code == TRAP_TRACE) {
		struct kprw_thread *t = kprw_thread_find(pid, tid);
		if (t && t->nstep) {
			step(t, uc);
			return 1;
		}
		return foreign_step(uc);
	}
	/* an int3: SI_KERNEL from the kernel, TRAP_BRKPT from valgrind (which natively
	 * means int1 or a debug register breakpoint) */
	if (si->si_code == SI_KERNEL || (si->si_code == TRAP_BRKPT && kprw_valgrind()))
		return kprw_trap_int3(uc, pid, tid);
	return 0;
}

/* kprw_sigtrap is the process's SIGTRAP handler when this image installed it: this
 * image's traps, then the other images' (rt_proc.c), then what the program would have
 * got without us (its own handler, or the default action: rt_sigguard.c). */
void kprw_sigtrap(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	(void)sig;
	if (kprw_trap_own(si, uc) || kprw_proc_others(SIGTRAP, si, uc))
		return;
	atomic_add(&kprewrite_rt_stats.foreign, 1);
	kprw_sg_deliver(SIGTRAP, si, uc);
}
