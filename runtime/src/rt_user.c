/*
 * rt_user.c - C handlers: the probes that handler files declare (KPRW_F_USER).
 *
 * A KPRW_F_USER probe's table entry points (user) at the handler file's struct kprobe or
 * struct kretprobe (include/kprewrite.h). The handlers are read from that struct at each
 * hit, as the kernel reads kp->pre_handler, so a kprewrite_init() may set them before it
 * registers the probe. Registration is a state bit (KPRW_SF_UNREG): every site was
 * patched at rewrite time, so register_kprobe() only arms an already-patched probe and
 * unregister_kprobe() disarms it (a jump-optimized point's gate follows); a struct
 * no file declares is bound by its symbol_name to a prepared site's placeholder, or
 * placed at a free live point from the embedded analysis (rt_usersite.c). A probe hit
 * while its thread runs any handler is missed; the struct's nmissed counts it, as the
 * kernel's kprobes_inc_nmissed_count() does.
 *
 * Every call of a user function goes through ucall(): kprw_ucall_asm (src/user.S)
 * records the callee-saved registers, the stack pointer and the return address in the
 * thread's struct kprw_ucall, whose address the thread context holds while the call
 * runs. A fault in it (SIGSEGV, SIGBUS, SIGFPE, SIGILL from the CPU) reaches
 * kprw_user_fault from rt_fault.c's handler (unless it is a fault of the fault-catching
 * copy, which kprewrite_copy_nofault uses): the probe's fault_handler runs first (the kernel's kprobes
 * fault_handler contract: non-zero = handled, resume at the registers it left); else
 * the fault is reported on stderr and the signal frame is edited so that rt_sigreturn
 * "returns" from kprw_ucall_asm with the call marked faulted - the handler is abandoned
 * as if it had returned 0, with the signal mask of the faulting context restored. A
 * fault that is not a handler's gets what it would have got without the runtime
 * (rt_fault.c).
 */
#define KPRW_RUNTIME_INTERNAL
#include "kprewrite.h"
#include "rt.h"

#define X86_DF 0x400ul
#define FLAGS_ARITH 0x8d5ul
#define SYS_sigaltstack 131

/* what a ucall is running, for reports */
enum { UH_PRE = 1, UH_POST, UH_ENTRY, UH_RET, UH_INIT, UH_EXIT, UH_FAULT, UH_JPROBE, UH_BREAK };

struct kprw_ucall {
	u64 jb[8];               /* rbx rbp r12 r13 r14 r15, sp and ip after the call (user.S) */
	struct kprw_ucall *prev; /* the call this one interrupted on the same thread, if any */
	u32 probe;               /* runtime probe index, ~0u in kprewrite_init/exit */
	u32 what;                /* UH_* */
	u32 faulted;             /* set by the fault handler: the call was abandoned */
	u32 in_fault;            /* the fault_handler runs */
	u64 mask;                /* signal mask of the context that faulted first */
	struct task_struct task; /* what `current` returns during this call */
	const struct kprw_rt *owner; /* the image whose handler runs (contexts are shared) */
	const struct pt_regs *regs;  /* the hit's registers (a probe's handlers), NULL: none */
};

__attribute__((visibility("hidden"))) long kprw_ucall_asm(struct kprw_ucall *u, void *fn, long a, long b, long c);

static struct task_struct task_outside; /* `current` outside any handler (init, exit) */
static u32 reg_lock;
static u32 start_pid;
static int init_failed; /* kprewrite_init() failed: kprewrite_exit() is not run */
static u64 ld_fini;        /* the %rdx the process entry got (the dynamic linker's fini) */
static u32 fault_reports;
#define MAX_FAULT_REPORTS 20

static inline struct kprobe *ukp(u32 i)
{
	if (kprw_spare_user(i)) /* registered by name on a prepared site */
		return (struct kprobe *)__atomic_load_n(&kprw_rt.spare_user[i], __ATOMIC_ACQUIRE);
	return (struct kprobe *)RT_ADDR(kprw_rt.probes[i].user);
}

static inline struct kretprobe *urp(u32 i)
{
	return (struct kretprobe *)ukp(i); /* (a struct kretprobe starts with its struct kprobe) */
}

static const struct kprw_hooks *hooks(void)
{
	return kprw_rt.hdr->hooks ? (const struct kprw_hooks *)RT_ADDR(kprw_rt.hdr->hooks) : NULL;
}

/* short_stack counts a hit whose handler is skipped: the SIGTRAP handler runs on a signal
 * stack with less room than the handlers' measured stack (KPRW_SHORT_STACK, rt_trap.c);
 * running it would write past the stack's end. Said once per process. */
static void short_stack(u32 probe)
{
	static u32 said;
	kprw_count_miss(probe);
	if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		return;
	kprw_puts("kprewrite: a C handler may use ");
	kprw_put_dec((unsigned long)hooks()->stack);
	kprw_puts(" bytes of stack and the thread's signal stack has less room left: its int3 hits there "
		  "are counted as missed (nmissed); jump-optimized probes do not use the signal stack\n");
}

/* ucall calls fn(a, b, c) as a guarded user call; *faulted says whether it was abandoned
 * after a fault (its result is then 0). */
