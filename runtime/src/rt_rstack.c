/*
 * rt_rstack.c - the return stack: a thread's trace-only hooked returns, in order.
 *
 * A return event that hooks the return address (a --calls function whose exits the
 * analysis cannot all see, a tail call's jmp, --calls-hook) kept its frame in a
 * kretprobe instance (rt_kretprobe.c): a free one found by compare-and-swap in the
 * probe's pool, a global sequence number, a hint table the return searches by K. Each
 * of those touches memory shared by every thread and every probe, cold in a program
 * with thousands of hooked functions: python3.11's start-up paid ~300 ns a hooked call
 * (issue 49). A probe with no handler and no entry data needs none of an instance's
 * state but K, the return address and the probe, which fit in the thread's own stack of
 * entries here, pushed at the entry and popped by the trampoline in LIFO order: no
 * atomic instruction, one or two cache lines the thread keeps warm.
 *
 * It is a fast path in front of the instances, never instead of them: an entry that
 * cannot go here (no thread context, the stack full of live frames, a chain on a word
 * an instance hooked) takes an instance as before, and the trampoline takes this
 * thread's newest entry for K when it has one, else the instance path. Order with
 * chains: a chain (the word at K already holds the trampoline: a tail call between
 * hooked functions) on an entry here is pushed here too (the newest returns first, as
 * the stack pops); a chain an instance makes on an entry here marks it KPRW_RS_CHAINED, so
 * the instances at K return before it.
 *
 * Entries that never return (longjmp, a vfork child's exec) stay until the stack is
 * full, when those whose word K no longer holds the trampoline are dropped; an
 * instance hooking a word K drops this thread's older entries for K (they are stale:
 * the word did not hold the trampoline). A coroutine switch (swapcontext) leaves live
 * entries of another stack above a returning frame's: the return takes its own from
 * under them. An exception unwinding a frame takes its entries (kprw_rstack_unwind).
 * The table is per image (each has its own trampoline) and thread context slot, and
 * is not wiped on fork: a fork child's thread returns through the frames its parent's
 * thread hooked, found by its key (the same thread pointer) in whichever slot.
 */
#include "rt.h"

struct kprw_rstack *kprw_rs_tab;

void kprw_rstack_init(void)
{
	kprw_rs_tab = kprw_mmap_anon((u64)KPRW_NTCTX * sizeof(struct kprw_rstack));
}

/* rs_of is thread context c's stack; claim: for a push (a stack another key left is
 * emptied for this one), else NULL unless c's key pushed there. A tid key (a thread
 * without TLS yet) gets none: its key changes once TLS is set. */
static struct kprw_rstack *rs_of(struct kprw_tctx *c, int claim)
{
	if (!kprw_rs_tab || !c)
		return NULL;
	u64 key = __atomic_load_n(&c->key, __ATOMIC_RELAXED);
	if (key <= 1 || (key & KPRW_KEY_TID))
		return NULL;
	struct kprw_rstack *s = &kprw_rs_tab[c - kprw_tctx_tab];
	if (s->key != key) {
		if (!claim)
			return NULL;
		s->n = 0;
		s->key = key;
	}
	return s;
}

static u64 tramp_addr(void)
{
	return (u64)(uptr)kprewrite_rt_rettramp;
}

/* sweep drops the entries whose word K no longer holds the trampoline (their frames
 * are gone); 1 if there is room after */
static int sweep(struct kprw_rstack *s)
{
	u64 tramp = tramp_addr();
	u32 j = 0;
	for (u32 i = 0; i < s->n; i++) {
		u64 w = 0;
		if (kprw_read_user(&w, s->e[i].K, 8) != 8 || w != tramp)
			continue;
		s->e[j++] = s->e[i];
	}
	s->n = j;
	return j < KPRW_RSTACK_N;
}

/* newest is the index of s's newest entry for K, or -1 */
static int newest(const struct kprw_rstack *s, uptr K)
{
	for (int i = (int)s->n - 1; i >= 0; i--)
		if (s->e[i].K == K)
			return i;
	return -1;
}

static void drop(struct kprw_rstack *s, int i)
{
	for (u32 j = (u32)i; j + 1 < s->n; j++)
		s->e[j] = s->e[j + 1];
	s->n--;
}

/* kprw_rstack_push hooks the return address at K for return probe pi (its thread's
 * handlers raised: busy) and says 1, or says 0 and changes nothing: the instance path
 * decides. */
