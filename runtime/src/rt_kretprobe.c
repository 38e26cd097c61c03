/*
 * rt_kretprobe.c - return probes.
 *
 * Entry (from the SIGTRAP handler, at the function's first instruction, so the return
 * address is at K = regs->sp): take a free instance from the probe's pool (maxactive of
 * them, allocated at start-up; none free -> nmissed), remember *K, run entry_handler,
 * and replace *K with kprewrite_rt_rettramp.
 *
 * Return: the function's ret lands in the trampoline (code, not a trap), which calls
 * kprw_rethook with the registers. The instance is found by K = regs->sp - 8 alone:
 * two live frames cannot share a return-address word, so no per-thread list is needed,
 * and recursion, threads, signal stacks and coroutines all work. Among instances keyed
 * by the same K the newest (highest global sequence number) is the live one; a hint
 * table finds it in O(1) on the common path (see ri_hint).
 *
 * Keys: keys[g] = (K>>3)<<16 | generation, 1 = being set up, 0 = free.
 * Stale instances (longjmp left the frame without returning, or the thread died; a C++
 * exception or a forced unwind releases the instances of the frames it leaves, see
 * kprw_unwind_personality) are never chosen (they are older than any live instance of their
 * K) and are reclaimed when the pool is empty and an instance's word K no longer holds
 * the trampoline address (read without faulting), or its thread is dead.
 * Several kretprobes at one function, and a kretprobed function tail-called from
 * another, chain through the trampoline: the newest instance for K (highest seq) holds
 * the trampoline as its return address, so each handler runs, newest first.
 */
#include "rt.h"
#include "rt_ring.h"
#include "rt_hot.h"

struct kprw_ri {
	u32 probe;
	u32 pid;
	u32 gen;
	u32 prev; /* + 1: the instance that was the newest at K when this one was made (a chain) */
	u64 seq;  /* from ri_seq: the newest instance of a word K has the highest */
	u64 real_ret; /* the frame's real return address: ri.ret_addr, or in a chain (where
	                 ri.ret_addr is the trampoline) the older instance's real one */
	u64 at;       /* a free return point's probe: its site at the entry (moved: see moved) */
	struct kretprobe_instance ri; /* what handlers see; data follows */
};

/* Every entry takes the next sequence number, so among the instances keyed by one word
 * K (a chain of kretprobes on one frame, a tail call, or stale instances of frames left
 * by longjmp) the live, newest one has the highest. The hint table remembers the
 * newest instance of each word K, in a set of HINT_WAYS entries per hash of K: an entry
 * replaces the one of its word (a chain: the older instance is its prev, which the
 * return puts back), else a free or dead one, else the oldest of the set; the return
 * finds its instance in O(1) and checks its key. Only a frame whose hint was evicted
 * (more than HINT_WAYS live frames of one set: deep recursion of many probed functions)
 * or raced away falls back to scanning all instances, which with a return probe on
 * every function of a big program is tens of thousands. */
static u64 ri_seq;
/* the DW_OP_addr operand in kprewrite_rt_eh_frame (entry.S) */
extern u8 kprw_eh_tramp_addr[] __attribute__((visibility("hidden")));
#define HINT_SETS 8192
#define HINT_WAYS 4
static u32 ri_hint[HINT_SETS][HINT_WAYS]; /* instance + 1 */

static inline u32 *hint_set(uptr K)
{
	return ri_hint[((u64)K * 0x9E3779B97F4A7C15ull) >> 51]; /* 13 bits */
}

#define KEY_SETUP 1ull
#define KEY_MATCH(k, K) (((k) >> 16) == ((u64)(K) >> 3) && (k) > KEY_SETUP)

/* A probe's instances are in two parts: the first ri_lo (the default maxactive, or its
 * maxactive when smaller) together with every other probe's first part, the lowest
 * indexes and memory from ri_mem on; the rest, a larger maxactive's (--calls' return
 * events: 64), after every first part. A program with thousands of return probes
 * touches only the first parts' keys and memory unless a recursion goes deeper (python3.11
 * with 3,508 hooked functions: 224,512 instances of 64 cost 11 ms of page faults at
 * start-up laid out one probe after another, where 10 each cost nothing more). */
static inline u32 lo_count(u32 pi)
{
	u32 c = kprw_rt.ri_pool[pi].count;
	return c < kprw_rt.ri_lo ? c : kprw_rt.ri_lo;
}

