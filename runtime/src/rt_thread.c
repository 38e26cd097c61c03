/*
 * rt_thread.c - per-thread state without TLS.
 *
 * Two tables live in MADV_WIPEONFORK mappings (a fork child starts with both empty and
 * with no cached pid; vfork children share them, as they share everything):
 *
 * 1. Thread contexts (struct kprw_tctx, in struct kprw_tshare: the process's, made by
 *    its first rewritten image and shared by the others, rt_proc.c; each image keeps
 *    its part of a context, its trace block, in struct kprw_tblk beside it), one per
 *    thread that ever hit a probe, keyed by
 *    the thread pointer and looked up in a few nanoseconds on every hit of every path
 *    (detour, int3, return trampoline). A context holds the reentrancy guard (busy), the
 *    thread's tid and its comm, so a hit needs no system call.
 *
 *    The key is the FS base: rdfsbase when the kernel enables FSGSBASE (AT_HWCAP2 bit 1,
 *    Linux >= 5.9), else the word at %fs:0 once the thread has a TLS block (the x86-64
 *    TLS ABI makes it the thread pointer itself in glibc and musl; read only after
 *    ARCH_GET_FS has shown a non-zero base, as static programs run code before libc
 *    sets up TLS). Without a usable key (no TLS yet, or a runtime whose %fs:0 is 0) the
 *    key is 1<<63 | tid from gettid, which is slow (a system call per hit) but correct.
 *
 *    Why it is correct: two live threads made by clone(CLONE_SETTLS), as every thread
 *    library does, have different TLS blocks, hence different keys, and a thread's key
 *    does not change while it runs in a probe. The one way a key moves to another thread
 *    is reuse: a thread dies and libc gives its TCB (glibc caches stacks with their TCBs)
 *    or its memory (musl) to a new thread. The new thread then finds the dead thread's
 *    context, whose tid, comm and busy are wrong. To see that cheaply, the runtime learns
 *    where libc keeps the tid in the TCB: each time a context is claimed (a system call
 *    is made then anyway) it reads 512 bytes below and 1 KiB above the thread pointer and keeps the
 *    offsets that hold the tid (glibc: struct pthread.tid, set by CLONE_PARENT_SETTID
 *    before the thread runs; musl: pthread.tid; Go: m.procid), intersected over every
 *    thread seen. A context's tid is trusted only while the word at each surviving
 *    offset equals it: one load per check. If no offset survives (no libc tid field),
 *    gettid is asked whenever the tid matters (trace records, kretprobe instances, a
 *    busy context); the reentrancy guard itself never needs it. Contexts of dead
 *    threads are reclaimed (tgkill(pid, tid, 0) == ESRCH) when the table is full.
 *    Known limits: threads made by raw clone without CLONE_SETTLS share their parent's
 *    key (a hit in one while the other runs a handler counts as missed; two hits that
 *    pass the reentrancy guard at the same instant share the context's trace block, and
 *    their records may overwrite each other: rt_ring.h's reserve takes places in it without a
 *    lock), and a vfork child's records carry its parent's pid and tid.
 *
 * 2. Single-step records (struct kprw_thread, per image) of the int3 path, keyed by (pid, tid): the
 *    SIGTRAP handler knows the tid anyway. An entry is claimed at a single-stepped hit
 *    and released when the step ends, so the table holds as many entries as threads are
 *    stepping at once, and lookups scan only up to the high-water mark.
 */
#include "rt.h"

#define KPRW_NTHREADS 256
#define TCTX_WINDOW KPRW_TCTX_WINDOW
#define KEY_CLAIMING 1ull
#define KEY_TID KPRW_KEY_TID
#define TIDSCAN 1024 /* bytes after the thread pointer searched for the tid */
#define TIDNEG 512   /* and before it: Go's m.procid lies below the thread pointer (Go's
                        FS base is &m.tls[1]; procid comes before tls in struct m) */
#define TIDCAND KPRW_TIDCAND
#define COMM_REFRESH_NS KPRW_COMM_REFRESH_NS

#define ARCH_GET_FS 0x1003
#define SYS_arch_prctl 158

/* this image's part: single-step records and its blocks of the trace file, one per
 * context of the process's table */
struct kprw_tstate {
	u32 hwm; /* step entries [0, hwm) may be in use */
	struct kprw_thread t[KPRW_NTHREADS];
	struct kprw_tblk b[KPRW_NTCTX];
};

