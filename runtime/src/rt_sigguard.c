/*
 * rt_sigguard.c - the signal guard: int3 probes need SIGTRAP delivered to our handler in
 * every thread, at every moment the program's code runs; fast reads (src/nofault.S,
 * rt_fault.c) need SIGSEGV and SIGBUS the same way, and the guard keeps those too when
 * they are on (kprw_sg_sigs: what is said of SIGTRAP below holds for each guarded
 * signal). Programs block it (sigfillset +
 * pthread_sigmask in a watchdog thread, or around fork in git's run_command), put it in
 * a handler's sa_mask, reset it (signal(SIGTRAP, SIG_DFL) in a fork child), or install
 * their own handler; each of these would kill the program at its next probe hit, or run
 * its handler instead of ours.
 *
 * For a dynamically linked program the rewriter lists the main executable's GOT words of
 * the libc functions that do so (struct kprw_sigguard). At start-up, which runs after
 * ld.so relocated everything and ran the libraries' constructors, each word is pointed
 * at a wrapper here, and the function it bound to becomes the wrapper's "real" one:
 *   - a word already bound (BIND_NOW, GLOB_DAT, or LD_BIND_NOW) gives it directly;
 *   - a JUMP_SLOT still pointing at its PLT stub (lazy binding) would have ld.so's
 *     resolver overwrite our wrapper at the first call, so the function is looked up the
 *     way ld.so would find it: link_map list from GOT[1] (which glibc sets exactly when
 *     it binds lazily; musl never does), each object's DT_GNU_HASH (or DT_HASH) and
 *     symbol table, the default version of the name;
 *   - full RELRO: the GOT is read-only by now; the page is made writable for the store
 *     and read-only again.
 * The wrappers:
 *   - masks (sigprocmask, pthread_sigmask, sigsuspend, ppoll, pselect, epoll_pwait,
 *     sigaction's sa_mask, syscall(SYS_rt_sigprocmask/rt_sigsuspend/rt_sigaction)) are
 *     passed on without SIGTRAP. What the program reads back (the old mask) is the
 *     kernel's truth, so it never contains SIGTRAP: masks derived from it stay clean, and
 *     no per-thread bookkeeping is needed. A SIGTRAP sent with kill() while the program
 *     "blocks" it is therefore acted on (see below) instead of staying pending.
 *   - the SIGTRAP disposition (sigaction, signal, bsd_signal, sysv_signal, sigset,
 *     sighold, sigignore, syscall(SYS_rt_sigaction)) is kept here, never given to the
 *     kernel: our handler stays installed, and reads back what the program set.
 * A SIGTRAP that is not ours (an int3 of the program's own, raise(SIGTRAP), a trap flag
 * it set) is then delivered as the kernel would: the program's handler runs with the same
 * siginfo and ucontext (so its changes to the registers take effect), on the signal
 * mask the kernel would give it (without SIGTRAP: a probe in the handler still fires),
 * SA_RESETHAND honoured; SIG_DFL (or SIG_IGN for a trap the CPU raised, which the kernel
 * forces) kills the process with SIGTRAP as without us; SIG_IGN drops a sent one.
 *
 * The program's SIGTRAP disposition lives in our memory: a vfork child that changes it
 * before exec changes it for its parent too (POSIX lets a vfork child only exec or _exit).
 *
 * A static program (static-pie too) has no GOT: the rewriter redirects the entries of its
 * C library's functions that make these system calls (found by symbol; glibc's
 * __libc_sigaction, __pthread_sigmask, sigsuspend, ppoll, pselect, epoll_pwait(2),
 * syscall; musl's the same plus __block_all_sigs/__block_app_sigs) through a word each
 * (KPRW_GS_ENTRY): entry_init stores the wrapper there, and the wrapper's real function
 * is the relocated copy of the entry's first instructions. musl's internal block helpers
 * run before code of the library's own that may be probed (raise, fork, pthread_create,
 * sigaction(SIGABRT)); their wrapper unblocks SIGTRAP right after.
 *
 * Not covered: stripped static programs (no symbols: the rewriter warns); raw system
 * calls in the program's own code; calls made by shared libraries through their own GOTs
 * and libc's internal calls (posix_spawn and pthread_create block signals internally:
 * harmless in a dynamic program, whose libc code has no probes, but in a static glibc
 * program an int3 probe in the library code run in that window kills the process).
 * Jump-optimized probes ("o") need no signal and have none of these limits.

 */
