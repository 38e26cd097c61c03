/*
 * rt_live.c - live probes: sites that hold the original instruction while their probes
 * are off, armed and disarmed while the program runs (docs/runtime.md, "Live probes").
 *
 * A point the rewriter marked KPRW_DF_LIVE (every probe on it rewritten --disable'd)
 * keeps its original bytes in the file. Its probes are armed
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
 * A jump-optimized site is written in the kernel's text_poke_bp order: an int3 on its
 * first byte, synchronised; the rest of the jmp, synchronised; the jmp's first byte,
 * synchronised. A thread that meets the int3 meanwhile is sent to the detour
 * (rt_trap.c), which runs the probes or, its gate closed, the DCR's copy. Putting the
 * original bytes back is the same order, and nothing can be inside the jmp. Arming has
 * one more step, before the rest of the jmp is written: no thread may be paused inside
 * the DCR (between two of its instructions), where it would resume in the middle of
 * the jmp. Every thread that may be there (running, or stopped at an address inside:
 * /proc/self/task/TID/syscall) gets a safepoint signal (SIGTRAP from our agent, with a
 * cookie) whose handler moves it to the same instruction of the detour's DCR copy
 * (its relocation keeps every instruction's offset: the rewriter checks); a thread
 * blocked in a system call is elsewhere and left alone. When some thread does not
 * answer in time, the site stays an int3 into the detour (armed, not yet optimized, as
 * the kernel's kprobes wait for their optimizer) and the agent tries again later.
 *
 * The agent is a thread of our own (clone with a stack and a thread pointer of its
 * own, every signal blocked, so no signal of the program's ever reaches it); it runs
 * runtime code only and ends with the process. A fork copies only the calling thread:
 * the signal guard's fork wrapper starts the child's own agent (kprw_live_child; a
 * fork by raw system call or from a library's GOT leaves the child's sites as they
 * were).
 */
#include "rt.h"

#define SYS_pwrite64 18
#define SYS_futex 202
#define SYS_membarrier 324
#define FUTEX_WAIT 0
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE 32
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE 64
#define O_RDWR 2
#define O_RDONLY_ 0
#define O_DIRECTORY_ 0200000
#define O_CLOEXEC 02000000
#define PR_SET_NAME 15
#define SIG_SETMASK 2
#define AGENT_IDLE_S 2 /* seconds idle before the agent looks whether it is alone */



#define LIVE_OFF 0
#define LIVE_INT3 1 /* the int3 at the site: an int3 point armed, or a jump point pending */
#define LIVE_JUMP 2 /* a jump point's jmp */

#define SYS_getdents64 217
#define SYS_exit 60
#define SYS_rt_tgsigqueueinfo 297
#define SI_QUEUE (-1)
#define ESRCH_ 3
#define SIGTRAP_ 5
#define FUTEX_WAKE 1

static u8 *live_armed;  /* per point: LIVE_* */
static int live_sync;   /* membarrier's SYNC_CORE is registered */
static int live_pending; /* jump points left at LIVE_INT3 for want of a safepoint */
static int agent_started; /* the live-probe thread runs */
/* cold: every live point is as the file holds it (off; jmps as written; gates closed)
 * and nothing can want one until the controls change: no live point starts wanted
 * (KPRW_HAS_LIVE_ON), this process made its image's control area (its words the
 * defaults; an area an earlier process of the run made may hold events switched on),
 * the trace file has no control or live frame, optimization and the switch of every
 * probe are on. Then reconcile skips the pass over the points (python3.11 with every
 * function prepared: 13,418, ~2 ms of its start-up) until ctl_gen differs from
 * cold_gen (its value when the area was made), and for good from then on. */
static int cold;
static u32 cold_gen;
static u8 free_state[KPRW_MAX_FREE]; /* per free live point: KPRW_LS_* of its last reconcile */
static u32 agent_done;    /* futex: the ctl_gen its last reconcile started from */
#define FUTEX_PRIVATE 128
static u64 agent_stack[2048] __attribute__((aligned(16))); /* 16 KiB */
static u64 agent_tcb[8] __attribute__((aligned(64)));      /* %fs:0 points here */

/* the safepoint of a jump point being armed (arming: its index, ~0 for none) */
static u32 arming = ~0u;
/* sp_state: the current safepoint round (high half) and the threads that answered it
 * (low half, the futex the agent waits on). One word, so that an answer counts for its
 * own round only: a handler of a round that timed out, preempted between its check of
 * the round and its count, would otherwise count for the next round, which then wrote
 * the jmp while a thread it had signalled still stood inside the DCR. */
static u64 sp_state;
static u64 sp_cookie; /* si_value of our safepoint signals: the cookie ^ the round */
#define DRAINING (~1u) /* arming: a free live point being drained (drained) */
static uptr drain_lo[2], drain_hi[2]; /* its int3 and its slot */
static u32 sp_busy;   /* threads of a draining round found at the point */
/* the point the agent is at in its passes (~0: none): the only one whose bytes may be
 * between two states, or differ from what live_armed says, when a fork copies the
 * process (the agent writes the bytes, then the state: resync) */
static u32 changing = ~0u;

/* sync_cores has every thread of the process serialise its instruction stream before
 * it runs on: none keeps bytes it fetched before the last write. */
static void sync_cores(void)
{
	if (live_sync)
		sys2(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0);
}

/* pokes writes n bytes of code at run-time address at, then synchronises; 0 on success. */
static int pokes(uptr at, const u8 *b, long n)
{
	long fd = sys3(SYS_open, (long)"/proc/self/mem", O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return (int)fd;
	long w = sys6(SYS_pwrite64, fd, (long)b, n, (long)at, 0, 0);
	sys1(SYS_close, fd);
	if (w != n)
		return w < 0 ? (int)w : -5;
	sync_cores();
	return 0;
}

static int poke(uptr at, u8 b) { return pokes(at, &b, 1); }

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
		if ((kprw_rt.events[e].flags & KPRW_EF_SPARE) && kprw_live_wants(i))
			return 1; /* a prepared site with events added (rt_livedef.c) */
		if (kprw_rt.ev_ctl) {
			if (!(__atomic_load_n(&kprw_rt.ev_ctl[e], __ATOMIC_ACQUIRE) & KPRW_CTL_SOFT_DISABLED))
				return 1;
		} else if (!(kprw_rt.events[e].flags & KPRW_EF_SOFT)) {
			return 1;
		}
	}
	return 0;
}