static struct kprw_tstate *ts;
static struct kprw_tstate ts_fallback; /* if mmap/madvise fail (no WIPEONFORK) */
static struct kprw_tshare tsh_fallback;
struct kprw_tshare *kprw_tsh; /* the process's contexts: this image's or the first image's (rt_proc.c) */
struct kprw_tctx *kprw_tctx_tab; /* kprw_tsh->c, for the inlined lookups (set at start-up: no absolute relocation) */
struct kprw_tblk *kprw_tblk_tab; /* ts->b */

/* &kprw_tsh->pid once the table exists (kprw_pid_fast); NULL before and without
 * WIPEONFORK (no initialised pointer: the object has no absolute relocation) */
u32 *kprw_pid_cache;
/* far_claims (kprw_tsh): contexts ever claimed outside their key's window (claim_ctx
 * passes 2 and 3): until there is one, a key's context can only be in its window, and
 * kprw_tctx_slow does not read the whole table (64 KiB: 16 page faults at start-up) */
#define far_claims (kprw_tsh->far_claims)
#define tid_learned (kprw_tsh->tid_learned)
#define tid_lock (kprw_tsh->tid_lock)
#define tid_off kprw_tid_off
#define tid_live kprw_tid_live

int kprw_thread_init(void)
{
	int ok = 1;
	ts = kprw_mmap_wipe_on_fork(sizeof(struct kprw_tstate));
	if (!ts) {
		ts = &ts_fallback;
		ok = 0;
	}
	kprw_tblk_tab = ts->b;
	/* the contexts: the process's, made by the first image (rt_proc.c) */
	struct kprw_tshare *sh = kprw_proc ? atomic_load(&kprw_proc->tsh) : NULL;
	if (!sh) {
		sh = kprw_mmap_wipe_on_fork(sizeof(struct kprw_tshare));
		if (!sh) {
			sh = &tsh_fallback;
			ok = 0;
		}
		if (kprw_proc)
			atomic_store(&kprw_proc->tsh, sh);
	}
	kprw_tsh = sh;
	/* the pid cached now, not at its first use: a first use in a CLONE_VM child (Go's
	 * os/exec forks with clone(CLONE_VM|CLONE_VFORK) and sets its signal handlers there)
	 * would cache the child's pid in the memory it shares with its parent, for both */
	if (sh != &tsh_fallback && !atomic_load(&sh->pid))
		atomic_store(&sh->pid, kprw_getpid());
	kprw_tctx_tab = sh->c;
	kprw_pid_cache = sh != &tsh_fallback ? &sh->pid : NULL;
	kprw_proc_tblk(ts->b);
	if (kprw_rt.hwcap2 & 2 /* HWCAP2_FSGSBASE */)
		kprw_rt.keymode = KPRW_KEY_FSBASE;
	else
		kprw_rt.keymode = kprw_thread_keymode_fs0();
	return ok ? 0 : -1;
}

/* kprw_tcb_slot_check sets kprw_rt.tcb_slot when this thread's TCB is glibc's, as far
 * as can be seen: TLS set up, tcbhead_t's tcb and self both the thread pointer, struct
 * pthread's tid this thread's, and the word the fast paths would use zero or one of
 * our contexts. The word (KPRW_TCB_SLOT) is in tcbhead_t.__glibc_unused2, 512 bytes
 * glibc keeps unused since 2.26 only for the struct's size (AddressSanitizer depends
 * on it). optprobe.S's TCTX_FIND then finds a context in one load from the TCB (a miss
 * finds it by its hash and names it there), checked before use: it points into the
 * table, its key is the thread pointer, its tid glibc's tid of the thread (a TCB a dead
 * thread left to a new one names the dead one's context: the tid differs). Not with
 * musl (no self at 0x10 with the tid at 0x2d0), Go's static threads (no TCB at %fs:0),
 * a tid key, or KPREWRITE_THREADKEY=hash. At start-up, and, in a static program whose
 * TLS comes after it, at the context lookups of the slow path until TLS is there. */
static u32 tcb_decided; /* kprw_tcb_slot_check saw TLS set up (or was told no) */

static void tcb_slot_decide(void);

void kprw_tcb_slot_check(void)
{
	tcb_slot_decide();
	kprw_fast_pick();
}

