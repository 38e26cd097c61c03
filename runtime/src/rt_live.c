/*
 * rt_live.c - live probes: sites that hold the original instruction while their probes
 * are off, armed and disarmed while the program runs (docs/runtime.md, "Live probes").
 *
 * A point the rewriter marked KPRW_DF_LIVE (an int3 point whose every probe was
 * rewritten --disable'd) keeps its original bytes in the file. Its probes are armed
 * when some probe on it is enabled: its event switched on in the trace file's control
 * area (`kprewrite enable FILE EVENT`, soft-disabled until then) and not disabled in
 * the process (KPREWRITE_DISABLE). Start-up arms what is wanted then; an agent thread
 * waits on the trace file's ctl_gen (a futex in the shared mapping, woken by
 * `kprewrite enable|disable`) and arms and disarms the sites that changed.
 *
 * Writing code the process runs: never a writable and executable mapping. The byte is
 * written through /proc/self/mem (the kernel writes a private copy of the page, as it
 * does for a debugger's breakpoint), opened for each change and closed at once, so a
 * program that closes every descriptor it did not open never has ours reused; then
 * membarrier(PRIVATE_EXPEDITED_SYNC_CORE) makes every thread's instruction stream see
 * it. An int3 site changes one byte, which the CPU fetches whole: a thread sees the
 * original instruction or the int3, never a mix; one that trapped on an int3 just
 * removed finds its point in the tables and runs the original instruction out of line
 * as any hit does (its probes are off: nothing else happens).
 *
 * The agent is a thread of our own (clone with a stack and a thread pointer of its
 * own, every signal blocked, so no signal of the program's ever reaches it); it runs
 * runtime code only and ends with the process. A fork child has no agent: its sites
 * stay as they were at the fork.
 */
#include "rt.h"

#define SYS_pwrite64 18
#define SYS_futex 202
#define SYS_membarrier 324
#define FUTEX_WAIT 0
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE 32
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE 64
#define O_RDWR 2
#define O_CLOEXEC 02000000
#define PR_SET_NAME 15
#define SIG_SETMASK 2

#define CLONE_VM 0x100
#define CLONE_FS 0x200
#define CLONE_FILES 0x400
#define CLONE_SIGHAND 0x800
#define CLONE_THREAD 0x10000
#define CLONE_SYSVSEM 0x40000
#define CLONE_SETTLS 0x80000

long kprw_spawn_agent(unsigned long flags, void *stack_top, void *tls, void (*fn)(void));

static u8 *live_armed;  /* per point: 1 when its site holds the int3 */
static int live_sync;   /* membarrier's SYNC_CORE is registered */
static u64 agent_stack[2048] __attribute__((aligned(16))); /* 16 KiB */
static u64 agent_tcb[8] __attribute__((aligned(64)));      /* %fs:0 points here */

/* sync_cores has every thread of the process serialise its instruction stream before
 * it runs on: none keeps bytes it fetched before the last write. */
static void sync_cores(void)
{
	if (live_sync)
		sys2(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0);
}

/* poke writes one byte of code at run-time address at; 0 on success. */
static int poke(uptr at, u8 b)
{
	long fd = sys3(SYS_open, (long)"/proc/self/mem", O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return (int)fd;
	long n = sys6(SYS_pwrite64, fd, (long)&b, 1, (long)at, 0, 0);
	sys1(SYS_close, fd);
	if (n != 1)
		return n < 0 ? (int)n : -5;
	sync_cores();
	return 0;
}

/* wanted says whether point i's probes should be armed: some probe on it enabled in
 * the process whose event is not soft-disabled in the control area. */
static int wanted(const struct kprw_point *pt)
{
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 i = pt->first_probe + k;
		if (!kprw_probe_enabled(i))
			continue;
		u32 e = kprw_rt.probes[i].event;
		if (e >= kprw_rt.nevents)
			return 1;
		if (kprw_rt.ev_ctl) {
			if (!(__atomic_load_n(&kprw_rt.ev_ctl[e], __ATOMIC_ACQUIRE) & KPRW_CTL_SOFT_DISABLED))
				return 1;
		} else if (!(kprw_rt.events[e].flags & KPRW_EF_SOFT)) {
			return 1;
		}
	}
	return 0;
}

/* reconcile arms the live points that are wanted and disarms the others. */
static void reconcile(void)
{
	for (u32 i = 0; i < kprw_rt.npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (!(pt->dflags & KPRW_DF_LIVE))
			continue;
		u8 want = (u8)wanted(pt);
		if (want == live_armed[i])
			continue;
		int err = poke(RT_ADDR(pt->site), want ? 0xcc : pt->orig[0]);
		if (err) {
			kprw_puts("kprewrite: cannot write the probe site at ");
			kprw_put_hex(pt->site);
			kprw_puts(" (/proc/self/mem): it stays ");
			kprw_puts(live_armed[i] ? "armed\n" : "disarmed\n");
			continue;
		}
		__atomic_store_n(&live_armed[i], want, __ATOMIC_RELEASE);
	}
}

/* agent waits for changes of the controls and applies them to the live sites. */
static void agent(void)
{
	sys2(SYS_prctl, PR_SET_NAME, (long)"kprewrite-live");
	for (;;) {
		u32 seen = __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_ACQUIRE);
		reconcile();
		/* a change after the load makes the wait return at once (EAGAIN) */
		sys6(SYS_futex, (long)kprw_rt.ctl_gen, FUTEX_WAIT, seen, 0, 0, 0);
	}
}

/* spawn starts the agent with every signal blocked (the mask it inherits). */
static void spawn(void)
{
	unsigned long all = ~0ul, old = 0;
	agent_tcb[0] = (u64)(uptr)agent_tcb; /* the thread pointer points at itself, as a TCB's */
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, 8);
	long tid = kprw_spawn_agent(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS,
				    agent_stack + sizeof agent_stack / sizeof agent_stack[0], agent_tcb, agent);
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8);
	if (tid < 0)
		kprw_puts("kprewrite: cannot start the live-probe thread: live probes keep their start-up state\n");
}

/* kprw_live_init arms the live points wanted at start-up and, when a trace file can
 * switch them later, starts the agent. Start-up, after the SIGTRAP handler is in. */
void kprw_live_init(void)
{
	u32 n = 0;
	for (u32 i = 0; i < kprw_rt.npoints; i++)
		n += (kprw_rt.points[i].dflags & KPRW_DF_LIVE) != 0;
	if (!n || !(live_armed = kprw_mmap_anon(kprw_rt.npoints)))
		return;
	live_sync = sys2(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0) == 0;
	reconcile();
	if (kprw_rt.ctl_gen && kprw_rt.ev_ctl)
		spawn();
}