int kprw_rstack_push(struct kprw_tctx *c, u32 pi, uptr K)
{
	struct kprw_rstack *s = rs_of(c, 1);
	if (!s)
		return 0;
	u64 word = *(const u64 *)K, real = word;
	if (word == tramp_addr()) {
		/* a chain: on this stack's newest frame only (else an instance's) */
		if (!s->n || s->e[s->n - 1].K != K)
			return 0;
		real = s->e[s->n - 1].real;
	}
	if (s->n == KPRW_RSTACK_N && !sweep(s))
		return 0;
	struct kprw_rent *e = &s->e[s->n];
	e->K = K;
	e->ret = word;
	e->real = real;
	e->pi = pi;
	e->flags = 0;
	s->n++;
	*(u64 *)K = tramp_addr();
	return 1;
}

/* kprw_rstack_take pops this thread's newest entry for frame K into *out (1), or
 * says 0: none, or (unless force) one an instance chained on since */
int kprw_rstack_take(struct kprw_tctx *c, uptr K, int force, struct kprw_rent *out)
{
	struct kprw_rstack *s = rs_of(c, 0);
	if (!s || !s->n)
		return 0;
	int i = s->e[s->n - 1].K == K ? (int)s->n - 1 : newest(s, K);
	if (i < 0 || ((s->e[i].flags & KPRW_RS_CHAINED) && !force))
		return 0;
	*out = s->e[i];
	drop(s, i);
	return 1;
}

/* kprw_rstack_take_any is kprw_rstack_take in any slot this thread's key pushed in: a
 * fork child's thread, whose context took another slot than its parent's thread's */
int kprw_rstack_take_any(uptr K, struct kprw_rent *out)
{
	u64 key = kprw_tkey();
	if (!kprw_rs_tab || !key)
		return 0;
	for (u32 j = 0; j < KPRW_NTCTX; j++) {
		struct kprw_rstack *s = &kprw_rs_tab[j];
		int i = s->key == key ? newest(s, K) : -1;
		if (i >= 0) {
			*out = s->e[i];
			drop(s, i);
			return 1;
		}
	}
	return 0;
}

/* kprw_rstack_chain says that an instance hooked word K (set: a chain on this thread's
 * entry for K, which then returns after it) or that the last instance at K returned
 * (!set): the entry returns through this stack again */
void kprw_rstack_chain(struct kprw_tctx *c, uptr K, int set)
{
	struct kprw_rstack *s = rs_of(c, 0);
	int i = s ? newest(s, K) : -1;
	if (i < 0)
		return;
	if (set)
		s->e[i].flags |= KPRW_RS_CHAINED;
	else
		s->e[i].flags &= ~KPRW_RS_CHAINED;
}

/* kprw_rstack_purge drops this thread's entries for K: an instance hooks the word
 * while it does not hold the trampoline, so their frames are gone */
void kprw_rstack_purge(struct kprw_tctx *c, uptr K)
{
	struct kprw_rstack *s = rs_of(c, 0);
	for (int i; s && (i = newest(s, K)) >= 0;)
		drop(s, i);
}

/* kprw_rstack_real is the real return address of this thread's frame at K, 0: none */
u64 kprw_rstack_real(struct kprw_tctx *c, uptr K)
{
	struct kprw_rstack *s = rs_of(c, 0);
	int i = s ? newest(s, K) : -1;
	return i < 0 ? 0 : s->e[i].real;
}

/* kprw_rstack_lowest is the lowest K above lo of this thread's entries whose word
 * holds the trampoline (0: none), for an unwinder that is not libgcc's */
uptr kprw_rstack_lowest(struct kprw_tctx *c, uptr lo)
{
	struct kprw_rstack *s = rs_of(c, 0);
	uptr best = 0;
	for (u32 i = 0; s && i < s->n; i++) {
		uptr K = s->e[i].K;
		u64 w = 0;
		if (K > lo && (!best || K < best) && kprw_read_user(&w, K, 8) == 8 && w == tramp_addr())
			best = K;
	}
	return best;
}

/* kprw_rstack_unwind releases this thread's entries for frame K, which an exception
 * leaves: their return events are lost (counted as their probes' misses and in
 * rp_flushed). It says the frame's real return address (0: no entry here), and in
 * *chained whether an instance hooked the word too. */
u64 kprw_rstack_unwind(struct kprw_tctx *c, uptr K, int *chained)
{
	struct kprw_rstack *s = rs_of(c, 0);
	u64 real = 0;
	*chained = 0;
	for (int i; s && (i = newest(s, K)) >= 0;) {
		real = s->e[i].real;
		*chained |= (s->e[i].flags & KPRW_RS_CHAINED) != 0;
		atomic_add((u64 *)(kprw_rt.ctr_base + (u64)s->e[i].pi * kprw_rt.ctr_stride + 8), 1);
		atomic_add(&kprewrite_rt_stats.rp_flushed, 1);
		drop(s, i);
	}
	return real;
}