#include "rt.h"

#define TRAPBIT (1ul << (SIGTRAP - 1))
#define SA_RESETHAND 0x80000000ul
#define SIG_BLOCK 0
#define SIG_SETMASK 2
#define SIG_HOLD 2ul
#define PROT_READ 1
#define PROT_WRITE 2
#define SYS_rt_sigsuspend 130
#define SYS_process_vm_writev 311

/* the C library's sigset_t and struct sigaction (glibc and musl agree on x86-64) */
struct usigset {
	unsigned long w[16];
};
struct usigaction {
	unsigned long handler;
	struct usigset mask;
	int flags;
	int pad;
	unsigned long restorer;
};

/* the functions the GOT words were bound to, by KPRW_SG_* */
static uptr sg_real[KPRW_SG_MAX + 1];

/* The guard's state is the process's (struct kprw_proc, rt_proc.c), whichever image's
 * guard a call goes through:
 * kprw_sg_sigs: the signals whose dispositions the guard keeps and whose blocking it
 * refuses: SIGTRAP with int3 probes, SIGSEGV and SIGBUS with fast reads, of any image;
 * sg_traps: int3 probes in some image: SIGTRAP must stay unblocked in handlers we run;
 * sg_prog: the program's disposition of each signal the runtime handles (kernel layout):
 * of the guarded ones as the program set it, of the others what start-up found. Readers
 * (the signal handlers among them) use the sequence counter sg_seq; writers block every
 * signal and take the counter odd. */
#define kprw_sg_sigs (kprw_proc->sg_sigs)
#define sg_traps (kprw_proc->sg_traps)
#define sg_prog (kprw_proc->sg_prog)
#define sg_seq (kprw_proc->sg_seq)

