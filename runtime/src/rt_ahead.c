/*
 * rt_ahead.c - readying the record area of a trace file written directly (no
 * `kprewrite record`) off the writers' threads.
 *
 * A page of the record area must be present and writable in the file before a record
 * lands on it (rt_tracefile.c, kprw_trace_ready): MADV_POPULATE_WRITE over a 128 KiB
 * chunk. On ext4 that call costs ~50 us on a quiet machine and 2-10 ms under load (the
 * first write to each page of a hole: block reservation, the journal), and the writer
 * that crossed into a chunk used to pay it: a 2-19 ms gap at the same record of every
 * run (issue 47), ~50 ns a record on average (issue 49). Under `kprewrite record` the
 * ring's blocks are reused and present, and the recorder, another process, pays for
 * the file.
 *
 * Here a thread of our own does what the recorder does for a ring: a writer that takes
 * a block within AHEAD_WAKE chunks of the ready mark raises the wanted mark to
 * AHEAD_CHUNKS chunks past its block and wakes the thread (one futex wake per
 * ~AHEAD_WAKE chunks, ~65,000 records of 32 bytes); the thread readies chunk by chunk
 * up to the wanted mark and sleeps. A run that stays in the first half chunk (2,000
 * records) asks for nothing: the two chunks the file was opened with serve it, and a
 * short run's trace takes no more disk than before. A writer that still reaches an unready page (the
 * thread was not scheduled in time, or the disk is full) readies it itself, as before
 * (rt_ring.c), so a record never lands on an unready page.
 *
 * The thread is started by the first writer that asks for chunks, not at start-up (a
 * process with one more thread cannot unshare(CLONE_NEWUSER) or setns into a user
 * namespace, and shows it in /proc/self/task: a program that records little keeps its
 * threads its own), with every signal blocked, a stack and thread pointer of its own,
 * like the live-probe agent, rt_live.c; it runs at SCHED_BATCH, so its wake-up does
 * not preempt the writer that woke it. It ends once nothing was asked of it for
 * AHEAD_IDLE_MS, so a program is multithreaded while its trace grows fast and shortly
 * after, not for the rest of its life (a burst, then unshare: TestDirectRunUnshareUserNS);
 * the next writer that asks starts it again (ahead_wake), unless the process has put
 * itself under a seccomp filter since start-up (PR_GET_SECCOMP: a sandbox's filter may
 * refuse or punish the clone; its writers ready their pages themselves). A process that
 * started under a filter (a container's) keeps the thread once started, as before: its
 * filter allowed the first clone, and nothing says it allows a later one. A fork child
 * whose parent had started it has no such thread (fork copies the calling thread only):
 * it readies chunks itself, as before. An idle end exits with the leader's status when
 * the leader has exited (kprw_end_thread, rt_live.c); a thread kept ends when the
 * program's threads have all ended (kprw_end_if_program_gone).
 */
#include "rt.h"
#include "rt_ring.h"

#define SYS_futex 202
#define SYS_sched_setscheduler 144
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129
#define PR_SET_NAME 15
#define SCHED_BATCH 3
#define SIG_SETMASK 2
#define SYS_sched_setaffinity 203


/* kept ready past the block a writer takes: 4 MiB, two of the 2 MiB pages the file is
 * mapped on (rt_tracefile.c, huge_pages), since readying a chunk of a page not there
 * yet makes the whole page; 768 KiB left the writer to wait for pages the thread was
 * still making (issue 49: direct runs in 16 pairs in turns, lower in 12) */
#define AHEAD_CHUNKS 32
#define AHEAD_IDLE_MS 50 /* nothing asked for this long: the thread ends */
#define AHEAD_KEPT_S 2    /* a kept thread's look whether the program is gone */
#define PR_GET_SECCOMP 21
#define FUTEX_WAIT_SHARED 0 /* (the kernel's wake at a CLONE_CHILD_CLEARTID exit is not private) */


static u64 want;   /* the area should be ready below this (raised by writers) */
static u32 wakes;  /* futex: bumped by each raise of want */
static u32 owner;  /* the pid whose thread readies: 0 for none */
/* 1 while the thread runs or is being started; 0 once it ended or is ending, when the
 * writer that moves it back to 1 starts it again */