static long ucall(u32 probe, u32 what, void *fn, long a, long b, long c, int *faulted)
{
	struct kprw_tctx *t = kprw_tctx_get();
	if (t && (t->slow_read & KPRW_SHORT_STACK) && probe != ~0u) {
		short_stack(probe);
		if (faulted)
			*faulted = 0;
		return 0;
	}
	struct kprw_ucall u;
	u.prev = t ? t->ucall : NULL;
	u.probe = probe;
	u.what = what;
	u.faulted = 0;
	u.in_fault = 0;
	u.task.pid = 0;
	u.owner = &kprw_rt;
	u.regs = what == UH_PRE || what == UH_POST || what == UH_ENTRY || what == UH_RET || what == UH_FAULT || what == UH_BREAK
			 ? (const struct pt_regs *)b
		 : what == UH_JPROBE ? (const struct pt_regs *)a /* (kprw_jprobe_enter's) */
				     : NULL;
	if (t)
		t->ucall = &u;
	if (what == UH_ENTRY || what == UH_RET) /* ri->task: this call's (kprewrite_current) */
		((struct kretprobe_instance *)a)->task = kprewrite_current();
	long r = kprw_ucall_asm(&u, fn, a, b, c);
	if (t)
		t->ucall = u.prev;
	if (faulted)
		*faulted = (int)u.faulted;
	return u.faulted ? 0 : r;
}

/* ---- the probe paths (called from rt.h, rt_trap.c, rt_kretprobe.c) ---- */

int kprw_user_pre(u32 i, struct pt_regs *regs)
{
	struct kprobe *kp = ukp(i);
	if (kprw_rt.probes[i].type != KPRW_T_KPROBE)
		return 0;
	if (READ_ONCE(kp->flags) & KPRW_KPROBE_JPROBE) { /* a jprobe: its entry, with the arguments */
		void *entry = READ_ONCE(((struct jprobe *)kp)->entry);
		if (entry)
			ucall(i, UH_JPROBE, (void *)kprw_jprobe_enter, (long)regs, (long)entry, 0, NULL);
		return 0;
	}
	kprobe_pre_handler_t fn = READ_ONCE(kp->pre_handler);
	if (!fn)
		return 0;
	return (int)ucall(i, UH_PRE, (void *)fn, (long)kp, (long)regs, 0, NULL) != 0;
}

/* on_altstack says whether this thread runs on its signal stack (or cannot tell): a
 * second handler there could pass its end, which was measured for one */
static int on_altstack(void)
{
	struct {
		void *sp;
		int flags;
		unsigned long size;
	} ss;
	return sys2(SYS_sigaltstack, 0, (long)&ss) != 0 || (ss.flags & 1 /* SS_ONSTACK */);
}

/* kprw_user_break runs probe i's break_handler for a hit of it while this thread runs
 * its own handler (the 2.6 kernel's reentrant hit): 1 when the handler took the hit (it
 * returned non-zero: no miss) */
int kprw_user_break(u32 i, struct pt_regs *regs)
{
	if (!(kprw_rt.has & KPRW_HAS_USER) || kprw_rt.probes[i].type != KPRW_T_KPROBE ||
	    !((kprw_rt.probes[i].flags & KPRW_F_USER) || kprw_spare_user(i)) || kprw_user_current_probe() != i ||
	    on_altstack())
		return 0;
	struct kprobe *kp = ukp(i);
	kprobe_break_handler_t fn = READ_ONCE(kp->break_handler);
	return fn && ucall(i, UH_BREAK, (void *)fn, (long)kp, (long)regs, 0, NULL) != 0;
}

int kprw_user_has_post(u32 i)
{
	return kprw_rt.probes[i].type == KPRW_T_KPROBE && READ_ONCE(ukp(i)->post_handler) != NULL;
}

void kprw_user_post(u32 i, struct pt_regs *regs)
{
	struct kprobe *kp = ukp(i);
	kprobe_post_handler_t fn = READ_ONCE(kp->post_handler);
	if (fn && kprw_rt.probes[i].type == KPRW_T_KPROBE)
		ucall(i, UH_POST, (void *)fn, (long)kp, (long)regs, 0, NULL);
}

int kprw_user_entry(u32 i, struct kretprobe_instance *ri, struct pt_regs *regs)
{
	kretprobe_handler_t fn = READ_ONCE(urp(i)->entry_handler);
	if (!fn)
		return 0;
	return (int)ucall(i, UH_ENTRY, (void *)fn, (long)ri, (long)regs, 0, NULL) != 0;
}

void kprw_user_ret(u32 i, struct kretprobe_instance *ri, struct pt_regs *regs)
{
	kretprobe_handler_t fn = READ_ONCE(urp(i)->handler);
	if (fn)
		ucall(i, UH_RET, (void *)fn, (long)ri, (long)regs, 0, NULL);
}

/* kprw_user_missed counts a miss in the struct: pool = a kretprobe entry that found no
 * free instance (rp->nmissed), else a hit while a handler ran (kp->nmissed). */
void kprw_user_missed(u32 i, int pool)
{
	if (pool && kprw_rt.probes[i].type == KPRW_T_KRETPROBE)
		__atomic_fetch_add(&urp(i)->nmissed, 1, __ATOMIC_RELAXED);
	else
		__atomic_fetch_add(&ukp(i)->nmissed, 1, __ATOMIC_RELAXED);
}

int kprw_user_any(void)
{
	return (kprw_rt.has & KPRW_HAS_USER) != 0;
}

