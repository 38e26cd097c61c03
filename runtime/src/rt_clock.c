/*
 * rt_clock.c - trace timestamps: CLOCK_MONOTONIC nanoseconds without a system call.
 *
 * The clock_gettime system call costs ~200 ns here and the vDSO ~23 ns; a trace record
 * must cost less than either. With an invariant TSC (CPUID 0x80000007 EDX bit 8, which
 * is also what lets the kernel use the TSC as its clocksource) a timestamp is
 *     anchor_ns + ((rdtsc - anchor_tsc) * mult) >> 32
 * where (anchor_tsc, anchor_ns) is a pair taken around a clock_gettime system call (its
 * TSC is the midpoint of an rdtsc before and after) and mult is the kernel clock's
 * nanoseconds per TSC tick measured between the last two anchors. Anchors are renewed
 * after 1, 2, 4 ... up to 64 ms of TSC time, so the rate comes from an interval at
 * least half as long as the one it extrapolates over: with an anchor uncertainty of
 * ~0.1 us the error stays below ~0.5 us, under the tracer's microsecond resolution,
 * and the extrapolation never drifts: every renewal snaps back to the kernel's clock.
 * Until two anchors 1 ms apart exist (the first millisecond of tracing), and whenever
 * the TSC is not invariant or reads behind the anchor (another CPU's TSC, unsynchronised),
 * the timestamp comes from the system call. A seqlock lets any thread read the state;
 * renewals are made by whichever thread first sees it is due (a try-lock: the others keep
 * extrapolating, or use their own system call reading).
 */
#include "rt.h"

#define MAX_INTERVAL_NS (64ull * 1000000)
#define MIN_RATE_NS 1000000ull

struct kprw_clk kprw_clk; /* read inlined by kprw_clock_fast (rt.h) */
#define clk kprw_clk

static inline u64 rdtsc(void)
{
	u32 lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (u64)hi << 32 | lo;
}

/* sys_pair reads the system clock and the TSC at (nearly) the same instant: the
 * narrowest of up to 5 tries. A try whose system call was preempted or interrupted by
 * the hypervisor brackets the clock read by tens of microseconds; taken as the anchor
 * of a rate measurement it skewed the rate by ~0.1% (50 us over the next 64 ms) on a
 * loaded 2-vCPU VM. */
static u64 sys_pair(u64 *tsc)
{
	u64 best_ns = 0, best_w = ~0ull;
	for (int i = 0; i < 5; i++) {
		u64 a = rdtsc();
		u64 ns = kprw_now_ns();
		u64 b = rdtsc();
		if (b - a < best_w) {
			best_w = b - a;
			best_ns = ns;
			*tsc = a + (b - a) / 2;
		}
		if (best_w < 4000) /* ~1-2 us at 2-4 GHz: as good as a pair gets here */
			break;
	}
	return best_ns;
}

void kprw_clock_init(void)
{
	u32 a, b, c, d;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
	if (a >= 0x80000007u) {
		__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
		kprw_rt.tsc_ok = (d >> 8) & 1;
	}
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0u), "c"(0));
	if (a >= 7) {
		__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7u), "c"(0));
		kprw_rt.has_rdpid = (c >> 22) & 1 && !kprw_valgrind();
	}
	if (kprw_rt.tsc_ok) {
		clk.ns = sys_pair(&clk.tsc);
		clk.interval_ns = MIN_RATE_NS;
	}
}

/* renew takes a fresh anchor (if no other thread is doing it) and returns the system
 * call's reading as this timestamp. */
static u64 renew(void)
{
	u64 tsc, ns = sys_pair(&tsc);
	u32 z = 0;
	if (!atomic_cas(&clk.lock, &z, 1))
		return ns;
	u64 at = clk.tsc, an = clk.ns;
	if (ns > an && tsc > at) {
		u64 dn = ns - an, dt = tsc - at;
		u64 mult = clk.mult, interval = clk.interval_ns;
		if (dn < MIN_RATE_NS)
			goto out; /* too close to the anchor to measure a rate: keep it */
		if (dn < (1ull << 31))
			mult = (dn << 32) / dt; /* dn < 2^31: no overflow */
		if (mult) {
			interval = dn * 2 > MAX_INTERVAL_NS ? MAX_INTERVAL_NS : dn * 2;
			if (interval < MIN_RATE_NS)
				interval = MIN_RATE_NS;
		}
		atomic_store(&clk.seq, clk.seq + 1);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		clk.tsc = tsc;
		clk.ns = ns;
		clk.mult = mult;
		clk.interval_ns = interval;
		clk.span = mult ? (interval << 32) / mult : 0;
		atomic_store(&clk.seq, clk.seq + 1);
	}
out:
	atomic_store(&clk.lock, 0);
	return ns;
}

u64 kprw_clock_slow(void)
{
	return kprw_rt.tsc_ok ? renew() : kprw_now_ns();
}

u64 kprw_clock(void)
{
	return kprw_clock_fast();
}