static void tcb_slot_decide(void)
{
	kprw_rt.tcb_slot = 0;
	if (kprw_rt.no_tcb_slot || (kprw_rt.keymode != KPRW_KEY_FS0 && kprw_rt.keymode != KPRW_KEY_FSBASE)) {
		tcb_decided = kprw_rt.keymode != KPRW_KEY_PENDING;
		return;
	}
	u64 base = 0, self[3], slot = 1;
	u32 tid = 0;
	sys2(SYS_arch_prctl, ARCH_GET_FS, (long)&base);
	tcb_decided = base != 0; /* (a static program's TLS comes after start-up) */
	if (!base || kprw_read_mode(self, (uptr)base, sizeof self, 0) != sizeof self ||
	    self[0] != base || self[KPRW_GLIBC_SELF / 8] != base ||
	    kprw_read_mode(&tid, (uptr)(base + KPRW_GLIBC_TID), 4, 0) != 4 || tid != (u32)kprw_gettid() ||
	    kprw_read_mode(&slot, (uptr)(base + KPRW_TCB_SLOT), 8, 0) != 8)
		return;
	if (slot && (slot < (u64)kprw_tctx_tab || slot >= (u64)(kprw_tctx_tab + KPRW_NTCTX) ||
		     (slot - (u64)kprw_tctx_tab) % sizeof *kprw_tctx_tab))
		return; /* (someone's word: left alone) */
	kprw_rt.tcb_slot = KPRW_TCB_SLOT;
}

/* the key mode without rdfsbase: %fs:0 if this thread has TLS, else wait for it */
u32 kprw_thread_keymode_fs0(void)
{
	u64 base = 0;
	sys2(SYS_arch_prctl, ARCH_GET_FS, (long)&base);
	return base ? KPRW_KEY_FS0 : KPRW_KEY_PENDING;
}

u32 kprw_pid(void)
{
	u32 pid = atomic_load(&kprw_tsh->pid);
	if (unlikely(pid == 0 || kprw_tsh == &tsh_fallback)) {
		pid = kprw_getpid();
		atomic_store(&kprw_tsh->pid, pid);
	}
	return pid;
}

/* ---- thread contexts ---- */

/* go_thread says whether the thread whose FS base is base is a static Go program's:
 * no TCB pointer at %fs:0, a g at %fs:-8 whose m's g0 names the same m (read without
 * faulting: anything else is not taken for Go) */
static int go_thread(u64 base)
{
	u64 self, g = 0, m = 0, g0 = 0, m2 = 0;
	__asm__ volatile("movq %%fs:0, %0" : "=r"(self));
	return !self && kprw_read_mode(&g, (uptr)(base - 8), 8, 0) == 8 && g &&
	       kprw_read_mode(&m, (uptr)(g + KPRW_GO_G_M), 8, 0) == 8 && m &&
	       kprw_read_mode(&g0, (uptr)m, 8, 0) == 8 && g0 &&
	       kprw_read_mode(&m2, (uptr)(g0 + KPRW_GO_G_M), 8, 0) == 8 && m2 == m;
}

static u64 key_slow(void)
{
	if (kprw_rt.keymode == KPRW_KEY_PENDING) {
		u64 base = 0;
		sys2(SYS_arch_prctl, ARCH_GET_FS, (long)&base);
		if (!base)
			return 0;
		/* libc has set up TLS (every later thread has it), or Go its m.tls: a Go
		 * thread is keyed by its M, so a record needs no gettid */
		kprw_rt.keymode = go_thread(base) ? KPRW_KEY_GOM : KPRW_KEY_FS0;
	}
	return kprw_tkey();
}

/* tid_sample learns (first call) or narrows (later calls) the TCB offsets holding the
 * tid, from thread pointer k of the thread whose tid is tid. Slow path only. */