/* ---- registration ---- */

static void reg_take(void)
{
	u32 z = 0;
	while (!atomic_cas(&reg_lock, &z, 1)) {
		z = 0;
		sys0(SYS_sched_yield);
	}
}

static void reg_give(void)
{
	atomic_store(&reg_lock, 0);
}

/* find returns the runtime index of the probe whose struct is obj (type 0: either). */
static int find(const void *obj, u8 type)
{
	if (!obj || !kprw_rt.init_done)
		return -1;
	for (u32 i = 0; i < kprw_rt.nprobes; i++) {
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if ((p->flags & KPRW_F_USER) && (type == 0 || p->type == type) && RT_ADDR(p->user) == (uptr)obj)
			return (int)i;
	}
	return -1;
}

/* rearm opens or closes a jump-optimized point's gate after its probes changed state. */
static void rearm(const struct kprw_point *pt)
{
	if (pt->xmode != KPRW_X_OPTIMIZED)
		return;
	u32 armed = 0;
	for (u32 k = 0; k < pt->nprobes; k++)
		if (kprw_probe_enabled(pt->first_probe + k))
			armed = 1;
	atomic_store(&kprw_rt.state[pt->first_probe].gate, armed);
}

static void say_site(const char *what, const struct kprobe *kp, const char *why)
{
	char name[64];
	long n = kp ? kprw_read_user(name, (uptr)kp->symbol_name, sizeof name - 1) : -1;
	name[n > 0 ? n : 0] = 0;
	kprw_puts("kprewrite: ");
	kprw_puts(what);
	kprw_puts("(");
	kprw_puts(name[0] ? name : "?");
	kprw_puts("): ");
	kprw_puts(why);
	kprw_puts("\n");
}

/* ---- C handlers' registrations in the trace file (KPRW_TIF_USER) ----
 * `kprewrite list TARGET` shows the probes C handlers have registered now, as the
 * kernel's kprobes/list shows modules' kprobes: the process says so in its image's
 * control area, two words a probe. A word carries its process's pid, so an
 * unregistration clears only its own (a forked child's exit leaves its parent's) and
 * the tool skips a word of a process that died without unregistering. */

