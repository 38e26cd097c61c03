/*
 * rt_ring.h - writing a record into the trace file's record area, inlined into every
 * writer (rt_dispatch.c's hit paths): who writes it (struct who), its place in the
 * thread's block (reserve; rt_ring.c's kprw_new_block when the block is full), its
 * fixed part (fill) and its commit; and the record area's chunks and blocks
 * (rt_tracefile.c sizes them). Included after rt.h by the trace file's files only.
 */
#ifndef KPRW_RT_RING_H
#define KPRW_RT_RING_H

#pragma GCC visibility push(hidden)

/* Populating ahead: the first write to each page of the record area faults, and a fault
 * on a shared file page costs ~1-10 us here (ext4 worst), i.e. up to ~270 ns per record.
 * MADV_POPULATE_WRITE (Linux 5.14) makes the pages of a whole chunk present and writable
 * in one call, ~10x cheaper per page on ext4; the writer whose record crosses into chunk
 * k populates chunk k+1, so records land on present pages. Older kernels say EINVAL and
 * records fault as before. */
#define CHUNK_SHIFT 17 /* 128 KiB */
#define MADV_POPULATE_WRITE 23
#define AHEAD_WAKE 16 /* chunks: a writer this close to the ready mark asks for more (rt_ahead.c) */

static inline void populate(u64 off, u64 len)
{
	if (!kprw_rt.populate || off >= kprw_rt.trace_data_size)
		return;
	if (len > kprw_rt.trace_data_size - off)
		len = kprw_rt.trace_data_size - off;
	off &= ~4095ull;
	long r = sys3(SYS_madvise, (long)(kprw_rt.trace_data + off), (long)((len + 4095) & ~4095ull),
		      MADV_POPULATE_WRITE);
	if (r == -22 /* EINVAL: no MADV_POPULATE_WRITE */)
		kprw_rt.populate = 0;
}

/* The record area is given out in blocks: a thread's first block is one granule (4 KiB,
 * the header's block_size: a short-lived process or thread that writes a few records
 * leaves at most that unused), its later ones big_block() bytes (one atomic operation
 * per ~600 records). Blocks are whole granules, granule-aligned; a block a thread has
 * not filled when it ends stays zero, which readers skip a granule at a time. */
#define GRANULE 4096ull
#define BIG_BLOCK (64ull << 10)

/* who is the thread writing a record: from its context, or from system calls when the
 * context table is full */
struct who {
	u64 now;
	u32 tid;
	const char *comm; /* the context's (a pointer: a record that takes no new block
			     reads no name), or own */
	char own[16];     /* the name read by system call, without a context */
};

/* rt_ring.c: a new block, when the thread's is full or it has none */
struct kprw_crec *kprw_new_block(u32 size, struct kprw_tctx *c, const struct who *w);

/* A thread's block is one word, struct kprw_tblk's rec: the next record's place and the
 * block's end together, so that the xadd that takes a place also says in which block it
 * lies. (With the two in separate words, a signal handler that took a new block between
 * a writer's read of the end and its xadd made the writer judge a good place by the old
 * end and leave it unwritten, and a second handler then wrote past the hole, where
 * readers, which stop at a record of zeros, never looked: TestTraceSignalStorm lost a
 * few handlers' records under load.) rt.h: rec_word, rec_end. */
/* rec_at is the record at offset off of the record area, and asks for the line
 * REC_AHEAD bytes further (a later record of the same writer, 32 records of 32 bytes)
 * to be made exclusive to this CPU (prefetchw). A record's stores go to a line no
 * cache of this CPU holds (a ring block last written by the recorder's zeroing, or a
 * new page), and the ~60 stores of a detour's hit (its pt_regs, the record) fill the
 * store buffer behind the first one that waits for the line: under `kprewrite record`
 * a hot event's record took 28.6 ns with the line waited for, 24.3 with it asked for
 * ahead (issue 49, docs/benchmarks.md); prefetcht0, which fetches the line shared,
 * saves nothing. A prefetch never faults, past the area's end or on a page not yet
 * present either. has_prefetchw: CPUID's PRFCHW (every x86-64 CPU of AMD and Intel's
 * since Broadwell; on older ones the instruction may be undefined). */