static void prog_get(int sig, struct k_sigaction *a)
{
	const struct k_sigaction *p = &sg_prog[sig & 31];
	for (int tries = 0;; tries++) {
		u32 s = __atomic_load_n(&sg_seq, __ATOMIC_ACQUIRE);
		a->handler = __atomic_load_n(&p->handler, __ATOMIC_RELAXED);
		a->flags = __atomic_load_n(&p->flags, __ATOMIC_RELAXED);
		a->restorer = __atomic_load_n(&p->restorer, __ATOMIC_RELAXED);
		a->mask = __atomic_load_n(&p->mask, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if ((!(s & 1) && __atomic_load_n(&sg_seq, __ATOMIC_RELAXED) == s) || tries > 100000)
			return;
		if (tries > 100)
			sys0(SYS_sched_yield);
	}
}

/* prog_swap stores n (if not NULL) as the program's disposition of sig, the previous one
 * in old. */
static void prog_swap(int sig, const struct k_sigaction *n, struct k_sigaction *old)
{
	struct k_sigaction *p = &sg_prog[sig & 31];
	unsigned long all = ~0ul, saved;
	sys4(SYS_rt_sigprocmask, SIG_BLOCK, (long)&all, (long)&saved, 8);
	for (int tries = 0;; tries++) {
		u32 s = __atomic_load_n(&sg_seq, __ATOMIC_RELAXED);
		/* odd: another writer; one that never finishes (a fork child of a thread caught
		 * mid-write) is overruled after a while, the counter staying odd */
		if (!(s & 1) || tries > 100000) {
			if (atomic_cas(&sg_seq, &s, s + ((s & 1) ? 2 : 1)))
				break;
			continue;
		}
		if (tries > 100)
			sys0(SYS_sched_yield);
	}
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (old)
		*old = *p;
	if (n) {
		__atomic_store_n(&p->handler, n->handler, __ATOMIC_RELAXED);
		__atomic_store_n(&p->flags, n->flags, __ATOMIC_RELAXED);
		__atomic_store_n(&p->restorer, n->restorer, __ATOMIC_RELAXED);
		__atomic_store_n(&p->mask, n->mask, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&sg_seq, 1, __ATOMIC_RELEASE);
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&saved, 0, 8);
}

static unsigned long prog_set_handler(int sig, unsigned long handler, unsigned long flags, unsigned long mask)
{
	struct k_sigaction n = {handler, flags, 0, mask}, old;
	prog_swap(sig, &n, &old);
	return old.handler;
}

/* guarded says whether the guard keeps sig's disposition (the kernel never gets it). */
static int guarded(int sig)
{
	return sig >= 1 && sig <= 64 && (__atomic_load_n(&kprw_sg_sigs, __ATOMIC_RELAXED) & SIGBIT(sig));
}

/* strip returns set, or a copy of it without the guarded signals in tmp. */
static const void *strip(const void *set, struct usigset *tmp)
{
	unsigned long g = __atomic_load_n(&kprw_sg_sigs, __ATOMIC_RELAXED);
	if (!set || !(*(const unsigned long *)set & g))
		return set;
	kprw_memcpy(tmp, set, sizeof *tmp);
	tmp->w[0] &= ~g;
	return tmp;
}

/* kprw_go_sg_sigs: kprw_sg_sigs as this image's Go stubs read it (gosig.S: a static
 * program, the one image of its process) */
unsigned long kprw_go_sg_sigs;

void kprw_sg_guard(unsigned long sigs)
{
	__atomic_fetch_or(&kprw_sg_sigs, sigs, __ATOMIC_RELEASE); /* every image's */
	__atomic_fetch_or(&kprw_go_sg_sigs, sigs, __ATOMIC_RELEASE);
}

/* kprw_sg_initial records the disposition sig had before the runtime's handler (start-up). */
void kprw_sg_initial(int sig, const struct k_sigaction *a)
{
	prog_swap(sig, a, NULL);
}

/* ---- the wrappers (called from the program with the C calling convention) ---- */

static int w_sigaction(int sig, const struct usigaction *act, struct usigaction *old)
{
	if (guarded(sig)) {
		struct k_sigaction cur, n;
		if (act) {
			n.handler = act->handler;
			n.flags = (unsigned int)act->flags;
			n.restorer = act->restorer;
			n.mask = act->mask.w[0];
		}
		prog_swap(sig, act ? &n : NULL, &cur);
		if (old) {
			kprw_memset(old, 0, sizeof *old);
			old->handler = cur.handler;
			old->mask.w[0] = cur.mask;
			old->flags = (int)cur.flags;
			old->restorer = cur.restorer;
		}
		return 0;
	}
	struct usigaction tmp;
	unsigned long g = __atomic_load_n(&kprw_sg_sigs, __ATOMIC_RELAXED);
	if (act && (act->mask.w[0] & g)) {
		kprw_memcpy(&tmp, act, sizeof tmp);
		tmp.mask.w[0] &= ~g;
		act = &tmp;
	}
	int (*f)(int, const void *, void *) = (void *)sg_real[KPRW_SG_SIGACTION];
	return f(sig, act, old);
}

/* signal(), bsd_signal(): BSD semantics (glibc and musl: SA_RESTART, the signal blocked in
 * its handler) */
static unsigned long w_signal(int sig, unsigned long handler)
{
	if (guarded(sig))
		return prog_set_handler(sig, handler, SA_RESTART, SIGBIT(sig));
	unsigned long (*f)(int, unsigned long) = (void *)sg_real[KPRW_SG_SIGNAL];
	return f(sig, handler);
}

/* sysv_signal(), __sysv_signal(): one-shot, not blocked in its handler */
static unsigned long w_sysv_signal(int sig, unsigned long handler)
{
	if (guarded(sig))
		return prog_set_handler(sig, handler, SA_RESETHAND | SA_NODEFER, 0);
	unsigned long (*f)(int, unsigned long) = (void *)sg_real[KPRW_SG_SYSV_SIGNAL];
	return f(sig, handler);
}

static unsigned long w_sigset(int sig, unsigned long disp)
{
	if (guarded(sig)) {
		struct k_sigaction cur;
		if (disp == SIG_HOLD) { /* block it: never; it was not blocked either */
			prog_get(sig, &cur);
			return cur.handler;
		}
		return prog_set_handler(sig, disp, 0, 0);
	}
	unsigned long (*f)(int, unsigned long) = (void *)sg_real[KPRW_SG_SIGSET];
	return f(sig, disp);
}

static int w_sighold(int sig)
{
	if (guarded(sig))
		return 0;
	int (*f)(int) = (void *)sg_real[KPRW_SG_SIGHOLD];
	return f(sig);
}

static int w_sigignore(int sig)
{
	if (guarded(sig)) {
		prog_set_handler(sig, SIG_IGN, 0, 0);
		return 0;
	}
	int (*f)(int) = (void *)sg_real[KPRW_SG_SIGIGNORE];
	return f(sig);
}

static int w_sigprocmask(int how, const void *set, void *old)
{
	struct usigset tmp;
	int (*f)(int, const void *, void *) = (void *)sg_real[KPRW_SG_SIGPROCMASK];
	return f(how, strip(set, &tmp), old);
}

static int w_pthread_sigmask(int how, const void *set, void *old)
{
	struct usigset tmp;
	int (*f)(int, const void *, void *) = (void *)sg_real[KPRW_SG_PTHREAD_SIGMASK];
	return f(how, strip(set, &tmp), old);
}

static int w_sigsuspend(const void *set)
{
	struct usigset tmp;
	int (*f)(const void *) = (void *)sg_real[KPRW_SG_SIGSUSPEND];
	return f(strip(set, &tmp));
}

static int w_ppoll(void *fds, unsigned long n, const void *ts, const void *set)
{
	struct usigset tmp;
	int (*f)(void *, unsigned long, const void *, const void *) = (void *)sg_real[KPRW_SG_PPOLL];
	return f(fds, n, ts, strip(set, &tmp));
}

static int w_ppoll_chk(void *fds, unsigned long n, const void *ts, const void *set, unsigned long fdslen)
{
	struct usigset tmp;
	int (*f)(void *, unsigned long, const void *, const void *, unsigned long) = (void *)sg_real[KPRW_SG_PPOLL_CHK];
	return f(fds, n, ts, strip(set, &tmp), fdslen);
}

static int w_pselect(int n, void *r, void *w, void *e, const void *ts, const void *set)
{
	struct usigset tmp;
	int (*f)(int, void *, void *, void *, const void *, const void *) = (void *)sg_real[KPRW_SG_PSELECT];
	return f(n, r, w, e, ts, strip(set, &tmp));
}

static int w_epoll_pwait(int fd, void *ev, int max, int timeout, const void *set)
{
	struct usigset tmp;
	int (*f)(int, void *, int, int, const void *) = (void *)sg_real[KPRW_SG_EPOLL_PWAIT];
	return f(fd, ev, max, timeout, strip(set, &tmp));
}

static int w_epoll_pwait2(int fd, void *ev, int max, const void *timeout, const void *set)
{
	struct usigset tmp;
	int (*f)(int, void *, int, const void *, const void *) = (void *)sg_real[KPRW_SG_EPOLL_PWAIT2];
	return f(fd, ev, max, timeout, strip(set, &tmp));
}

/* musl's __block_all_sigs(set) / __block_app_sigs(set): block, then give the guarded
 * signals back at once (no code of the program runs in between) */
static void block_sigs(u32 func, void *set)
{
	void (*f)(void *) = (void *)sg_real[func];
	f(set);
	unsigned long g = __atomic_load_n(&kprw_sg_sigs, __ATOMIC_RELAXED);
	sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&g, 0, 8);
}