/* publish says how a C handler registered probe i: kp of type, or (kp NULL) not */
static void publish(u32 i, const struct kprobe *kp, u8 type)
{
	u64 *w = kprw_rt.user_regs;
	if (!w || i >= kprw_rt.nprobes)
		return;
	u64 pid = (u64)kprw_pid() << 32;
	if (!kp) { /* (only this process's word: another's may have replaced it) */
		u64 was = __atomic_load_n(&w[2 * i], __ATOMIC_RELAXED);
		while ((was & ~0xffffffffull) == pid &&
		       !__atomic_compare_exchange_n(&w[2 * i], &was, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
			;
		return;
	}
	u64 v = pid | (type == KPRW_T_KRETPROBE		     ? KPRW_UR_KRETPROBE
		       : (kp->flags & KPRW_KPROBE_JPROBE) ? KPRW_UR_JPROBE
							  : KPRW_UR_KPROBE);
	if ((kp->flags & KPROBE_FLAG_DISABLED) ||
	    ((kprw_rt.probes[i].flags & KPRW_F_USER) && (kprw_rt.state[i].flags & KPRW_SF_DISABLED)))
		v |= KPRW_UR_DISABLED; /* (a declared one KPREWRITE_DISABLE names too) */
	u32 at = kprw_rt.probes[i].point;
	const u8 *slot;
	const struct kprw_point *want = at >= kprw_rt.npoints ? kprw_usersite_free(at - kprw_rt.npoints, &slot) : NULL;
	if (want) /* a free live point's: its site as the C handler's registration placed it */
		v |= KPRW_UR_FREE | (u64)want->xmode << 8;
	__atomic_store_n(&w[2 * i + 1], want ? want->site : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&w[2 * i], v, __ATOMIC_RELEASE);
}

/* ---- struct kprobes registered by name on prepared sites (rewrite --prepare) ---- */

/* The placeholder kprobe at a prepared function's entry is named by its event,
 * prepared/FUNC: register_kprobe() of a struct kprobe that no DEFINE_KPROBE declared
 * binds it there by its symbol_name (offset 0), as the kernel resolves symbol_name at
 * registration. kp->kprw_private[0] holds 1 + the placeholder's index while it is
 * registered; the binding is kprw_rt.spare_user[index], NULL while disabled. */

static int name_is(u64 vaddr, const char *s)
{
	const char *n = (const char *)RT_ADDR(vaddr);
	while (*n && *n == *s)
		n++, s++;
	return *n == 0 && *s == 0;
}

/* name_is_ret says whether the event name at vaddr is s followed by "__return" */
static int name_is_ret(u64 vaddr, const char *s)
{
	const char *n = (const char *)RT_ADDR(vaddr);
	while (*s && *n == *s)
		n++, s++;
	return *s == 0 && kprw_strcmp(n, "__return") == 0;
}

/* spare_site is the placeholder of type of the prepared function kp names (its entry
 * kprobe, or its kretprobe, event FUNC__return), -1: none */
static int spare_site(const struct kprobe *kp, u8 type)
{
	if (!kprw_rt.spare_user || !kp->symbol_name || kp->offset)
		return -1;
	for (u32 i = 0; i < kprw_rt.nprobes; i++) {
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (p->type != type || p->event >= kprw_rt.nevents || p->point >= kprw_rt.npoints)
			continue; /* (a free live point's placeholder has no function) */
		const struct kprw_event *ev = &kprw_rt.events[p->event];
		if ((ev->flags & KPRW_EF_SPARE) &&
		    (type == KPRW_T_KPROBE ? name_is(ev->name, kp->symbol_name) : name_is_ret(ev->name, kp->symbol_name)))
			return (int)i;
	}
	return -1;
}

/* spare_bind sets placeholder i's struct kprobe (NULL: none) and has the live-probe
 * thread arm or disarm the site */
static void spare_bind(u32 i, struct kprobe *kp)
{
	void *was = __atomic_exchange_n(&kprw_rt.spare_user[i], (void *)kp, __ATOMIC_ACQ_REL);
	if (!was && kp)
		__atomic_add_fetch(&kprw_rt.spare_bound, 1, __ATOMIC_RELEASE);
	else if (was && !kp)
		__atomic_sub_fetch(&kprw_rt.spare_bound, 1, __ATOMIC_RELEASE);
	kprw_live_kick();
}

/* unprepared registers kp (a struct kprobe, or a struct kretprobe's: type) at an
 * unprepared site the embedded analysis describes (rt_usersite.c) and has the
 * live-probe thread place and arm it */
static int unprepared(struct kprobe *kp, u8 type)
{
	const char *fn = type == KPRW_T_KRETPROBE ? "register_kretprobe" : "register_kprobe";
	if (kprw_live_kick() < 0) { /* (before: no point is held for nothing) */
		if (kprw_rt.nfree)
			say_site(fn, kp,
				 "an unprepared site is placed by the live-probe thread, which needs a trace file: -ENOENT");
		return -ENOENT;
	}
	int r = kprw_usersite_register(kp, type);
	if (r == -ENOENT)
		say_site(fn, kp,
			 "neither a prepared function (--prepare) nor one the handler files name in a string "
			 "(the rewrite describes those): -ENOENT");
	if (r == 0)
		publish((u32)(kp->kprw_private[0] - 1), kp, type);
	if (r == 0 && !(kp->flags & KPROBE_FLAG_DISABLED))
		spare_bind((u32)(kp->kprw_private[0] - 1), kp);
	else if (r == 0)
		kprw_live_kick(); /* placed, not armed */
	return r;
}

static int spare_register(struct kprobe *kp, u8 type)
{
	if (kp->kprw_private[0])
		return -EINVAL; /* already registered */
	int found = spare_site(kp, type);
	if (found < 0)
		return unprepared(kp, type); /* (a kretprobe: at a free return point) */
	u32 i = (u32)found;
	const struct kprw_point *pt = &kprw_rt.points[kprw_rt.probes[i].point];
	if (kprw_rt.spare_user[i])
		return -EBUSY; /* one struct kprobe a prepared site */
	if (kp->post_handler && pt->xmode == KPRW_X_OPTIMIZED) {
		say_site("register_kprobe", kp,
			 "a post_handler on a jump-optimized prepared site; prepare it with --no-optimize");
		return -EINVAL;
	}
	if (type == KPRW_T_KRETPROBE) {
		struct kretprobe *rp = (struct kretprobe *)kp;
		if (rp->data_size > kprw_rt.probes[i].data_size) {
			say_site("register_kretprobe", kp, "data_size is larger than a prepared site's (64 bytes, with --handlers)");
			return -EINVAL;
		}
		if (kprw_rt.ri_pool)
			rp->maxactive = (int)kprw_rt.ri_pool[i].count;
		rp->nmissed = 0;
	}
	if (kprw_live_kick() < 0) {
		say_site("register_kprobe", kp, "a prepared site is armed by the live-probe thread, which needs a trace file");
		return -ENOENT;
	}
	kp->addr = (kprobe_opcode_t *)RT_ADDR(pt->site);
	kp->nmissed = 0;
	kp->flags = (kp->flags & ~(u32)KPROBE_FLAG_OPTIMIZED) | (pt->xmode == KPRW_X_OPTIMIZED ? KPROBE_FLAG_OPTIMIZED : 0);
	kp->kprw_private[0] = i + 1;
	publish(i, kp, type);
	if (!(kp->flags & KPROBE_FLAG_DISABLED))
		spare_bind(i, kp);
	return 0;
}

static int do_register(void *obj, u8 type)
{
	struct kprobe *kp = obj; /* a struct kretprobe starts with its struct kprobe */
	int found = find(obj, type);
	if (found < 0 && kp && kprw_rt.init_done)
		return spare_register(kp, type);
	if (found < 0)
		return -ENOENT; /* not declared: no site was patched for it */
	u32 i = (u32)found;
	const struct kprw_probe *p = &kprw_rt.probes[i];
	const struct kprw_point *pt = &kprw_rt.points[p->point];
	uptr site = RT_ADDR(pt->site);
	u32 st = kprw_rt.state[i].flags;
	if (!(st & KPRW_SF_UNREG))
		return -EINVAL; /* already registered */
	if (kp->addr && (uptr)kp->addr != site)
		return -EINVAL; /* another address than the declared site */
	if (type == KPRW_T_KPROBE && kp->post_handler && pt->xmode == KPRW_X_OPTIMIZED) {
		say_site("register_kprobe", kp,
			 "a post_handler on a jump-optimized site; give .post_handler in DEFINE_KPROBE so the site is single-stepped");
		return -EINVAL;
	}
	if (type == KPRW_T_KRETPROBE) {
		struct kretprobe *rp = obj;
		if (rp->data_size > p->data_size) {
			say_site("register_kretprobe", kp, "data_size is larger than at rewrite time");
			return -EINVAL;
		}
		if (kprw_rt.ri_pool)
			rp->maxactive = (int)kprw_rt.ri_pool[i].count;
		rp->nmissed = 0;
	}
	kp->addr = (kprobe_opcode_t *)site;
	kp->nmissed = 0;
	kp->flags = (kp->flags & ~(u32)KPROBE_FLAG_OPTIMIZED) |
		    (pt->xmode == KPRW_X_OPTIMIZED ? KPROBE_FLAG_OPTIMIZED : 0);
	u32 nst = st & ~(u32)(KPRW_SF_UNREG | KPRW_SF_DISABLED);
	if ((kp->flags & KPROBE_FLAG_DISABLED) || (st & KPRW_SF_FORCED))
		nst |= KPRW_SF_DISABLED;
	atomic_store(&kprw_rt.state[i].flags, nst); /* (opens, or stays closed: no bump) */
	publish(i, kp, type);
	rearm(pt);
	return 0;
}

static void do_unregister(void *obj, u8 type)
{
	struct kprobe *kp = obj;
	int i = find(obj, type);
	if (i < 0 && kp && kp->kprw_private[0] && kprw_rt.spare_user) {
		publish((u32)(kp->kprw_private[0] - 1), NULL, type);
		kprw_usersite_release((u32)(kp->kprw_private[0] - 1)); /* (a free point's: given back) */
		spare_bind((u32)(kp->kprw_private[0] - 1), NULL);
		kp->kprw_private[0] = 0;
		return;
	}
	if (i < 0 || (kprw_rt.state[i].flags & KPRW_SF_UNREG)) {
		if (kp)
			kp->addr = NULL; /* as the kernel does with an incorrect probe */
		return;
	}
	atomic_store(&kprw_rt.state[i].flags, kprw_rt.state[i].flags | KPRW_SF_UNREG);
	kprw_sw_bump();
	publish((u32)i, NULL, type);
	rearm(&kprw_rt.points[kprw_rt.probes[i].point]);
}

static int do_enable(struct kprobe *kp, int on)
{
	int i = find(kp, 0);
	if (i < 0 && kp && kp->kprw_private[0] && kprw_rt.spare_user) { /* registered by name */
		kp->flags = on ? kp->flags & ~(u32)KPROBE_FLAG_DISABLED : kp->flags | KPROBE_FLAG_DISABLED;
		u32 pi = (u32)(kp->kprw_private[0] - 1);
		publish(pi, kp, kprw_rt.probes[pi].type);
		spare_bind(pi, on ? kp : NULL);
		return 0;
	}
	if (i < 0 || (kprw_rt.state[i].flags & KPRW_SF_UNREG))
		return -EINVAL;
	u32 st = kprw_rt.state[i].flags;
	if (on) {
		if (st & KPRW_SF_FORCED)
			return -EPERM; /* disabled by the rewrite (--disable) or KPREWRITE_DISABLE */
		kp->flags &= ~(u32)KPROBE_FLAG_DISABLED;
		st &= ~(u32)KPRW_SF_DISABLED;
	} else {
		kp->flags |= KPROBE_FLAG_DISABLED;
		st |= KPRW_SF_DISABLED;
	}
	atomic_store(&kprw_rt.state[i].flags, st);
	if (!on)
		kprw_sw_bump(); /* (closed now) */
	publish((u32)i, kp, kprw_rt.probes[i].type);
	rearm(&kprw_rt.points[kprw_rt.probes[i].point]);
	return 0;
}

__attribute__((visibility("hidden"))) int kprewrite_register_kprobe(struct kprobe *p)
{
	reg_take();
	int r = do_register(p, KPRW_T_KPROBE);
	reg_give();
	return r;
}

__attribute__((visibility("hidden"))) void kprewrite_unregister_kprobe(struct kprobe *p)
{
	reg_take();
	do_unregister(p, KPRW_T_KPROBE);
	reg_give();
}

__attribute__((visibility("hidden"))) int kprewrite_register_kretprobe(struct kretprobe *rp)
{
	reg_take();
	int r = do_register(rp, KPRW_T_KRETPROBE);
	reg_give();
	return r;
}

__attribute__((visibility("hidden"))) void kprewrite_unregister_kretprobe(struct kretprobe *rp)
{
	reg_take();
	do_unregister(rp, KPRW_T_KRETPROBE);
	reg_give();
}

__attribute__((visibility("hidden"))) int kprewrite_enable_kprobe(struct kprobe *p)
{
	reg_take();
	int r = do_enable(p, 1);
	reg_give();
	return r;
}

__attribute__((visibility("hidden"))) int kprewrite_disable_kprobe(struct kprobe *p)
{
	reg_take();
	int r = do_enable(p, 0);
	reg_give();
	return r;
}

/* ---- start-up and exit ---- */

/* kprw_user_prepare runs at start-up after the table's and KPREWRITE_DISABLE's disables
 * are applied and before anything can fire: those disables become FORCED, and every
 * C handler probe starts unregistered. */
void kprw_user_prepare(void)
{
	/* SF_FORCED only matters to enable_kprobe() of C handlers: without them the state
	 * (bss, 32 bytes a probe) is not even read, so its pages stay unallocated */
	if (!kprw_user_any())
		return;
	for (u32 i = 0; i < kprw_rt.nprobes; i++) {
		u32 st = kprw_rt.state[i].flags;
		if (st & KPRW_SF_DISABLED)
			st |= KPRW_SF_FORCED;
		if (kprw_rt.probes[i].flags & KPRW_F_USER)
			st |= KPRW_SF_UNREG;
		if (st != kprw_rt.state[i].flags) /* untouched bss pages stay unallocated */
			kprw_rt.state[i].flags = st;
	}
}

static void put_int(long v)
{
	if (v < 0) {
		kprw_puts("-");
		v = -v;
	}
	kprw_put_dec((unsigned long)v);
}

/* kprw_user_has_init: the C handlers have a kprewrite_init(), which registers their
 * probes itself at the end of start-up (rt_init.c start_late); without one, the declared
 * probes are registered as soon as probes fire (start_early) */
int kprw_user_has_init(void)
{
	const struct kprw_hooks *h = hooks();
	return h && h->init;
}

/* kprw_user_start registers every C handler probe, or runs kprewrite_init() to do it;
 * called once during start-up (single-threaded, before libc). */
void kprw_user_start(void)
{
	const struct kprw_hooks *h = hooks();
	if (h && h->stack)
		kprw_rt.hstack_need = (u32)(h->stack < (1u << 30) ? h->stack + KPRW_SIGTRAP_STACK : 1u << 30);
	start_pid = kprw_pid();
	if (h && h->init) {
		struct kprw_tctx *c = kprw_tctx_get();
		int faulted = 0;
		if (c)
			c->busy++; /* probes hit by init are missed, as in any handler */
		int r = (int)ucall(~0u, UH_INIT, (void *)RT_ADDR(h->init), 0, 0, 0, &faulted);
		if (c)
			c->busy--;
		if (r != 0 || faulted) {
			kprw_puts("kprewrite: kprewrite_init() ");
			if (faulted) {
				kprw_puts("faulted");
			} else {
				kprw_puts("returned ");
				put_int(r);
			}
			kprw_puts(": every probe of the C handlers is unregistered; the program runs without them\n");
			init_failed = 1; /* no kprewrite_exit() either: a module whose init failed is not loaded */
			reg_take();
			for (u32 i = 0; i < kprw_rt.nprobes; i++) {
				if (kprw_rt.probes[i].flags & KPRW_F_USER)
					do_unregister((void *)RT_ADDR(kprw_rt.probes[i].user), kprw_rt.probes[i].type);
				else if (kprw_spare_user(i)) /* registered by name before it failed */
					spare_bind(i, NULL);
				publish(i, NULL, 0); /* (a disabled one too) */
			}
			kprw_usersite_release(~0u); /* (a disabled one too: every free point given back) */
			reg_give();
		}
		return;
	}
	reg_take();
	for (u32 i = 0; i < kprw_rt.nprobes; i++) {
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (!(p->flags & KPRW_F_USER))
			continue;
		int r = do_register((void *)RT_ADDR(p->user), p->type);
		if (r < 0) {
			kprw_puts("kprewrite: a declared probe could not be registered at start-up: error ");
			put_int(r);
			kprw_puts("\n");
		}
	}
	reg_give();
}

/* run_exit runs kprewrite_exit(), in the process that started */
static void run_exit(void)
{
	const struct kprw_hooks *h = hooks();
	if (h && h->exit && kprw_pid() == start_pid && !init_failed) {
		struct kprw_tctx *c = kprw_tctx_get();
		if (c)
			c->busy++;
		ucall(~0u, UH_EXIT, (void *)RT_ADDR(h->exit), 0, 0, 0, NULL);
		if (c)
			c->busy--;
	}
}

static void kprw_fini(void)
{
	run_exit();
	if (ld_fini)
		((void (*)(void))ld_fini)();
}

/* kprewrite_rt_lib_exit is called by a library's DT_FINI, kprewrite_rt_lib_fini (src/entry.S):
 * it runs kprewrite_exit() and returns the run-time address of the library's own DT_FINI,
 * or 0. */
__attribute__((visibility("hidden"))) uptr kprewrite_rt_lib_exit(void)
{
	if (!kprw_rt.init_done)
		return 0; /* the tables were never read: no hooks known, no DT_FINI either */
	run_exit();
	const struct kprw_hooks *h = hooks();
	return h && h->fini ? RT_ADDR(h->fini) : 0;
}

/* kprw_fini_rdx is called by the process entry (src/entry.S) with the %rdx the kernel or
 * ld.so gave it: the function the program must register with atexit (the dynamic
 * linker's fini, or 0). With a kprewrite_exit(), the entry hands the program kprw_fini
 * instead, which runs it and then the original. glibc's __libc_start_main registers it;
 * musl ignores it. */
__attribute__((visibility("hidden"))) unsigned long kprw_fini_rdx(unsigned long rdx)
{
	const struct kprw_hooks *h = kprw_rt.init_done ? hooks() : NULL;
	if (!h || !h->exit)
		return rdx;
	ld_fini = rdx;
	return (unsigned long)kprw_fini;
}

/* ---- faults in handlers ---- */

static const char *signame(int sig)
{
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS: return "SIGBUS";
	case SIGFPE: return "SIGFPE";
	case SIGILL: return "SIGILL";
	}
	return "signal";
}

/* what_name names a UH_* (a switch: a table of string pointers would need absolute
 * relocations) */
static const char *what_name(u32 what)
{
	switch (what) {
	case UH_PRE: return "pre_handler";
	case UH_JPROBE: return "jprobe entry";
	case UH_BREAK: return "break_handler";
	case UH_POST: return "post_handler";
	case UH_ENTRY: return "entry_handler";
	case UH_RET: return "handler";
	case UH_INIT: return "kprewrite_init()";
	case UH_EXIT: return "kprewrite_exit()";
	case UH_FAULT: return "fault_handler";
	}
	return "handler";
}

static void report(const struct kprw_ucall *u, int sig, const struct k_siginfo *si, const struct k_sigcontext *mc)
{
	u32 n = __atomic_fetch_add(&fault_reports, 1, __ATOMIC_RELAXED);
	if (n > MAX_FAULT_REPORTS)
		return;
	if (n == MAX_FAULT_REPORTS) {
		kprw_puts("kprewrite: more faults in C handlers are only counted (kprewrite_rt_stats.handler_faults)\n");
		return;
	}
	kprw_puts("kprewrite: a C handler faulted: ");
	kprw_puts(signame(sig));
	kprw_puts(" (trap ");
	kprw_put_dec(mc->trapno);
	kprw_puts(", address ");
	kprw_put_hex(si->si_addr);
	kprw_puts(") at ");
	kprw_put_hex(mc->ip);
	kprw_puts(" in the ");
	kprw_puts(what_name(u->what));
	if (u->probe < kprw_rt.nprobes) {
		char name[64];
		long r = kprw_read_user(name, (uptr)ukp(u->probe)->symbol_name, sizeof name - 1);
		name[r > 0 ? r : 0] = 0;
		kprw_puts(" of the probe at ");
		kprw_puts(name[0] ? name : "?");
	}
	kprw_puts("; the handler is abandoned and the program goes on\n");
}

static void regs_from(struct pt_regs *r, const struct k_sigcontext *mc)
{
	r->r15 = mc->r15; r->r14 = mc->r14; r->r13 = mc->r13; r->r12 = mc->r12;
	r->bp = mc->bp; r->bx = mc->bx; r->r11 = mc->r11; r->r10 = mc->r10;
	r->r9 = mc->r9; r->r8 = mc->r8; r->ax = mc->ax; r->cx = mc->cx;
	r->dx = mc->dx; r->si = mc->si; r->di = mc->di; r->orig_ax = ~0ul;
	r->ip = mc->ip; r->cs = mc->cs; r->flags = mc->flags; r->sp = mc->sp; r->ss = mc->ss;
}

static void regs_to(struct k_sigcontext *mc, const struct pt_regs *r)
{
	mc->r15 = r->r15; mc->r14 = r->r14; mc->r13 = r->r13; mc->r12 = r->r12;
	mc->bp = r->bp; mc->bx = r->bx; mc->r11 = r->r11; mc->r10 = r->r10;
	mc->r9 = r->r9; mc->r8 = r->r8; mc->ax = r->ax; mc->cx = r->cx;
	mc->dx = r->dx; mc->si = r->si; mc->di = r->di;
	mc->ip = r->ip; mc->sp = r->sp;
	mc->flags = (mc->flags & ~FLAGS_ARITH) | (r->flags & FLAGS_ARITH);
}

/* kprw_user_fault handles a fault the CPU raised (from rt_fault.c's handler) if this
 * thread runs a C handler: 1, else 0 (not a handler's fault). */
int kprw_user_fault(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	struct k_sigcontext *mc = &uc->mc;
	struct kprw_tctx *c = kprw_tctx_get();
	struct kprw_ucall *u = c ? c->ucall : NULL;

	if (!u || u->owner != &kprw_rt) /* none, or another image's handler faulted */
		return 0;
	atomic_add(&kprewrite_rt_stats.handler_faults, 1);
	if (!u->in_fault) {
		u->mask = uc->sigmask;
		if (u->what == UH_FAULT) /* a fault_handler called for a step's fault faulted */
			goto abandon;
		struct kprobe *kp = u->probe < kprw_rt.nprobes ? ukp(u->probe) : NULL;
		kprobe_fault_handler_t fh = kp ? READ_ONCE(kp->fault_handler) : NULL;
		if (fh) {
			struct pt_regs regs;
			regs_from(&regs, mc);
			u->in_fault = 1; /* a fault in the fault_handler abandons the handler */
			int handled = fh(kp, &regs, (int)mc->trapno);
			u->in_fault = 0;
			if (handled) {
				regs_to(mc, &regs);
				return 1;
			}
		}
	}
abandon:
	report(u, sig, si, mc);
	/* return from kprw_ucall_asm: callee-saved registers, sp and ip as it recorded them */
	mc->bx = u->jb[0];
	mc->bp = u->jb[1];
	mc->r12 = u->jb[2];
	mc->r13 = u->jb[3];
	mc->r14 = u->jb[4];
	mc->r15 = u->jb[5];
	mc->sp = u->jb[6];
	mc->ip = u->jb[7];
	mc->ax = 0;
	mc->flags &= ~X86_DF;
	u->faulted = 1;
	uc->sigmask = u->mask; /* a nested fault (in the fault_handler) restores the first mask */
	return 1;
}

/* kprw_user_step_fault runs the fault_handlers of point pt's C handler probes for a
 * fault (trap trapnr) of its instruction's out-of-line copy while it is single-stepped
 * (rt_trap.c's kprw_step_fault; regs as at the probed instruction), in the point's
 * order, until one returns non-zero: 1 then (the fault is handled, the thread resumes at
 * regs), else 0. A fault_handler that faults is abandoned as returning 0. */
int kprw_user_step_fault(const struct kprw_point *pt, struct pt_regs *regs, int trapnr)
{
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 i = pt->first_probe + k;
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (p->type != KPRW_T_KPROBE || !((p->flags & KPRW_F_USER) || kprw_spare_user(i)) ||
		    !kprw_probe_enabled(i))
			continue;
		struct kprobe *kp = ukp(i);
		kprobe_fault_handler_t fh = READ_ONCE(kp->fault_handler);
		int faulted = 0;
		if (fh && (int)ucall(i, UH_FAULT, (void *)fh, (long)kp, (long)regs, trapnr, &faulted) != 0 && !faulted)
			return 1;
	}
	return 0;
}

