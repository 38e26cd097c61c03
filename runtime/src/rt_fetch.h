/* rt_fetch.h - fetch programs (rt_fetch.c), included by rt.h */
#ifndef KPRW_RT_FETCH_H
#define KPRW_RT_FETCH_H
#ifndef KPRW_RT_H
#error "included by rt.h"
#endif

u32 kprw_fetch_edata_size(const u8 *prog, u32 plen);
long kprw_fetch_fixed_size(const u8 *prog, u32 plen); /* -1: not fixed */
int kprw_fetch_none(const u8 *prog, u32 plen);
int kprw_fetch_reads_xmm(const u8 *prog, u32 plen);
#define KPRW_PLAN_MAX 16
/* mem: 1 a read, 2 a plain load (StMemSafe); reg: index in pt_regs */
struct kprw_fplan_op {
	u8 mem, reg, size;
	u8 slot; /* a kprw_hot line's copy: the register's place in optprobe.S's fast frame,
		    0 where that frame does not hold it (rt_dispatch.c's fast_slot) */
	int off;
	u32 dest;
};
struct kprw_fplan {
	u32 n, fixed;
	struct kprw_fplan_op op[KPRW_PLAN_MAX];
};
int kprw_fetch_plan(const u8 *prog, u32 plen, struct kprw_fplan *pl);
void kprw_fetch_plan_run(const struct kprw_fplan *pl, const struct pt_regs *regs, u8 *out, int fast);

/* kprw_load_safe reads n bytes at src with a plain load: memory that cannot fault
 * (StMemSafe), a Go function's g through R14. The Go runtime clears R14 where it calls
 * Go code on a thread without a g (needm, a signal on a thread Go did not create), so
 * an address outside the user range reads as zeros. */
static inline __attribute__((always_inline)) void kprw_load_safe(u8 *d, uptr src, u32 n)
{
	if (src >= KPRW_FAST_LO && src + n >= src && src + n <= KPRW_FAST_HI)
		kprw_memcpy(d, (const void *)src, n);
	else
		kprw_memset(d, 0, n);
}

/* kprw_fetch_plan_into runs plan pl into out, which must be zero already (a record's
 * data: the record area is never written twice): what a read cannot give stays zero,
 * as copy_from_user leaves it. kprw_fetch_plan_run is this after clearing out. */
static inline __attribute__((always_inline)) void kprw_fetch_ops_into(u32 n, const struct kprw_fplan_op *ops,
									const struct pt_regs *regs, u8 *out, int fast)
{
	const u64 *r = (const u64 *)regs;
	for (u32 i = 0; i < n; i++) {
		const struct kprw_fplan_op *op = &ops[i];
		u8 *d = out + op->dest;
		u64 v = r[op->reg];
		if (op->mem == 2) { /* memory that cannot fault (StMemSafe) */
			kprw_load_safe(d, (uptr)(v + (u64)(s64)op->off), op->size);
			continue;
		}
		if (op->mem) {
			uptr src = (uptr)(v + (u64)(s64)op->off);
			/* kprw_read_mode's fast branch, without the call */
			if (likely(fast && src >= KPRW_FAST_LO && src + op->size >= src && src + op->size <= KPRW_FAST_HI))
				kprw_copy_nofault(d, (const void *)src, op->size);
			else
				kprw_read_mode(d, src, op->size, fast);
			continue;
		}
		switch (op->size) {
		case 8: __builtin_memcpy(d, &v, 8); break;
		case 4: __builtin_memcpy(d, &v, 4); break;
		case 2: __builtin_memcpy(d, &v, 2); break;
		default: d[0] = (u8)v; break;
		}
	}
}
static inline __attribute__((always_inline)) void kprw_fetch_plan_into(const struct kprw_fplan *pl,
									 const struct pt_regs *regs, u8 *out, int fast)
{
	kprw_fetch_ops_into(pl->n, pl->op, regs, out, fast);
}

int kprw_fetch_entry(const u8 *prog, u32 plen, const struct pt_regs *regs, u8 *edata, u32 elen, int fast);
long kprw_fetch_run(const u8 *prog, u32 plen, const struct pt_regs *regs, const u8 *edata, u32 elen,
		    const char *comm, u8 *out, u32 cap, int fast);

#endif
