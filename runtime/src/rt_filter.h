/* rt_filter.h - event filters (rt_filter.c), included by rt.h */
#ifndef KPRW_RT_FILTER_H
#define KPRW_RT_FILTER_H
#ifndef KPRW_RT_H
#error "included by rt.h"
#endif

/* kprw_fenv is what a filter sees at a hit: the record's data and the values of the
 * common fields (cpu and comm only when the filter's needs say so) */
struct kprw_fenv {
	const u8 *data;
	u32 dlen, tid, cpu, type;
	u64 ip, ret_ip, bias;
	u64 ts;              /* the hit's time (common_timestamp: hist triggers) */
	const char *comm;
	const struct pt_regs *regs; /* the hit's registers (stacktrace keys), NULL: none */
	int fast;            /* kprw_fast_ok for the stack walk's reads */
	struct kprw_synthq *synthq; /* synthetic events' records kept until the hit's own is
				       written (rt_dispatch.c), NULL: written at once */
};
#define KPRW_FNEED_CPU 1
#define KPRW_FNEED_COMM 2
#define KPRW_FNEED_TS 4 /* the hit's time (common_timestamp): only the runtime sets it */
/* kprw_le_read reads a little-endian field of size bytes (1..8) at p, zero-extended
 * (filters and histograms read fetched fields with it) */
static inline __attribute__((always_inline)) u64 kprw_le_read(const u8 *p, u32 size)
{
	u64 x = 0;
	switch (size) {
	case 8: __builtin_memcpy(&x, p, 8); break;
	case 4: { u32 y; __builtin_memcpy(&y, p, 4); x = y; break; }
	case 2: { u16 y; __builtin_memcpy(&y, p, 2); x = y; break; }
	case 1: x = p[0]; break;
	default:
		for (u32 k = size; k-- > 0;)
			x = x << 8 | p[k];
	}
	return x;
}
/* a filter decoded at start-up (kprw_filter_compile) */
struct kprw_fpred {
	u8 fn, src, op, size, sgn, biased, not, match, when, pad8;
	u16 target, off, plen;
	u64 val, val2, mask;
	const u8 *pat;
};
struct kprw_fprog {
	u32 n, needs;
	struct kprw_fpred p[];
};
u32 kprw_filter_size(const u8 *prog, u32 plen);
int kprw_filter_compile(const u8 *prog, u32 plen, struct kprw_fprog *out);
int kprw_filter_match(const struct kprw_fprog *f, const struct kprw_fenv *e);

#endif