static void w_block_all_sigs(void *set)
{
	block_sigs(KPRW_SG_BLOCK_ALL_SIGS, set);
}

static void w_block_app_sigs(void *set)
{
	block_sigs(KPRW_SG_BLOCK_APP_SIGS, set);
}

/* syscall(): the variadic arguments arrive as six integers (the sixth on the stack,
 * always readable: it is the caller's frame). */
static long w_syscall(long n, long a, long b, long c, long d, long e, long g)
{
	unsigned long set, gs = __atomic_load_n(&kprw_sg_sigs, __ATOMIC_RELAXED);
	struct k_sigaction ka;
	if ((n == SYS_rt_sigprocmask && b && (*(const unsigned long *)b & gs)) ||
	    (n == SYS_rt_sigsuspend && a && (*(const unsigned long *)a & gs))) {
		set = *(const unsigned long *)(n == SYS_rt_sigsuspend ? a : b) & ~gs;
		if (n == SYS_rt_sigsuspend)
			a = (long)&set;
		else
			b = (long)&set;
	} else if (n == SYS_rt_sigaction && guarded((int)a) && d == 8) {
		struct k_sigaction cur;
		prog_swap((int)a, (const struct k_sigaction *)b, &cur);
		if (c)
			*(struct k_sigaction *)c = cur;
		return 0;
	} else if (n == SYS_rt_sigaction && b && (((const struct k_sigaction *)b)->mask & gs)) {
		ka = *(const struct k_sigaction *)b;
		ka.mask &= ~gs;
		b = (long)&ka;
	}
	long (*f)(long, ...) = (void *)sg_real[KPRW_SG_SYSCALL];
	return f(n, a, b, c, d, e, g);
}