/* cat copies s to d and returns the end of d (a NUL there). */
static char *cat(char *d, const char *s)
{
	while ((*d = *s++) != 0)
		d++;
	return d;
}

/* number parses a decimal thread id. */
static long number(const char *s)
{
	long n = 0;
	while (*s >= '0' && *s <= '9')
		n = n * 10 + (*s++ - '0');
	return n;
}

/* read_small reads a small /proc file into buf (NUL-terminated); its length or -1. */
static long read_small(const char *path, char *buf, long size)
{
	long fd = sys3(SYS_open, (long)path, O_RDONLY_ | O_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	long n = sys3(SYS_read, fd, (long)buf, size - 1);
	sys1(SYS_close, fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

static int saved_inside(uptr sp, uptr lo, uptr hi);

/* hexword parses the 0x-prefixed hex number at s */
static u64 hexword(const char *s)
{
	u64 v = 0;
	if (s[0] == '0' && s[1] == 'x')
		for (s += 2; (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'); s++)
			v = v * 16 + (u64)(*s <= '9' ? *s - '0' : *s - 'a' + 10);
	return v;
}

/* may_be_inside says whether thread tid may be paused inside [lo, hi) or [lo2, hi2):
 * it is running (or runnable), or stopped outside a system call at an address there (a
 * page fault), or blocked in a system call (at its syscall instruction, which no DCR
 * holds) with a context saved on its stack that is: a signal interrupted it inside, and
 * its handler made the call (a C handler's, or the runtime's own for a probe the
 * handler hit). */
static int may_be_inside(const char *tid, uptr lo, uptr hi, uptr lo2, uptr hi2)
{
	char path[64], buf[256];
	cat(cat(cat(path, "/proc/self/task/"), tid), "/syscall");
	if (read_small(path, buf, sizeof buf) <= 0)
		return 0; /* gone */
	if (buf[0] == 'r')
		return 1; /* "running" */
	const char *pc = buf, *sp = buf; /* "NR args... sp pc" or "-1 sp pc": the last words */
	for (const char *q = buf; *q; q++)
		if (*q == ' ' && q[1] && q[1] != '\n') {
			sp = pc;
			pc = q + 1;
		}
	u64 ip = hexword(pc);
	if (buf[0] == '-')
		return (ip >= lo && ip < hi) || (ip >= lo2 && ip < hi2);
	return saved_inside((uptr)hexword(sp), lo, hi) || saved_inside((uptr)hexword(sp), lo2, hi2);
}

/* runtime_thread says whether thread tid is a thread of a runtime (this image's or
 * another's: its live-probe thread, the thread that readies the trace file): it runs no
 * code of the program's and blocks every signal, so it is never inside a DCR and would
 * never answer (rt_ahead.c) */
static int runtime_thread(const char *tid)
{
	char path[64], comm[32];
	if (number(tid) == kprw_ahead_tid)
		return 1;
	cat(cat(cat(path, "/proc/self/task/"), tid), "/comm");
	if (read_small(path, comm, sizeof comm) <= 0)
		return 0;
	return kprw_strcmp(comm, "kprewrite-live\n") == 0 || kprw_strcmp(comm, "kprw-ahead\n") == 0;
}

/* exited says whether thread tid has ended but is still listed (a zombie: the thread
 * group's leader stays after its own exit until the last thread's); *status is then its
 * exit status (field 52, as waitpid reports it) */
static int exited(const char *tid, int *status)
{
	char path[64], buf[1024];
	cat(cat(cat(path, "/proc/self/task/"), tid), "/stat");
	if (read_small(path, buf, sizeof buf) <= 0)
		return 1; /* gone meanwhile */
	const char *q = kprw_stat_comm_end(buf);
	if (!q || q[1] != ' ' || (q[2] != 'Z' && q[2] != 'X'))
		return 0;
	u64 st;
	kprw_stat_field(buf, 52, &st);
	*status = (int)st;
	return 1;
}

/* kprw_end_if_program_gone ends the calling runtime thread when every thread of the program has ended (each with
 * SYS_exit, the leader a zombie) and only runtime threads are left, which block every
 * signal: they must then end too, or the process would never exit and a SIGTERM would
 * stay pending forever (rt_ahead.c, agent below). It ends the calling runtime thread
 * then, with the leader's exit code: this kernel reports the last thread's as the
 * process's (6.x), which the program's last thread would have been. */
void kprw_end_if_program_gone(void)
{
	long fd = sys3(SYS_open, (long)"/proc/self/task", O_RDONLY_ | O_DIRECTORY_ | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	int gone = 1, status = 0;
	char buf[2048];
	for (long n; gone && (n = sys3(SYS_getdents64, fd, (long)buf, sizeof buf)) > 0;)
		for (long off = 0; gone && off < n;) {
			const char *name = buf + off + 19; /* d_ino, d_off, d_reclen, d_type */
			off += *(const u16 *)(buf + off + 16);
			if (name[0] >= '0' && name[0] <= '9' && !runtime_thread(name) && !exited(name, &status))
				gone = 0;
		}
	sys1(SYS_close, fd);
	if (gone)
		sys1(SYS_exit, (status >> 8) & 0xff); /* (this thread only) */
}

/* kprw_end_thread ends the calling runtime thread (rt_ahead.c's, idle) while the program
 * may still run: with the leader's exit status when the leader has exited (a zombie: the
 * program's threads end with SYS_exit, and this thread may end last, whose status this
 * kernel reports for the process), else 0 (a thread that is not the last) */
void kprw_end_thread(void)
{
	char pid[24];
	int status = 0;
	if (!exited(kprw_dec(pid, (unsigned long)sys0(SYS_getpid)), &status))
		status = 0;
	sys1(SYS_exit, (status >> 8) & 0xff); /* (this thread only) */
}

/* signal_threads sends the safepoint signal to every other thread that may be inside
 * [lo, hi) or [lo2, hi2) (a DCR: after its first byte); it returns how many were sent
 * one, or ~0u when one could not be sent (a thread that ended meanwhile excepted). */
static u32 signal_threads(uptr lo, uptr hi, uptr lo2, uptr hi2)
{
	long me = sys0(SYS_gettid), pid = sys0(SYS_getpid);
	long fd = sys3(SYS_open, (long)"/proc/self/task", O_RDONLY_ | O_DIRECTORY_ | O_CLOEXEC, 0);
	if (fd < 0)
		return ~0u;
	u32 sent = 0, failed = 0;
	char buf[2048];
	for (;;) {
		long n = sys3(SYS_getdents64, fd, (long)buf, sizeof buf);
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			const char *name = buf + off + 19; /* d_ino, d_off, d_reclen, d_type */
			off += *(const u16 *)(buf + off + 16);
			if (name[0] < '0' || name[0] > '9' || number(name) == me || !may_be_inside(name, lo, hi, lo2, hi2) ||
			    runtime_thread(name))
				continue;
			struct k_siginfo info = {0}; /* SI_QUEUE's: pid, uid, then the value */
			info.si_signo = SIGTRAP_;
			info.si_code = SI_QUEUE;
			u64 *rt = (u64 *)&info.si_addr;
			rt[0] = (u64)(u32)pid | (u64)sys0(SYS_getuid) << 32;
			rt[1] = sp_cookie ^ (__atomic_load_n(&sp_state, __ATOMIC_RELAXED) >> 32);
			long err = sys4(SYS_rt_tgsigqueueinfo, pid, number(name), SIGTRAP_, (long)&info);
			if (err == 0)
				sent++;
			else if (err != -ESRCH_)
				failed = 1; /* a thread that may be inside cannot be moved */
		}
	}
	sys1(SYS_close, fd);
	return failed ? ~0u : sent;
}

/* safepoint has no thread stay paused inside point i's DCR: each that may be is moved
 * to the DCR's copy by its signal handler; 1 when every one answered in time. */
static int answered(u32 sent);

/* new_round starts a safepoint round: its number in sp_state's high half, no answer yet */
static void new_round(void)
{
	u64 round = (__atomic_load_n(&sp_state, __ATOMIC_RELAXED) >> 32) + 1;
	if ((u32)round == 0)
		round = 1; /* (0 is no round) */
	__atomic_store_n(&sp_state, round << 32, __ATOMIC_RELEASE);
}

static int safepoint(u32 i)
{
	new_round();
	__atomic_store_n(&arming, i, __ATOMIC_RELEASE);
	const struct kprw_point *pt = &kprw_rt.points[i];
	u32 sent = signal_threads(RT_ADDR(pt->site) + 1, RT_ADDR(pt->site) + pt->insn_len, 0, 0);
	return answered(sent);
}

/* answered waits for the answers of a safepoint round to sent threads (at most ~100
 * ms), then ends the round: 1 when every one answered. */
static int answered(u32 sent)
{
	u32 *acks = (u32 *)&sp_state; /* the low half (little-endian) */
	for (int tries = 0; sent != ~0u && tries < 50; tries++) { /* at most ~100 ms */
		u32 got = __atomic_load_n(acks, __ATOMIC_ACQUIRE);
		if (got >= sent)
			break;
		struct { long s, ns; } ts = {0, 2000000};
		sys6(SYS_futex, (long)acks, FUTEX_WAIT, got, (long)&ts, 0, 0);
	}
	int ok = sent != ~0u && __atomic_load_n(acks, __ATOMIC_ACQUIRE) >= sent;
	__atomic_store_n(&arming, ~0u, __ATOMIC_RELEASE);
	return ok;
}

/* int3_frame says whether the signal frame whose saved ip is at ipw is a SIGTRAP of an
 * int3 (SI_KERNEL, or our safepoint signal into which an int3's trap was merged): its
 * siginfo follows the ucontext, 17 words after the ip. Our SIGTRAP handler runs with
 * SA_NODEFER, so a safepoint signal can interrupt it before it has sent a thread that hit
 * the site's int3 (ip = site + 1) to the detour: that context is not paused inside the
 * DCR, and moving it to the copy's second byte would leave the int3's handler with an ip
 * it does not know. */
static int int3_frame(uptr ipw)
{
	int w[4];
	struct k_iovec l = {w, sizeof w}, r = {(void *)(ipw + 17 * 8), sizeof w};
	if (sys6(SYS_process_vm_readv, sys0(SYS_getpid), (long)&l, 1, (long)&r, 1, 0) != (long)sizeof w)
		return 0;
	return w[0] == SIGTRAP_ && (w[2] == 0x80 || w[2] == SI_QUEUE); /* signo, errno, code */
}

/* copy_off is where the instruction at offset o of point pt's DCR starts in the DCR's
 * copy: o, moved by the point's DCR map (kprw_point.aux: a jcc rel8 before it copied
 * as a rel32) */
static uptr copy_off(const struct kprw_point *pt, uptr o)
{
	u64 m = pt->aux;
	uptr d = 0;
	for (int k = 0; k < 4 && (u8)m && (u8)m <= o; k++, m >>= 16)
		d = (u8)(m >> 8);
	return o + d;
}

/* scan_saved finds the contexts saved on a thread's stack above sp whose ip is inside
 * [lo, hi): a signal that interrupted the thread there and whose handler still runs (the
 * kernel restores that ip when the handler returns). Such a context is a struct
 * k_ucontext of the signal frame: found by its ip with cs 0x33 and ss 0x2b beside it and
 * flags' always-set bit 1, in the 64 KiB above sp (read with process_vm_readv: the stack
 * may end sooner). With copy, each is moved to the same instruction of copy (copy_off
 * with pt; the thread's own stack: only the thread itself calls it so); without, the
 * count found is returned. */
static int scan_saved(uptr sp, uptr lo, uptr hi, uptr copy, const struct kprw_point *pt)
{
	enum { CHUNK = 64, OVERLAP = 4 }; /* words */
	u64 w[CHUNK];
	int found = 0;
	for (uptr at = sp & ~7ul; at < (sp & ~7ul) + 65536; at += (CHUNK - OVERLAP) * 8) {
		struct k_iovec l = {w, sizeof w}, r = {(void *)at, sizeof w};
		if (sys6(SYS_process_vm_readv, sys0(SYS_getpid), (long)&l, 1, (long)&r, 1, 0) != (long)sizeof w)
			return found;
		for (int k = 1; k + 3 < CHUNK; k++) { /* w[k] the ip: sp before it, flags and cs|gs|fs|ss after */
			if (w[k] < lo || w[k] >= hi || !(w[k + 1] & 2) || (u16)w[k + 2] != 0x33 || (u16)(w[k + 2] >> 48) != 0x2b)
				continue;
			found++;
			if (!copy)
				continue;
			if (w[k] == lo && int3_frame(at + (uptr)k * 8))
				continue; /* an int3 hit at the site, its handler interrupted: it goes on there */
			u64 fixed = copy + copy_off(pt, w[k] - (lo - 1));
			*(volatile u64 *)(at + (uptr)k * 8) = fixed;
			w[k] = fixed;
		}
	}
	return found;
}

static int saved_inside(uptr sp, uptr lo, uptr hi) { return sp && scan_saved(sp, lo, hi, 0, NULL) > 0; }

/* fix_saved moves the contexts saved on the calling thread's stack above sp that are
 * paused inside point pt's DCR (after its first byte) to the DCR's copy */
static void fix_saved(uptr sp, const struct kprw_point *pt)
{
	uptr site = RT_ADDR(pt->site);
	scan_saved(sp, site + 1, site + pt->insn_len, RT_ADDR(pt->slot) + kprw_rt.opt_tmpl_len, pt);
}

/* draining_here says whether the thread of context uc is at the free live point being
 * drained: its int3 or its slot, or a context saved on its stack there (its SIGTRAP
 * handler, or a signal handler that interrupted the slot's copy, still runs) */
static int draining_here(const struct k_ucontext *uc)
{
	uptr ip = uc->mc.ip;
	for (int r = 0; r < 2; r++)
		if ((ip >= drain_lo[r] && ip < drain_hi[r]) || saved_inside(uc->mc.sp, drain_lo[r], drain_hi[r]))
			return 1;
	return 0;
}

/* kprw_live_safepoint runs a safepoint signal of our agent (a SIGTRAP with si_code
 * SI_QUEUE, our pid and cookie): a thread paused inside the DCR being armed goes on at
 * the same instruction of its copy. 1 when the signal was ours. */
int kprw_live_safepoint(const struct k_siginfo *si, struct k_ucontext *uc)
{
	const u8 *b = (const u8 *)si;
	u64 round = *(const u64 *)(b + 24) ^ sp_cookie, now = __atomic_load_n(&sp_state, __ATOMIC_ACQUIRE) >> 32;
	if (!live_armed || *(const u32 *)(b + 16) != kprw_pid() || round == 0 || round > now)
		return 0;
	kprw_trap_lost_int3(uc); /* an int3 whose trap the kernel merged into this signal */
	u32 i = __atomic_load_n(&arming, __ATOMIC_ACQUIRE);
	if (i == DRAINING && draining_here(uc))
		__atomic_add_fetch(&sp_busy, 1, __ATOMIC_RELAXED);
	if (i < kprw_rt.npoints) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		uptr site = RT_ADDR(pt->site);
		if (uc->mc.ip > site && uc->mc.ip < site + pt->insn_len)
			uc->mc.ip = RT_ADDR(pt->slot) + kprw_rt.opt_tmpl_len + copy_off(pt, uc->mc.ip - site);
		fix_saved(uc->mc.sp, pt);
	}
	/* counted only while its round is the current one (a late answer of a round that
	 * timed out does not count for the next) */
	u64 s = __atomic_load_n(&sp_state, __ATOMIC_ACQUIRE);
	while (s >> 32 == round)
		if (__atomic_compare_exchange_n(&sp_state, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			sys6(SYS_futex, (long)&sp_state, FUTEX_WAKE, 1, 0, 0, 0);
			break;
		}
	return 1;
}

/* site_len is how many of jump point pt's bytes a live change writes: the DCR, to its
 * 16th byte (a longer DCR's tail keeps the original's, as the kernel's optprobes leave
 * it: no thread enters the DCR but at its site, and one paused there was moved out) */
static u32 site_len(const struct kprw_point *pt)
{
	return pt->insn_len < sizeof pt->orig ? pt->insn_len : sizeof pt->orig;
}

/* jump_bytes is what jump point pt's first n bytes are when optimized: the jmp to its
 * detour, int3s after it */
static void jump_bytes(const struct kprw_point *pt, u8 *jmp, u32 n)
{
	u32 rel = (u32)(pt->slot - pt->site - 5);
	jmp[0] = 0xe9;
	kprw_memcpy(jmp + 1, &rel, 4);
	for (u32 k = 5; k < n; k++)
		jmp[k] = 0xcc;
}

/* set_jump brings jump point i from state from to want (text_poke_bp's order); it
 * returns the state reached. */
static u8 set_jump(u32 i, u8 from, u8 want)
{
	const struct kprw_point *pt = &kprw_rt.points[i];
	uptr site = RT_ADDR(pt->site);
	u32 n = site_len(pt); /* the bytes written: the jmp, int3s after it (jump_bytes) */
	if (from != LIVE_INT3 && poke(site, 0xcc)) /* first: the int3 on the first byte */
		return from;
	if (want == LIVE_INT3) { /* un-optimized (optimize off): int3, then the original tail */
		if (from == LIVE_JUMP && pokes(site + 1, pt->orig + 1, n - 1))
			return LIVE_JUMP; /* (an int3 before a jmp's tail: still the detour's) */
		return LIVE_INT3;
	}
	if (want == LIVE_OFF) {
		if (from == LIVE_JUMP && pokes(site + 1, pt->orig + 1, n - 1))
			return LIVE_INT3;
		return poke(site, pt->orig[0]) ? LIVE_INT3 : LIVE_OFF;
	}
	if (!safepoint(i))
		return LIVE_INT3; /* armed through the int3; optimized later */
	u8 jmp[16];
	jump_bytes(pt, jmp, n);
	if (pokes(site + 1, jmp + 1, n - 1))
		return LIVE_INT3;
	if (poke(site, 0xe9)) { /* LIVE_INT3 is an int3 before the original tail */
		pokes(site + 1, pt->orig + 1, n - 1);
		return LIVE_INT3;
	}
	return LIVE_JUMP;
}


/* same says whether the n bytes at a and b are equal */
static int same(const void *a, const void *b, u32 n)
{
	const u8 *x = a, *y = b;
	for (u32 k = 0; k < n; k++)
		if (x[k] != y[k])
			return 0;
	return 1;
}

/* say_free says on stderr, once a point, that the point the tool made at want's site
 * is refused */
static void say_free(const struct kprw_point *want, const char *what)
{
	static const struct kprw_point *said;
	if (said == want)
		return;
	said = want;
	kprw_puts("kprewrite: the live event at ");
	kprw_put_hex(want->site);
	kprw_puts(" ");
	kprw_puts(what);
	kprw_puts(" (its point does not check against the program): not armed\n");
}

/*
 * Free live points (kprw_header.nfree): events at sites no rewrite prepared. The
 * rewrite leaves nfree table entries after the sorted points, unplaced (site 0), each
 * with one placeholder kprobe and a slot of KPRW_FREE_SLOT bytes of int3s in the text.
 * `kprewrite probe` runs the rewriter's analysis on the binary, makes the point (an
 * int3 boosted, single-stepped or emulated, as `check` decides) and its slot's bytes
 * for a free entry's slot address, and hands both over in the live frame
 * (KPRW_LE_POINT). The live-probe thread writes the slot, then the table entry, through
 * /proc/self/mem (the table is read-only: the kernel copies its page, as for the
 * code), then the int3: one byte, so no text_poke_bp tail. Removing the event puts the
 * original byte back and leaves the entry placed, so that a thread that trapped just
 * before finds its point; an entry is placed elsewhere only once a safepoint round
 * (drained) found no thread at its int3, in its slot or in a handler interrupted there.
 */

/* kprw_free_find is the free live point placed at link-time address vaddr (NULL: none):
 * the trap path's search after the sorted points' */
const struct kprw_point *kprw_free_find(u64 vaddr)
{
	for (u32 k = 0; k < kprw_rt.nfree; k++) {
		const struct kprw_point *pt = &kprw_rt.points[kprw_rt.npoints + k];
		if (vaddr && __atomic_load_n(&pt->site, __ATOMIC_ACQUIRE) == vaddr)
			return pt;
	}
	return NULL;
}

/* drained says, after a safepoint round, whether no thread is at free point pt: its
 * int3 (ip site or site + 1), its slot, or a handler that interrupted either */
static int drained(const struct kprw_point *pt)
{
	uptr s = RT_ADDR(pt->site), sl = RT_ADDR(pt->slot);
	drain_lo[0] = s, drain_hi[0] = s + 2, drain_lo[1] = sl, drain_hi[1] = sl + KPRW_FREE_SLOT;
	__atomic_store_n(&sp_busy, 0, __ATOMIC_RELAXED);
	new_round();
	__atomic_store_n(&arming, DRAINING, __ATOMIC_RELEASE);
	u32 sent = signal_threads(drain_lo[0], drain_hi[0], drain_lo[1], drain_hi[1]);
	return answered(sent) && __atomic_load_n(&sp_busy, __ATOMIC_ACQUIRE) == 0;
}

/* unplace takes free point j off its site (site 0: the trap path no longer finds it),
 * once no thread is at its int3 or in its slot: 1 when done. Its byte is the original
 * already (disarmed). */
static int unplace(u32 j)
{
	const struct kprw_point *cur = &kprw_rt.points[kprw_rt.npoints + j];
	struct kprw_point off = *cur;
	off.site = 0;
	return drained(cur) && pokes((uptr)cur, (const u8 *)&off, sizeof off) == 0;
}

/* site_taken says whether another point than free point k is at site: 0 none, 1 a
 * point of the rewrite's or a free point wanted there (the tool's frame is wrong), 2 a
 * free point another event left placed there (an entry point where a return event goes
 * now, or the reverse), still armed or with a thread at it: tried again later. Such a
 * point is taken off the site once it is idle. */
static int site_taken(u32 k, u64 site)
{
	for (u32 i = 0; i < kprw_rt.npoints + kprw_rt.nfree; i++) {
		if (kprw_rt.points[i].site != site || i == kprw_rt.npoints + k)
			continue;
		if (i < kprw_rt.npoints)
			return 1;
		const u8 *slot;
		const struct kprw_point *w = kprw_livedef_free(i - kprw_rt.npoints, &slot);
		if (w && w->site == site)
			return 1;
		if (__atomic_load_n(&live_armed[i], __ATOMIC_ACQUIRE) != LIVE_OFF || !unplace(i - kprw_rt.npoints))
			return 2;
	}
	return 0;
}

/* free_ok checks the point the tool made for free point k (want): the entry's slot
 * and probe, an int3 kind, a copy that fits the slot, and a site that holds the
 * point's original bytes and no other point: 1 when it does, 0 when it does not, 2
 * when another free point must leave the site first (site_taken) */
static int free_ok(u32 k, const struct kprw_point *want)
{
	const struct kprw_point *cur = &kprw_rt.points[kprw_rt.npoints + k];
	const u32 pf = KPRW_PF_CALL | KPRW_PF_BRANCH | KPRW_PF_ADDR32 | KPRW_PF_PUSHF | KPRW_PF_NOBOOST;
	if (want->slot != cur->slot || want->first_probe != cur->first_probe || want->nprobes != 1 || !want->site ||
	    want->xmode < KPRW_X_SSTEP || want->xmode > KPRW_X_EMULATE || (want->pflags & ~pf) || want->dflags ||
	    !want->insn_len || want->insn_len > 15 || want->slot_len + 5 > KPRW_FREE_SLOT)
		return 0;
	int taken = site_taken(k, want->site);
	if (taken)
		return taken == 2 ? 2 : 0;
	u8 code[16]; /* (read by system call: a frame's site may be anywhere) */
	return kprw_read_mode(code, RT_ADDR(want->site), want->insn_len, 0) == want->insn_len &&
	       same(code, want->orig, want->insn_len);
}

/* place writes free point k as want (its slot's bytes at slot), once no thread is at
 * its old place: 1 when it is placed */
static int place(u32 k, const struct kprw_point *want, const u8 *slot)
{
	const struct kprw_point *cur = &kprw_rt.points[kprw_rt.npoints + k];
	if (cur->site && !drained(cur))
		return 0;
	if (pokes(RT_ADDR(cur->slot), slot, KPRW_FREE_SLOT))
		return 0;
	return pokes((uptr)cur, (const u8 *)want, sizeof *want) == 0;
}

/* reconcile_free places the free live points the newest live frame wants where it
 * wants them and arms those with events (int3s); 1 when one waits for a safepoint */
static int reconcile_free(void)
{
	int pending = 0;
	for (u32 k = 0; k < kprw_rt.nfree; k++) {
		u32 i = kprw_rt.npoints + k;
		const struct kprw_point *cur = &kprw_rt.points[i];
		__atomic_store_n(&changing, i, __ATOMIC_RELAXED);
		const u8 *slot = NULL, *other;
		const struct kprw_point *want = kprw_usersite_free(k, &slot); /* a C handler's (rt_usersite.c) */
		int user = want != NULL;
		if (!user)
			want = kprw_livedef_free(k, &slot);
		else if (kprw_livedef_free(k, &other))
			say_free(kprw_livedef_free(k, &other), "is on a free point a C handler's register_kprobe() holds");
		u8 now = live_armed[i];
		if (want && !same(cur, want, sizeof *want)) { /* to be placed, or elsewhere */
			if (now != LIVE_OFF && poke(RT_ADDR(cur->site), cur->orig[0]) == 0)
				now = LIVE_OFF;
			__atomic_store_n(&live_armed[i], now, __ATOMIC_RELEASE);
			int ok = now == LIVE_OFF ? free_ok(k, want) : 0;
			free_state[k] = ok == 2 ? KPRW_LS_PENDING : KPRW_LS_REFUSED;
			if (ok == 2) {
				pending = 1; /* another free point leaves the site first */
				continue;
			}
			if (!ok) {
				say_free(want, "cannot be placed");
				continue;
			}
			if (!place(k, want, slot)) {
				free_state[k] = KPRW_LS_PENDING;
				pending = 1; /* a thread is at its old place: tried again later */
				continue;
			}
		}
		if (want && !user)
			kprw_livedef_placed(k); /* its events are recorded from now on */
		u8 on = want && kprw_probe_enabled(cur->first_probe) && (!user || kprw_spare_user(cur->first_probe))
				? LIVE_INT3
				: LIVE_OFF;
		if (on && now == LIVE_OFF && kprw_live_records() < 0) {
			free_state[k] = KPRW_LS_OFF;
			continue; /* no records can be written: it stays off */
		}
		if (on != now && cur->site && poke(RT_ADDR(cur->site), on ? 0xcc : cur->orig[0]) == 0)
			now = on;
		__atomic_store_n(&live_armed[i], now, __ATOMIC_RELEASE);
		free_state[k] = now == LIVE_INT3 ? KPRW_LS_INT3 : KPRW_LS_OFF;
	}
	return pending;
}

/* gated_live (kprw_live_gated) says whether pt is a jump-optimized point that cannot
 * change live (its DCR's copy moves instructions) whose probes are of live events: its
 * gate is switched instead of its bytes, by reconcile only (start-up's arm_detours leaves
 * it: the probes' state of hundreds of such prepared sites stays untouched) */
int kprw_live_gated(const struct kprw_point *pt)
{
	if (pt->xmode != KPRW_X_OPTIMIZED || (pt->pflags & KPRW_PF_COUNT))
		return 0;
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 e = kprw_rt.probes[pt->first_probe + k].event;
		if (e >= kprw_rt.nevents || !(kprw_rt.events[e].flags & KPRW_EF_LIVE))
			return 0;
	}
	return 1;
}

/* kprw_live_only says whether every probe of the image is of a live event, so that
 * nothing records until one is switched on (start-up then leaves the record area and
 * the fetch plans for kprw_live_records). */
int kprw_live_only(void)
{
	static int only = -1; /* (the tables do not change: one pass over them) */
	if (only >= 0)
		return only;
	only = kprw_rt.nprobes && !(kprw_rt.has & KPRW_HAS_USER);
	for (u32 i = 0; only && !kprw_rt.tables_late && i < kprw_rt.nprobes; i++) { /* (idle: every one) */
		u32 e = kprw_rt.probes[i].event;
		if (e >= kprw_rt.nevents || !(kprw_rt.events[e].flags & KPRW_EF_LIVE))
			only = 0;
	}
	return only;
}

/* noopt says whether `kprewrite optimize FILE off` is in effect */
static int noopt(void)
{
	return kprw_rt.trace && (__atomic_load_n(&kprw_rt.trace->flags, __ATOMIC_ACQUIRE) & KPRW_TRACE_NOOPT);
}

/* reconcile arms the live points that are wanted and disarms the others, as jmps or,
 * with optimization off, as int3s; and un-optimizes or re-optimizes the other jump
 * points that can change. */
static void reconcile(u32 gen)
{
	int pending = 0, off = noopt();
	if (cold && gen != cold_gen)
		cold = 0;
	for (u32 i = 0; !cold && i < kprw_rt.npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		__atomic_store_n(&changing, i, __ATOMIC_RELAXED);
		if (pt->dflags & KPRW_DF_REOPT) { /* armed unless every probe is off: its kind follows the switch */
			u8 want = (kprw_rt.disable_all & KPRW_DISARM) ? LIVE_OFF : off ? LIVE_INT3 : LIVE_JUMP;
			u8 now = live_armed[i];
			if (now != want)
				now = set_jump(i, now, want);
			pending |= now != want;
			__atomic_store_n(&live_armed[i], now, __ATOMIC_RELEASE);
			continue;
		}
		if (!(pt->dflags & KPRW_DF_LIVE)) {
			if (kprw_live_gated(pt)) { /* the jmp stays: the detour's gate follows */
				u32 open = (u32)wanted(pt) && kprw_live_records() == 0;
				u32 *gate = &kprw_rt.state[pt->first_probe].gate;
				if (__atomic_load_n(gate, __ATOMIC_RELAXED) != open) /* (no write: no page for a closed one) */
					__atomic_store_n(gate, open, __ATOMIC_RELEASE);
			}
			continue;
		}
		u8 now = live_armed[i], want;
		int w = wanted(pt); /* (once: it reads the probes', state's and events' tables) */
		if (w && now == LIVE_OFF && kprw_live_records() < 0) {
			continue; /* no records can be written: it stays off */
		} else if (pt->xmode == KPRW_X_OPTIMIZED) {
			want = w ? (off ? LIVE_INT3 : LIVE_JUMP) : LIVE_OFF;
			if (want != LIVE_OFF) /* (start-up leaves a live point's gate closed) */
				__atomic_store_n(&kprw_rt.state[pt->first_probe].gate, 1, __ATOMIC_RELEASE);
			if (want != now)
				now = set_jump(i, now, want);
		} else {
			want = w ? LIVE_INT3 : LIVE_OFF;
			if (want != now && poke(RT_ADDR(pt->site), want ? 0xcc : pt->orig[0]) == 0)
				now = want;
		}
		if (now != want && !(pt->xmode == KPRW_X_OPTIMIZED && now == LIVE_INT3 && want == LIVE_JUMP)) {
			kprw_puts("kprewrite: cannot write the probe site at ");
			kprw_put_hex(pt->site);
			kprw_puts(" (/proc/self/mem)\n");
		}
		pending |= now != want;
		__atomic_store_n(&live_armed[i], now, __ATOMIC_RELEASE);
	}
	if (kprw_rt.nfree)
		pending |= reconcile_free();
	__atomic_store_n(&changing, ~0u, __ATOMIC_RELAXED);
	live_pending = pending;
}

/* site_state is what point i is now, for the live events on it (KPRW_LS_*) */
static u64 site_state(u32 i)
{
	const struct kprw_point *pt = &kprw_rt.points[i];
	if (i >= kprw_rt.npoints)
		return free_state[i - kprw_rt.npoints];
	if (kprw_rt.disable_all & KPRW_DISARM)
		return KPRW_LS_OFF;
	if (!(pt->dflags & (KPRW_DF_LIVE | KPRW_DF_REOPT))) /* (its bytes never change: a gate, or an int3) */
		return pt->xmode == KPRW_X_OPTIMIZED ? KPRW_LS_JUMP : KPRW_LS_INT3;
	u8 a = live_armed[i];
	return a == LIVE_JUMP ? KPRW_LS_JUMP : a == LIVE_INT3 ? KPRW_LS_INT3 : KPRW_LS_OFF;
}

/* report_states writes each live event's site state into the trace file (the words
 * `kprewrite list TARGET` reads): after each reconcile (no pass over the points of an
 * image no event was added to: python3.11 with every function prepared has 13,418) */
static void report_states(void)
{
	if (!kprw_rt.live_lists || !kprw_livedef_any())
		return;
	for (u32 i = 0; i < kprw_rt.npoints + kprw_rt.nfree; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		for (u32 k = 0; k < pt->nprobes; k++) {
			u32 pi = pt->first_probe + k, e = kprw_rt.probes[pi].event;
			if (e < kprw_rt.nevents && (kprw_rt.events[e].flags & KPRW_EF_SPARE))
				kprw_livedef_state(pi, site_state(i));
		}
	}
}

/* publish_done tells `kprewrite probe`, through the trace file, that this program has
 * applied every change up to generation seen: live_done becomes seen + 1 unless another
 * program's agent published a later one */
static void publish_done(u32 seen)
{
	if (!kprw_rt.trace)
		return;
	u32 *d = &kprw_rt.trace->live_done, cur = __atomic_load_n(d, __ATOMIC_RELAXED);
	while ((cur == 0 || (int)(seen + 1 - cur) > 0) &&
	       !__atomic_compare_exchange_n(d, &cur, seen + 1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

/* agent waits for changes of the controls and applies them to the live sites. */
static void agent(void)
{
	sys2(SYS_prctl, PR_SET_NAME, (long)"kprewrite-live");
	kprw_trace_release_old(); /* (its blocks freed here, not in the program's start-up) */
	for (;;) {
		u32 seen = __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_ACQUIRE);
		/* cold, nothing to do, and an idle image's tables are checked when first needed:
		 * a thread that works while the program starts makes each of the program's
		 * copy-on-write faults a TLB shootdown of this thread's CPU (~3% of python3.11's
		 * start-up) */
		if (!(cold && seen == cold_gen) && kprw_tables_check()) {
			kprw_livedef_sync(); /* events added or removed (kprewrite probe) */
			kprw_disarm_sync();  /* the switch of every probe */
			reconcile(seen);
			report_states();
		}
		__atomic_store_n(&agent_done, seen, __ATOMIC_RELEASE); /* (kprw_live_kick waits) */
		publish_done(seen);
		sys6(SYS_futex, (long)&agent_done, FUTEX_WAKE | FUTEX_PRIVATE, 0x7fffffff, 0, 0, 0);
		/* a change after the load makes the wait return at once (EAGAIN); a jump
		 * point left pending is tried again after 50 ms; idle, it looks every
		 * AGENT_IDLE_S seconds whether the program's threads all ended, and waits on
		 * without a pass over the points while nothing changed */
		struct { long s, ns; } ts = {0, 50000000}, idle = {AGENT_IDLE_S, 0};
		for (;;) {
			long r = sys6(SYS_futex, (long)kprw_rt.ctl_gen, FUTEX_WAIT, seen, live_pending ? (long)&ts : (long)&idle, 0, 0);
			if (r != -110 /* ETIMEDOUT */ || live_pending)
				break;
			kprw_end_if_program_gone();
			if (__atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_ACQUIRE) != seen)
				break;
		}
	}
}

/* kprw_live_running says whether this process's live-probe thread was started */
int kprw_live_running(void)
{
	return agent_started;
}

/* kprw_live_kick has the live-probe thread reconcile now (a C handler registered or
 * unregistered a probe on a prepared site): ctl_gen bumped and woken, which the other
 * programs writing into the trace file see as a change of nothing. -1: no thread. */
int kprw_live_kick(void)
{
	if (!live_armed || !agent_started || !kprw_rt.ctl_gen)
		return -1;
	u32 g = __atomic_add_fetch(kprw_rt.ctl_gen, 1, __ATOMIC_RELEASE);
	kprw_sw_bump(); /* (every ctl_gen change is one: the lines look at ctl_seen again) */
	sys6(SYS_futex, (long)kprw_rt.ctl_gen, FUTEX_WAKE, 0x7fffffff, 0, 0, 0);
	/* register_kprobe() returns with the site armed, as the kernel's does: wait for a
	 * reconcile that started after the bump (at most ~2 s: a thread that never answers
	 * the safepoint leaves a jump site an int3 into the detour, armed all the same) */
	for (int tries = 0; tries < 20; tries++) {
		u32 d = __atomic_load_n(&agent_done, __ATOMIC_ACQUIRE);
		if ((int)(d - g) >= 0)
			return 0;
		struct { long s, ns; } ts = {0, 100000000};
		sys6(SYS_futex, (long)&agent_done, FUTEX_WAIT | FUTEX_PRIVATE, d, (long)&ts, 0, 0);
	}
	return 0;
}

/* spawn starts the agent with every signal blocked (the mask it inherits). */
static void spawn(void)
{
	unsigned long all = ~0ul, old = 0;
	agent_tcb[0] = (u64)(uptr)agent_tcb; /* the thread pointer points at itself, as a TCB's */
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, 8);
	long tid = kprw_spawn_agent(KPRW_CLONE_RT_THREAD,
				    agent_stack + sizeof agent_stack / sizeof agent_stack[0], agent_tcb, agent, 0);
	sys4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8);
	if (tid < 0)
		kprw_puts("kprewrite: cannot start the live-probe thread: live probes keep their start-up state\n");
	else
		agent_started = 1;
}

/* resync makes the state of the point the parent's agent was changing when the fork
 * copied the process (changing) what the child's bytes say. The agent writes a site's
 * bytes, then notes its state: a copy taken between the two would have the child's
 * agent go on from a state the bytes do not have (an original first byte written
 * before a jmp's tail: garbage code). Bytes between two states (an int3 before either
 * tail) become an int3 before the original tail, which every step starts from; the
 * child runs one thread, in the fork wrapper, so any write is safe. */
static void resync(void)
{
	u32 i = changing;
	changing = ~0u;
	if (i >= kprw_rt.npoints + kprw_rt.nfree || !kprw_rt.points[i].site)
		return;
	const struct kprw_point *pt = &kprw_rt.points[i];
	if (i < kprw_rt.npoints && !(pt->dflags & (KPRW_DF_LIVE | KPRW_DF_REOPT)))
		return; /* (its bytes never change) */
	const u8 *at = (const u8 *)RT_ADDR(pt->site);
	if (i >= kprw_rt.npoints || pt->xmode != KPRW_X_OPTIMIZED) { /* an int3 point: one byte */
		live_armed[i] = at[0] == pt->orig[0] ? LIVE_OFF : LIVE_INT3;
		return;
	}
	u32 n = site_len(pt);
	u8 jmp[16];
	jump_bytes(pt, jmp, n);
	if (same(at, pt->orig, n))
		live_armed[i] = LIVE_OFF;
	else if (same(at, jmp, n))
		live_armed[i] = LIVE_JUMP;
	else if ((at[0] == 0xcc || poke((uptr)at, 0xcc) == 0) && pokes((uptr)at + 1, pt->orig + 1, n - 1) == 0)
		live_armed[i] = LIVE_INT3;
}

/* kprw_live_child starts the agent of a fork child (the signal guard's fork wrapper):
 * the parent's did not come along. */
void kprw_live_child(void)
{
	if (!live_armed)
		return;
	resync();
	__atomic_store_n(&arming, ~0u, __ATOMIC_RELAXED);
	if (kprw_rt.ctl_gen && kprw_rt.ev_ctl)
		spawn();
}

/* has_spare says whether point pt carries a prepared site's placeholder (rewrite
 * --prepare): events may be added there, whatever its kind */
static int has_spare(const struct kprw_point *pt)
{
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 e = kprw_rt.probes[pt->first_probe + k].event;
		if (e < kprw_rt.nevents && (kprw_rt.events[e].flags & KPRW_EF_SPARE))
			return 1;
	}
	return 0;
}

/* starts_cold says whether nothing can want a live point yet (see cold) */
static int starts_cold(void)
{
	if ((kprw_rt.has & KPRW_HAS_LIVE_ON) || (kprw_rt.disable_all & KPRW_DISARM))
		return 0;
	const struct kprw_trace_hdr *h = kprw_rt.trace;
	return !h || (kprw_rt.ctl_fresh && __atomic_load_n(&h->ctl_last, __ATOMIC_ACQUIRE) == 0 &&
		      !(__atomic_load_n(&h->flags, __ATOMIC_ACQUIRE) & (KPRW_TRACE_NOOPT | KPRW_TRACE_DISARMED)));
}

/* kprw_live_init arms the live points wanted at start-up and, when a trace file can
 * switch them later, starts the agent. A prepared site that is not live (another event
 * at it keeps it armed) needs the agent too: it applies the frames of the events added
 * there. Start-up, after the SIGTRAP handler is in. */
void kprw_live_init(void)
{
	u32 n = kprw_rt.nfree || kprw_rt.tables_late; /* (idle: every point is live) */
	for (u32 i = 0; !n && i < kprw_rt.npoints; i++) { /* (one is enough: the table stays unread) */
		const struct kprw_point *pt = &kprw_rt.points[i];
		n += (pt->dflags & KPRW_DF_LIVE) || kprw_live_gated(pt) || has_spare(pt);
	}
	if (!n || !(live_armed = kprw_mmap_anon((u64)kprw_rt.npoints + kprw_rt.nfree)))
		return;
	for (u32 i = 0; !kprw_rt.tables_late && i < kprw_rt.npoints; i++) /* (idle: none) */
		if (kprw_rt.points[i].dflags & KPRW_DF_REOPT)
			live_armed[i] = LIVE_JUMP; /* (the file holds its jmp) */
	live_sync = sys2(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0) == 0;
	u64 tsc;
	__asm__ volatile("rdtsc; shl $32, %%rdx; or %%rdx, %%rax" : "=a"(tsc) : : "rdx");
	sp_cookie = tsc ^ (u64)(uptr)&sp_cookie ^ (u64)sys0(SYS_getpid) << 40;
	u32 seen = kprw_rt.ctl_gen ? __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_ACQUIRE) : 0;
	cold = starts_cold();
	cold_gen = kprw_rt.trace ? kprw_rt.ctl_fresh_gen : seen; /* (a switch since makes ctl_gen differ) */
	int agent = kprw_rt.ctl_gen && kprw_rt.ev_ctl;
	if ((!cold || !agent) && !kprw_tables_check())
		return; /* (an idle image's tables, read by this pass or by no thread later) */
	kprw_livedef_init();
	kprw_livedef_sync(); /* events the trace file holds already */
	reconcile(seen);
	report_states();
	if (agent) {
		/* what start-up applied, published now: a live_done of 0 tells `kprewrite probe`
		 * that no program will apply its change, so a change made before the agent's
		 * first pass (a loaded machine) returned before it was applied */
		publish_done(seen);
		spawn();
	}
}
