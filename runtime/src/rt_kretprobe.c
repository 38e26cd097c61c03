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
 * Stale instances (longjmp or a C++ exception left the frame without returning, or
 * the thread died) are never chosen (they are older than any live instance of their
 * K) and are reclaimed when the pool is empty and an instance's word K no longer holds
 * the trampoline address (read without faulting), or its thread is dead.
 * Several kretprobes at one function, and a kretprobed function tail-called from
 * another, chain through the trampoline: the newest instance for K (highest seq) holds
 * the trampoline as its return address, so each handler runs, newest first.
 */
#include "rt.h"

struct kprw_ri {
	u32 probe;
	u32 pid;
	u32 gen;
	u32 reserved;
	u64 seq; /* from ri_seq: the newest instance of a word K has the highest */
	u64 reserved2;
	struct kretprobe_instance ri; /* what handlers see; data follows */
};

/* Every entry takes the next sequence number, so among the instances keyed by one word
 * K (a chain of kretprobes on one frame, a tail call, or stale instances of frames left
 * by longjmp) the live, newest one has the highest. The hint table remembers, per hash
 * of K, the instance the last entry made: the return finds it in O(1) and checks its
 * key; a hint that another entry overwrote (a hash collision) or that is gone falls back
 * to scanning all instances. */
static u64 ri_seq;
#define HINTS 1024
static u32 ri_hint[HINTS]; /* instance + 1 */

static inline u32 hint_of(uptr K)
{
	return (u32)(((u64)K * 0x9E3779B97F4A7C15ull) >> 54); /* 10 bits */
}

#define KEY_SETUP 1ull
#define KEY_MATCH(k, K) (((k) >> 16) == ((u64)(K) >> 3) && (k) > KEY_SETUP)

static struct kprw_ri *inst(u32 g, u32 pi)
{
	return (struct kprw_ri *)(kprw_rt.ri_mem + kprw_rt.ri_off[pi] +
				  (u64)(g - kprw_rt.ri_first[pi]) * kprw_rt.ri_stride[pi]);
}

/* fetch-program entry data of an instance, after the user's data */
static u8 *edata_of(struct kprw_ri *r, const struct kprw_probe *p)
{
	return (u8 *)r->ri.data + ((p->data_size + 15) & ~15ul);
}

/* owner of global instance g (its probe), from a table made at start-up */
static u32 *ri_owner;
static inline u32 owner(u32 g)
{
	return ri_owner[g];
}

int kprw_kretprobe_init(void)
{
	u32 n = kprw_rt.nprobes, total = 0;
	u64 mem = 0;
	u32 def = kprw_rt.ncpus * 2 > 10 ? kprw_rt.ncpus * 2 : 10;
	int any = 0;

	for (u32 i = 0; i < n; i++)
		if (kprw_rt.probes[i].type == KPRW_T_KRETPROBE)
			any = 1;
	if (!any)
		return 0;
	u64 arrays = (u64)n * (4 + 4 + 4 + 4 + 8);
	u8 *a = kprw_mmap_anon(arrays);
	if (!a)
		return -1;
	kprw_rt.ri_off = (u64 *)a;
	kprw_rt.ri_first = (u32 *)(a + (u64)n * 8);
	kprw_rt.ri_count = kprw_rt.ri_first + n;
	kprw_rt.ri_stride = kprw_rt.ri_count + n;
	kprw_rt.ri_elen = kprw_rt.ri_stride + n;
	for (u32 i = 0; i < n; i++) {
		const struct kprw_probe *p = &kprw_rt.probes[i];
		kprw_rt.ri_first[i] = total;
		kprw_rt.ri_off[i] = mem;
		if (p->type != KPRW_T_KRETPROBE)
			continue;
		u32 c = p->maxactive ? p->maxactive : def;
		if (c > KPRW_MAX_MAXACTIVE)
			c = KPRW_MAX_MAXACTIVE;
		u32 elen = 0;
		if ((p->flags & KPRW_F_TRACE) && p->event < kprw_rt.nevents) {
			const struct kprw_event *ev = &kprw_rt.events[p->event];
			elen = kprw_fetch_edata_size((const u8 *)RT_ADDR(ev->fetch), ev->fetch_len);
		}
		kprw_rt.ri_elen[i] = elen;
		u32 stride = (u32)((sizeof(struct kprw_ri) + ((p->data_size + 15) & ~15ul) + elen + 15) & ~15ul);
		kprw_rt.ri_count[i] = c;
		kprw_rt.ri_stride[i] = stride;
		total += c;
		mem += (u64)c * stride;
	}
	u64 head = ((u64)total * 12 + 15) & ~15ull; /* keys, owners; instances 16-byte aligned */
	u8 *m = kprw_mmap_anon(head + mem);
	if (!m)
		return -1;
	kprw_rt.ri_keys = (u64 *)m;
	ri_owner = (u32 *)(m + (u64)total * 8);
	kprw_rt.ri_mem = m + head;
	kprw_rt.ri_total = total;
	for (u32 i = 0; i < n; i++)
		for (u32 k = 0; k < kprw_rt.ri_count[i]; k++)
			ri_owner[kprw_rt.ri_first[i] + k] = i;
	return 0;
}