/* Go's runtime.rt_sigaction of a guarded signal (gosig.S): sig's disposition, in the
 * kernel's layout, is kept as the program's. But in a child that shares our memory:
 * os/exec forks with clone(CLONE_VM|CLONE_VFORK), and the child resets every handler
 * of Go's to SIG_DFL before it execs (clearSignalHandlers), which kept here would be
 * its parent's; the child's own dispositions are the kernel's. Such a child is told by
 * the cached pid, which a fork's child loses (MADV_WIPEONFORK) and a CLONE_VM child
 * shares with its parent. */
int kprw_go_sigaction(long sig, const struct k_sigaction *n, struct k_sigaction *o, long size)
{
	struct k_sigaction cur;
	if (size != 8)
		return -22; /* EINVAL */
	if (kprw_pid() != kprw_getpid())
		return (int)sys4(SYS_rt_sigaction, sig, (long)n, (long)o, size);
	prog_swap((int)sig, n, &cur);
	if (o)
		*o = cur;
	return 0;
}

/* fork: the child of an image with live probes has no live-probe thread (a fork copies
 * only the calling thread): it starts its own (rt_live.c) */
static long w_fork(void)
{
	long (*f)(void) = (void *)sg_real[KPRW_SG_FORK];
	long pid = f();
	if (pid == 0)
		kprw_live_child();
	return pid;
}

static uptr wrapper(u32 func)
{
	switch (func) {
	case KPRW_SG_SIGACTION: return (uptr)w_sigaction;
	case KPRW_SG_SIGNAL: return (uptr)w_signal;
	case KPRW_SG_SYSV_SIGNAL: return (uptr)w_sysv_signal;
	case KPRW_SG_SIGSET: return (uptr)w_sigset;
	case KPRW_SG_SIGHOLD: return (uptr)w_sighold;
	case KPRW_SG_SIGIGNORE: return (uptr)w_sigignore;
	case KPRW_SG_SIGPROCMASK: return (uptr)w_sigprocmask;
	case KPRW_SG_PTHREAD_SIGMASK: return (uptr)w_pthread_sigmask;
	case KPRW_SG_SIGSUSPEND: return (uptr)w_sigsuspend;
	case KPRW_SG_PPOLL: return (uptr)w_ppoll;
	case KPRW_SG_PSELECT: return (uptr)w_pselect;
	case KPRW_SG_EPOLL_PWAIT: return (uptr)w_epoll_pwait;
	case KPRW_SG_SYSCALL: return (uptr)w_syscall;
	case KPRW_SG_PPOLL_CHK: return (uptr)w_ppoll_chk;
	case KPRW_SG_EPOLL_PWAIT2: return (uptr)w_epoll_pwait2;
	case KPRW_SG_BLOCK_ALL_SIGS: return (uptr)w_block_all_sigs;
	case KPRW_SG_BLOCK_APP_SIGS: return (uptr)w_block_app_sigs;
	case KPRW_SG_FORK: return (uptr)w_fork;
	case KPRW_SG_GO_SIGACTION: return (uptr)kprw_go_rt_sigaction;
	case KPRW_SG_GO_SIGPROCMASK: return (uptr)kprw_go_rtsigprocmask;
	}
	return 0;
}

/* ---- delivering a signal that is not ours ---- */

/* kprw_sg_deliver gives the program a signal that reached one of our handlers and is not
 * the runtime's (a SIGTRAP of its own, a fault in its code), as the kernel would have
 * given it: its handler runs with the same siginfo and ucontext (so its changes to the
 * registers take effect), on the mask the kernel would give it, SA_RESETHAND honoured;
 * SIG_DFL (or SIG_IGN for a signal the CPU raised, which the kernel forces to SIG_DFL)
 * kills the process by the signal as without us; SIG_IGN drops a sent one. */