static void tid_sample(u64 k, u32 tid)
{
	u32 z = 0;
	if (!atomic_cas(&tid_lock, &z, 1))
		return; /* another thread is sampling; this sample is not needed */
	if (!tid_learned) {
		u8 buf[256];
		u32 n = 0, live = 0;
		for (int off = -TIDNEG; off < TIDSCAN; off += (int)sizeof buf) {
			long r = kprw_read_mode(buf, (uptr)(k + (u64)(s64)off), sizeof buf, 0); /* (no context yet) */
			if (r < (long)sizeof buf && off < 0)
				continue; /* (nothing mapped below the thread pointer) */
			for (long j = 0; j + 4 <= r; j += 4) {
				u32 v;
				kprw_memcpy(&v, buf + j, 4);
				if (v != tid)
					continue;
				if (n == TIDCAND) {
					live = 0; /* too many: no reliable offset */
					break;
				}
				tid_off[n] = (u32)(off + (int)j); /* (signed: below the thread pointer) */
				live |= 1u << n++;
			}
			if (r < (long)sizeof buf || n == TIDCAND)
				break;
		}
		atomic_store(&tid_live, live);
		tid_learned = 1;
	} else {
		u32 live = atomic_load(&tid_live);
		for (u32 i = 0; i < TIDCAND; i++) {
			u32 v = 0;
			if ((live & (1u << i)) &&
			    (kprw_read_mode(&v, (uptr)(k + (u64)(s64)(int)tid_off[i]), 4, 0) != 4 || v != tid))
				__atomic_fetch_and(&tid_live, ~(1u << i), __ATOMIC_RELEASE);
		}
	}
	atomic_store(&tid_lock, 0);
}

/* fresh says whether context c still belongs to the thread that claimed it. Called only
 * by the thread whose key c has, so reading its TCB cannot fault. */
static int fresh(const struct kprw_tctx *c)
{
	if (c->key & KEY_TID)
		return 1; /* the key is the tid */
	u32 live = atomic_load(&tid_live);
	if (likely(live))
		return kprw_tctx_tcb_holds(c, live);
	return kprw_gettid() == c->tid;
}

static void renew(struct kprw_tctx *c, u32 tid)
{
	c->tid = tid;
	c->busy = 0;
	c->comm_ns = 0;
	c->comm_dl = 0;
	/* a trace block names one thread: the new one takes its own in every image */
	kprw_proc_tblk_leave((u32)(c - kprw_tctx_tab));
}

static struct kprw_tctx *claim_ctx(u64 k, u32 tid, u32 pid)
{
	u32 h = kprw_tctx_hash(k);
	/* pass 0: a free slot in the window; 1: a dead thread's slot in the window;
	 * 2 and 3: the same anywhere (that thread then always takes the slow path) */
	for (u32 pass = 0; pass < 4; pass++) {
		u32 span = pass < 2 ? TCTX_WINDOW : KPRW_NTCTX;
		for (u32 i = 0; i < span; i++) {
			struct kprw_tctx *c = &kprw_tsh->c[(h + i) & (KPRW_NTCTX - 1)];
			u64 cur = atomic_load(&c->key);
			if (cur != 0) {
				if (!(pass & 1) || cur == KEY_CLAIMING ||
				    sys3(SYS_tgkill, pid, c->tid, 0) != -3 /* ESRCH */)
					continue;
				if (!atomic_cas(&c->key, &cur, 0))
					continue;
				cur = 0;
			}
			if (atomic_cas(&c->key, &cur, KEY_CLAIMING)) {
				if (pass >= 2)
					__atomic_fetch_add(&far_claims, 1, __ATOMIC_SEQ_CST);
				renew(c, tid);
				atomic_store(&c->key, k);
				return c;
			}
		}
	}
	return NULL;
}

/* kprw_tctx_slow finds or claims the context of key k (kprw_tkey) when the inlined
 * lookup did not find it in its window. */
struct kprw_tctx *kprw_tctx_slow(u64 k)
{
	if (k == 0)
		k = key_slow();
	if (unlikely(!tcb_decided))
		kprw_tcb_slot_check();
	u32 tid = kprw_gettid(), pid = kprw_pid();
	int ptr = k != 0 && !(k & KEY_TID);
	if (!ptr)
		k = KEY_TID | tid;
	u32 h = kprw_tctx_hash(k), span = atomic_load(&far_claims) ? KPRW_NTCTX : TCTX_WINDOW;
	for (u32 i = 0; i < span; i++) {
		struct kprw_tctx *c = &kprw_tsh->c[(h + i) & (KPRW_NTCTX - 1)];
		if (atomic_load(&c->key) == k) {
			if (c->tid != tid)
				renew(c, tid); /* a dead thread's TCB, reused */
			if (ptr)
				kprw_tcb_name(c);
			return c;
		}
	}
	struct kprw_tctx *c = claim_ctx(k, tid, pid);
	if (c && ptr) {
		tid_sample(k, tid);
		kprw_tcb_name(c);
	}
	return c;
}

