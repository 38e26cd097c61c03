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
#include "optfast.h"

#define MAX_INTERVAL_NS (64ull * 1000000)
/* optprobe.S's TCLK_NOW multiplies in 64 bits: below the span, delta * mult < interval << 32 */
_Static_assert(MAX_INTERVAL_NS < (1ull << 26), "TCLK_NOW's product fits 64 bits");
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
	u32 ext = a;
	if (ext >= 0x80000001u) {
		__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000001u), "c"(0));
		kprw_rt.has_prefetchw = (c >> 8) & 1;
	}
	if (ext >= 0x80000007u) {
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
	if (kprw_rt.clock_mode == KPRW_CLOCK_UNSET)
		kprw_rt.clock_mode = KPRW_CLOCK_TSC; /* (no trace file says another) */
	kprw_rt.clk_tsc = kprw_rt.tsc_ok && kprw_rt.clock_mode == KPRW_CLOCK_TSC;
	kprw_fast_pick();
}

static u64 last_sys; /* the largest system-call reading returned as a timestamp */

/* at_ns is the anchor (at, an)'s extrapolation at tsc t with rate m */
static inline u64 at_ns(u64 at, u64 an, u64 m, u64 t)
{
	return an + (u64)(((unsigned __int128)(t - at) * m) >> 32);
}

/* anchor is kprw_clk's anchor as one renewal left it (anchor_load), and with tsc the
 * TSC read under the same seqlock */
struct anchor {
	u64 at, an, m, span, t;
};

static void anchor_load(struct anchor *a, int tsc)
{
	for (;;) {
		u32 s = __atomic_load_n(&clk.seq, __ATOMIC_ACQUIRE);
		a->at = __atomic_load_n(&clk.tsc, __ATOMIC_RELAXED);
		a->an = __atomic_load_n(&clk.ns, __ATOMIC_RELAXED);
		a->m = __atomic_load_n(&clk.mult, __ATOMIC_RELAXED);
		a->span = __atomic_load_n(&clk.span, __ATOMIC_RELAXED);
		a->t = tsc ? rdtsc() : 0;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(s & 1) && __atomic_load_n(&clk.seq, __ATOMIC_ACQUIRE) == s)
			return; /* (else a renewal is writing: a few stores) */
	}
}

/* stamp is a timestamp for a thread that does not renew: the current anchor's
 * extrapolation, held at the end of its span (the most any thread read from it), or,
 * before a rate is measured, the system call's reading ns, never below one returned
 * before. So a thread's timestamps never step back, neither here nor when the anchor
 * moves (renew). */
