/*
 * rt_ring.c - the trace file's record area, given out in blocks: one atomic fetch-add
 * on the header's head per block, or, in a file kprewrite record made, a block taken
 * from its ring's queue. A thread writes its records into its own block back to back
 * with no atomic operation, each committed with a last store (rt_ring.h: reserve,
 * fill, commit), so nothing is lost on a crash, abort or _exit. Readers merge the
 * blocks by timestamp, as the kernel's tracer merges its per-CPU buffers. This file
 * takes the blocks: kprw_new_block, when a thread has none or its block is full.
 */
#include "rt.h"
#include "rt_ring.h"

/* zero_block clears a ring block this writer takes again before its header goes in:
 * the recorder gives blocks back as they were (its magic cleared only), and readers
 * take a block's records to end at the first of zeros (trace version 4; before it the
 * recorder zeroed each block it gave back: 2 GB/s of its CPU's stores in a hot burst,
 * which let it fall behind, issue 49). rep stosb: ~2 us for 64 KiB, and the lines are
 * then this CPU's for the records that follow. (DF is clear: C runs with it clear.) */
static void zero_block(u8 *p, u64 n)
{
	__asm__ volatile("rep stosb" : "+D"(p), "+c"(n) : "a"(0) : "memory");
}

/* blk_init writes the header of a block of n bytes at off, magic last */
static void blk_init(u64 off, u64 n, u32 seq, const struct who *w)
{
	struct kprw_blk *b = (struct kprw_blk *)(kprw_rt.trace_data + off);
	b->size = (u32)n;
	b->pid = kprw_pid_fast();
	b->tid = w->tid;
	b->image = (u8)kprw_rt.trace_image;
	b->seq = seq;
	b->image_id = kprw_rt.image_id;
	b->bias = kprw_rt.bias;
	__builtin_memcpy(b->comm, w->comm, 16);
	atomic_store(&b->magic, KPRW_BLK_MAGIC);
}

/* blk_off is ring block blk's offset from trace_data: in the file's ring, or in the
 * room for the extents the ring grows by (rt_tracefile.c's ring_reserve) */
static u64 blk_off(u64 blk)
{
	u64 n0 = kprw_rt.ring_n0;
	return blk < n0 ? blk * kprw_rt.trace_block : kprw_rt.ring_g0 + (blk - n0) * kprw_rt.trace_block;
}

/* ring_extend appends extent k (rt_tracefile.c), but not within EXTEND_RETRY of a
 * failure (a full disk: every record would pay for the system calls that find it full) */
#define EXTEND_RETRY 10000000ull /* ns */
static u64 extend_failed; /* when it last failed (kprw_now_ns) */
static int ring_extend(u64 k)
{
	u64 then = __atomic_load_n(&extend_failed, __ATOMIC_RELAXED);
	if (then && kprw_now_ns() - then < EXTEND_RETRY)
		return -1;
	int r = kprw_ring_extend(k);
	if (r < 0)
		__atomic_store_n(&extend_failed, kprw_now_ns(), __ATOMIC_RELAXED);
	return r;
}

#define GROW_LOW 4   /* the queue runs low with fewer than a GROW_LOW-th of the ring free */
#define GROW_AHEAD 2 /* extents readied ahead of the ring's growth */

/* ring_extent is the extent that holds grown block blk */
static u64 ring_extent(u64 blk) { return (blk - kprw_rt.ring_n0) / kprw_rt.ring_ext_blocks; }

/* ring_extent_mapped makes sure the extent that holds grown block blk is mapped in this
 * process (another writer appended it). 0, or -1. */
static int ring_extent_mapped(u64 blk)
{
	if (!kprw_rt.ring_ext)
		return -1;
	return kprw_ring_map(ring_extent(blk)); /* (mapped already: 0) */
}

/* ring_block is ring block blk's offset, its pages made present and writable in this
 * process at its first take: a ring block is reused, so after this no record pays for a
 * page. A block the ring grows by (grown) has no disk blocks reserved for it until its
 * extent is appended to the file (the recorder reserves the ring it starts with only: a
 * reserve taken at the start would be taken from the trace's own room on the disk); its
 * populate makes its pages, and where that or the extent fails (a full disk, where the
 * write's page fault would be a SIGBUS; a kernel without MADV_POPULATE_WRITE) it is ~0,
 * and the ring does not grow into it. A grown block another writer gave back is mapped
 * here first, once per extent. */
