/*
 * rt_thread.c - per-thread state without TLS.
 *
 * A thread needs state only while it is "inside" a probe: its handlers run (the
 * reentrancy guard) or a single-step is in flight. So an entry is claimed at a hit and
 * released when both end; the table holds as many entries as threads are inside probes
 * at once, and lookups scan only up to the high-water mark.
 *
 * The key is (pid, tid) from getpid/gettid rather than %fs:0: the thread pointer is 0
 * before libc sets up TLS (static binaries run code before that), and libc reuses a
 * dead thread's TCB for a new thread, so a fs->tid cache would lie. The trace record
 * needs the tid anyway. The pid is cached in a MADV_WIPEONFORK page, so it costs one
 * system call only after a fork; the table lives in the same mapping, so a fork child
 * starts with no stale entries (vfork children share it, as they share everything).
 */
#include "rt.h"

#define KPRW_NTHREADS 256

struct kprw_tstate {
	u32 pid;     /* cached getpid(); 0 in a fresh fork child */
	u32 hwm;     /* entries [0, hwm) may be in use */
	struct kprw_thread t[KPRW_NTHREADS];
};

static struct kprw_tstate *ts;
static struct kprw_tstate ts_fallback; /* if mmap/madvise fail (no WIPEONFORK) */

int kprw_thread_init(void)
{
	void *p = kprw_mmap_anon(sizeof(struct kprw_tstate));
	if (p && sys3(SYS_madvise, (long)p, (sizeof(struct kprw_tstate) + 4095) & ~4095ul,
		      18 /* MADV_WIPEONFORK */) == 0) {
		ts = p;
		return 0;
	}
	ts = &ts_fallback;
	return -1;
}

u32 kprw_pid(void)
{
	u32 pid = atomic_load(&ts->pid);
	if (unlikely(pid == 0 || ts == &ts_fallback)) {
		pid = kprw_getpid();
		atomic_store(&ts->pid, pid);
	}
	return pid;
}

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
			t->busy = 0;
			t->nstep = 0;
			u32 h = atomic_load(&ts->hwm);
			while (h < i + 1 && !atomic_cas(&ts->hwm, &h, i + 1))
				;
			return t;
		}
	}
	return NULL;
}

/* kprw_thread_get finds or claims this thread's entry; NULL if the table is full of
 * live threads (the caller then treats the hit as missed). */
struct kprw_thread *kprw_thread_get(u32 pid, u32 tid)
{
	struct kprw_thread *t = kprw_thread_find(pid, tid);
	if (t)
		return t;
	t = claim(pid, tid, 0);
	if (!t)
		t = claim(pid, tid, 1);
	return t;
}

void kprw_thread_put(struct kprw_thread *t)
{
	if (t && t->busy == 0 && t->nstep == 0) {
		t->pid = 0;
		atomic_store(&t->tid, 0);
	}
}
