/*
 * rt_istep.c - single-steps that end on an int3 (KPRW_PF_INT3STEP), as the kernel has
 * single-stepped kprobes since 5.15: the slot is [copy][int3]; after the pre handlers the
 * thread resumes at the slot with no trap flag, and the int3's trap (ip = slot + slot_len
 * + 1, si_code SI_KERNEL) ends the step: ip goes back to site + insn_len and the post
 * handlers run. The trap is found by address alone, so nothing per thread is kept across
 * the step: a signal handler that runs between the copy and the int3, a longjmp out of
 * one, a thread or fork child born from a copied syscall, all end their step the same way.
 * This file keeps the int3-step points sorted by the address of their slot's int3.
 */
#include "rt.h"

static u32 *ends; /* indices of the KPRW_PF_INT3STEP points, by slot + slot_len */
static u32 nends;

static u64 end_of(u32 i)
{
	const struct kprw_point *pt = &kprw_rt.points[i];
	return pt->slot + pt->slot_len;
}

/* kprw_istep_init validates the int3-step points and sorts them (start-up). */
void kprw_istep_init(void)
{
	u32 n = 0;
	for (u32 i = 0; i < kprw_rt.npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (!(pt->pflags & KPRW_PF_INT3STEP))
			continue;
		if (pt->xmode != KPRW_X_SSTEP || !pt->slot || !pt->slot_len ||
		    (pt->pflags & (KPRW_PF_BRANCH | KPRW_PF_CALL | KPRW_PF_PUSHF | KPRW_PF_INNER)))
			kprw_fatal("inconsistent int3-step probepoint at", RT_ADDR(pt->site));
		n++;
	}
	if (!n)
		return;
	ends = kprw_mmap_anon(((u64)n * 4 + 4095) & ~4095ull);
	if (!ends)
		kprw_fatal("cannot allocate the int3-step index, points:", n);
	for (u32 i = 0; i < kprw_rt.npoints; i++)
		if (kprw_rt.points[i].pflags & KPRW_PF_INT3STEP)
			ends[nends++] = i;
	/* slots are usually laid out in site order, so this is one pass; shell sort else */
	for (u32 gap = n / 2; gap > 0; gap /= 2)
		for (u32 i = gap; i < n; i++) {
			u32 v = ends[i];
			u64 k = end_of(v);
			u32 j = i;
			for (; j >= gap && end_of(ends[j - gap]) > k; j -= gap)
				ends[j] = ends[j - gap];
			ends[j] = v;
		}
}

/* kprw_istep_find returns the int3-step point whose slot int3 is at vaddr, or NULL. */
const struct kprw_point *kprw_istep_find(u64 vaddr)
{
	u32 lo = 0, hi = nends;
	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2;
		u64 e = end_of(ends[mid]);
		if (e == vaddr)
			return &kprw_rt.points[ends[mid]];
		if (e < vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* kprw_istep_within returns the int3-step point whose slot copy holds vaddr (a fault of
 * the copy: rt_trap.c's kprw_step_fault), or NULL. */
const struct kprw_point *kprw_istep_within(u64 vaddr)
{
	u32 lo = 0, hi = nends;
	while (lo < hi) { /* the first slot whose int3 is past vaddr */
		u32 mid = lo + (hi - lo) / 2;
		if (end_of(ends[mid]) <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == nends)
		return NULL;
	const struct kprw_point *pt = &kprw_rt.points[ends[lo]];
	return vaddr >= pt->slot ? pt : NULL;
}