static u64 ring_block(u64 blk, int grown)
{
	u64 off = blk_off(blk);
	u64 *bits = kprw_rt.ring_mapped, bit = 1ull << (blk % 64);
	if (bits && (__atomic_load_n(&bits[blk / 64], __ATOMIC_RELAXED) & bit))
		return off;
	if (blk >= kprw_rt.ring_n0) {
		int r = ring_extent_mapped(blk);
		if (r < 0 && grown && kprw_rt.ring_ext)
			r = ring_extend(ring_extent(blk));
		if (r < 0)
			return ~0ull;
	}
	long r = sys3(SYS_madvise, (long)(kprw_rt.trace_data + off), (long)kprw_rt.trace_block, MADV_POPULATE_WRITE);
	if (grown && r < 0 && !kprw_refused(r)) /* (refused by a sandbox: its extent's blocks
						   * were allocated, its pages fault in) */
		return ~0ull;
	if (bits)
		__atomic_fetch_or(&bits[blk / 64], bit, __ATOMIC_RELAXED);
	return off;
}

/* ring_done says whether the recorder has finished. Read after a take or a claim: a
 * recorder that finished (and may give the ring's pages back) saw it, or this writer
 * sees that it finished. */
static int ring_done(const struct kprw_trace_hdr *h)
{
	return (__atomic_load_n(&h->ring_flags, __ATOMIC_SEQ_CST) & KPRW_RING_DONE) != 0;
}

/* grow_ahead asks this process's thread (rt_ahead.c) to have the extents that hold
 * the next GROW_AHEAD blocks the ring would grow by appended, mapped and their pages
 * made, when the queue runs low (fewer than a GROW_LOW-th of the ring free) or the ring
 * grows: a grown block's pages are new memory, ~5 ms a 2 MiB page on this VM (the host
 * backs a page the guest gave back anew), which the writer that claimed it paid
 * (issue 49: half of a hot burst's CPU time when the recorder fell behind). A writer
 * that claims a block the thread has not readied yet makes it itself, as before. */
static void grow_ahead(const struct kprw_trace_hdr *h)
{
	u64 g = __atomic_load_n(&h->ring_grown, __ATOMIC_RELAXED);
	if (g && g < kprw_rt.ring_nblocks)
		kprw_ahead_ring(g + GROW_AHEAD * kprw_rt.ring_ext_blocks);
}

/* kprw_ring_ready makes the ring's blocks [from, to) present in this process ahead of
 * their takes, grown ones appended first (rt_ahead.c's thread): how far it got (it
 * stops at a block it cannot make, or once the recorder has finished) */
u64 kprw_ring_ready(u64 from, u64 to)
{
	u64 b = from;
	for (; b < to && b < kprw_rt.ring_nblocks; b++)
		if (__atomic_load_n(&kprw_rt.trace_detached, __ATOMIC_ACQUIRE) || ring_done(kprw_rt.trace) ||
		    ring_block(b, b >= kprw_rt.ring_n0) == ~0ull)
			break;
	return b;
}

/* ring_grow claims the ring's next unused block for a writer that found the queue
 * empty (the programs outran the recorder): the record waits in memory the writer makes
 * present, instead of being lost, while the ring has blocks left (ring_grown <
 * ring_nblocks; ring_grown 0: it does not grow). The block is made present before it is
 * claimed: every block below ring_grown has its pages, so the recorder and readers can
 * read its header (a hole of a full tmpfs is a SIGBUS even to a read). Returns the
 * block's offset, or ~0. */
static u64 ring_grow(u32 *seq)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	u64 g = __atomic_load_n(&h->ring_grown, __ATOMIC_RELAXED);
	if (ring_done(h)) /* (a program that outlives its recorder appends no extents) */
		return ~0ull;
	while (g && g < kprw_rt.ring_nblocks) {
		u64 off = ring_block(g, 1);
		if (off == ~0ull)
			return ~0ull; /* nothing claimed: the next writer tries again */
		if (__atomic_compare_exchange_n(&h->ring_grown, &g, g + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
			if (ring_done(h))
				return ~0ull;
			/* a seq no take through the queue has (theirs count up from 0: they
			 * reach 2^31 after 16 TiB of 8 KiB blocks): readers know a block's
			 * records by it */
			*seq = 0x80000000u | (u32)g;
			if (kprw_rt.ring_ext)
				grow_ahead(h);
			return off;
		}
	}
	return ~0ull;
}