#define REC_AHEAD 1024
static inline __attribute__((always_inline)) struct kprw_crec *rec_at(u64 off)
{
	const u8 *p = kprw_rt.trace_data + off;
	if (likely(kprw_rt.has_prefetchw))
		__asm__ volatile("prefetchw %0" : : "m"(p[REC_AHEAD]));
	return (struct kprw_crec *)p;
}

/* reserve returns room for a record of size bytes (a multiple of 8) in the calling
 * thread's block, or NULL (counted as lost). No atomic operation: the place is taken with
 * one xadd without lock, which a signal handler of the same thread cannot split, and
 * which returns the block's end with the place. A place that does not fit is never
 * written, and nothing is written after it: every later place in that block is past it
 * too (the writer takes a new block, and replaces the whole word). */
static inline struct kprw_crec *reserve(u32 size, struct kprw_tctx *c, const struct who *w)
{
	if (likely(c != NULL)) {
		struct kprw_tblk *b = kprw_tblk(c);
		u64 word = size;
		__asm__ volatile("xaddq %0, %1" : "+r"(word), "+m"(b->rec));
		u64 off = word & REC_NEXT_MASK;
		if (likely(off + size <= rec_end(word)))
			return rec_at(off);
	}
	return kprw_new_block(size, c, w);
}

/* commit ends a record of data_len bytes of data: the commit word last, then the
 * record counted in kprewrite_rt_stats.records (diagnostics) with a plain add, not an
 * atomic one: records written by two threads at the same instant may be counted once
 * (the file's records are the exact count) */
static inline void commit(struct kprw_crec *rec, u32 data_len, u16 how)
{
	__atomic_store_n(&rec->commit, (u16)(data_len | how), __ATOMIC_RELEASE);
	__atomic_store_n(&kprewrite_rt_stats.records, __atomic_load_n(&kprewrite_rt_stats.records, __ATOMIC_RELAXED) + 1,
			 __ATOMIC_RELAXED);
}

/* commit_hot is commit for the fast paths' records (rt_hot.h's hot_record; optprobe.S
 * counts its own the same way): counted in thread c's kprw_tblk, on the line its xadd
 * wrote, with one incq (a signal handler's count cannot fall between a load and a
 * store); kprw_new_block adds the count to kprewrite_rt_stats.records. One add on that
 * shared line by every record of every thread moved it between CPUs on each record
 * (issue 49). */
static inline void commit_hot(struct kprw_crec *rec, u32 data_len, u16 how, struct kprw_tctx *c)
{
	__atomic_store_n(&rec->commit, (u16)(data_len | how), __ATOMIC_RELEASE);
	__asm__ volatile("incq %0" : "+m"(kprw_tblk(c)->nrec));
}

static inline __attribute__((always_inline)) void who(struct who *w, struct kprw_tctx *c)
{
	w->now = kprw_clock_fast();
	if (likely(c != NULL)) {
		w->tid = kprw_tctx_tid_fast(c);
		if (unlikely(c->comm_ns == 0 || w->now - c->comm_ns > KPRW_COMM_REFRESH_NS))
			kprw_tctx_comm(c, w->now);
		kprw_tclk_check(c, w->now);
		w->comm = c->comm;
	} else {
		w->tid = kprw_gettid();
		kprw_memset(w->own, 0, 16);
		sys2(SYS_prctl, 16 /* PR_GET_NAME */, (long)w->own);
		w->comm = w->own;
	}
}

/* who_noclock is who without the clock (w->now 0), for a hit that may end in its
 * triggers and write nothing: the name is the thread's last (a new thread's is read),
 * and who_clock completes it once the hit is to be written. The clock costs ~12 ns
 * on a VM whose rdtsc traps. */