void kprw_sg_deliver(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	struct k_sigaction a;
	prog_get(sig, &a);
	if (a.handler == SIG_IGN && si->si_code <= 0)
		return; /* sent by kill/tgkill/sigqueue, ignored */
	if (a.handler == SIG_DFL || a.handler == SIG_IGN) {
		/* the default action: death by the signal (core), as without the runtime; a
		 * trap or fault the CPU raised on an ignored signal is forced to it by the
		 * kernel as well. A CPU fault happens again at the same instruction when the
		 * handler returns, now with the default action; a sent signal is sent again. */
		struct k_sigaction sa = {0};
		sa.handler = SIG_DFL;
		sys4(SYS_rt_sigaction, sig, (long)&sa, 0, 8);
		if (si->si_code <= 0 || sig == SIGTRAP)
			sys3(SYS_tgkill, kprw_pid(), kprw_gettid(), sig);
		return;
	}
	if (a.flags & SA_RESETHAND)
		prog_set_handler(sig, SIG_DFL, 0, 0);
	/* the mask the kernel would run the handler with (sa_mask, and the signal itself
	 * without SA_NODEFER), but for SIGTRAP while int3 probes need it: probes hit in the
	 * handler must still reach us. A blocked SIGSEGV/SIGBUS stays blocked, so a fault in
	 * the program's own fault handler ends the program as the kernel would end it; the
	 * thread's fetches read by system call meanwhile (slow_read). */
	unsigned long m = uc->sigmask | a.mask | ((a.flags & SA_NODEFER) ? 0 : SIGBIT(sig));
	if (sig == SIGTRAP || sg_traps)
		m &= ~TRAPBIT;
	struct kprw_tctx *c = kprw_rt.fast_read ? kprw_tctx_get() : NULL;
	if (c)
		c->slow_read = (c->slow_read & ~(u32)KPRW_FAULT_SIGS) | (u32)(m & KPRW_FAULT_SIGS);
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&m, 0, 8);
	void (*h)(int, struct k_siginfo *, struct k_ucontext *) = (void *)a.handler;
	h(sig, si, uc);
	if (sig == SIGTRAP || sg_traps)
		uc->sigmask &= ~TRAPBIT; /* restored by rt_sigreturn */
	if (c) /* (a handler that siglongjmp'd away leaves this thread reading slowly until
		* its next fault or int3 hit shows its real mask) */
		c->slow_read = (c->slow_read & ~(u32)KPRW_FAULT_SIGS) | (u32)(uc->sigmask & KPRW_FAULT_SIGS);
}

/* ---- start-up ---- */

struct lmap { /* the public head of glibc's struct link_map */
	uptr l_addr;
	const char *l_name;
	const long *l_ld;
	struct lmap *l_next, *l_prev;
};

struct esym {
	u32 name;
	u8 info;
	u8 other;
	u16 shndx;
	u64 value;
	u64 size;
};

#define DT_HASH 4
#define DT_STRTAB 5
#define DT_SYMTAB 6
#define DT_GNU_HASH 0x6ffffef5
#define DT_VERSYM 0x6ffffff0
#define STT_FUNC 2
#define STT_GNU_IFUNC 10
#define VERSYM_HIDDEN 0x8000

static u32 gnu_hash(const char *s)
{
	u32 h = 5381;
	for (; *s; s++)
		h = h * 33 + (u8)*s;
	return h;
}

