/* rt_stack.c - user stacks for stacktrace triggers, walked without a system call.
 *
 * The rewriter turns the image's .eh_frame into an ORC-like table (kprewrite_abi.h,
 * struct kprw_unwind): per pc range, the CFA is rsp or rbp plus an offset, the return
 * address is at CFA-8 and the caller's rbp is unchanged or saved at a known offset. A
 * frame costs a row lookup (a cache, else the lookup index and a short binary search)
 * and two or three fault-safe reads of the stack. A return
 * address that is a return probe's trampoline is translated back to the real one (the
 * kernel's kretprobe_find_ret_addr). The walk stops at the first pc the table does not
 * cover (another object: libc's start-up, a signal frame), recording that pc. */
#include "rt.h"

/* A direct-mapped cache of lookups (a hot path's return addresses come again and
 * again): a word holds pc offset + 1 and the row's index, stored and read whole, so a
 * race between threads costs a search, never a wrong row. */
#define ROW_CACHE 1024
static u64 row_cache[ROW_CACHE];

static const struct kprw_unwind *search(u64 off);

/* row is the unwind row covering run-time pc, NULL outside the table */
static const struct kprw_unwind *row(u64 pc)
{
	const struct kprw_header *h = kprw_rt.hdr;
	const struct kprw_unwind *tab = (const struct kprw_unwind *)RT_ADDR(h->unwind);
	u64 off = pc - (h->unwind_base + kprw_rt.bias);
	if (off >= 0xffffffffull)
		return NULL;
	u64 *slot = &row_cache[(u32)((off * 0x9E3779B97F4A7C15ull) >> 54)];
	u64 v = __atomic_load_n(slot, __ATOMIC_RELAXED);
	if ((v >> 32) == off + 1 && (u32)v < h->nunwind)
		return &tab[(u32)v];
	const struct kprw_unwind *r = search(off);
	if (r)
		__atomic_store_n(slot, (off + 1) << 32 | (u64)(r - tab), __ATOMIC_RELAXED);
	return r;
}

/* search finds the row covering pc offset off by the lookup index and a binary
 * search, NULL outside the table */
static const struct kprw_unwind *search(u64 off)
{
	const struct kprw_header *h = kprw_rt.hdr;
	const struct kprw_unwind *tab = (const struct kprw_unwind *)RT_ADDR(h->unwind);
	if (!h->nunwind || off < tab[0].pc)
		return NULL;
	/* the lookup index after the rows narrows the search to the pc's block */
	const u32 *idx = (const u32 *)(tab + h->nunwind);
	u64 nblk = (u64)tab[h->nunwind - 1].pc / KPRW_UW_BLOCK + 2, b = off / KPRW_UW_BLOCK;
	if (b + 1 >= nblk)
		return &tab[h->nunwind - 1]; /* past the last row's block: the last row */
	u32 lo = idx[b], hi = idx[b + 1] + 1; /* the last row with pc <= off is in [lo, hi) */
	if (lo >= h->nunwind || hi > h->nunwind || lo >= hi)
		return NULL;
	while (hi - lo > 1) {
		u32 mid = lo + (hi - lo) / 2;
		if (tab[mid].pc <= (u32)off)
			lo = mid;
		else
			hi = mid;
	}
	return &tab[lo];
}

/* read8 reads the stack word at a, fault-safely; 0 when it could */
static inline __attribute__((always_inline)) int read8(u64 *dst, u64 a, int fast)
{
	if (likely(fast && a >= KPRW_FAST_LO && a + 8 > a && a + 8 <= KPRW_FAST_HI))
		return kprw_copy_nofault(dst, (const void *)(uptr)a, 8) != 0;
	return kprw_read_mode(dst, (uptr)a, 8, fast) != 8;
}

u32 kprw_stack_walk(const struct pt_regs *regs, u64 *out, u32 max, int fast)
{
	u64 pc = regs->ip, sp = regs->sp, bp = regs->bp;
	int bp_ok = 1;
	u32 n = 0;
	u64 last_at = 0;
	const struct kprw_unwind *last = NULL;
	if (!kprw_rt.hdr->unwind || !max)
		return 0;
	for (;;) {
		out[n++] = pc;
		if (n == max)
			break;
		/* a caller's pc is a return address: the call is the byte before it (a call
		 * to a noreturn function may end its function) */
		u64 at = n > 1 ? pc - 1 : pc;
		if (at != last_at) { /* recursion: the same return address again */
			last_at = at;
			last = row(at);
		}
		const struct kprw_unwind *r = last;
		if (!r || (r->cfa_reg & 3) == KPRW_UW_UNDEF)
			break;
		if ((r->cfa_reg & 3) == KPRW_UW_BP && !bp_ok)
			break;
		u64 cfa = ((r->cfa_reg & 3) == KPRW_UW_BP ? bp : sp) + (u64)(s64)r->cfa_off, ra;
		if (cfa <= sp || read8(&ra, cfa - 8, fast))
			break; /* callers' frames are above: a CFA that is not is garbage */
		if (r->cfa_reg & KPRW_UW_BPLOST)
			bp_ok = 0;
		else if (r->bp_off && read8(&bp, cfa + (u64)(s64)r->bp_off * 8, fast))
			bp_ok = 0;
		if (ra == (u64)(uptr)kprewrite_rt_rettramp)
			ra = kprw_kretprobe_real_ret((uptr)(cfa - 8));
		if (!ra)
			break;
		sp = cfa;
		pc = ra;
	}
	return n;
}