static u32 running;
/* its thread id (rt_live.c sends it no safepoint signal): set by the kernel before it
 * runs, cleared once it has ended (CLONE_CHILD_CLEARTID), when its stack is free */
u32 kprw_ahead_tid;
static u64 ahead_stack[4096] __attribute__((aligned(16))); /* 32 KiB: a SIGBUS's frame too */
static u64 ahead_tcb[8] __attribute__((aligned(64)));      /* %fs:0 points here */

/* catch_up readies the area chunk by chunk up to want (a writer waiting for the next
 * chunk gets it without waiting for the rest); it stops where the disk is full: the
 * writers that reach that far find out themselves (kprw_trace_grow). */
static void catch_up(void)
{
	u64 c = 1ull << CHUNK_SHIFT;
	for (;;) {
		u64 ready = __atomic_load_n(&kprw_trace_ready, __ATOMIC_RELAXED);
		u64 to = __atomic_load_n(&want, __ATOMIC_RELAXED);
		if (to > kprw_rt.trace_data_size) /* (0 once the file shrank: rt_tracefile.c) */
			to = kprw_rt.trace_data_size;
		if (!kprw_rt.populate || ready >= to)
			return;
		u64 next = (ready & ~(c - 1)) + c;
		if (!kprw_trace_ready_to(next < to ? next : to) || __atomic_load_n(&kprw_trace_ready, __ATOMIC_RELAXED) <= ready)
			return;
	}
}

/* asked says whether the writers want more of the area ready than is (up to its end) */
static int asked(void)
{
	u64 to = __atomic_load_n(&want, __ATOMIC_RELAXED);
	if (to > kprw_rt.trace_data_size)
		to = kprw_rt.trace_data_size;
	return __atomic_load_n(&kprw_trace_ready, __ATOMIC_RELAXED) < to;
}

/* ---- a ring that grows (kprewrite record's): its blocks readied ahead (rt_ring.c's
 * grow_ahead) ---- */
static u64 ring_want;  /* the ring's blocks below this wanted present here */
static u64 ring_ready; /* from here (the thread's own: blocks below it are present) */

static void ring_catch_up(void)
{
	u64 to = __atomic_load_n(&ring_want, __ATOMIC_RELAXED), g = __atomic_load_n(&kprw_rt.trace->ring_grown, __ATOMIC_RELAXED);
	if (ring_ready < g)
		ring_ready = g; /* (blocks in use already: a writer maps one at its take) */
	if (ring_ready < to)
		ring_ready = kprw_ring_ready(ring_ready, to);
}

/* The thread is started at the first chunks (a direct trace) or the first growth (a
 * ring) a writer asks for, not at start-up: a program that records little, or never
 * outruns its recorder, keeps its threads its own. It takes the CPUs the process had at
 * start-up (spawned from a writer, it would inherit that thread's, which a program may
 * have pinned). */
static u64 start_cpus[16]; /* the process's affinity at start-up (1024 CPUs) */
static long start_ncpus;   /* its size, or 0 */
static u32 prepared;       /* kprw_ahead_prepare ran: a writer may start the thread */
static long start_seccomp; /* PR_GET_SECCOMP at start-up: 0, or the thread is kept */
static int kprw_ahead_start(void);

/* kprw_ahead_prepare notes the start-up's affinity, for the thread a writer may start
 * later (start-up, rt_tracefile.c): 1 when the process started under a seccomp filter
 * (a container's: its thread then makes no more calls than before) */
int kprw_ahead_prepare(void)
{
	long r = sys3(SYS_sched_getaffinity, 0, sizeof start_cpus, (long)start_cpus);
	start_ncpus = r > 0 ? r : 0;
	start_seccomp = sys2(SYS_prctl, PR_GET_SECCOMP, 0);
	__atomic_store_n(&prepared, 1, __ATOMIC_RELEASE);
	return start_seccomp != 0;
}

/* kprw_ahead_pending says whether a writer may still start the thread (rt_init.c: the
 * replaced FILE.old is then left to it, or to the process's exit, not freed in the
 * program's start-up) */
