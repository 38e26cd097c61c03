/*
 * rt_fault.c - the runtime's one handler of SIGSEGV, SIGBUS (and, with C handlers,
 * SIGFPE and SIGILL).
 *
 * Installed for the fast reads (rt_init.c: events whose fetch programs read memory,
 * C handlers that call kprewrite_copy_nofault) and for C handler probes; SIGBUS also
 * whenever a trace file is mapped. A fault is, in this order:
 *   0. a SIGBUS in a mapping of the trace file: the file shrank (rt_tracefile.c);
 *   1. a fault of the fault-catching copy (src/nofault.S): its exception-table entry
 *      gives the fixup, which returns the bytes not copied. A fetch from a bad pointer
 *      costs one signal (~2 us here) instead of a crash;
 *   2. a fault while this thread runs a C handler (rt_user.c: its fault_handler, or the
 *      handler is abandoned), or of a probed instruction's copy being single-stepped
 *      (rt_trap.c: the C handlers' fault_handlers, then the program's, the fault moved
 *      back to the probed instruction);
 *   3. anything else is not ours: the program gets exactly what it would have got
 *      without the runtime, through the signal guard's delivery (rt_sigguard.c): its
 *      own handler (chained with its flags, mask and SA_SIGINFO arguments; kept by the
 *      guard when fast reads are on, else the disposition found at start-up), or the
 *      default action (death by the signal, at the faulting instruction).
 * Only faults the CPU raised (si_code > 0) can be 1 or 2: a SIGSEGV sent with kill()
 * while the copy runs goes to the program and the copy carries on.
 *
 * SA_NODEFER and a mask without the fault signals: a fault inside our handling (the C
 * handler's fault_handler, a program handler we call) must be delivered, not forced
 * to the default action by a blocked signal. SA_ONSTACK: the thread's sigaltstack
 * if it has one (a bad read on a small stack, or a stack overflow the program catches
 * on its sigaltstack).
 */
#include "rt.h"

/* kprw_read_user is kprw_read_mode in the mode this thread may use now. */
long kprw_read_user(void *dst, uptr src, unsigned long n)
{
	return kprw_read_mode(dst, src, n, kprw_rt.fast_read && kprw_fast_ok(kprw_tctx_get()));
}

/* kprw_fault_install's handler, or (rt_proc.c) the installed one's question: is this
 * fault this image's (1: handled)? */
int kprw_fault_own(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	/* first: a copy into a record of a truncated trace file is the file's fault, not the
	 * copy's source's */
	if (sig == SIGBUS && si->si_code > 0 && kprw_trace_fault(si->si_addr))
		return 1;
	if (si->si_code > 0 && kprw_copy_fixup(&uc->mc))
		return 1;
	/* the thread's mask as the fault interrupted it: a fault handler of the program that
	 * was left by siglongjmp no longer blocks anything */
	struct kprw_tctx *c = kprw_rt.fast_read ? kprw_tctx_get() : NULL;
	if (c)
		c->slow_read = (c->slow_read & ~(u32)KPRW_FAULT_SIGS) | (u32)(uc->sigmask & KPRW_FAULT_SIGS);
	return si->si_code > 0 && (kprw_user_fault(sig, si, uc) || kprw_step_fault(uc));
}

static void fault_signal(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	if (kprw_fault_own(sig, si, uc) || kprw_proc_others(sig, si, uc))
		return;
	kprw_sg_deliver(sig, si, uc);
}

/* kprw_fault_install points the signals of sigs (SIGBIT()s) at our handler, once each,
 * and gives the signal guard what was there before: the program's disposition so far
 * (SIG_DFL, or a library constructor's handler). Start-up, single-threaded. */
void kprw_fault_install(unsigned long sigs)
{
	static unsigned long installed;
	static const int all[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
	for (u32 k = 0; k < ARRAY_SIZE(all); k++) {
		int sig = all[k];
		if (!(sigs & SIGBIT(sig)) || (installed & SIGBIT(sig)))
			continue;
		if (!kprw_proc_take(sig)) { /* another image's handler is in: it asks this one */
			installed |= SIGBIT(sig);
			continue;
		}
		struct k_sigaction sa, old;
		kprw_memset(&sa, 0, sizeof sa);
		kprw_memset(&old, 0, sizeof old);
		sa.handler = (unsigned long)fault_signal;
		sa.flags = SA_SIGINFO | SA_RESTORER | SA_NODEFER | SA_ONSTACK | SA_RESTART;
		sa.restorer = (unsigned long)kprw_restorer;
		sa.mask = ~0ul & ~(SIGBIT(SIGTRAP) | SIGBIT(SIGILL) | SIGBIT(SIGBUS) | SIGBIT(SIGFPE) |
				   SIGBIT(SIGSEGV) | SIGBIT(31) /* SIGSYS */);
		if (sys4(SYS_rt_sigaction, sig, (long)&sa, (long)&old, 8) == 0) {
			kprw_sg_initial(sig, &old);
			installed |= SIGBIT(sig);
		}
	}
}