/* ---- helpers for handlers (kprewrite.h) ---- */

__attribute__((visibility("hidden"))) struct task_struct *kprewrite_current(void)
{
	struct kprw_tctx *c = kprw_tctx_get();
	struct kprw_ucall *u = c ? c->ucall : NULL;
	struct task_struct *t = u ? &u->task : &task_outside;
	t->tgid = (pid_t)kprw_pid();
	if (c) {
		t->pid = (pid_t)kprw_tctx_tid(c);
		kprw_memcpy(t->comm, kprw_tctx_comm(c, kprw_clock()), TASK_COMM_LEN);
	} else {
		t->pid = (pid_t)kprw_gettid();
		kprw_memset(t->comm, 0, TASK_COMM_LEN);
		sys2(SYS_prctl, 16 /* PR_GET_NAME */, (long)t->comm);
	}
	t->comm[TASK_COMM_LEN - 1] = 0;
	t->mm = (void *)t; /* (any non-NULL: a user task, not a kernel thread) */
	return t;
}

/* kprewrite_dump_stack is the kernel's dump_stack() in a probe's handler: the user
 * stack at the hit, as a stack record of the trace file (`kprewrite trace` prints it as
 * the kernel's tracer prints a stacktrace); nothing outside a probe's handler */
__attribute__((visibility("hidden"))) void kprewrite_dump_stack(void)
{
	struct kprw_tctx *c = kprw_tctx_get();
	struct kprw_ucall *u = c ? c->ucall : NULL;
	if (!u || !u->regs || u->probe >= kprw_rt.nprobes || u->owner != &kprw_rt)
		return;
	struct kprw_hit hit = {u->probe, u->regs, c, 0};
	kprw_trace_stack(&hit);
}