/* ring_take hands out a free block of the ring (ring mode: kprewrite record drains the
 * ring and gives the blocks back through the queue). The queue entry is read before the
 * take is claimed: the recorder refills entry t only once take is past t. Returns the
 * block's offset and its seq, or, when the queue has no free block (the recorder fell
 * behind, or is gone), a block the ring grows by, or ~0 when it cannot grow: the record
 * is lost, counted. */
static u64 ring_take(u32 *seq, int *reused)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	u64 n = kprw_rt.ring_nblocks;
	u64 t = __atomic_load_n(&h->ring_take, __ATOMIC_RELAXED);
	for (;;) {
		u64 give = __atomic_load_n(&h->ring_give, __ATOMIC_ACQUIRE);
		if (t >= give)
			return ring_grow(seq);
		if (give - t < kprw_rt.ring_n0 / GROW_LOW && kprw_rt.ring_ext)
			grow_ahead(h);
		u64 e = __atomic_load_n(&kprw_rt.ring_queue[t % n], __ATOMIC_ACQUIRE);
		if ((e >> 32) != ((t / n) & 0xffffffffull))
			return ring_grow(seq); /* its giver has not stored it yet */
		/* a block of an extent this process has not mapped is mapped before the take
		 * is claimed: a block claimed and not written would never be given back */
		if ((u32)e >= kprw_rt.ring_n0 && (u32)e < n && ring_extent_mapped((u32)e) < 0)
			return ~0ull;
		if (__atomic_compare_exchange_n(&h->ring_take, &t, t + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
			u32 blk = (u32)e;
			if (blk >= n || ring_done(h))
				return ~0ull;
			*seq = (u32)t;
			*reused = t >= kprw_rt.ring_n0; /* (the queue's first round: blocks never written) */
			return ring_block(blk, 0);
		}
	}
}

/* ring_give puts the block at off back in the queue (overwrite mode: the oldest block
 * a writer left is the next one taken, its records overwritten) */
static void ring_give(u64 off)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	u64 n = kprw_rt.ring_nblocks;
	u64 g = atomic_add(&h->ring_give, 1);
	__atomic_store_n(&kprw_rt.ring_queue[g % n], (off / kprw_rt.trace_block) | (g / n) << 32, __ATOMIC_RELEASE);
}

/* overwritten counts the committed records of the ring block b (n bytes) that a writer
 * is taking again, past what the recorder copied of it (drained): they were written, and
 * go now. The walk stops where the records end, or at a size that does not fit. */
static u64 overwritten(const struct kprw_blk *b, u64 n)
{
	if (__atomic_load_n(&b->magic, __ATOMIC_ACQUIRE) != KPRW_BLK_MAGIC || b->size != n)
		return 0;
	u64 off = b->drained > sizeof *b ? b->drained : sizeof *b, count = 0;
	while (off + sizeof(struct kprw_crec) <= n) {
		const struct kprw_crec *r = (const struct kprw_crec *)((const u8 *)b + off);
		if (r->ts_lo == 0 && r->ts_hi == 0)
			break;
		u64 size = (sizeof *r + (r->rlen & KPRW_CREC_EXT ? sizeof(struct kprw_crec_ext) : 0) +
			    (r->rlen & KPRW_CREC_RET ? 8 : 0) + (r->rlen & KPRW_CREC_LEN) + 7) & ~7ull;
		if (size > n - off)
			break;
		if ((r->commit & KPRW_CREC_COMMITTED) && !(r->commit & KPRW_CREC_DISCARDED))
			count++;
		off += size;
	}
	return count;
}

/* fold_counts adds what the fast paths counted in thread block b (its records, its
 * return trampolines' runs) to kprewrite_rt_stats; exchanges, so that a signal
 * handler's counts taken meanwhile are not lost */
static void fold_counts(struct kprw_tblk *b)
{
	u64 nrec = __atomic_exchange_n(&b->nrec, 0, __ATOMIC_RELAXED);
	if (nrec)
		atomic_add(&kprewrite_rt_stats.records, nrec);
	u64 nret = __atomic_exchange_n(&b->nret, 0, __ATOMIC_RELAXED);
	if (nret)
		atomic_add(&kprewrite_rt_stats.rettramps, nret);
}

/* kprw_new_block takes a block for a record of size bytes (a larger one for a record larger
 * than a block) and makes it c's (none: the record has it alone; the context table is
 * full). Returns the record's place, or NULL (counted as lost). */
