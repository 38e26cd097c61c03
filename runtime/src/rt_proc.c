/*
 * rt_proc.c - one runtime per process: how the rewritten images of a process find each
 * other and share what the process has only one of.
 *
 * Every rewritten image (the executable, each library) carries a copy of the runtime
 * and starts it on its own (rt_init.c), in an order nobody controls: libraries while
 * the loader relocates them, the executable at its entry, a dlopen'd library whenever
 * it is loaded. The kernel keeps one disposition per signal and one thread per thread,
 * so the images must share:
 *   - the signal handlers: the first image that needs a signal (SIGTRAP for int3
 *     probes, SIGSEGV/SIGBUS for fast reads and the trace file, SIGFPE/SIGILL for C
 *     handlers) installs its handler; the images after it register instead. The
 *     installed handler tries its own image, then each registered image (a hit or a
 *     fault is some image's by its address), and only then gives the signal to the
 *     program. Before, each image installed its own and took the one before it for the
 *     program's: a program that set its own SIGTRAP handler through one image's guard
 *     replaced the other image's handler in that chain, and the other image's next int3
 *     hit went to the program (a crash, or death by SIGTRAP after SIG_DFL);
 *   - the signal guard's state: the program's disposition of each signal (one, whichever
 *     image's guard the program's call went through) and the signals kept from the
 *     kernel (every image's);
 *   - the thread contexts (rt_thread.c): one per thread, so a thread running a handler
 *     of any image is busy for every image (a probe hit meanwhile is missed, as the
 *     kernel misses a kprobe hit while another kprobe's handler runs), and what a
 *     thread's context learns (its tid, name, whether its fault signals are blocked) is
 *     learnt once.
 * What stays per image: its probes, tables, counters, trace-file mapping and blocks
 * (a block names its image), single-step records (a step is its image's), and its
 * return-probe instances (per probe, maxactive each, as the kernel's kretprobes; an
 * instance is found by its frame's return-address word, so frames of several images'
 * return probes chain through the words themselves).
 *
 * The rendezvous: one page at a fixed address (KPRW_PROC_ADDR, above every sanitizer's
 * shadow and below where the kernel places mappings), mapped MAP_FIXED_NOREPLACE by the
 * first image, holding a magic word, the runtime's build and the address of the first
 * image's struct kprw_proc. A fork child inherits it with the rest of the address
 * space, exec drops it. An image reads it by system call (it may be something else's
 * page, or none); one that finds no page it can use, or one of another runtime build
 * (images rewritten by different kprewrite versions share no structure), runs alone as
 * earlier versions did. The page holds no state: a program that maps over it only stops
 * later images from joining.
 */
#include "rt.h"

#define PROC_ADDR 0x7e9b6b700000ul
#define PROC_MAGIC 0x434f525057524b50ull /* "PKRWPROC" */
#define PROT_RW 3
#define MAP_PRIVATE_ANON 0x22
#define MAP_FIXED_NOREPLACE 0x100000
#ifndef KPRW_RT_BUILD
#define KPRW_RT_BUILD 0ull /* build.sh defines it: a hash of the runtime's sources */
#endif

struct anchor {
	u64 magic;
	u64 build;
	u64 proc;  /* struct kprw_proc * */
	u64 check; /* mixes the three: a page that merely starts with the magic is not ours */
};

static u64 anchor_check(const struct anchor *a)
{
	return (a->magic ^ (a->build * 0x9E3779B97F4A7C15ull) ^ (a->proc * 0xC2B2AE3D27D4EB4Full)) | 1;
}

static struct kprw_proc own; /* the process's when this image is the first (or alone) */
struct kprw_proc *kprw_proc;
static u32 self = ~0u; /* this image's entry in kprw_proc->img (set whenever kprw_proc is) */

/* lock: images join one at a time (the loader's own lock serializes them already, but
 * for a fork child of a thread caught holding it: taken over after a while) */
static void lock(void)
{
	u32 z = 0;
	for (u32 tries = 0; !atomic_cas(&kprw_proc->lock, &z, 1) && tries < 10000; tries++) {
		z = 0;
		sys0(SYS_sched_yield);
	}
	atomic_store(&kprw_proc->lock, 1);
}

static void unlock(void)
{
	atomic_store(&kprw_proc->lock, 0);
}

/* find reads the anchor page: the process's struct, or NULL (none usable). */
static struct kprw_proc *find(void)
{
	struct anchor a;
	if (kprw_read_mode(&a, PROC_ADDR, sizeof a, 0) != (long)sizeof a)
		return NULL;
	if (a.magic != PROC_MAGIC || a.build != KPRW_RT_BUILD || a.check != anchor_check(&a) || !a.proc)
		return NULL;
	struct kprw_proc probe;
	if (kprw_read_mode(&probe, (uptr)a.proc, sizeof probe.magic + sizeof probe.build, 0) !=
		    (long)(sizeof probe.magic + sizeof probe.build) ||
	    probe.magic != PROC_MAGIC || probe.build != KPRW_RT_BUILD)
		return NULL;
	return (struct kprw_proc *)(uptr)a.proc;
}