static u64 stamp(u64 ns)
{
	struct anchor a;
	anchor_load(&a, 1);
	if (a.m && a.t >= a.at)
		return at_ns(a.at, a.an, a.m, a.t - a.at < a.span ? a.t : a.at + a.span);
	u64 cur = __atomic_load_n(&last_sys, __ATOMIC_RELAXED);
	while (cur < ns && !__atomic_compare_exchange_n(&last_sys, &cur, ns, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return cur > ns ? cur : ns;
}

/* renew takes a fresh anchor (if no other thread is doing it) and returns this
 * timestamp. The anchor it publishes is the present (a TSC read just before), its time
 * the new rate's extrapolation from the system call's reading, but never below the old
 * anchor's at the end of its span nor a system-call reading returned before: the
 * timestamps a thread reads before and after the move do not step back (the rate
 * measured over the next interval takes the difference up). One window is left: a
 * system-call reading returned while the first rate is published (the first
 * millisecond of tracing) may be ahead of the extrapolations after it by the
 * extrapolation's error, and a CPU whose TSC runs behind the anchor's reads the system
 * call. */
static u64 renew(void)
{
	u64 tsc, ns = sys_pair(&tsc), ret = 0;
	u32 z = 0;
	if (!atomic_cas(&clk.lock, &z, 1))
		return stamp(ns);
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
		u64 t = mult ? rdtsc() : tsc, v = mult ? at_ns(tsc, ns, mult, t) : ns;
		u64 held = clk.mult ? at_ns(at, an, clk.mult, at + clk.span) : 0;
		u64 sys = __atomic_load_n(&last_sys, __ATOMIC_RELAXED);
		v = v > held ? v : held;
		v = v > sys ? v : sys;
		atomic_store(&clk.seq, clk.seq + 1);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		clk.tsc = t;
		clk.ns = v;
		clk.mult = mult;
		clk.interval_ns = interval;
		clk.span = mult ? (interval << 32) / mult : 0;
		atomic_store(&clk.seq, clk.seq + 1);
		ret = v;
	}
out:
	atomic_store(&clk.lock, 0);
	return ret ? ret : stamp(ns);
}

/* tclk_span is the ticks from anchor a that thread c's copy of the
 * clock may extrapolate: within the anchor's span, times before c's comm_dl (NOW_CHECK's
 * rule: a comm older than its refresh is read again) and past ts_base by 1 up to
 * 1 << FC_TS_FAST_BITS (no ext part); 0 where there is none */
static u64 tclk_span(const struct kprw_tctx *c, const struct anchor *a)
{
	u64 base = kprw_rt.ts_base, at = a->at, an = a->an, m = a->m, sp = a->span;
	if (!kprw_rt.clk_tsc || !kprw_rt.trace || !m || !sp || c->comm_dl <= an || an <= base)
		return 0;
	u64 d = c->comm_dl - an; /* below it: ticks k with k * m >> 32 < d */
	if (d < (1ull << 31)) {
		u64 k = (d << 32) / m; /* (< 2^63: no 128-bit division, which needs libgcc) */
		sp = sp < k ? sp : k;
	}
	return at_ns(at, an, m, at + sp) - base > (1ull << FC_TS_FAST_BITS) ? 0 : sp;
}

/* kprw_tclk_refresh copies the current anchor into thread c's kprw_tblk for optprobe.S's
 * TCLK_NOW (its rule in rt.h's struct kprw_tblk). The copy's times are the anchor's,
 * the same kprw_tsc_ns gives, held inside its span: a renewal by another thread moves
 * nothing it wrote. Called by c's thread only, in a C path (who, hot_record); the
 * stores' order is what a signal handler on this thread sees, so compiler barriers
 * between them are all it takes. */
void kprw_tclk_refresh(struct kprw_tctx *c)
{
	struct kprw_tblk *b = kprw_tblk(c);
	struct anchor a;
	anchor_load(&a, 0);
	u64 span = tclk_span(c, &a);
	__atomic_store_n(&b->tc_span, 0, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&b->tc_seq, b->tc_seq + 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	b->tc_tsc = a.at;
	b->tc_mult = a.m;
	b->tc_rel = a.an - kprw_rt.ts_base;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&b->tc_span, span, __ATOMIC_RELAXED);
}

/* ---- the record clocks (the kernel's trace_clock): tsc, mono, counter ----
 *
 * tsc is the extrapolation above, inlined into the record path (kprw_clock_fast's first
 * branch: the only clock whose read is not a call). mono reads CLOCK_MONOTONIC with the
 * vDSO's clock_gettime (~20-25 ns), or the system call where the vDSO has none. counter
 * reads no clock: one count in the trace file's header, taken with an atomic add by
 * every thread of every process writing the file, so records sort in one order that
 * agrees with each thread's own and with whatever ordered two threads (a lock, a
 * fork, a pipe: the later record took the larger count); it costs one locked add on a
 * line the writers share. */

/* the vDSO is built with the kernel's -mno-sse -mno-avx: like the runtime's own code it
 * leaves the vector registers alone, so a detour may call it */
typedef long (*gettime_fn)(long clk, struct k_timespec *ts);
/* (optprobe.S's MONO_NOW calls it too: kprw_vdso_gettime) */
gettime_fn vdso_gettime __asm__("kprw_vdso_gettime");
/* the trace file header's counter when it is the record clock, else NULL: taken with
 * lock xadd by kprw_clock_slow and by optprobe.S's fast path */
u64 *kprw_clk_counter;

struct elf_sym {
	u32 name;
	u8 info, other;
	u16 shndx;
	u64 value, size;
};

/* vdso_lookup finds a function the vDSO exports by its section headers (the vDSO is a
 * whole ELF file in memory): its dynamic symbol table and that table's strings. */
static void *vdso_lookup(const char *want)
{
	const u8 *b = (const u8 *)(uptr)kprw_rt.at_vdso;
	if (!b || kprw_strncmp((const char *)b, "\177ELF", 4) != 0)
		return NULL;
	u64 shoff = *(const u64 *)(b + 0x28), phoff = *(const u64 *)(b + 0x20);
	u16 shnum = *(const u16 *)(b + 0x3c), phnum = *(const u16 *)(b + 0x38);
	s64 bias = -1;
	for (u16 i = 0; i < phnum && bias < 0; i++) {
		const u8 *ph = b + phoff + i * 56ull;
		if (*(const u32 *)ph == 1 /* PT_LOAD */)
			bias = (s64)(*(const u64 *)(ph + 8) - *(const u64 *)(ph + 16)); /* p_offset - p_vaddr */
	}
	for (u16 i = 0; i < shnum && bias >= 0; i++) {
		const u8 *sh = b + shoff + i * 64ull;
		if (*(const u32 *)(sh + 4) != 11 /* SHT_DYNSYM */)
			continue;
		const struct elf_sym *sym = (const struct elf_sym *)(b + *(const u64 *)(sh + 0x18));
		u64 n = *(const u64 *)(sh + 0x20) / sizeof *sym;
		const u8 *str = b + shoff + *(const u32 *)(sh + 0x28) * 64ull;
		const char *names = (const char *)(b + *(const u64 *)(str + 0x18));
		for (u64 k = 0; k < n; k++)
			if (sym[k].shndx != 0 && (sym[k].info & 0xf) == 2 /* STT_FUNC */ &&
			    kprw_strcmp(names + sym[k].name, want) == 0)
				return (void *)(b + bias + sym[k].value);
	}
	return NULL;
}

/* kprw_clock_want is the clock a trace file this image creates takes: KPREWRITE_CLOCK
 * (tsc, mono or counter), else the rewrite's (KPRW_HF_CLOCK_*) */
u32 kprw_clock_want(const char *env, u32 hflags)
{
	if (env && kprw_strcmp(env, "tsc") == 0)
		return KPRW_CLOCK_TSC;
	if (env && kprw_strcmp(env, "mono") == 0)
		return KPRW_CLOCK_MONO;
	if (env && kprw_strcmp(env, "counter") == 0)
		return KPRW_CLOCK_COUNTER;
	if (hflags & KPRW_HF_CLOCK_COUNTER)
		return KPRW_CLOCK_COUNTER;
	return hflags & KPRW_HF_CLOCK_MONO ? KPRW_CLOCK_MONO : KPRW_CLOCK_TSC;
}

/* kprw_clock_set makes mode the record clock (the trace file's: rt_tracefile.c);
 * counter is the header's count */
void kprw_clock_set(u32 mode, u64 *counter)
{
	kprw_rt.clock_mode = mode == KPRW_CLOCK_UNSET ? KPRW_CLOCK_TSC : mode;
	kprw_clk_counter = kprw_rt.clock_mode == KPRW_CLOCK_COUNTER ? counter : NULL;
	if (kprw_rt.clock_mode == KPRW_CLOCK_MONO && !vdso_gettime && !kprw_valgrind())
		vdso_gettime = (gettime_fn)vdso_lookup("__vdso_clock_gettime");
	kprw_rt.clk_tsc = kprw_rt.tsc_ok && kprw_rt.clock_mode == KPRW_CLOCK_TSC;
	kprw_fast_pick();
}

static u64 mono_ns(void)
{
	struct k_timespec ts = {0, 0};
	if (!vdso_gettime || vdso_gettime(1 /* CLOCK_MONOTONIC */, &ts) != 0)
		return kprw_now_ns();
	return (u64)ts.sec * 1000000000ull + (u64)ts.nsec;
}

u64 kprw_clock_slow(void)
{
	if (kprw_clk_counter)
		return __atomic_add_fetch(kprw_clk_counter, 1, __ATOMIC_RELAXED);
	if (kprw_rt.clock_mode == KPRW_CLOCK_MONO)
		return mono_ns();
	return kprw_rt.tsc_ok ? renew() : kprw_now_ns();
}

u64 kprw_clock(void)
{
	return kprw_clock_fast();
}

/* kprw_clock_ns is nanoseconds whatever the record clock (C handlers' ktime_get_ns) */
u64 kprw_clock_ns(void)
{
	u64 ns;
	if (kprw_rt.clock_mode == KPRW_CLOCK_MONO)
		return mono_ns();
	if (kprw_rt.tsc_ok && kprw_tsc_ns(&ns))
		return ns;
	return kprw_rt.tsc_ok ? renew() : kprw_now_ns();
}