/* slot is the global index of probe pi's j-th instance */
static inline u32 slot(u32 pi, u32 j)
{
	const struct kprw_pool *q = &kprw_rt.ri_pool[pi];
	u32 lo = lo_count(pi);
	return j < lo ? q->first + j : q->first_hi + (j - lo);
}

static inline __attribute__((always_inline)) struct kprw_ri *inst(u32 g, u32 pi)
{
	const struct kprw_pool *q = &kprw_rt.ri_pool[pi];
	u32 j = g - q->first;
	if (likely(j < lo_count(pi)))
		return (struct kprw_ri *)(kprw_rt.ri_mem + q->off + (u64)j * q->stride);
	return (struct kprw_ri *)(kprw_rt.ri_mem + q->off_hi + (u64)(g - q->first_hi) * q->stride);
}

static inline u32 owner(u32 g);

/* hint_at is a live instance at word K the hints name (the newest there unless a race
 * or an eviction lost it), or ~0u */
static u32 hint_at(uptr K)
{
	u32 *set = hint_set(K), best = ~0u;
	u64 bestseq = 0;
	for (u32 w = 0; w < HINT_WAYS; w++) {
		u32 h = __atomic_load_n(&set[w], __ATOMIC_RELAXED);
		if (!h || h > kprw_rt.ri_total || !KEY_MATCH(atomic_load(&kprw_rt.ri_keys[h - 1]), K))
			continue;
		struct kprw_ri *r = inst(h - 1, owner(h - 1));
		if (r->ri.entry_sp == K && (best == ~0u || r->seq > bestseq)) {
			best = h - 1;
			bestseq = r->seq;
		}
	}
	return best;
}

/* hint_put makes instance g (at word K, sequence seq) the hint of K: in place of the
 * hint of the same word, else of a free or dead entry, else of the oldest */
static void hint_put(u32 g, uptr K)
{
	u32 *set = hint_set(K), victim = 0;
	u64 oldest = ~0ull;
	for (u32 w = 0; w < HINT_WAYS; w++) {
		u32 h = __atomic_load_n(&set[w], __ATOMIC_RELAXED);
		if (!h || h > kprw_rt.ri_total) {
			victim = w;
			oldest = 0;
			continue;
		}
		struct kprw_ri *r = inst(h - 1, owner(h - 1));
		u64 k = atomic_load(&kprw_rt.ri_keys[h - 1]);
		if (!KEY_MATCH(k, r->ri.entry_sp) || r->ri.entry_sp == K) {
			victim = w; /* free, reused, or the same word's: take it */
			if (r->ri.entry_sp == K && KEY_MATCH(k, K))
				break;
			oldest = 0;
			continue;
		}
		if (r->seq < oldest) {
			oldest = r->seq;
			victim = w;
		}
	}
	__atomic_store_n(&set[victim], g + 1, __ATOMIC_RELAXED);
}

/* hint_drop takes instance g (at word K, about to be released) out of the hints, putting
 * back the older instance of a chain at K */