/* kprw_proc_join makes this image one of the process's (start-up, before any signal
 * handler or thread context of it exists). Idempotent. */
void kprw_proc_join(int (*sig_own)(int, struct k_siginfo *, struct k_ucontext *))
{
	if (kprw_proc)
		return;
	own.magic = PROC_MAGIC;
	own.build = KPRW_RT_BUILD;
	struct kprw_proc *p = NULL;
	long r = sys6(SYS_mmap, (long)PROC_ADDR, 4096, PROT_RW, MAP_PRIVATE_ANON | MAP_FIXED_NOREPLACE, -1, 0);
	if (r == (long)PROC_ADDR) {
		struct anchor *a = (struct anchor *)PROC_ADDR;
		a->magic = PROC_MAGIC;
		a->build = KPRW_RT_BUILD;
		a->proc = (u64)(uptr)&own;
		a->check = anchor_check(a);
		p = &own;
	} else {
		if (r > 0) /* a kernel before 4.17 took the address as a hint */
			sys2(SYS_munmap, r, 4096);
		p = find();
		if (!p)
			p = &own; /* alone */
	}
	for (;;) {
		kprw_proc = p;
		lock();
		if (p->nimages < KPRW_PROC_IMAGES) {
			self = p->nimages;
			p->img[self].own = sig_own;
			p->img[self].sigs = 0;
			atomic_store(&p->nimages, self + 1);
		}
		unlock();
		if (self != ~0u || p == &own)
			break;
		p = &own; /* the process's is full: alone */
	}
	kprw_rt.proc_shared = p != &own;
}

/* kprw_proc_take says whether this image installs its handler for sig (1: no image has
 * one installed) or only registers for it (0: the installed handler passes it the
 * signals it does not own). Start-up. */
int kprw_proc_take(int sig)
{
	if (!kprw_proc)
		return 1; /* not joined: alone, as before */
	int first;
	lock();
	__atomic_fetch_or(&kprw_proc->img[self].sigs, SIGBIT(sig), __ATOMIC_RELEASE);
	first = !(kprw_proc->installed & SIGBIT(sig));
	kprw_proc->installed |= SIGBIT(sig);
	unlock();
	return first;
}

/* kprw_proc_others offers a signal that the installed handler's image does not own to
 * the other images registered for it; 1 when one of them owned it. */
int kprw_proc_others(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	struct kprw_proc *p = kprw_proc;
	if (!p)
		return 0;
	u32 n = atomic_load(&p->nimages);
	for (u32 i = 0; i < n && i < KPRW_PROC_IMAGES; i++) {
		if (i == self || !(__atomic_load_n(&p->img[i].sigs, __ATOMIC_ACQUIRE) & SIGBIT(sig)))
			continue;
		if (p->img[i].own(sig, si, uc))
			return 1;
	}
	return 0;
}

/* kprw_proc_tblk registers this image's parts of the thread contexts (start-up). */
void kprw_proc_tblk(struct kprw_tblk *t)
{
	if (kprw_proc)
		atomic_store(&kprw_proc->img[self].tblk, t);
}

static void leave(struct kprw_tblk *b)
{
	/* its block looks full: rt_ring.c's kprw_new_block leaves it */
	u64 end = rec_end(__atomic_load_n(&b->rec, __ATOMIC_RELAXED));
	__atomic_store_n(&b->rec, rec_word(end, end), __ATOMIC_RELAXED);
	/* and its copy of the clock ends: it was made before the thread's comm_dl moved */
	__atomic_store_n(&b->tc_span, 0, __ATOMIC_RELAXED);
}

/* kprw_proc_tblk_leave: context i has a new thread, or its thread a new name; a trace
 * block names both, so the next record of every image takes a new block. Called by the
 * thread that has context i, the only one that writes its blocks. */
void kprw_proc_tblk_leave(u32 i)
{
	struct kprw_proc *p = kprw_proc;
	if (i >= KPRW_NTCTX)
		return;
	if (!p) {
		leave(&kprw_tblk_tab[i]);
		return;
	}
	u32 n = atomic_load(&p->nimages);
	for (u32 k = 0; k < n && k < KPRW_PROC_IMAGES; k++) {
		struct kprw_tblk *t = atomic_load(&p->img[k].tblk);
		if (t)
			leave(&t[i]);
	}
}