static inline __attribute__((always_inline)) void who_noclock(struct who *w, struct kprw_tctx *c)
{
	if (unlikely(c == NULL)) {
		who(w, c);
		return;
	}
	w->now = 0;
	w->tid = kprw_tctx_tid_fast(c);
	if (unlikely(c->comm_ns == 0))
		kprw_tctx_comm(c, kprw_clock_fast());
	w->comm = c->comm;
}

static inline __attribute__((always_inline)) void who_clock(struct who *w, struct kprw_tctx *c)
{
	if (w->now)
		return;
	w->now = kprw_clock_fast();
	if (unlikely(w->now - c->comm_ns > KPRW_COMM_REFRESH_NS))
		kprw_tctx_comm(c, w->now); /* (w->comm is c->comm) */
	kprw_tclk_check(c, w->now);
}

/* rec_size is the bytes of a record with dlen bytes of data; ext: it carries its event
 * id and site (a record of no probe, or of an image the file does not describe) */
static inline u32 rec_size(u32 dlen, int ret, int ext)
{
	return (u32)((sizeof(struct kprw_crec) + (ext ? sizeof(struct kprw_crec_ext) : 0) + (ret ? 8 : 0) + dlen + 7) &
		     ~7ul);
}

/* TS_MAX: a time past ts_base by this much or more takes the ext part */
#define TS_MAX (1ull << 48)

/* fill writes a record's fixed part (rlen first) and returns where its data goes. A
 * record whose time is too far from ts_base is written with the ext part, for which
 * size must have room: need_ext says when. */
static inline __attribute__((always_inline)) u8 *fill(struct kprw_crec *rec, u32 dlen, u32 pi, int ret, int ext,
						       u8 type, u32 event_id, u64 ip, u64 ret_ip, const struct who *w)
{
	rec->rlen = (u16)(dlen | (ret ? KPRW_CREC_RET : 0) | (ext ? KPRW_CREC_EXT : 0) |
			  (pi != KPRW_NO_PROBE && kprw_rt.rec_hits ? KPRW_CREC_HIT : 0));
	rec->cpu = (u16)kprw_cpu_fast();
	rec->probe = pi;
	u8 *d = (u8 *)(rec + 1);
	if (ext) {
		struct kprw_crec_ext *x = (struct kprw_crec_ext *)d;
		x->type = type;
		x->event_id = event_id;
		x->ip = ip;
		x->ts_ns = w->now;
		rec->ts_hi = 0xffff;
		rec->ts_lo = ~0u;
		d += sizeof *x;
	} else {
		u64 rel = w->now - kprw_rt.ts_base;
		rec->ts_hi = (u16)(rel >> 32);
		rec->ts_lo = (u32)rel;
	}
	if (ret) {
		__builtin_memcpy(d, &ret_ip, 8);
		d += 8;
	}
	return d;
}

/* need_ext: a record of probe pi at time now must carry its event and site */
static inline int need_ext(u64 now)
{
	u64 rel = now - kprw_rt.ts_base;
	return unlikely(rel - 1 >= TS_MAX - 2 || kprw_rt.rec_ext);
}

/* (the writers of records that filters judge: rt_dispatch.c, rt_livedef.c) */
/* filter_env fills what the event's filter reads besides the data */
static inline __attribute__((always_inline)) void filter_env(struct kprw_fenv *e, u32 needs, u32 tid,
							      const char *comm, u32 id, u64 ip, u64 ret_ip, u64 now)
{
	e->ts = now;
	e->tid = tid;
	e->comm = comm;
	e->type = id;
	e->ip = ip;
	e->ret_ip = ret_ip;
	e->bias = kprw_rt.bias;
	e->cpu = (needs & KPRW_FNEED_CPU) ? kprw_cpu_fast() : 0;
	e->regs = NULL;
	e->fast = 0;
	e->synthq = NULL;
}

#pragma GCC visibility pop
#endif