__attribute__((noinline)) struct kprw_crec *kprw_new_block(u32 size, struct kprw_tctx *c, const struct who *w)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	u64 need = sizeof(struct kprw_blk) + size, off, n;
	u32 seq = 0;
	int reused = 0;
	struct kprw_tblk *b = c ? kprw_tblk(c) : NULL;
	u64 old = b ? rec_end(__atomic_load_n(&b->rec, __ATOMIC_RELAXED)) : 0;
	if (b)
		fold_counts(b);
	if (kprw_rt.ring_queue) {
		/* every block of the ring is trace_block bytes (more than any record needs) */
		n = kprw_rt.trace_block;
		struct kprw_blk *left = NULL;
		if (old >= n && old <= kprw_rt.trace_data_size) {
			/* the block this thread leaves (not when a new thread found a dead one's
			 * context: the recorder has taken that block back, someone may have it) */
			left = (struct kprw_blk *)(kprw_rt.trace_data + old - n);
			if (left->tid != w->tid || left->pid != kprw_pid_fast() || left->done)
				left = NULL;
		}
		/* taken before the left one is given back (overwrite mode): while this writer
		 * holds a block, the queue's entry it reads cannot be refilled under it */
		off = ring_take(&seq, &reused);
		if (left) {
			atomic_store(&left->done, 1); /* the recorder may take it back */
			if (kprw_rt.ring_over)
				ring_give(old - n);
		}
		if (off != ~0ull && off + n > kprw_rt.trace_data_size)
			off = ~0ull; /* (past REC_AREA_MAX: rt_tracefile.c) */
		if (off == ~0ull)
			goto lost;
		if (kprw_rt.ring_over) { /* its old records go: readers see no magic first */
			struct kprw_blk *b = (struct kprw_blk *)(kprw_rt.trace_data + off);
			u64 gone = overwritten(b, n);
			atomic_store(&b->magic, 0);
			if (gone)
				atomic_add(&h->overwritten, gone);
			kprw_memset((u8 *)b + 4, 0, n - 4);
		} else if (reused && __atomic_load_n((u32 *)(kprw_rt.trace_data + off), __ATOMIC_RELAXED) != KPRW_BLK_ZEROED) {
			/* (a block the recorder zeroed says so: the queue entry's acquire
			 * made its stores visible) */
			zero_block(kprw_rt.trace_data + off, n);
		}
	} else {
		u64 bs = old ? kprw_rt.trace_block : GRANULE;
		n = ((need + bs - 1) / bs) * bs;
		if (__atomic_load_n(&kprw_rt.rec_full, __ATOMIC_RELAXED))
			goto lost; /* (no add on the header's line every lost record) */
		off = atomic_add(&h->head, n);
		if (off + n > kprw_rt.trace_data_size || off + n < off) {
			__atomic_store_n(&kprw_rt.rec_full, 1, __ATOMIC_RELAXED);
			kprw_trace_said_full();
			goto lost;
		}
		/* the block's pages ready in the file before it is written (rt_tracefile.c;
		 * on a full disk the block's records are lost, not the program) */
		if (unlikely(off + n > kprw_trace_ready) && kprw_trace_grow(off + n) < 0)
			goto lost;
	}
	blk_init(off, n, seq, w);
	u64 end = off + n;
	off += sizeof(struct kprw_blk);
	if (b) /* one store: a signal handler of this thread sees the old block or this one */
		__atomic_store_n(&b->rec, rec_word(off + size, end), __ATOMIC_RELAXED);
	/* the next chunks ready once the block is this thread's: the writer that nears the
	 * ready mark has them readied ahead (rt_ahead.c), and signal handlers that write
	 * meanwhile (a populate takes ~50 us when this thread does it) write into this block
	 * rather than take one each */
	if (!kprw_rt.ring_queue && unlikely(end + AHEAD_WAKE * (1ull << CHUNK_SHIFT) > kprw_trace_ready))
		kprw_ahead(end);
	return (struct kprw_crec *)(kprw_rt.trace_data + off);
lost:
	/* nothing more into the block left: a full block's word would grow by each record
	 * the thread tries, and past 2^REC_END_SHIFT bytes of them (a lost record a hit, for
	 * hours) its place would carry into its end and fit again, at the file's start */
	if (b)
		__atomic_store_n(&b->rec, 0, __ATOMIC_RELAXED);
	atomic_add(&h->lost, 1);
	atomic_add(&kprewrite_rt_stats.lost, 1);
	return NULL;
}
