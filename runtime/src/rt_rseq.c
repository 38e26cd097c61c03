/*
 * rt_rseq.c - per-CPU hit counting for count-only detours (src/rseq.S).
 *
 * A locked increment of a shared counter costs ~4.7 ns on some CPUs (AMD Zen 5 here)
 * against ~0.2 ns unlocked; the kernel counts kprobe hits per CPU with preemption
 * disabled instead. User space has restartable sequences for that: glibc (>= 2.35)
 * registers an rseq area for every thread, at one offset from the thread pointer for
 * all of them, and the kernel keeps its cpu_id current and aborts a critical section
 * that a preemption, migration or signal interrupts. So count-only detours, once
 * start-up has found that area and the trace file holds per-CPU shards of the image's
 * hit counters, count with kprewrite_rt_rseq_count (~1 ns) instead of lock incq:
 * exact across threads and fork children (the shards are in the MAP_SHARED trace file,
 * which keeps them on a crash; no two tasks run on one CPU at once).
 *
 * Finding the area without asking glibc (the runtime links nothing): the thread's
 * registration is unique, and rseq(2) tells, without side effects, whether an address
 * is it: unregistering it with a wrong signature fails with EPERM for the registered
 * area and EINVAL for any other address; registering it again with RSEQ_SIG fails with
 * EBUSY only when the registration used RSEQ_SIG, which the abort handler needs. The
 * candidates are the 32-byte aligned words near the thread pointer whose cpu_id_start
 * and cpu_id agree (read by process_vm_readv, which cannot fault). Nothing is found,
 * and detours keep lock incq, where no library registered rseq (musl, Go, glibc < 2.35
 * or GLIBC_TUNABLES=glibc.pthread.rseq=0), in static programs (glibc registers it after
 * this start-up), and on machines with more than KPRW_RSEQ_MAXCPU possible CPUs.
 *
 * Known limits: a thread made by raw clone without CLONE_SETTLS reads its creator's
 * area (its registration is not inherited), and a thread whose registration failed
 * reads cpu_id -1 or -2: their hits go to a shard of their own, without the kernel's
 * protection, so two of them counting the same probe at the same instant can lose one.
 */
#include "rt.h"

#define SYS_rseq 334
#define RSEQ_SIG 0x53053053u
#define RSEQ_FLAG_UNREGISTER 1
#define NOT_OUR_SIG 0x6b707277u /* "kprw": a signature no registration uses */
#define EPERM 1
#define EBUSY 16
#define ARCH_GET_FS 0x1003
#define SYS_arch_prctl 158
#define SCAN 8192 /* bytes searched on each side of the thread pointer */

struct kprw_rseq_cs {
	u32 version, flags;
	u64 start_ip, post_commit_offset, abort_ip;
};
#define HIDDEN __attribute__((visibility("hidden")))
extern HIDDEN struct kprw_rseq_cs kprw_rseq_cs;
extern HIDDEN char kprw_rseq_start[], kprw_rseq_post[], kprw_rseq_abort[];
HIDDEN u64 *kprw_shardtab[256]; /* rseq.S: a CPU's shard, by the low byte of cpu_id */

static u32 rd32(const u8 *p)
{
	u32 v;
	__builtin_memcpy(&v, p, 4);
	return v;
}

/* is_area says whether the rseq_len bytes at a are this thread's registered rseq area,
 * registered with RSEQ_SIG */
static int is_area(uptr a)
{
	static const u32 lens[] = {32, 64, 128, 256};
	for (u32 i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		if (sys4(SYS_rseq, (long)a, lens[i], RSEQ_FLAG_UNREGISTER, NOT_OUR_SIG) != -EPERM)
			continue; /* not the registered area, or not with this length */
		return sys4(SYS_rseq, (long)a, lens[i], 0, RSEQ_SIG) == -EBUSY;
	}
	return 0;
}

/* possible_cpus is 1 + the highest CPU number the kernel may ever run on, from
 * /sys/devices/system/cpu/possible ("0-3", "0,2-5"), or 0 */
static u32 possible_cpus(void)
{
	char buf[128];
	long fd = sys3(SYS_open, (long)"/sys/devices/system/cpu/possible", 0 /* O_RDONLY */, 0);
	if (fd < 0)
		return 0;
	long n = sys3(SYS_read, fd, (long)buf, sizeof buf - 1);
	sys1(SYS_close, fd);
	if (n <= 0)
		return 0;
	u32 max = 0, v = 0;
	int digits = 0;
	for (long i = 0; i < n; i++) {
		char ch = buf[i];
		if (ch >= '0' && ch <= '9') {
			v = v * 10 + (u32)(ch - '0');
			if (v > 100000)
				return 0;
			digits = 1;
		} else {
			if (digits && v > max)
				max = v;
			v = 0;
			digits = 0;
			if (ch != '-' && ch != ',' && ch != '\n')
				return 0;
		}
	}
	if (digits && v > max)
		max = v;
	return max + 1;
}

/* kprw_rseq_probe finds this thread's rseq area (kprw_rt.rseq_off, its offset from the
 * thread pointer) and the number of shards per-CPU counting needs (kprw_rt.rseq_shards:
 * one per possible CPU and one for threads without a registration); both stay 0 when
 * detours must keep lock incq. Start-up, before the trace file is opened. */
void kprw_rseq_probe(void)
{
	u64 tp = 0;
	if (sys2(SYS_arch_prctl, ARCH_GET_FS, (long)&tp) < 0 || tp < SCAN)
		return;
	u32 ncpu = possible_cpus();
	if (ncpu == 0 || ncpu > KPRW_RSEQ_MAXCPU)
		return;
	u8 buf[1024];
	for (uptr a = (tp - SCAN) & ~31ul; a < tp + SCAN; a += sizeof buf) {
		long n = kprw_read_mode(buf, a, sizeof buf, 0);
		for (long o = 0; o + 32 <= n; o += 32) {
			u32 start = rd32(buf + o), id = rd32(buf + o + 4);
			if (start != id || id >= ncpu || a + (uptr)o == tp || !is_area(a + (uptr)o))
				continue;
			kprw_rt.rseq_off = (s64)(a + (uptr)o - tp);
			kprw_rt.rseq_shards = ncpu + 1;
			return;
		}
	}
}

/* kprw_rseq_arm points the shard table at shards (kprw_rt.rseq_shards of stride bytes,
 * the last for threads without a registration), fills the critical section's
 * descriptor and publishes the area's offset: from now on count-only detours count per
 * CPU. */
void kprw_rseq_arm(u8 *shards, u64 stride)
{
	u32 ncpu = kprw_rt.rseq_shards - 1;
	for (u32 i = 0; i < 256; i++)
		kprw_shardtab[i] = (u64 *)(shards + (u64)(i < ncpu ? i : ncpu) * stride);
	kprw_rseq_cs.version = 0;
	kprw_rseq_cs.flags = 0;
	kprw_rseq_cs.start_ip = (u64)(uptr)kprw_rseq_start;
	kprw_rseq_cs.post_commit_offset = (u64)(kprw_rseq_post - kprw_rseq_start);
	kprw_rseq_cs.abort_ip = (u64)(uptr)kprw_rseq_abort;
	__atomic_store_n(&kprewrite_rt_rseq_off, (u64)kprw_rt.rseq_off, __ATOMIC_RELEASE);
}