int kprw_tctx_busy_slow(struct kprw_tctx *c)
{
	if (fresh(c))
		return 1;
	renew(c, kprw_gettid()); /* left busy by a dead thread whose TCB this one reuses */
	return 0;
}

u32 kprw_tctx_tid(struct kprw_tctx *c)
{
	if (likely(fresh(c)))
		return c->tid;
	u32 busy = c->busy;
	renew(c, kprw_gettid());
	c->busy = busy; /* the caller's own guard, taken before the check */
	if (!(c->key & KEY_TID))
		tid_sample(c->key, c->tid);
	return c->tid;
}

const char *kprw_tctx_comm(struct kprw_tctx *c, u64 now)
{
	if (unlikely(c->comm_ns == 0 || now - c->comm_ns > COMM_REFRESH_NS)) {
		char comm[16];
		kprw_memset(comm, 0, sizeof comm);
		sys2(SYS_prctl, 16 /* PR_GET_NAME */, (long)comm);
		u64 n[2], o[2];
		__builtin_memcpy(n, comm, 16);
		__builtin_memcpy(o, c->comm, 16);
		if (n[0] != o[0] || n[1] != o[1]) {
			__builtin_memcpy(c->comm, comm, 16);
			/* a trace block names its thread once: a renamed thread takes a new one
			 * in every image */
			kprw_proc_tblk_leave((u32)(c - kprw_tctx_tab));
		}
		c->comm_ns = now ? now : 1;
		c->comm_dl = c->comm_ns + COMM_REFRESH_NS;
	}
	return c->comm;
}

/* ---- single-step records ---- */

struct kprw_thread *kprw_thread_find(u32 pid, u32 tid)
{
	u32 n = atomic_load(&ts->hwm);
	for (u32 i = 0; i < n && i < KPRW_NTHREADS; i++) {
		struct kprw_thread *t = &ts->t[i];
		if (atomic_load(&t->tid) == tid && t->pid == pid)
			return t;
	}
	return NULL;
}

static struct kprw_thread *claim(u32 pid, u32 tid, int reclaim)
{
	for (u32 i = 0; i < KPRW_NTHREADS; i++) {
		struct kprw_thread *t = &ts->t[i];
		u32 cur = atomic_load(&t->tid);
		if (cur != 0) {
			/* a thread that died inside a probe (e.g. exit from a stepped syscall) */
			if (!reclaim || t->pid != pid || sys3(SYS_tgkill, pid, cur, 0) != -3 /* ESRCH */)
				continue;
			if (!atomic_cas(&t->tid, &cur, 0))
				continue;
			cur = 0;
		}
		if (atomic_cas(&t->tid, &cur, tid)) {
			t->pid = pid;
			t->nstep = 0;
			t->refs = 0;
			u32 h = atomic_load(&ts->hwm);
			while (h < i + 1 && !atomic_cas(&ts->hwm, &h, i + 1))
				;
			return t;
		}
	}
	return NULL;
}

/* kprw_thread_get finds or claims this thread's step entry; NULL if the table is full of
 * live threads (the caller then treats the hit as missed). */
struct kprw_thread *kprw_thread_get(u32 pid, u32 tid)
{
	struct kprw_thread *t = kprw_thread_find(pid, tid);
	if (!t)
		t = claim(pid, tid, 0);
	if (!t)
		t = claim(pid, tid, 1);
	if (t)
		t->refs++; /* only this thread touches its entry */
	return t;
}

/* kprw_thread_put releases a hit's hold (or, from the step trap, nothing): the entry is
 * freed when no hit holds it and no step is in flight. A hit whose handler called a
 * probed function holds it across the nested hit. */
void kprw_thread_put(struct kprw_thread *t)
{
	if (t && t->refs)
		t->refs--;
	kprw_thread_idle(t);
}

/* kprw_thread_idle frees the entry if no hit holds it and no step is in flight (the step
 * trap's end, which holds nothing). */
void kprw_thread_idle(struct kprw_thread *t)
{
	if (t && t->nstep == 0 && t->refs == 0) {
		t->pid = 0;
		atomic_store(&t->tid, 0);
	}
}
