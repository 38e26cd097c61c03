/* rt_stack.c - user stacks for stacktrace triggers, walked without a system call.
 *
 * The rewriter turns the image's .eh_frame into an ORC-like table (kprewrite_abi.h,
 * struct kprw_unwind): per pc range, the CFA is rsp or rbp plus an offset, the return
 * address is at CFA-8 and the caller's rbp is unchanged or saved at a known offset. A
 * frame costs a binary search and two or three fault-safe reads of the stack. A return
 * address that is a return probe's trampoline is translated back to the real one (the
 * kernel's kretprobe_find_ret_addr). The walk stops at the first pc the table does not
 * cover (another object: libc's start-up, a signal frame), recording that pc. */
#include "rt.h"

/* row is the unwind row covering run-time pc, NULL outside the table */
static const struct kprw_unwind *row(u64 pc)
{
	const struct kprw_header *h = kprw_rt.hdr;
	const struct kprw_unwind *tab = (const struct kprw_unwind *)RT_ADDR(h->unwind);
	u64 off = pc - (h->unwind_base + kprw_rt.bias);
	if (off >= (1ull << 32) || !h->nunwind || off < tab[0].pc)
		return NULL;
	u32 lo = 0, hi = h->nunwind; /* the last row with pc <= off is in [lo, hi) */
	while (hi - lo > 1) {
		u32 mid = lo + (hi - lo) / 2;
		if (tab[mid].pc <= (u32)off)
			lo = mid;
		else
			hi = mid;
	}
	return &tab[lo];
}

u32 kprw_stack_walk(const struct pt_regs *regs, u64 *out, u32 max, int fast)
{
	u64 pc = regs->ip, sp = regs->sp, bp = regs->bp;
	int bp_ok = 1;
	u32 n = 0;
	if (!kprw_rt.hdr->unwind || !max)
		return 0;
	for (;;) {
		out[n++] = pc;
		if (n == max)
			break;
		/* a caller's pc is a return address: the call is the byte before it (a call
		 * to a noreturn function may end its function) */
		const struct kprw_unwind *r = row(n > 1 ? pc - 1 : pc);
		if (!r || (r->cfa_reg & 3) == KPRW_UW_UNDEF)
			break;
		if ((r->cfa_reg & 3) == KPRW_UW_BP && !bp_ok)
			break;
		u64 cfa = ((r->cfa_reg & 3) == KPRW_UW_BP ? bp : sp) + (u64)(s64)r->cfa_off, ra;
		if (cfa <= sp || kprw_read_mode(&ra, (uptr)(cfa - 8), 8, fast) != 8)
			break; /* callers' frames are above: a CFA that is not is garbage */
		if (r->cfa_reg & KPRW_UW_BPLOST)
			bp_ok = 0;
		else if (r->bp_off && kprw_read_mode(&bp, (uptr)(cfa + (u64)(s64)r->bp_off * 8), 8, fast) != 8)
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