int kprw_ahead_pending(void)
{
	return __atomic_load_n(&prepared, __ATOMIC_ACQUIRE) != 0;
}

/* ahead_spawn starts the thread the first time in a process image; not in a vfork
 * child, which shares the parent's memory (its cached pid is the parent's), nor in a
 * fork child of a process that had one (its writers ready their pages themselves): 1
 * when it runs or can be started again (ahead_wake) */
static int ahead_spawn(void)
{
	static u32 tried;
	if (!__atomic_load_n(&prepared, __ATOMIC_ACQUIRE))
		return 0;
	if (__atomic_load_n(&tried, __ATOMIC_ACQUIRE))
		return kprw_ahead_owned();
	if (kprw_pid_fast() != (u32)kprw_getpid())
		return 0; /* (before the try: a vfork child's would be its parent's) */
	if (__atomic_exchange_n(&tried, 1, __ATOMIC_ACQ_REL))
		return kprw_ahead_owned();
	__atomic_store_n(&running, 1, __ATOMIC_SEQ_CST);
	if (!kprw_ahead_start())
		__atomic_store_n(&running, 0, __ATOMIC_SEQ_CST);
	return kprw_ahead_owned();
}

/* ahead_wake tells the thread that want or ring_want rose: a futex wake while it runs;
 * when it ended, the writer that moves running back to 1 starts it again, once the one
 * before has left its stack. The thread marks itself ended before it looks at wakes
 * for the last time (ahead_idle), and a writer bumps wakes before it looks at running:
 * one of the two sees the other's store, so a raise is never left with no thread. */