static u32 sysv_hash(const char *s)
{
	u32 h = 0;
	for (; *s; s++) {
		h = (h << 4) + (u8)*s;
		u32 g = h & 0xf0000000u;
		if (g)
			h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

struct dso {
	uptr base;
	const struct esym *symtab;
	const char *strtab;
	const u16 *versym;
};

/* consider returns 2 for the default definition of name at symbol i, 1 for a hidden
 * (non-default) version of it, 0 otherwise; *addr gets its address. */
static int consider(const struct dso *o, u32 i, const char *name, uptr *addr)
{
	const struct esym *s = &o->symtab[i];
	u32 type = s->info & 0xf, bind = s->info >> 4;
	if (s->shndx == 0 || s->value == 0 || (type != STT_FUNC && type != STT_GNU_IFUNC) || bind == 0)
		return 0;
	if (kprw_strcmp(o->strtab + s->name, name) != 0)
		return 0;
	*addr = o->base + s->value;
	if (type == STT_GNU_IFUNC)
		*addr = ((uptr(*)(void))*addr)();
	return o->versym && (o->versym[i] & VERSYM_HIDDEN) ? 1 : 2;
}

static uptr lookup_in(const struct lmap *l, const char *name)
{
	struct dso o = {l->l_addr, NULL, NULL, NULL};
	const u32 *gh = NULL, *hash = NULL;
	if (!l->l_ld)
		return 0;
	for (const long *d = l->l_ld; d[0]; d += 2) {
		uptr v = (uptr)d[1];
		if (v < o.base) /* glibc relocates these in place unless .dynamic is read-only */
			v += o.base;
		switch (d[0]) {
		case DT_HASH: hash = (const u32 *)v; break;
		case DT_GNU_HASH: gh = (const u32 *)v; break;
		case DT_STRTAB: o.strtab = (const char *)v; break;
		case DT_SYMTAB: o.symtab = (const struct esym *)v; break;
		case DT_VERSYM: o.versym = (const u16 *)v; break;
		}
	}
	if (!o.symtab || !o.strtab)
		return 0;
	uptr best = 0, a;
	if (gh) {
		u32 nb = gh[0], symoff = gh[1], nbloom = gh[2];
		if (nb == 0)
			return 0;
		const u32 *buckets = (const u32 *)((const u64 *)(gh + 4) + nbloom);
		const u32 *chain = buckets + nb;
		u32 h = gnu_hash(name);
		u32 i = buckets[h % nb];
		if (i < symoff)
			return 0;
		for (;; i++) {
			u32 ch = chain[i - symoff];
			if ((ch | 1) == (h | 1)) {
				int k = consider(&o, i, name, &a);
				if (k == 2)
					return a;
				if (k == 1 && !best)
					best = a;
			}
			if (ch & 1)
				break;
		}
	} else if (hash) {
		u32 nb = hash[0];
		const u32 *bucket = hash + 2, *chain = bucket + nb;
		if (nb == 0)
			return 0;
		for (u32 i = bucket[sysv_hash(name) % nb], n = 0; i && n < hash[1]; i = chain[i], n++) {
			int k = consider(&o, i, name, &a);
			if (k == 2)
				return a;
			if (k == 1 && !best)
				best = a;
		}
	}
	return best;
}

/* lookup finds name in the objects ld.so loaded, in their search order (the executable,
 * then its libraries), from the executable's struct link_map. */
static uptr lookup(const struct lmap *l, const char *name)
{
	for (int n = 0; l && n < 4096; l = l->l_next, n++) {
		uptr a = lookup_in(l, name);
		if (a)
			return a;
	}
	return 0;
}

/* store_word writes v at p: through process_vm_writev, which fails instead of faulting
 * on a read-only page; then, for a RELRO page, by making it writable for the store. */
static int store_word(uptr p, uptr v, uptr relro_lo, uptr relro_hi)
{
	struct k_iovec l = {&v, 8}, r = {(void *)p, 8};
	long n = sys6(SYS_process_vm_writev, kprw_getpid(), (long)&l, 1, (long)&r, 1, 0);
	if (n == 8)
		return 0;
	if (n >= 0)
		return -1;
	if (p < relro_lo || p + 8 > relro_hi) {
		if (n == -EFAULT)
			return -1; /* read-only, and not by RELRO: leave it */
		*(volatile uptr *)p = v; /* process_vm_writev not allowed (seccomp) */
		return 0;
	}
	uptr page = p & ~4095ul;
	if (sys3(SYS_mprotect, (long)page, 4096, PROT_READ | PROT_WRITE) < 0)
		return -1;
	*(volatile uptr *)p = v;
	sys3(SYS_mprotect, (long)page, 4096, PROT_READ);
	return 0;
}

u32 kprw_sg_wrapped; /* GOT words and static entries now going to wrappers */

/* entry_init fills the words the redirected entries of a static program's functions
 * (KPRW_GS_ENTRY) jump through: the wrapper, with the relocated copy of the entry as its
 * real function; the copy itself (the program unchanged) when unguarded. Every word is
 * filled whatever the mode: zero in the file, it must never be jumped through empty.
 */
static u32 entry_init(const struct kprw_got_slot *s, u32 n, int guard)
{
	u32 entries = 0, hooked = 0;
	for (u32 i = 0; i < n; i++) {
		u32 f = s[i].func;
		if (!(s[i].flags & KPRW_GS_ENTRY) || f < 1 || f > KPRW_SG_MAX)
			continue;
		if (guard && !sg_real[f])
			sg_real[f] = RT_ADDR(s[i].lazy); /* the rewriter gives each function one entry */
	}
	for (u32 i = 0; i < n; i++) {
		u32 f = s[i].func;
		if (!(s[i].flags & KPRW_GS_ENTRY) || f < 1 || f > KPRW_SG_MAX)
			continue;
		uptr real = RT_ADDR(s[i].lazy), w = 0;
		entries++;
		if (guard && sg_real[f] == real)
			w = wrapper(f);
		__atomic_store_n((uptr *)RT_ADDR(s[i].slot), w ? w : real, __ATOMIC_RELEASE);
		if (w) {
			hooked++;
			kprw_sg_wrapped++;
		} else if (guard && kprw_rt.debug) {
			kprw_puts("kprewrite: signal guard: cannot wrap ");
			kprw_puts((const char *)RT_ADDR(s[i].name));
			kprw_puts("\n");
		}
	}
	if (kprw_rt.debug && guard && entries) {
		kprw_puts("kprewrite: signal guard: ");
		kprw_put_dec(hooked);
		kprw_puts(" function entries wrapped, ");
		kprw_put_dec(entries - hooked);
		kprw_puts(" not\n");
	}
	return entries - hooked;
}

/* kprw_sigguard_init points the GOT words (and the words of a static program's
 * redirected entries) at the wrappers: the signal functions' for int3 probes (traps) or
 * fast reads (faults). The signals they guard
 * are set apart (kprw_sg_guard), when the runtime's handlers are in. Returns 1 when
 * every signal function listed was wrapped (none listed: 1). Runs once, single-threaded,
 * before the program. */
int kprw_sigguard_init(const char *mode, int traps, int faults)
{
	const struct kprw_header *h = kprw_rt.hdr;
	int guard = !(mode && kprw_strcmp(mode, "off") == 0);
	if (traps)
		sg_traps = 1; /* some image has int3 probes */
	if (!h->sigguard)
		return guard;
	const struct kprw_sigguard *g = (const void *)RT_ADDR(h->sigguard);
	const struct kprw_got_slot *s = (const void *)RT_ADDR(g->slots);
	/* no signal handler of ours to protect: the entries get their copies */
	u32 missed = entry_init(s, g->nslots, guard && (traps || faults));
	if (!guard)
		return 0;
	uptr relro_lo = 0, relro_hi = 0;
	if (g->relro_size) { /* the pages ld.so protects: whole pages inside the segment */
		relro_lo = RT_ADDR(g->relro) & ~4095ul;
		relro_hi = (RT_ADDR(g->relro) + g->relro_size) & ~4095ul;
	}
	const struct lmap *main_map = NULL;
	if (g->pltgot)
		main_map = *(const struct lmap *const *)(RT_ADDR(g->pltgot) + 8);
	u32 lazy = 0, failed = 0, wrapped = 0, words = 0, sigfailed = 0;
	/* the real functions first (a word bound to its function gives it to every word of
	 * that function), then the stores */
	for (u32 i = 0; i < g->nslots; i++) {
		if (s[i].func < 1 || s[i].func > KPRW_SG_MAX || (s[i].flags & KPRW_GS_ENTRY))
			continue;
		uptr v = *(const uptr *)RT_ADDR(s[i].slot);
		if (v && !(s[i].lazy && v == RT_ADDR(s[i].lazy)) && !sg_real[s[i].func])
			sg_real[s[i].func] = v;
	}
	for (u32 i = 0; i < g->nslots; i++) {
		u32 f = s[i].func;
		if (s[i].flags & KPRW_GS_ENTRY)
			continue;
		words++;
		if (f < 1 || f > KPRW_SG_MAX || (!traps && !faults))
			continue;
		uptr p = RT_ADDR(s[i].slot);
		uptr v = *(const uptr *)p;
		if (v == 0)
			continue; /* an unresolved weak reference: the program sees NULL, as before */
		uptr w = 0;
		if (!sg_real[f] && s[i].lazy && v == RT_ADDR(s[i].lazy)) {
			sg_real[f] = lookup(main_map, (const char *)RT_ADDR(s[i].name));
			lazy++;
		}
		if (sg_real[f])
			w = wrapper(f);
		if (!w || store_word(p, w, relro_lo, relro_hi) < 0) {
			failed++;
			sigfailed++;
			if (kprw_rt.debug) {
				kprw_puts("kprewrite: signal guard: cannot wrap ");
				kprw_puts((const char *)RT_ADDR(s[i].name));
				kprw_puts("\n");
			}
			continue;
		}
		kprw_sg_wrapped++;
		wrapped++;
	}
	if (kprw_rt.debug && words) {
		kprw_puts("kprewrite: signal guard: ");
		kprw_put_dec(wrapped);
		kprw_puts(" GOT words wrapped (");
		kprw_put_dec(lazy);
		kprw_puts(" bound lazily, looked up), ");
		kprw_put_dec(failed);
		kprw_puts(" not\n");
	}
	return missed == 0 && sigfailed == 0;
}