static void hint_drop(u32 g, uptr K, u32 prev)
{
	u32 *set = hint_set(K);
	for (u32 w = 0; w < HINT_WAYS; w++) {
		u32 h = g + 1;
		if (__atomic_load_n(&set[w], __ATOMIC_RELAXED) == h) {
			u32 p = prev && prev <= kprw_rt.ri_total && KEY_MATCH(atomic_load(&kprw_rt.ri_keys[prev - 1]), K) ? prev : 0;
			__atomic_compare_exchange_n(&set[w], &h, p, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		}
	}
}

/* fetch-program entry data of an instance, after the user's data */
static u8 *edata_of(struct kprw_ri *r, const struct kprw_probe *p)
{
	return (u8 *)r->ri.data + ((p->data_size + 15) & ~15ul);
}

/* owner of global instance g (its probe): written when the instance is first taken,
 * before its key is published, and never changed (an instance is its probe's); read
 * only for an instance whose key was published (a key that matches, a hint), never
 * for one never taken (0 there) */
static u32 *ri_owner;
static inline u32 owner(u32 g)
{
	return ri_owner[g];
}

/* pool_size sets probe i's maxactive, stride and entry data bytes (a probe that is no
 * kretprobe keeps its pool zero: no instances, and its line untouched) */
static void pool_size(u32 i, u32 def)
{
	const struct kprw_probe *p = &kprw_rt.probes[i];
	struct kprw_pool *q = &kprw_rt.ri_pool[i];
	u32 c = p->maxactive ? p->maxactive : def;
	if (c > KPRW_MAX_MAXACTIVE)
		c = KPRW_MAX_MAXACTIVE;
	u32 elen = 0;
	if ((p->flags & KPRW_F_TRACE) && p->event < kprw_rt.nevents) {
		const struct kprw_event *ev = &kprw_rt.events[p->event];
		elen = kprw_fetch_edata_size((const u8 *)RT_ADDR(ev->fetch), ev->fetch_len);
	}
	q->elen = elen;
	q->count = c;
	/* the return stack keeps K, the return address and the probe: nothing a handler,
	 * entry data or a free live point (moved) needs. It bounds a thread's depth, not a
	 * probe's frames, so it only adds to the pool: a maxactive asked below the default
	 * keeps the instances alone, whose pool it limits (r3:, and misses past 3 frames, as
	 * the kernel's kretprobe); the default and more (r32:, --calls' r64:) get both */
	q->rs = p->flags == KPRW_F_TRACE && !p->entry_handler && !p->ret_handler && !p->pre_handler &&
		!p->post_handler && !p->data_size && !elen && p->point < kprw_rt.npoints &&
		p->event < kprw_rt.nevents && (p->maxactive == 0 || p->maxactive >= def);
	q->stride = (u32)((sizeof(struct kprw_ri) + ((p->data_size + 15) & ~15ul) + elen + 15) & ~15ul);
}

int kprw_kretprobe_init(void)
{
	/* the trampoline's FDE compares the return-address word with this (entry.S) */
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	kprw_memcpy(kprw_eh_tramp_addr, &tramp, 8);

	u32 n = kprw_rt.nprobes, total = 0, more = 0;
	u64 mem = 0;
	u32 def = kprw_rt.ncpus * 2 > 10 ? kprw_rt.ncpus * 2 : 10;
	if (!(kprw_rt.has & KPRW_HAS_KRET))
		return 0;
	kprw_rt.ri_pool = kprw_mmap_dense((u64)n * sizeof(struct kprw_pool));
	if (!kprw_rt.ri_pool)
		return -1;
	kprw_rt.ri_lo = def;
	kprw_rstack_init();
	for (u32 i = 0; i < n; i++) { /* the first parts */
		struct kprw_pool *q = &kprw_rt.ri_pool[i];
		if (kprw_rt.probes[i].type != KPRW_T_KRETPROBE)
			continue;
		pool_size(i, def);
		q->first = total;
		q->off = mem;
		total += lo_count(i);
		mem += (u64)lo_count(i) * q->stride;
		more |= q->count > def;
	}
	for (u32 i = 0; more && i < n; i++) { /* the rest, after them */
		struct kprw_pool *q = &kprw_rt.ri_pool[i];
		u32 hi = q->count - lo_count(i);
		if (!hi)
			continue;
		q->first_hi = total;
		q->off_hi = mem;
		total += hi;
		mem += (u64)hi * q->stride;
	}
	u64 head = ((u64)total * 12 + 15) & ~15ull; /* keys, owners; instances 16-byte aligned */
	u8 *m = kprw_mmap_anon(head + mem); /* (sparse: most instances never taken) */
	if (!m)
		return -1;
	kprw_rt.ri_keys = (u64 *)m;
	ri_owner = (u32 *)(m + (u64)total * 8);
	kprw_rt.ri_mem = m + head;
	kprw_rt.ri_total = total;
	return 0;
}

/* stale says whether instance g of probe pi (its key) is left over: its word K no
 * longer holds the trampoline, or its thread died. The word first: a thread asking about
 * its own instances (a recursion deeper than maxactive asks at every deeper entry) then
 * makes no tgkill, only the read. */
static int stale(u32 g, u32 pi, u64 key, u32 pid, u32 tid)
{
	struct kprw_ri *r = inst(g, pi);
	u64 word = 0;
	if (key <= KEY_SETUP)
		return 0;
	if (kprw_read_user(&word, r->ri.entry_sp, 8) != 8 || word != (u64)(uptr)kprewrite_rt_rettramp)
		return 1;
	return r->pid == pid && r->ri.tid != tid && sys3(SYS_tgkill, pid, r->ri.tid, 0) == -3 /* ESRCH */;
}

/* The point's probes are newest definition first; the instances are hooked oldest first
 * so that, returning newest instance first, the return events run newest first too, as
 * the uprobe tracer runs a uretprobe's consumers (C handlers' kretprobes keep the
 * kernel's kprobe order: each pushes its instance as its pre handler runs). */
void kprw_run_return_events(const struct kprw_point *pt, struct pt_regs *regs, struct kprw_tctx *c)
{
	for (u32 k = pt->nprobes; k-- > 0;) {
		u32 i = pt->first_probe + k;
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (p->type == KPRW_T_KRETPROBE && !(p->flags & KPRW_F_USER) && !p->entry_handler && kprw_probe_enabled(i) &&
		    !kprw_probe_live_off(pt, i) && !kprw_spare_user(i)) /* (a C handler's: pushed already) */
			kprw_kretprobe_entry(i, regs, c);
	}
}

static u32 real_inst(uptr K, u32 pid, u32 tid);

void kprw_kretprobe_entry(u32 pi, struct pt_regs *regs, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	uptr K = regs->sp;
	u64 *keys = kprw_rt.ri_keys;
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	u32 pid = kprw_pid();
	u32 count = kprw_rt.ri_pool[pi].count;

	if (!keys || count == 0)
		return;
	if (c && kprw_rt.ri_pool[pi].rs && !kprw_spare_user(pi) && kprw_rstack_push(c, pi, K))
		return;

	u32 g = 0, got = 0, tid = 0;
	for (int pass = 0; pass < 2 && !got; pass++) {
		if (pass == 1)
			tid = c ? kprw_tctx_tid(c) : kprw_gettid();
		for (u32 j = 0; j < count; j++) {
			g = slot(pi, j);
			u64 k = atomic_load(&keys[g]);
			if (k != 0 && !(pass == 1 && stale(g, pi, k, pid, tid)))
				continue;
			if (atomic_cas(&keys[g], &k, KEY_SETUP)) {
				got = 1;
				break;
			}
		}
	}
	if (!got) {
		kprw_count_miss_pool(pi);
		return;
	}
	ri_owner[g] = pi; /* (before the key is published: see owner) */
	struct kprw_ri *r = inst(g, pi);
	r->probe = pi;
	r->seq = atomic_add(&ri_seq, 1) + 1;
	r->pid = pid;
	r->gen = (r->gen + 1) & 0xffff;
	if (r->gen == 0)
		r->gen = 1;
	void *by_name = kprw_spare_user(pi) ? __atomic_load_n(&kprw_rt.spare_user[pi], __ATOMIC_ACQUIRE) : NULL;
	r->ri.rp = by_name ? by_name : p->user ? (void *)RT_ADDR(p->user) : (void *)p;
	r->ri.ret_addr = *(u64 *)K;
	r->ri.entry_sp = K;
	r->ri.tid = c ? kprw_tctx_tid(c) : kprw_gettid();
	r->prev = 0;
	r->real_ret = r->ri.ret_addr;
	r->at = p->point >= kprw_rt.npoints ? __atomic_load_n(&kprw_rt.points[p->point].site, __ATOMIC_ACQUIRE) : 0;
	if (unlikely(r->ri.ret_addr == tramp)) {
		/* a chain at K (another return probe of this frame, or a tail call from a
		 * return-probed function): the newest instance there knows the real address,
		 * else this thread's return stack, whose entry then returns after this one */
		u32 a = hint_at(K);
		u64 rs = a == ~0u ? kprw_rstack_real(c, K) : 0;
		if (a != ~0u) {
			r->prev = a + 1;
			r->real_ret = inst(a, owner(a))->real_ret;
		} else if (rs) {
			r->real_ret = rs;
		} else {
			u32 b = real_inst(K, pid, r->ri.tid);
			r->real_ret = b == ~0u ? 0 : inst(b, owner(b))->ri.ret_addr;
		}
	} else {
		kprw_rstack_purge(c, K); /* (stale: the word did not hold the trampoline) */
	}
	if (p->data_size)
		kprw_memset(r->ri.data, 0, p->data_size);
	if (kprw_rt.ri_pool[pi].elen) {
		/* the fetch program sees ip = site (the entry handler, site + 1) */
		const struct kprw_event *ev = &kprw_rt.events[p->event];
		uptr ip = regs->ip;
		regs->ip = RT_ADDR(kprw_rt.points[p->point].site);
		kprw_fetch_entry((const u8 *)RT_ADDR(ev->fetch), ev->fetch_len, regs, edata_of(r, p),
				 kprw_rt.ri_pool[pi].elen, kprw_fast_ok(c));
		regs->ip = ip;
	}
	if ((p->flags & KPRW_F_USER) || by_name) {
		if (kprw_user_entry(pi, &r->ri, regs)) {
			atomic_store(&keys[g], 0);
			return;
		}
	} else if (p->entry_handler) {
		int (*eh)(struct kretprobe_instance *, struct pt_regs *) =
			(void *)RT_ADDR(p->entry_handler);
		if (eh(&r->ri, regs)) {
			atomic_store(&keys[g], 0);
			return;
		}
	}
	if (r->ri.ret_addr == tramp)
		kprw_rstack_chain(c, K, 1);
	*(u64 *)K = tramp;
	atomic_store(&keys[g], ((u64)K >> 3) << 16 | r->gen);
	hint_put(g, K);
}

static u64 shown_ret(const struct kprw_ri *r, uptr K);

/* moved says whether instance r is of a free return point placed at another site since
 * its entry (rt_live.c reuses a point once no thread is at its int3, not once its
 * instances returned): the frame returns as always, the events now riding the point
 * are not this call's, so nothing runs and nothing counts (the kernel's orphaned
 * instance) */
static int moved(const struct kprw_ri *r, const struct kprw_probe *p)
{
	return p->point >= kprw_rt.npoints &&
	       r->at != __atomic_load_n(&kprw_rt.points[p->point].site, __ATOMIC_ACQUIRE);
}

/* ret_record writes probe pi's return event for a frame returning to shown (the real
 * return address, also in a chain, where we resume into the trampoline: the fetches see
 * it, as the uprobe tracer shows it), with instance r's entry data (NULL: a return
 * stack entry, none); thread context c's handlers raised */
static void ret_record(u32 pi, struct pt_regs *regs, u64 shown, struct kprw_ri *r, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	u64 resume = regs->ip;
	u32 elen = r ? kprw_rt.ri_pool[pi].elen : 0;
	regs->ip = shown;
	/* (no entry data: the path of a return event at an exit, fast when the event has
	 * nothing else; a CALL line's return event, faster still) */
	const struct kprw_hot *h = kprw_rt.hot && p->point < kprw_rt.npoints ? &kprw_rt.hot[p->point] : NULL;
	int written = !elen && h && !hot_ret_fast(h, pi, regs, shown, c);
	if (!written && !(elen ? kprw_trace_hit(pi, regs, KPRW_REC_KRETPROBE, shown, edata_of(r, p), elen, c)
			       : kprw_trace_exit(pi, regs, shown, c)))
		kprw_count_hit(pi); /* a written record is the hit */
	regs->ip = resume;
}

/* ret_work runs probe pi's return work (its event, its handlers) for instance r (NULL:
 * a return stack entry) and sets regs->ip to resume at ret, the word K's old value */
static void ret_work(u32 pi, struct pt_regs *regs, u64 ret, u64 shown, struct kprw_ri *r, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	regs->ip = ret;
	if (!kprw_probe_enabled(pi) || (r && moved(r, p)))
		return;
	if (!c || kprw_tctx_busy(c)) {
		kprw_count_miss(pi);
		return;
	}
	c->busy++;
	if (!(p->flags & KPRW_F_TRACE)) {
		kprw_count_hit(pi);
	} else if (unlikely(!kprw_rt.trace)) {
		kprw_count_hit(pi);
		kprw_trace_lost();
	} else {
		ret_record(pi, regs, shown, r, c);
	}
	if (r && ((p->flags & KPRW_F_USER) || kprw_spare_user(pi))) {
		kprw_user_ret(pi, &r->ri, regs);
	} else if (r && p->ret_handler) {
		int (*h)(struct kretprobe_instance *, struct pt_regs *) = (void *)RT_ADDR(p->ret_handler);
		h(&r->ri, regs);
	}
	c->busy--;
}

/* rs_take is kprw_rstack_take with the thread's handlers raised (a signal handler's
 * probes are missed meanwhile: its entries cannot interleave with the stack's change) */
static int rs_take(struct kprw_tctx *c, uptr K, int force, struct kprw_rent *e)
{
	if (!c)
		return force && kprw_rstack_take_any(K, e);
	c->busy++;
	int got = kprw_rstack_take(c, K, force, e) || (force && kprw_rstack_take_any(K, e));
	c->busy--;
	return got;
}

/* find_inst is the live instance of word K (the newest there), ~0u: none; *pi its probe */
static u32 find_inst(uptr K, u32 *pi)
{
	u64 *keys = kprw_rt.ri_keys;
	u32 best = ~0u;
	u64 bestseq = 0;
	if (keys && (best = hint_at(K)) != ~0u) {
		*pi = owner(best);
		return best;
	}
	for (u32 g = 0; keys && g < kprw_rt.ri_total; g++) {
		u64 k = atomic_load(&keys[g]);
		if (KEY_MATCH(k, K)) {
			u32 o = owner(g);
			u64 s = inst(g, o)->seq;
			if (best == ~0u || s > bestseq) {
				best = g;
				bestseq = s;
				*pi = o;
			}
		}
	}
	return best;
}

void kprw_rethook(struct pt_regs *regs)
{
	uptr K = regs->sp - 8;
	u32 pi = 0;
	unsigned long flags = regs->flags;
	struct kprw_tctx *c = kprw_tctx_get();
	struct kprw_rent e;

	/* a diagnostic, counted with a plain add as records are (rt_ring.h's commit): a
	 * locked one was a third of this function's time in a program returning through
	 * here a million times (two threads at the same instant may count one) */
	__atomic_store_n(&kprewrite_rt_stats.rettramps,
			 __atomic_load_n(&kprewrite_rt_stats.rettramps, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	/* this thread's return stack first; an instance, else one the stack holds under a
	 * chain since gone (or a fork child's, in its parent's thread's slot) */
	u32 best = ~0u;
	int rs = rs_take(c, K, 0, &e) || ((best = find_inst(K, &pi)) == ~0u && rs_take(c, K, 1, &e));
	if (rs) {
		ret_work(e.pi, regs, e.ret, e.real, NULL, c);
	} else {
		if (best == ~0u)
			kprw_fatal("kretprobe BUG!: no instance for the return address at", K);
		struct kprw_ri *r = inst(best, pi);
		ret_work(pi, regs, r->ri.ret_addr, shown_ret(r, K), r, c);
		if (r->ri.ret_addr == (u64)(uptr)kprewrite_rt_rettramp && !r->prev)
			kprw_rstack_chain(c, K, 0); /* the oldest instance of a chain: next, the stack's entry */
		hint_drop(best, K, r->prev);
		atomic_store(&kprw_rt.ri_keys[best], 0);
	}
	*(u64 *)K = regs->ip;
	/* handlers may change the arithmetic flags, nothing else (as on the other paths) */
	regs->flags = (flags & ~0x8d5ul) | (regs->flags & 0x8d5ul);
}

/*
 * Unwinding through the trampoline: C++ exceptions and forced unwinds (pthread_cancel,
 * pthread_exit).
 *
 * A return-probed frame's return address is the trampoline's. The rewriter gives the
 * trampoline an FDE (kprewrite_rt_eh_frame, entry.S) listed in the executable's
 * .eh_frame_hdr, whose CIE names kprw_unwind_personality. libgcc's unwinder (unwind.inc:
 * _Unwind_RaiseException's search and cleanup phases, _Unwind_ForcedUnwind_Phase2), like
 * nongnu libunwind (tested) and LLVM's, calls a frame's personality routine after it
 * decoded the frame's CFI (uw_frame_state_for) and before it computes the caller's
 * registers and return address from it (uw_update_context), so the routine can still
 * change what that return address is: it writes the real one back into the word K and releases the frame's instances.
 * The unwinder then reads the real return address (the CFI's value expression reads
 * *K) and goes on into the real caller; the cleanup phase, which walks again from the
 * thrower, no longer meets the trampoline. Only frames the exception really leaves are
 * touched: the search phase stops at the catching frame, so return-probed frames above
 * it keep their instances and return through the trampoline as usual. The return
 * events of the unwound frames are lost: counted as their probe's misses in the trace
 * counters (what `kprewrite profile` shows) and in kprewrite_rt_stats.rp_flushed.
 *
 * Which frame: the routine runs on the unwinding thread's stack, below every frame
 * being unwound, and the unwinder visits frames innermost first, so the frame is this
 * thread's live instance with the lowest K above the routine's own stack pointer whose
 * word still holds the trampoline (every lower one was released when the unwinder
 * passed it). libgcc's context records the CFA of the frame below (K + 8) at a fixed
 * place, next to the frame's pc; when that pc is the trampoline (the layout is libgcc's)
 * and the CFA names one of the candidates, it decides, which also rules out a stale word
 * that a longjmp left holding the trampoline inside a frame being unwound; the hint
 * table then finds the instance in O(1) unless several share K. Other unwinders (the
 * libunwinds) get the lowest-K rule alone (a scan of the instances per frame).
 */
#define URC_CONTINUE_UNWIND 8
/* libgcc's struct _Unwind_Context on x86-64: reg[18] (8 bytes each), then void *cfa,
 * void *ra (the frame's pc: the trampoline, which confirms the layout) */
#define LIBGCC_CONTEXT_CFA 144
/* an unwinder's context is a local of its frames just above ours: read directly when
 * it is this close, fault-safely otherwise */
#define CONTEXT_NEAR (64u << 10)

/* this thread's: instances a fork child inherited (another pid) are the forking
 * thread's frames, now the child's */
static inline int mine(const struct kprw_ri *r, u32 pid, u32 tid)
{
	return r->pid != pid || r->ri.tid == tid;
}

/* real_inst is the instance of this thread's frame at word K that saved the real return
 * address: a chain at K (several kretprobes on one function, or a tail call between
 * probed functions) saved it in its oldest live instance, the newer ones saved the
 * trampoline; among stale ones longjmp left, the live one is the newest. ~0u: none. */
static u32 real_inst(uptr K, u32 pid, u32 tid)
{
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	u32 best = ~0u;
	u64 bestseq = 0;
	for (u32 g = 0; g < kprw_rt.ri_total; g++) {
		u64 k = atomic_load(&kprw_rt.ri_keys[g]);
		if (!KEY_MATCH(k, K))
			continue;
		struct kprw_ri *r = inst(g, owner(g));
		if (r->ri.entry_sp == K && mine(r, pid, tid) && r->ri.ret_addr != tramp &&
		    (best == ~0u || r->seq > bestseq)) {
			best = g;
			bestseq = r->seq;
		}
	}
	return best;
}

/* the unwind left frame K: its return event is lost */
static void unwound(u32 g, u64 k)
{
	/* a thread reclaiming stale instances may have taken it first (K no longer holds
	 * the trampoline): then it is not counted here */
	if (atomic_cas(&kprw_rt.ri_keys[g], &k, 0)) {
		atomic_add((u64 *)(kprw_rt.ctr_base + (u64)owner(g) * kprw_rt.ctr_stride + 8), 1);
		atomic_add(&kprewrite_rt_stats.rp_flushed, 1);
	}
}

/* unwind_at releases this thread's instances at word K (the unwind leaves the frame) */
static void unwind_at(uptr K, u32 pid, u32 tid)
{
	for (u32 g = 0; g < kprw_rt.ri_total; g++) {
		u64 k = atomic_load(&kprw_rt.ri_keys[g]);
		if (KEY_MATCH(k, K) && inst(g, owner(g))->ri.entry_sp == K && mine(inst(g, owner(g)), pid, tid))
			unwound(g, k);
	}
}

/* unwind_rstack releases frame K's entries on this thread's return stack, and the
 * instances chained on them, writing its real return address back into K: 1, or 0 when
 * the stack has none */
static int unwind_rstack(struct kprw_tctx *c, uptr K, u32 pid, u32 tid)
{
	int chained = 0;
	u64 real = c ? kprw_rstack_unwind(c, K, &chained) : 0;
	if (!real)
		return 0;
	*(volatile u64 *)K = real;
	if (chained)
		unwind_at(K, pid, tid);
	return 1;
}

/* lowest_frame is the lowest K above lo of this thread's instances (0: none) */
static uptr lowest_frame(uptr lo, u32 pid, u32 tid)
{
	uptr next = 0;
	for (u32 g = 0; g < kprw_rt.ri_total; g++) {
		u64 k = atomic_load(&kprw_rt.ri_keys[g]);
		if (k <= KEY_SETUP)
			continue;
		struct kprw_ri *r = inst(g, owner(g));
		uptr e = r->ri.entry_sp;
		if (e > lo && (!next || e < next) && KEY_MATCH(k, e) && mine(r, pid, tid))
			next = e;
	}
	return next;
}

__attribute__((visibility("hidden"))) int kprw_unwind_personality(int version, int actions, u64 exc_class,
								   void *exc, void *context)
{
	(void)version, (void)actions, (void)exc_class, (void)exc;
	u64 *keys = kprw_rt.ri_keys;
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	uptr sp = (uptr)__builtin_frame_address(0);
	if (!keys)
		return URC_CONTINUE_UNWIND;
	struct kprw_tctx *c = kprw_tctx_get();
	u32 pid = kprw_pid(), tid = c ? kprw_tctx_tid(c) : kprw_gettid();
	u64 cr[2] = {0, 0}, word = 0; /* libgcc's context: cfa, ra */
	uptr ctx = (uptr)context + LIBGCC_CONTEXT_CFA;
	if (ctx > sp && ctx - sp < CONTEXT_NEAR)
		kprw_memcpy(cr, (const void *)ctx, 16); /* in our callers' frames */
	else
		kprw_read_user(cr, ctx, 16);

	uptr K = 0;
	/* (the frame may be on another stack than this routine, e.g. thrown from a signal
	 * handler on a sigaltstack: no comparison with sp here; C is the return-address
	 * word of the live frame being unwound, readable) */
	if (cr[1] == tramp && cr[0] > 8 && (cr[0] & 7) == 0 && *(const volatile u64 *)(uptr)(cr[0] - 8) == tramp) {
		uptr C = cr[0] - 8;
		if (unwind_rstack(c, C, pid, tid))
			return URC_CONTINUE_UNWIND;
		/* the common case in O(1): the hint names the newest instance at C, and it saved
		 * a real return address (no chain at C) */
		u32 h = hint_at(C);
		if (h != ~0u) {
			u64 k = atomic_load(&keys[h]);
			struct kprw_ri *r = inst(h, owner(h));
			if (KEY_MATCH(k, C) && mine(r, pid, tid) && r->ri.ret_addr != tramp) {
				*(volatile u64 *)C = r->ri.ret_addr;
				unwound(h, k);
				return URC_CONTINUE_UNWIND;
			}
		}
		for (u32 g = 0; g < kprw_rt.ri_total && !K; g++) {
			u64 k = atomic_load(&keys[g]);
			if (KEY_MATCH(k, C) && inst(g, owner(g))->ri.entry_sp == C && mine(inst(g, owner(g)), pid, tid))
				K = C;
		}
	}
	for (uptr lo = sp; !K;) {
		uptr next = lowest_frame(lo, pid, tid), rn = kprw_rstack_lowest(c, lo);
		if (rn && (!next || rn < next))
			next = rn;
		if (!next)
			break;
		if (kprw_read_user(&word, next, 8) == 8 && word == tramp)
			K = next;
		lo = next;
	}
	if (!K) {
		kprw_puts("kprewrite: an unwind reached a return probe's trampoline that has no instance: it stops there\n");
		return URC_CONTINUE_UNWIND;
	}
	if (unwind_rstack(c, K, pid, tid))
		return URC_CONTINUE_UNWIND;

	u32 best = real_inst(K, pid, tid);
	if (best == ~0u) {
		kprw_puts("kprewrite: an unwind reached a return probe's trampoline whose return address is lost: it stops there\n");
		return URC_CONTINUE_UNWIND;
	}
	*(volatile u64 *)K = inst(best, owner(best))->ri.ret_addr;
	unwind_at(K, pid, tid);
	return URC_CONTINUE_UNWIND;
}

/* shown_ret is the return address a record shows: the real one, as the uprobe tracer
 * shows it for each of several return probes on one function (chained instances), where
 * the newer instances' saved address is the trampoline */
static u64 shown_ret(const struct kprw_ri *r, uptr K)
{
	u64 ret = r->ri.ret_addr;
	if (likely(r->real_ret))
		return r->real_ret; /* resolved at the entry */
	if (unlikely(ret == (u64)(uptr)kprewrite_rt_rettramp)) {
		u64 real = kprw_kretprobe_real_ret(K);
		if (real)
			ret = real;
	}
	return ret;
}

/* kprw_kretprobe_real_ret is the real return address of the return-probed frame whose
 * return-address word K holds the trampoline, for stack walks (rt_stack.c): the hint's
 * instance, else real_inst's. 0 when none is found. Reads only: nothing is released. */
u64 kprw_kretprobe_real_ret(uptr K)
{
	u64 *keys = kprw_rt.ri_keys;
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	if (!keys)
		return 0;
	u64 rs = kprw_rstack_real(kprw_tctx_get(), K);
	if (rs)
		return rs;
	u32 h = hint_at(K);
	if (h != ~0u) {
		struct kprw_ri *r = inst(h, owner(h));
		if (r->real_ret)
			return r->real_ret;
		if (r->ri.ret_addr != tramp)
			return (u64)(uptr)r->ri.ret_addr;
	}
	struct kprw_tctx *c = kprw_tctx_get();
	u32 g = real_inst(K, kprw_pid(), c ? kprw_tctx_tid(c) : kprw_gettid());
	return g == ~0u ? 0 : (u64)(uptr)inst(g, owner(g))->ri.ret_addr;
}