static int stale(u32 g, u32 pi, u64 key, u32 pid)
{
	struct kprw_ri *r = inst(g, pi);
	u64 word = 0;
	if (key <= KEY_SETUP)
		return 0;
	if (r->pid == pid && sys3(SYS_tgkill, pid, r->ri.tid, 0) == -3 /* ESRCH */)
		return 1;
	if (kprw_read_user(&word, r->ri.entry_sp, 8) != 8)
		return 1;
	return word != (u64)(uptr)kprewrite_rt_rettramp;
}

void kprw_run_return_events(const struct kprw_point *pt, struct pt_regs *regs, struct kprw_tctx *c)
{
	for (u32 k = 0; k < pt->nprobes; k++) {
		u32 i = pt->first_probe + k;
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if (p->type == KPRW_T_KRETPROBE && !(p->flags & KPRW_F_USER) && !p->entry_handler && kprw_probe_enabled(i))
			kprw_kretprobe_entry(i, regs, c);
	}
}

void kprw_kretprobe_entry(u32 pi, struct pt_regs *regs, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	uptr K = regs->sp;
	u64 *keys = kprw_rt.ri_keys;
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	u32 pid = kprw_pid();
	u32 first = kprw_rt.ri_first[pi], end = first + kprw_rt.ri_count[pi];

	if (!keys || kprw_rt.ri_count[pi] == 0)
		return;

	u32 g, got = 0;
	for (int pass = 0; pass < 2 && !got; pass++) {
		for (g = first; g < end; g++) {
			u64 k = atomic_load(&keys[g]);
			if (k != 0 && !(pass == 1 && stale(g, pi, k, pid)))
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
	struct kprw_ri *r = inst(g, pi);
	r->probe = pi;
	r->seq = atomic_add(&ri_seq, 1) + 1;
	r->pid = pid;
	r->gen = (r->gen + 1) & 0xffff;
	if (r->gen == 0)
		r->gen = 1;
	r->ri.rp = p->user ? (void *)RT_ADDR(p->user) : (void *)p;
	r->ri.ret_addr = *(u64 *)K;
	r->ri.entry_sp = K;
	r->ri.tid = c ? kprw_tctx_tid(c) : kprw_gettid();
	if (p->data_size)
		kprw_memset(r->ri.data, 0, p->data_size);
	if (kprw_rt.ri_elen[pi]) {
		/* the fetch program sees ip = site (the entry handler, site + 1) */
		const struct kprw_event *ev = &kprw_rt.events[p->event];
		uptr ip = regs->ip;
		regs->ip = RT_ADDR(kprw_rt.points[p->point].site);
		kprw_fetch_entry((const u8 *)RT_ADDR(ev->fetch), ev->fetch_len, regs, edata_of(r, p),
				 kprw_rt.ri_elen[pi], kprw_fast_ok(c));
		regs->ip = ip;
	}
	if (p->flags & KPRW_F_USER) {
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
	*(u64 *)K = tramp;
	atomic_store(&keys[g], ((u64)K >> 3) << 16 | r->gen);
	__atomic_store_n(&ri_hint[hint_of(K)], g + 1, __ATOMIC_RELAXED);
}

void kprw_rethook(struct pt_regs *regs)
{
	uptr K = regs->sp - 8;
	u64 *keys = kprw_rt.ri_keys;
	u32 best = ~0u, pi = 0;
	u64 bestseq = 0;
	unsigned long flags = regs->flags;

	atomic_add(&kprewrite_rt_stats.rettramps, 1);
	u32 h = __atomic_load_n(&ri_hint[hint_of(K)], __ATOMIC_RELAXED);
	if (keys && h && h <= kprw_rt.ri_total && KEY_MATCH(atomic_load(&keys[h - 1]), K)) {
		best = h - 1;
		pi = owner(best);
	} else {
		for (u32 g = 0; keys && g < kprw_rt.ri_total; g++) {
			u64 k = atomic_load(&keys[g]);
			if (KEY_MATCH(k, K)) {
				u32 o = owner(g);
				u64 s = inst(g, o)->seq;
				if (best == ~0u || s > bestseq) {
					best = g;
					bestseq = s;
					pi = o;
				}
			}
		}
	}
	if (best == ~0u)
		kprw_fatal("kretprobe BUG!: no instance for the return address at", K);

	struct kprw_ri *r = inst(best, pi);
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	regs->ip = r->ri.ret_addr;
	if (kprw_probe_enabled(pi)) {
		struct kprw_tctx *c = kprw_tctx_get();
		if (c && !kprw_tctx_busy(c)) {
			c->busy++;
			kprw_count_hit(pi);
			if (p->flags & KPRW_F_TRACE)
				kprw_trace_hit(pi, regs, KPRW_REC_KRETPROBE, r->ri.ret_addr, edata_of(r, p),
					       kprw_rt.ri_elen[pi], c);
			if (p->flags & KPRW_F_USER) {
				kprw_user_ret(pi, &r->ri, regs);
			} else if (p->ret_handler) {
				int (*h)(struct kretprobe_instance *, struct pt_regs *) =
					(void *)RT_ADDR(p->ret_handler);
				h(&r->ri, regs);
			}
			c->busy--;
		} else {
			kprw_count_miss(pi);
		}
	}
	atomic_store(&keys[best], 0);
	*(u64 *)K = regs->ip;
	/* handlers may change the arithmetic flags, nothing else (as on the other paths) */
	regs->flags = (flags & ~0x8d5ul) | (regs->flags & 0x8d5ul);
}

/* kprw_kretprobe_flush runs before a C++ exception is thrown (the signal guard's throw
 * wrappers, src/throwstub.S), sp being the thrower's stack pointer at the call: every
 * instance of this thread whose frame is above sp and whose return-address word still
 * holds the trampoline gets its original return address written back and is released,
 * as the kernel flushes kretprobe instances of frames it cannot return to. The unwinder
 * then sees the real return addresses and finds every catch. The return handlers of
 * these frames do not run, including frames above the catch that later return normally
 * (their events are lost: counted in kprewrite_rt_stats.rp_flushed). Instances a fork
 * child inherited (another pid) count as this thread's: the forking thread's frames. */
void kprw_kretprobe_flush(uptr sp)
{
	u64 *keys = kprw_rt.ri_keys;
	u64 tramp = (u64)(uptr)kprewrite_rt_rettramp;
	if (!keys)
		return;
	u32 pid = kprw_pid(), tid = kprw_gettid(), n = 0;
	for (u32 round = 0; round <= kprw_rt.ri_total; round++) {
		/* one return-address word K per round: its newest instance whose saved return
		 * address is not the trampoline (older ones of a chain at K saved the real one,
		 * newer ones the trampoline; stale ones are older than the live one) */
		uptr K = 0;
		u32 best = ~0u;
		u64 bestseq = 0;
		for (u32 g = 0; g < kprw_rt.ri_total; g++) {
			u64 k = atomic_load(&keys[g]);
			if (k <= KEY_SETUP)
				continue;
			struct kprw_ri *r = inst(g, owner(g));
			if ((r->pid == pid && r->ri.tid != tid) || r->ri.entry_sp < sp ||
			    !KEY_MATCH(k, r->ri.entry_sp))
				continue;
			if (!K)
				K = r->ri.entry_sp;
			if (r->ri.entry_sp != K)
				continue;
			if (r->ri.ret_addr != tramp && (best == ~0u || r->seq > bestseq)) {
				best = g;
				bestseq = r->seq;
			}
		}
		if (!K)
			break;
		u64 word = 0;
		int live = kprw_read_user(&word, K, 8) == 8 && word == tramp && best != ~0u;
		if (live)
			*(volatile u64 *)K = inst(best, owner(best))->ri.ret_addr;
		for (u32 g = 0; g < kprw_rt.ri_total; g++) {
			u64 k = atomic_load(&keys[g]);
			if (k <= KEY_SETUP || !KEY_MATCH(k, K))
				continue;
			struct kprw_ri *r = inst(g, owner(g));
			if ((r->pid == pid && r->ri.tid != tid) || r->ri.entry_sp != K)
				continue;
			if (atomic_cas(&keys[g], &k, 0) && live)
				n++;
		}
	}
	if (n)
		atomic_add(&kprewrite_rt_stats.rp_flushed, n);
}