static void ahead_wake(void)
{
	__atomic_add_fetch(&wakes, 1, __ATOMIC_SEQ_CST);
	u32 z = 0;
	if (__atomic_load_n(&running, __ATOMIC_SEQ_CST)) {
		sys6(SYS_futex, (long)&wakes, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
		return;
	}
	if (kprw_pid_fast() != (u32)kprw_getpid())
		return; /* a vfork child: its parent's writers start it */
	if (!__atomic_compare_exchange_n(&running, &z, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return; /* (another writer starts it, or it went on) */
	if (!kprw_ahead_start()) {
		/* no thread from now on: the writers ready their pages themselves */
		__atomic_store_n(&owner, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&running, 0, __ATOMIC_SEQ_CST);
	}
}

/* kprw_ahead_ring asks this process's thread for the ring's blocks below to (rt_ring.c),
 * starting it the first time; a fork child has none: its writers make their blocks
 * themselves */
void kprw_ahead_ring(u64 to)
{
	u64 cur = __atomic_load_n(&ring_want, __ATOMIC_RELAXED);
	if (cur >= to || (!kprw_ahead_owned() && !ahead_spawn()))
		return;
	while (cur < to && !__atomic_compare_exchange_n(&ring_want, &cur, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	if (cur >= to)
		return;
	ahead_wake();
}

/* ahead_idle is the thread's end after AHEAD_IDLE_MS with nothing asked (seen: wakes
 * when it last looked): it marks itself ended, then ends unless a writer asked
 * meanwhile (it returns then, to go on) */
static void ahead_idle(u32 seen)
{
	if (start_seccomp) {
		kprw_end_if_program_gone(); /* (kept: see above) */
		return;
	}
	__atomic_store_n(&running, 0, __ATOMIC_SEQ_CST);
	u32 z = 0;
	if (__atomic_load_n(&wakes, __ATOMIC_SEQ_CST) != seen &&
	    __atomic_compare_exchange_n(&running, &z, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return;
	kprw_end_thread(); /* (a writer that starts the next one waits for kprw_ahead_tid's clear) */
}

static void ahead_thread(void)
{
	struct { long s, ns; } idle = {0, AHEAD_IDLE_MS * 1000000l}, kept = {AHEAD_KEPT_S, 0};
	long param = 0;
	sys3(SYS_sched_setscheduler, 0, SCHED_BATCH, (long)&param);
	sys2(SYS_prctl, PR_SET_NAME, (long)"kprw-ahead");
	if (start_ncpus)
		sys3(SYS_sched_setaffinity, 0, start_ncpus, (long)start_cpus);
	/* a SIGBUS reaches the runtime's handler (rt_fault.c): this thread reads the trace
	 * file's mapping, and a file that shrank makes that a SIGBUS, which blocked would be
	 * forced on the process with its default action */
	unsigned long bus = SIGBIT(SIGBUS);
	sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&bus, 0, 8);
	kprw_trace_release_old(); /* (its blocks freed here, not in the program's start-up) */
	for (;;) {
		u32 seen = __atomic_load_n(&wakes, __ATOMIC_ACQUIRE);
		if (kprw_rt.ring_queue)
			ring_catch_up();
		else {
			catch_up();
			/* what the writers left behind (rt_tracefile.c), step by step while
			 * they ask for nothing more: a burst that outran it is caught up with
			 * when it pauses or ends */
			while (!asked() && kprw_trace_retire())
				;
		}
		long r = sys6(SYS_futex, (long)&wakes, FUTEX_WAIT_PRIVATE, seen, (long)(start_seccomp ? &kept : &idle), 0, 0);
		if (r == -110 /* ETIMEDOUT */)
			ahead_idle(seen);
	}
}

/* kprw_ahead_start starts the thread (a writer that asks for chunks or a ring's growth
 * first, or again after it ended), once the one before has left its stack: 1 when it
 * runs. Without it the writers ready their chunks themselves. */
static int kprw_ahead_start(void)
{
	struct { long s, ns; } ms = {0, 1000000};
	for (u32 t; (t = __atomic_load_n(&kprw_ahead_tid, __ATOMIC_ACQUIRE)) != 0;)
		sys6(SYS_futex, (long)&kprw_ahead_tid, FUTEX_WAIT_SHARED, t, (long)&ms, 0, 0);
	if (!start_seccomp && sys2(SYS_prctl, PR_GET_SECCOMP, 0) != 0)
		return 0; /* (sandboxed since start-up) */
	unsigned long all = ~0ul, old = 0;
	ahead_tcb[0] = (u64)(uptr)ahead_tcb; /* the thread pointer points at itself, as a TCB's */
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, 8);
	long tid = kprw_spawn_agent(KPRW_CLONE_RT_THREAD | KPRW_CLONE_TID,
				    ahead_stack + ARRAY_SIZE(ahead_stack), ahead_tcb, ahead_thread, &kprw_ahead_tid);
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8);
	if (tid <= 0)
		return 0;
	__atomic_store_n(&owner, kprw_getpid(), __ATOMIC_RELEASE);
	return 1;
}

/* kprw_ahead_owned says whether this process's thread readies the area (not in a fork
 * child, whose parent's thread did not come along) */
int kprw_ahead_owned(void)
{
	u32 me = __atomic_load_n(&owner, __ATOMIC_ACQUIRE);
	return me && me == kprw_pid_fast();
}

/* kprw_ahead is called by a writer that took a block ending at end (rt_ring.c): within
 * AHEAD_WAKE chunks of the ready mark, it asks for AHEAD_CHUNKS chunks past end, from
 * this process's thread, or, with none (a fork child), readies the next chunk itself.
 * The thread is started only when a writer comes within a chunk of the ready mark: a
 * run whose records fit in the chunks the file was opened with (~4,000 records of 32
 * bytes) stays single-threaded. */
void kprw_ahead(u64 end)
{
	if (!kprw_rt.populate)
		return; /* (pages fault in as written: nothing to ready, the mark stays) */
	u64 c = 1ull << CHUNK_SHIFT, ready = __atomic_load_n(&kprw_trace_ready, __ATOMIC_RELAXED);
	if (end + AHEAD_WAKE * c <= ready)
		return;
	if (end < c / 2)
		return; /* the chunks the file was opened with serve a short run (disk it needs) */
	if (!kprw_ahead_owned() && (end + c <= ready || !ahead_spawn())) {
		if (end + c > ready)
			kprw_trace_grow(end);
		return;
	}
	u64 to = ((end + c - 1) & ~(c - 1)) + AHEAD_CHUNKS * c, cur = __atomic_load_n(&want, __ATOMIC_RELAXED);
	while (cur < to && !__atomic_compare_exchange_n(&want, &cur, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	if (cur >= to)
		return; /* another writer asked for as much already */
	ahead_wake();
}