__attribute__((visibility("hidden"))) unsigned int kprewrite_smp_processor_id(void)
{
	return kprw_cpu();
}

__attribute__((visibility("hidden"))) u64 kprewrite_ktime_get_ns(void)
{
	return kprw_clock_ns();
}

__attribute__((visibility("hidden"))) u64 kprewrite_ktime_get_real_ns(void)
{
	struct k_timespec ts = {0, 0};
	sys2(SYS_clock_gettime, 0 /* CLOCK_REALTIME */, (long)&ts);
	return (u64)ts.sec * 1000000000ull + (u64)ts.nsec;
}

__attribute__((visibility("hidden"))) long kprewrite_write(int fd, const void *buf, size_t n)
{
	return sys3(SYS_write, fd, (long)buf, (long)n);
}

__attribute__((visibility("hidden"))) long kprewrite_copy_nofault(void *dst, const void *src, size_t size)
{
	if (size == 0)
		return 0;
	return kprw_read_user(dst, (uptr)src, size) == (long)size ? 0 : -EFAULT;
}

__attribute__((visibility("hidden"))) long kprewrite_strncpy_nofault(char *dst, const void *src, long count)
{
	uptr a = (uptr)src;
	long n = 0;
	if (count <= 0)
		return 0;
	while (n < count) {
		/* never across a page: a readable string before an unmapped page still reads */
		unsigned long chunk = 4096 - (a & 4095);
		if (chunk > 64)
			chunk = 64;
		if ((long)chunk > count - n)
			chunk = (unsigned long)(count - n);
		if (kprw_read_user(dst + n, a, chunk) != (long)chunk) {
			dst[0] = 0;
			return -EFAULT;
		}
		for (unsigned long k = 0; k < chunk; k++)
			if (dst[n + (long)k] == 0)
				return n + (long)k + 1;
		n += (long)chunk;
		a += chunk;
	}
	dst[count - 1] = 0;
	return count;
}

/* the probe whose handler this thread runs (for trace_printk), or ~0u */
u32 kprw_user_current_probe(void)
{
	struct kprw_tctx *c = kprw_tctx_get();
	struct kprw_ucall *u = c ? c->ucall : NULL;
	return u && u->owner == &kprw_rt ? u->probe : ~0u;
}
