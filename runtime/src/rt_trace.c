/*
 * rt_trace.c - the trace file: a MAP_SHARED file every thread and process of the run
 * appends to (fork children share the mapping; exec'd rewritten programs open the same
 * path again). The record area is given out in blocks (one atomic fetch-add on the
 * header's head per block); a thread writes its records into its own block back to back
 * with no atomic operation, each committed with a last store, so nothing is lost on a
 * crash, abort or _exit: the kernel owns the pages. Readers merge the blocks by
 * timestamp, as the kernel's tracer merges its per-CPU buffers. The file also holds
 * per-image {hit, nmissed} counters (kprobe_profile), shared the same way; a probe's hit
 * that writes a record is counted by the record.
 */
#include "rt.h"

#define O_RDWR 02
#define O_CREAT 0100
#define O_NOFOLLOW 0400000
#define O_CLOEXEC 02000000
#define LOCK_EX 2
#define LOCK_UN 8

static void warn(const char *what, const char *path, long err)
{
	kprw_puts("kprewrite: trace file ");
	kprw_puts(path);
	kprw_puts(": ");
	kprw_puts(what);
	if (err) {
		kprw_puts(" (errno ");
		kprw_put_dec((unsigned long)-err);
		kprw_puts(")");
	}
	kprw_puts("; tracing off\n");
}

/* Populating ahead: the first write to each page of the record area faults, and a fault
 * on a shared file page costs ~1-10 us here (ext4 worst), i.e. up to ~270 ns per record.
 * MADV_POPULATE_WRITE (Linux 5.14) makes the pages of a whole chunk present and writable
 * in one call, ~10x cheaper per page on ext4; the writer whose record crosses into chunk
 * k populates chunk k+1, so records land on present pages. Older kernels say EINVAL and
 * records fault as before. */
#define CHUNK_SHIFT 17 /* 128 KiB */
#define MADV_POPULATE_WRITE 23

static void populate(u64 off, u64 len)
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

/* map_add remembers a mapping of the trace file (start-up, single-threaded) */
static void map_add(long addr, u64 len)
{
	if (kprw_rt.ntrace_maps < ARRAY_SIZE(kprw_rt.trace_maps)) {
		kprw_rt.trace_maps[kprw_rt.ntrace_maps].addr = (uptr)addr;
		kprw_rt.trace_maps[kprw_rt.ntrace_maps].len = len;
		kprw_rt.ntrace_maps++;
	}
}

/* kprw_trace_fault: a SIGBUS at addr (rt_fault.c). In a mapping of the trace file, the
 * file shrank under the program (log rotation's copytruncate, ": > f.trace"): its pages
 * past the new end fault at every access. The trace file's mappings become anonymous
 * memory, once, so the faulting write and every later one land in memory; new blocks
 * are refused (each later record is counted in kprewrite_rt_stats.lost), threads give
 * up their blocks, and one line says so. Returns 1 when it was such a fault (the
 * instruction is retried), 0 when the fault is not the trace file's. */
int kprw_trace_fault(uptr addr)
{
	u32 k, n = kprw_rt.ntrace_maps;
	for (k = 0; k < n; k++)
		if (addr - kprw_rt.trace_maps[k].addr < kprw_rt.trace_maps[k].len)
			break;
	if (k == n)
		return 0;
	if (__atomic_exchange_n(&kprw_rt.trace_detached, 1, __ATOMIC_ACQ_REL))
		return 1; /* another thread is replacing them: retry until it has */
	kprw_rt.trace_data_size = 0; /* new_block refuses, populate does nothing */
	for (u32 i = 0; kprw_tblk_tab && i < KPRW_NTCTX; i++)
		__atomic_store_n(&kprw_tblk_tab[i].rec_end, 0, __ATOMIC_RELAXED);
	for (k = 0; k < n; k++)
		sys6(SYS_mmap, (long)kprw_rt.trace_maps[k].addr, (long)kprw_rt.trace_maps[k].len, 3,
		     0x22 /* MAP_PRIVATE | MAP_ANONYMOUS */ | 0x10 /* MAP_FIXED */, -1, 0);
	kprw_puts("kprewrite: trace file ");
	kprw_puts(kprw_rt.trace_path ? kprw_rt.trace_path : "?");
	kprw_puts(" shrank while the program ran (truncated?): later records and counts are lost\n");
	return 1;
}

#define SYS_pwrite64 18

/* add_desc appends the image description frame (kprw_header.desc) at the end of the
 * file, which grows; the caller holds the file lock. Returns its offset, 0 if none. */
static u64 add_desc(long fd)
{
	const struct kprw_header *hdr = kprw_rt.hdr;
	struct k_stat st;
	if (!hdr->desc || !hdr->desc_size)
		return 0;
	kprw_memset(&st, 0, sizeof st);
	if (sys2(SYS_fstat, fd, (long)&st) < 0)
		return 0;
	u64 off = ((u64)st.st_size + 7) & ~7ull, done = 0;
	const u8 *p = (const u8 *)RT_ADDR(hdr->desc);
	while (done < hdr->desc_size) {
		long n = sys4(SYS_pwrite64, fd, (long)(p + done), (long)(hdr->desc_size - done), (long)(off + done));
		if (n <= 0)
			return 0;
		done += (u64)n;
	}
	return off;
}

static void warn_counters(const char *what)
{
	kprw_puts("kprewrite: trace file ");
	kprw_puts(what);
	kprw_puts("\n");
}

/* fill_zero writes zeros over [off, off+len) of the file with pwritev. Pages a new file
 * will have touched through the mapping are written this way first: on ext4 the first
 * write fault on a hole of a file costs ~2 ms here (a write(2) of the same page ~20 us),
 * which would double the start-up time of a short program. */
#define SYS_pwritev 296
static const u8 zero_page[4096];

static void fill_zero(long fd, u64 off, u64 len)
{
	struct k_iovec iov[16];
	for (u32 i = 0; i < 16; i++) {
		iov[i].base = (void *)zero_page;
		iov[i].len = sizeof zero_page;
	}
	while (len) {
		u64 n = len < sizeof iov / sizeof iov[0] * sizeof zero_page ? len : sizeof iov / sizeof iov[0] * sizeof zero_page;
		u32 k = (u32)((n + sizeof zero_page - 1) / sizeof zero_page);
		iov[k - 1].len = n - (u64)(k - 1) * sizeof zero_page;
		long r = sys6(SYS_pwritev, fd, (long)iov, k, (long)off, 0, 0);
		iov[k - 1].len = sizeof zero_page;
		if (r <= 0)
			return;
		off += (u64)r;
		len -= (u64)r;
	}
}

/* reserve_blocks allocates the file's blocks for [off, off+len): a page of a mapped file
 * without blocks, written when the disk is full, is a SIGBUS, which would kill the
 * traced program; a reserved file never runs out. A file system that cannot reserve
 * (EOPNOTSUPP) is used as before. Returns 0 or a negative errno. */
#define SYS_fallocate 285
#define K_EOPNOTSUPP 95
static long reserve_blocks(long fd, u64 off, u64 len)
{
	long r = sys4(SYS_fallocate, fd, 0, (long)off, (long)len);
	return r == -K_EOPNOTSUPP ? 0 : r;
}

/* append_counters gives the image need bytes (counters, ext record, control area) at
 * the end of the file when the counters area is full (a small rewritten program created
 * the file, then exec'd a big one): page-aligned, zero (ftruncate), the ext record written with pwrite. Returns the file
 * offset, 0 on failure. The caller holds the file lock. */
static u64 append_counters(long fd, u64 need)
{
	struct k_stat st;
	kprw_memset(&st, 0, sizeof st);
	if (sys2(SYS_fstat, fd, (long)&st) < 0)
		return 0;
	u64 off = ((u64)st.st_size + 4095) & ~4095ull;
	u64 len = (need + 4095) & ~4095ull;
	if (sys2(SYS_ftruncate, fd, (long)(off + len)) < 0)
		return 0;
	if (reserve_blocks(fd, off, len) < 0) {
		sys2(SYS_ftruncate, fd, st.st_size);
		return 0;
	}
	fill_zero(fd, off, len);
	return off;
}

/* Per-CPU shards of an image's hit counters (rt_rseq.c): at most this much is made
 * present at start-up, the rest faults in at first use */
#define SHARDS_POPULATE_MAX (4ull << 20)
#define SYS_pread64 17

/* append_shards gives a new image n zero shards of stride bytes at the end of the file;
 * the caller holds the file lock. Returns the file offset, 0 on failure. */
static u64 append_shards(long fd, u64 n, u64 stride)
{
	struct k_stat st;
	kprw_memset(&st, 0, sizeof st);
	if (sys2(SYS_fstat, fd, (long)&st) < 0)
		return 0;
	u64 off = ((u64)st.st_size + 4095) & ~4095ull;
	if (sys2(SYS_ftruncate, fd, (long)(off + n * stride)) < 0)
		return 0;
	if (reserve_blocks(fd, off, n * stride) < 0) {
		sys2(SYS_ftruncate, fd, st.st_size);
		return 0;
	}
	if (n * stride <= SHARDS_POPULATE_MAX) /* the CPUs' shards: no first write fault on a */
		fill_zero(fd, off, (n - 1) * stride); /* hole (see fill_zero); the last is rarely used */
	return off;
}

/* map_shards maps the image's shards, if the file has enough of them and this thread
 * found its rseq area, and switches count-only detours to per-CPU counting */
static void map_shards(long fd, const struct kprw_trace_image_ext *ext)
{
	u64 stride = ext->shards_stride, n = ext->shards_n;
	if (!kprw_rt.rseq_shards || !ext->shards_off || n < kprw_rt.rseq_shards || (ext->shards_off & 4095) ||
	    (stride & 4095) || stride < (u64)kprw_rt.hdr->nprobes * 8 || n * stride / n != stride)
		return;
	long r = sys6(SYS_mmap, 0, (long)(n * stride), 3, 1 /* MAP_SHARED */, fd, (long)ext->shards_off);
	if (r < 0 && r > -4096)
		return;
	map_add(r, n * stride);
	if (n * stride <= SHARDS_POPULATE_MAX) /* the CPUs' shards, present and writable */
		sys3(SYS_madvise, r, (long)((kprw_rt.rseq_shards - 1) * stride), MADV_POPULATE_WRITE);
	kprw_rseq_arm((u8 *)r, stride);
}

/* counts_only: the tables hold nothing but count-only detours and int3 probes of
 * count-only events, and per-CPU counting is possible: every hit can count in a shard
 * (kprw_count_hit), so the counters (python3.11 with a probe on every function: 40
 * pages, ~90 us to write and populate) are only for misses and need no preparing. A
 * page of them written late in a run, first, can cost milliseconds on ext4 (its
 * page_mkwrite), which is why the shards are prepared. */
static int counts_only(void)
{
	return kprw_rt.rseq_shards && (kprw_rt.has & KPRW_HAS_COUNT) &&
	       !(kprw_rt.has & (KPRW_HAS_RECORDS | KPRW_HAS_USER | KPRW_HAS_KRET | KPRW_HAS_GATED));
}

/* file_span is [off, off+len) of the file: in the mapping of its first mapped bytes,
 * or mapped on its own; NULL when it cannot be */
static u8 *file_span(long fd, u8 *map, u64 mapped, u64 off, u64 len)
{
	if (off <= mapped && len <= mapped - off)
		return map + off;
	u64 pg = off & ~4095ull;
	long r = sys6(SYS_mmap, 0, (long)(off - pg + len), 3, 1 /* MAP_SHARED */, fd, (long)pg);
	if (r < 0 && r > -4096)
		return NULL;
	map_add(r, off - pg + len);
	return (u8 *)r + (off - pg);
}

/* write_ctl writes a new image's control area (its events' first KPRW_CTL_* flags and
 * its triggers' counts, rt_trigger.c) at off; 0 when it could not */
static int write_ctl(long fd, u64 off, u64 size)
{
	u8 *buf = kprw_mmap_anon(size);
	if (!buf)
		return 0;
	kprw_ctl_fill(buf);
	long n = sys4(SYS_pwrite64, fd, (long)buf, (long)size, (long)off);
	sys2(SYS_munmap, (long)buf, (long)size);
	return n == (long)size;
}

static void register_image(struct kprw_trace_hdr *h, long fd, u64 mapped)
{
	const struct kprw_header *hdr = kprw_rt.hdr;
	/* the counters, then struct kprw_trace_image_ext, then the control area */
	u64 cbytes = (u64)hdr->nprobes * 16;
	u64 ctl = (kprw_rt.has & KPRW_HAS_RECORDS) ? kprw_ctl_size() : 0;
	u64 need = cbytes + sizeof(struct kprw_trace_image_ext) + ctl;
	struct kprw_trace_image *im = NULL;

	for (u32 i = 0; i < h->nimages && i < KPRW_TRACE_MAX_IMAGES; i++)
		if (h->images[i].image_id == hdr->image_id && h->images[i].nprobes == hdr->nprobes)
			im = &h->images[i];
	/* each image's counters start on a page of the file, so they can be mapped over
	 * the image's counter window */
	u64 start = (h->counters_used + 4095) & ~4095ull;
	struct kprw_trace_image_ext ext;
	kprw_memset(&ext, 0, sizeof ext);
	if (im && (im->flags & KPRW_TIF_EXT)) /* registered by an earlier process: its shards */
		sys4(SYS_pread64, fd, (long)&ext, sizeof ext, (long)(im->counters_off + cbytes));
	if (!im && h->nimages < KPRW_TRACE_MAX_IMAGES) {
		u64 off = 0;
		if (start <= h->counters_size && need <= h->counters_size - start) {
			off = h->counters_off + start;
			h->counters_used = start + need;
			if (!counts_only())
				fill_zero(fd, off, (need + 4095) & ~4095ull); /* fresh pages of the area */
		} else {
			off = append_counters(fd, need); /* the area is full: grow the file */
		}
		if (off) {
			ext.desc_off = add_desc(fd);
			ext.desc_size = ext.desc_off ? hdr->desc_size : 0;
			if (kprw_rt.rseq_shards) { /* per-CPU counting (rt_rseq.c) */
				u64 stride = ((u64)hdr->nprobes * 8 + 4095) & ~4095ull;
				ext.shards_off = append_shards(fd, kprw_rt.rseq_shards, stride);
				ext.shards_stride = ext.shards_off ? stride : 0;
				ext.shards_n = ext.shards_off ? kprw_rt.rseq_shards : 0;
			}
			if (ctl && write_ctl(fd, off + cbytes + sizeof ext, ctl))
				ext.ctl_size = (u32)ctl;
			if (sys4(SYS_pwrite64, fd, (long)&ext, sizeof ext, (long)(off + cbytes)) == (long)sizeof ext) {
				im = &h->images[h->nimages];
				im->image_id = hdr->image_id;
				im->nprobes = hdr->nprobes;
				im->counters_off = off;
				im->flags = KPRW_TIF_EXT | (ext.ctl_size ? KPRW_TIF_SPARE : 0);
				h->nimages++;
			}
		}
	}
	kprw_rt.rec_ext = 1; /* until the file is known to describe the image */
	if (!im) {
		warn_counters("has no room for this program's counters (counted in memory only)");
		return;
	}
	/* records name the image's entry, and count their probes' hits there */
	kprw_rt.trace_image = (u32)(im - h->images);
	kprw_rt.rec_hits = 1;
	kprw_rt.rec_ext = !ext.desc_off || !ext.desc_size;
	map_shards(fd, &ext);
	/* with the shards armed, every hit that is counted (a count-only image's, and one a
	 * record does not stand for: filtered out, soft-disabled, judged by triggers) counts
	 * in this CPU's shard: no locked add on a line every thread and process of the file
	 * shares; the file's counters keep the misses */
	if (kprewrite_rt_rseq_off)
		kprw_rt.hits_per_cpu = 1;
	if (ctl && ext.ctl_size == ctl) { /* else (an older runtime's image) in memory: kprw_trig_init */
		u8 *p = file_span(fd, (u8 *)h, mapped, im->counters_off + cbytes + sizeof ext, ctl);
		if (p)
			kprw_ctl_attach(p);
	}
	int lazy = counts_only() && kprewrite_rt_rseq_off != 0;
	if (hdr->counters && !(im->counters_off & 4095)) {
		/* the file's counters over the window: counting code addresses them at link-time
		 * addresses (count-only detours), everything else through ctr_base */
		long r = sys6(SYS_mmap, (long)RT_ADDR(hdr->counters), (long)hdr->counters_size, 3,
			      1 /* MAP_SHARED */ | 0x10 /* MAP_FIXED */, fd, (long)im->counters_off);
		if (r == (long)RT_ADDR(hdr->counters)) {
			map_add(r, hdr->counters_size);
			/* the counters' pages present and writable in one call, not a write fault
			 * (and the file system's page_mkwrite) at the first hit of each */
			if (!lazy)
				sys3(SYS_madvise, r, (long)((cbytes + 4095) & ~4095ull), MADV_POPULATE_WRITE);
			return; /* ctr_base is the window already */
		}
		/* whatever a failed MAP_FIXED left there, the window is memory again */
		sys6(SYS_mmap, (long)RT_ADDR(hdr->counters), (long)hdr->counters_size, 3,
		     0x22 /* MAP_PRIVATE | MAP_ANONYMOUS */ | 0x10, -1, 0);
	}
	for (u32 i = 0; i < kprw_rt.npoints; i++)
		if (kprw_rt.points[i].pflags & KPRW_PF_COUNT) {
			warn_counters("counters could not be mapped: count-only probes count in memory only");
			break;
		}
	if (im->counters_off <= mapped && cbytes <= mapped - im->counters_off) {
		kprw_rt.ctr_base = (u8 *)h + im->counters_off;
	} else { /* appended after the file was mapped: a mapping of its own */
		u64 pg = im->counters_off & ~4095ull;
		long r = sys6(SYS_mmap, 0, (long)(im->counters_off - pg + cbytes), 3, 1 /* MAP_SHARED */, fd, (long)pg);
		if (r < 0 && r > -4096) {
			warn_counters("counters could not be mapped (counted in memory only)");
			return;
		}
		map_add(r, im->counters_off - pg + cbytes);
		kprw_rt.ctr_base = (u8 *)r + (im->counters_off - pg);
	}
	kprw_rt.ctr_stride = 16;
	uptr lo = (uptr)kprw_rt.ctr_base & ~4095ul, hi = ((uptr)kprw_rt.ctr_base + cbytes + 4095) & ~4095ul;
	sys3(SYS_madvise, (long)lo, (long)(hi - lo), MADV_POPULATE_WRITE); /* as above */
}

/* counters_area sizes the counters area of a new file: room for the creating image's
 * counters and ext record four times over (later images of the run, e.g. exec'd
 * rewritten programs, register into the same area), at least KPRW_TRACE_COUNTERS_SIZE,
 * the slack capped at 256 MiB (the file is sparse; untouched pages cost nothing). A file
 * records its size in counters_size, so readers and later runtimes never assume it. */
#define COUNTERS_SLACK_MAX (256ull << 20)

static u64 counters_area(void)
{
	u64 ctl = (kprw_rt.has & KPRW_HAS_RECORDS) ? kprw_ctl_size() : 0;
	u64 need = ((u64)kprw_rt.hdr->nprobes * 16 + sizeof(struct kprw_trace_image_ext) + ctl + 4095) & ~4095ull;
	u64 slack = 3 * need;
	if (slack > COUNTERS_SLACK_MAX)
		slack = COUNTERS_SLACK_MAX;
	u64 area = need + slack;
	if (area < KPRW_TRACE_COUNTERS_SIZE)
		area = KPRW_TRACE_COUNTERS_SIZE;
	return (area + 4095) & ~4095ull;
}

/* The record area is given out in blocks: a thread's first block is one granule (4 KiB,
 * the header's block_size: a short-lived process or thread that writes a few records
 * leaves at most that unused), its later ones big_block() bytes (one atomic operation
 * per ~600 records). Blocks are whole granules, granule-aligned; a block a thread has
 * not filled when it ends stays zero, which readers skip a granule at a time. */
#define GRANULE 4096ull
#define BIG_BLOCK (64ull << 10)

/* big_block: 64 KiB, less in a small file (at least 16 of them fit), never less than two
 * granules (more than the largest record: reserve relies on it) */
static u64 big_block(u64 size)
{
	u64 bs = BIG_BLOCK;
	while (bs > 2 * GRANULE && size / bs < 16)
		bs >>= 1;
	return bs;
}

/* ring_ok checks a ring file's geometry (kprewrite record made it): blocks of a power of
 * two bytes, at least two granules, filling the record area, the queue inside the
 * file's first mapping */
static int ring_ok(const struct kprw_trace_hdr *h, u64 total)
{
	u64 n = h->ring_nblocks, bs = h->ring_bs;
	if (!n)
		return 1;
	return bs >= 2 * GRANULE && bs <= (1ull << 30) && !(bs & (bs - 1)) && n * bs == h->data_size &&
	       !(h->ring_queue_off & 7) && h->ring_queue_off >= sizeof *h && h->ring_queue_off <= total &&
	       n * 8 <= total - h->ring_queue_off;
}

/* unmap_trace gives up the file's mapping kprw_trace_open made (start-up: nothing
 * else has it yet) */
static void unmap_trace(u8 *map, u64 total)
{
	sys2(SYS_munmap, (long)map, (long)total);
	kprw_rt.ntrace_maps = 0;
}

void kprw_trace_open(const char *path, u64 size, int prefault, int records)
{
	int flags = O_RDWR | O_CREAT | O_CLOEXEC | (kprw_rt.secure ? O_NOFOLLOW : 0);
	long fd = sys3(SYS_open, (long)path, flags, 0644);
	struct k_stat st;
	u8 *map = NULL;
	u64 total, csize = 0;

	if (fd < 0) {
		warn("cannot open", path, fd);
		return;
	}
	sys2(SYS_flock, fd, LOCK_EX);
	kprw_memset(&st, 0, sizeof st);
	long r = sys2(SYS_fstat, fd, (long)&st);
	if (r < 0) {
		warn("cannot stat", path, r);
		goto out;
	}
	if (st.st_size == 0) {
		if (size < 4096)
			size = 4096;
		size = (size + 4095) & ~4095ull;
		csize = counters_area();
		total = KPRW_TRACE_HDR_SIZE + size + csize;
		r = sys2(SYS_ftruncate, fd, (long)total);
		if (r < 0) {
			warn("cannot size", path, r);
			goto out;
		}
		/* an image that only counts reserves the header and the counters, not the record
		 * area it never writes (64 MiB of extents on ext4, of memory on tmpfs, every
		 * first run): the first image that records reserves it (KPRW_TRACE_UNRESERVED) */
		r = reserve_blocks(fd, 0, records ? total : KPRW_TRACE_HDR_SIZE);
		if (r >= 0 && !records)
			r = reserve_blocks(fd, KPRW_TRACE_HDR_SIZE + size, csize);
		if (r < 0) { /* a full disk: no tracing, rather than a SIGBUS at the first record */
			sys2(SYS_ftruncate, fd, 0);
			warn("has no space for its record area (KPREWRITE_TRACE_SIZE sets a smaller one)", path, r);
			goto out;
		}
		fill_zero(fd, 0, KPRW_TRACE_HDR_SIZE);
		if (records) /* the chunks populate() makes present first */
			fill_zero(fd, KPRW_TRACE_HDR_SIZE, size < (2ull << CHUNK_SHIFT) ? size : 2ull << CHUNK_SHIFT);
	} else {
		total = (u64)st.st_size;
	}
	if (total < KPRW_TRACE_HDR_SIZE) {
		warn("is not a kprewrite trace file", path, 0);
		goto out;
	}
	r = sys6(SYS_mmap, 0, (long)total, 3, 1 /* MAP_SHARED */, fd, 0);
	if (r < 0 && r > -4096) {
		warn("cannot map", path, r);
		goto out;
	}
	map = (u8 *)r;
	map_add(r, total);
	struct kprw_trace_hdr *h = (struct kprw_trace_hdr *)map;
	if (st.st_size == 0) {
		h->version = KPRW_TRACE_VERSION;
		h->data_off = KPRW_TRACE_HDR_SIZE;
		h->data_size = size;
		h->counters_off = KPRW_TRACE_HDR_SIZE + size;
		h->counters_size = csize;
		h->block_size = GRANULE;
		h->clock_id = 1;
		struct k_timespec ts = {0, 0};
		sys2(SYS_clock_gettime, 0, (long)&ts);
		h->created_real_ns = (u64)ts.sec * 1000000000ull + (u64)ts.nsec;
		h->created_mono_ns = kprw_now_ns();
		/* a second before: a process whose clock runs a little behind the creator's
		 * still writes times after it */
		h->ts_base = h->created_mono_ns > 1000000000ull ? h->created_mono_ns - 1000000000ull : 0;
		h->flags = records ? 0 : KPRW_TRACE_UNRESERVED;
		kprw_memcpy(h->magic, KPRW_TRACE_MAGIC, 8);
	} else if (kprw_strncmp(h->magic, KPRW_TRACE_MAGIC, 8) != 0 || h->version != KPRW_TRACE_VERSION ||
		   h->data_off != KPRW_TRACE_HDR_SIZE || h->data_size > total ||
		   h->counters_off < KPRW_TRACE_HDR_SIZE + h->data_size ||
		   h->counters_off > total || h->counters_size > total - h->counters_off ||
		   h->counters_used > h->counters_size || h->block_size != GRANULE || !ring_ok(h, total)) {
		warn("is not a kprewrite trace file (or another version)", path, 0);
		unmap_trace(map, total);
		goto out;
	}
	if (records && (h->flags & KPRW_TRACE_UNRESERVED)) {
		r = reserve_blocks(fd, h->data_off, h->data_size);
		if (r < 0) {
			warn("has no space for its record area (KPREWRITE_TRACE_SIZE sets a smaller one)", path, r);
			unmap_trace(map, total);
			goto out;
		}
		h->flags &= ~KPRW_TRACE_UNRESERVED;
	}
	register_image(h, fd, total);
	kprw_rt.trace_mapped = total;
	kprw_rt.trace = h;
	kprw_ctl_install(fd, h);
	kprw_rt.ctl_gen = &h->ctl_gen;
	kprw_rt.tracing_off = &h->tracing_off;
	kprw_rt.trace_path = path;
	kprw_rt.trace_data = map + h->data_off;
	kprw_rt.trace_data_size = h->data_size;
	kprw_rt.trace_block = big_block(h->data_size);
	kprw_rt.ts_base = h->ts_base;
	kprw_rt.populate = records; /* count-only runs write no records: nothing to populate */
	if (h->ring_nblocks) {
		/* kprewrite record's ring: its blocks are reused, so making them all present
		 * once is what keeps a record from ever paying for a page */
		kprw_rt.ring_queue = (u64 *)(map + h->ring_queue_off);
		kprw_rt.ring_over = (h->ring_flags & KPRW_RING_OVERWRITE) != 0;
		kprw_rt.ring_nblocks = h->ring_nblocks;
		kprw_rt.trace_block = h->ring_bs;
		kprw_rt.ring_mapped = kprw_mmap_anon(((u64)h->ring_nblocks + 63) / 64 * 8);
		kprw_rt.populate = 0;
	} else if (records && prefault) {
		populate(0, h->data_size);
	} else if (records) {
		u64 head = atomic_load(&h->head);
		populate(head & ~((1ull << CHUNK_SHIFT) - 1), 2ull << CHUNK_SHIFT);
	}
out:
	sys2(SYS_flock, fd, LOCK_UN);
	sys1(SYS_close, fd);
}

/* who is the thread writing a record: from its context, or from system calls when the
 * context table is full */
struct who {
	u64 now;
	u32 tid;
	char comm[16];
};

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

/* ring_take hands out a free block of the ring (ring mode: kprewrite record drains the
 * ring and gives the blocks back through the queue). The queue entry is read before the
 * take is claimed: the recorder refills entry t only once take is past t. Returns the
 * block's offset and its seq, or ~0 when the ring has no free block (the recorder fell
 * behind, or is gone): the record is lost, counted. */
static u64 ring_take(u32 *seq)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	u64 n = kprw_rt.ring_nblocks;
	u64 t = __atomic_load_n(&h->ring_take, __ATOMIC_RELAXED);
	for (;;) {
		if (t >= __atomic_load_n(&h->ring_give, __ATOMIC_ACQUIRE))
			return ~0ull;
		u64 e = __atomic_load_n(&kprw_rt.ring_queue[t % n], __ATOMIC_ACQUIRE);
		if ((e >> 32) != ((t / n) & 0xffffffffull))
			return ~0ull; /* its giver has not stored it yet */
		if (__atomic_compare_exchange_n(&h->ring_take, &t, t + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
			u32 blk = (u32)e;
			/* after the take: a recorder that finished (and may give the ring's pages
			 * back) saw this take, or this writer sees that it finished */
			if (blk >= n || (__atomic_load_n(&h->ring_flags, __ATOMIC_SEQ_CST) & KPRW_RING_DONE))
				return ~0ull;
			*seq = (u32)t;
			u64 off = (u64)blk * kprw_rt.trace_block;
			/* the block's pages present and writable in this process, once: a ring
			 * block is reused, so after this no record pays for a page */
			u64 *bits = kprw_rt.ring_mapped;
			if (bits && !(__atomic_load_n(&bits[blk / 64], __ATOMIC_RELAXED) & (1ull << (blk % 64)))) {
				__atomic_fetch_or(&bits[blk / 64], 1ull << (blk % 64), __ATOMIC_RELAXED);
				sys3(SYS_madvise, (long)(kprw_rt.trace_data + off), (long)kprw_rt.trace_block, MADV_POPULATE_WRITE);
			}
			return off;
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

/* new_block takes a block for a record of size bytes (a larger one for a record larger
 * than a block) and makes it c's (none: the record has it alone; the context table is
 * full). Returns the record's place, or NULL (counted as lost). */
static __attribute__((noinline)) struct kprw_crec *new_block(u32 size, struct kprw_tctx *c, const struct who *w)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	u64 need = sizeof(struct kprw_blk) + size, off, n;
	u32 seq = 0;
	struct kprw_tblk *b = c ? kprw_tblk(c) : NULL;
	u64 old = b ? (u64)__atomic_load_n(&b->rec_end, __ATOMIC_RELAXED) << 12 : 0;
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
		off = ring_take(&seq);
		if (left) {
			atomic_store(&left->done, 1); /* the recorder may take it back */
			if (kprw_rt.ring_over)
				ring_give(old - n);
		}
		if (off == ~0ull) {
			if (b) /* nothing more into the block left */
				__atomic_store_n(&b->rec_end, 0, __ATOMIC_RELAXED);
			goto lost;
		}
		if (kprw_rt.ring_over) { /* its old records go: readers see no magic first */
			struct kprw_blk *b = (struct kprw_blk *)(kprw_rt.trace_data + off);
			atomic_store(&b->magic, 0);
			kprw_memset((u8 *)b + 4, 0, n - 4);
		}
	} else {
		u64 bs = old ? kprw_rt.trace_block : GRANULE;
		n = ((need + bs - 1) / bs) * bs;
		off = atomic_add(&h->head, n);
		if (off + n > kprw_rt.trace_data_size || off + n < off)
			goto lost;
		/* the writer that takes a block starting or crossing into a chunk makes the next
		 * chunk's pages present */
		if (unlikely(!(off & ((1ull << CHUNK_SHIFT) - 1)) || (off >> CHUNK_SHIFT) != ((off + n - 1) >> CHUNK_SHIFT)))
			populate((((off + n - 1) >> CHUNK_SHIFT) + 1) << CHUNK_SHIFT, 1ull << CHUNK_SHIFT);
	}
	blk_init(off, n, seq, w);
	off += sizeof(struct kprw_blk);
	if (b) {
		/* next before end: a signal handler of this thread that writes a record in
		 * between finds its place past the old end and takes a block of its own */
		__atomic_store_n(&b->rec_next, off + size, __ATOMIC_RELAXED);
		__asm__ volatile("" ::: "memory");
		__atomic_store_n(&b->rec_end, (u32)((off - sizeof(struct kprw_blk) + n) >> 12), __ATOMIC_RELAXED);
	}
	return (struct kprw_crec *)(kprw_rt.trace_data + off);
lost:
	atomic_add(&h->lost, 1);
	atomic_add(&kprewrite_rt_stats.lost, 1);
	return NULL;
}

/* reserve returns room for a record of size bytes (a multiple of 8) in the calling
 * thread's block, or NULL (counted as lost). No atomic operation: the place is taken with
 * one xadd without lock, which a signal handler of the same thread cannot split, and the
 * end is read before it, so a handler that took a new block in between makes this record
 * take one too rather than write outside its block: the place must lie in the trace_block
 * bytes before the end read (a ring's blocks are anywhere in it; a first block, smaller,
 * and a block for a larger record, are only given out by head, which grows). */
static inline struct kprw_crec *reserve(u32 size, struct kprw_tctx *c, const struct who *w)
{
	if (likely(c != NULL)) {
		struct kprw_tblk *b = kprw_tblk(c);
		u64 end = (u64)__atomic_load_n(&b->rec_end, __ATOMIC_RELAXED) << 12, bs = kprw_rt.trace_block;
		__asm__ volatile("" ::: "memory");
		u64 off = size;
		__asm__ volatile("xaddq %0, %1" : "+r"(off), "+m"(b->rec_next));
		if (likely(off - (end - bs) <= bs - size))
			return (struct kprw_crec *)(kprw_rt.trace_data + off);
	}
	return new_block(size, c, w);
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

static inline __attribute__((always_inline)) void who(struct who *w, struct kprw_tctx *c)
{
	w->now = kprw_clock_fast();
	if (likely(c != NULL)) {
		w->tid = kprw_tctx_tid_fast(c);
		if (unlikely(c->comm_ns == 0 || w->now - c->comm_ns > KPRW_COMM_REFRESH_NS))
			kprw_tctx_comm(c, w->now);
		__builtin_memcpy(w->comm, c->comm, 16); /* constant size: two moves */
	} else {
		w->tid = kprw_gettid();
		kprw_memset(w->comm, 0, 16);
		sys2(SYS_prctl, 16 /* PR_GET_NAME */, (long)w->comm);
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
	__builtin_memcpy(w->comm, c->comm, 16);
}

static inline __attribute__((always_inline)) void who_clock(struct who *w, struct kprw_tctx *c)
{
	if (w->now)
		return;
	w->now = kprw_clock_fast();
	if (unlikely(w->now - c->comm_ns > KPRW_COMM_REFRESH_NS)) {
		kprw_tctx_comm(c, w->now);
		__builtin_memcpy(w->comm, c->comm, 16);
	}
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

/* synth_write writes a synthetic event's record (KPRW_REC_SYNTH): its fields, n u64,
 * and the site of the hit whose trigger generated it */
static __attribute__((noinline)) void synth_write(u32 id, u64 site, const u64 *data, u32 n, struct kprw_tctx *c)
{
	if (!kprw_rt.trace || __atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED))
		return;
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(n * 8, 0, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, n * 8, KPRW_NO_PROBE, 0, 1, KPRW_REC_SYNTH, id, site, 0, &w);
	kprw_memcpy(d, data, n * 8);
	commit(rec, n * 8, KPRW_CREC_COMMITTED);
}

/* kprw_trace_synth writes the record of a synthetic event an onmatch() or onmax()
 * trace action generated (rt_hist.c), or keeps it in the hit's queue until the hit's
 * own record is written (synth_flush) */
void kprw_trace_synth(u32 id, u64 site, const u64 *data, u32 n, const struct kprw_fenv *e)
{
	struct kprw_synthq *q = e->synthq;
	if (n > KPRW_HIST_MAXVARS)
		return;
	if (q && q->n < KPRW_SYNTHQ) {
		q->r[q->n].id = id;
		q->r[q->n].nfields = n;
		q->r[q->n].site = site;
		kprw_memcpy(q->r[q->n].data, data, n * 8);
		q->n++;
		return;
	}
	synth_write(id, site, data, n, kprw_tctx_get());
}

/* synth_flush writes the synthetic events' records a hit's triggers queued */
static inline __attribute__((always_inline)) void synth_flush(struct kprw_synthq *q, struct kprw_tctx *c)
{
	for (u32 k = 0; unlikely(k < q->n); k++)
		synth_write(q->r[k].id, q->r[k].site, q->r[k].data, q->r[k].nfields, c);
	q->n = 0;
}

/* a record of up to this many bytes of data is fetched on the stack when its event has a
 * filter, so that a filtered-out hit writes nothing (with strings: the thread's scratch
 * buffer) */
#define FILTER_STACK 256

/* closed: no record of event e may be written now: tracing is off (traceoff) or the
 * event is soft-disabled (enable_event/disable_event, --disable with triggers) */
/* entry_sp_word is the word an entry record of a function with a return event carries:
 * the stack pointer (the word the return address is in) lets readers end the calls a
 * longjmp or a missed return left open; bit 0: that word holds the return trampoline
 * already, this entry is a tail call from a return-probed frame (this hit's own return
 * events run after its records) */
static inline __attribute__((always_inline)) u64 entry_sp_word(const struct pt_regs *regs)
{
	return (u64)regs->sp | (*(const u64 *)regs->sp == (u64)(uptr)kprewrite_rt_rettramp);
}

static inline __attribute__((always_inline)) int closed(u32 e)
{
	const u32 *ctl = kprw_rt.ev_ctl;
	return unlikely(__atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED) != 0) ||
	       (ctl && e < kprw_rt.nevents && unlikely(__atomic_load_n(&ctl[e], __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED));
}

/* trace_hit is kprw_trace_hit's body, inlined twice: without a filter or triggers (flt
 * and tg NULL, their code and buffer folded away, so the frame on the probed thread's
 * stack, a goroutine's too, stays small) and with them. With a filter or conditional
 * triggers the data is fetched where it can be seen before anything is written (the
 * scratch buffer, or this frame for a fixed size up to FILTER_STACK) and a refused hit
 * writes nothing; where neither can hold it, the record is judged where it was written
 * and a refused one is committed as KPRW_REC_DISCARD. Triggers run in the kernel's
 * order: unconditional ones before anything else, conditional ones on the fetched data
 * before the record is written, traceoff after it (written or not). */
static inline __attribute__((always_inline)) int trace_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip,
							   const u8 *edata, u32 elen, struct kprw_tctx *c,
							   const struct kprw_fprog *flt, const struct kprw_evtrig *tg)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	const struct kprw_event *ev = NULL;
	const u8 *prog = NULL;
	struct who w;

	if (p->event < kprw_rt.nevents)
		ev = &kprw_rt.events[p->event];
	if (!kprw_rt.trace) {
		kprw_trace_lost();
		return 0;
	}
	int cond = tg && tg->cond, norec = 0;
	const struct kprw_hit hit = {pi, regs, c};
	if (tg && !cond)
		kprw_triggers_run(tg, NULL);
	if ((flt || tg) && closed(p->event)) { /* (without either, kprw_trace_hit checked) */
		if (!cond)
			return 0; /* the caller counts the hit */
		/* conditional triggers still see the hit (the kernel's temp buffer); the record
		 * is not written when tracing is off, and not when the event is soft-disabled
		 * after its triggers ran */
		norec = __atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED) != 0;
	}
	/* a hit its filter or triggers may end takes the clock when it is to be written,
	 * unless they read the time or the name (which the clock keeps fresh), or the
	 * event's data may hold the name (data of no fixed size: $comm is a string) */
	u32 needs = (flt ? flt->needs : 0) | (tg ? tg->needs : 0);
	if ((flt || cond) && !(needs & (KPRW_FNEED_TS | KPRW_FNEED_COMM)) && kprw_rt.ev_fixed && ev &&
	    kprw_rt.ev_fixed[p->event] >= 0)
		who_noclock(&w, c);
	else
		who(&w, c);
	u32 dlen = 0;
	int fast = kprw_fast_ok(c);
	const u8 *once = NULL; /* the record's data, fetched into the thread's scratch buffer */
	if (ev && ev->fetch_len) {
		prog = (const u8 *)RT_ADDR(ev->fetch);
		/* a fixed size is known without running the program: it runs once, into the
		 * record; else once into the scratch buffer (each memory read once), or, with
		 * none, measured first (strings are read to find their length) */
		long fixed = kprw_rt.ev_fixed ? kprw_rt.ev_fixed[p->event] : kprw_fetch_fixed_size(prog, ev->fetch_len);
		if (fixed >= 0) {
			dlen = (u32)fixed; /* 0: no arguments, nothing to run */
		} else if (c && kprw_rt.scratch) {
			u8 *buf = kprw_rt.scratch + (uptr)(c - kprw_tctx_tab) * KPRW_MAX_REC_DATA;
			long m = kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, buf, KPRW_MAX_REC_DATA,
						fast);
			if (m > 0)
				dlen = (u32)m;
			once = buf;
		} else {
			long m = kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, NULL,
						KPRW_MAX_REC_DATA, fast);
			if (m > 0)
				dlen = (u32)m;
		}
	}
	struct kprw_fenv fe;
	u8 tmp[FILTER_STACK];
	u32 tt = 0;
	struct kprw_synthq sq;
	sq.n = 0;
	if (flt || cond) {
		filter_env(&fe, needs, w.tid, w.comm, ev->id, kprw_rt.points[p->point].site + kprw_rt.bias, ret_ip, w.now);
		fe.regs = regs; /* stacktrace keys */
		fe.fast = fast;
		if (!once && dlen <= sizeof tmp && kprw_rt.ev_fixed) {
			if (dlen && kprw_rt.ev_plan && kprw_rt.ev_plan[p->event].n != ~0u && elen == 0)
				kprw_fetch_plan_run(&kprw_rt.ev_plan[p->event], regs, tmp, fast);
			else if (dlen && kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, tmp, dlen, fast) < 0)
				kprw_memset(tmp, 0, dlen);
			once = tmp;
		}
		if (once || norec) {
			fe.data = once;
			fe.dlen = once ? dlen : 0; /* no buffer and no record: conditions see no data */
			fe.synthq = &sq;
			if (cond)
				tt = kprw_triggers_run(tg, &fe);
			fe.synthq = NULL;
			int keep = !norec && !(cond && closed(p->event)) && (!flt || kprw_filter_match(flt, &fe));
			if (!keep) {
				synth_flush(&sq, c);
				if (tt)
					kprw_triggers_post(tg, tt, &hit);
				return 0; /* the caller counts the hit */
			}
			flt = NULL;
			cond = 0;
		}
	}
	who_clock(&w, c);
	int ret = type == KPRW_REC_KRETPROBE, ext = !ev || type > KPRW_REC_KRETPROBE || need_ext(w.now);
	u64 word = ret_ip;
	if (type == KPRW_REC_KPROBE && kprw_rt.spev && unlikely(kprw_rt.spev[p->point / 64] >> (p->point % 64) & 1)) {
		word = entry_sp_word(regs); /* the entry of a function with a return event */
		ret = 1;
	}
	struct kprw_crec *rec = reserve(rec_size(dlen, ret, ext), c, &w);
	if (!rec) {
		synth_flush(&sq, c);
		if (tt)
			kprw_triggers_post(tg, tt, &hit);
		return 0;
	}
	u8 *d = fill(rec, dlen, pi, ret, ext, type, ev ? ev->id : KPRW_NO_EVENT, kprw_rt.points[p->point].site, word,
		     &w);
	long got = 0;
	if (once) {
		kprw_memcpy(d, once, dlen);
		got = dlen;
	} else if (dlen && kprw_rt.ev_plan && kprw_rt.ev_plan[p->event].n != ~0u && elen == 0) {
		kprw_fetch_plan_into(&kprw_rt.ev_plan[p->event], regs, d, fast);
		got = dlen;
	} else if (dlen) {
		got = kprw_fetch_run(prog, ev->fetch_len, regs, edata, elen, w.comm, d, dlen, fast);
		if (got < 0)
			got = 0;
		/* bytes past got are still zero */
	}
	if (flt || cond) {
		fe.data = d;
		fe.dlen = (u32)got;
		if (cond)
			tt = kprw_triggers_run(tg, &fe);
		if ((cond && closed(p->event)) || (flt && !kprw_filter_match(flt, &fe))) {
			commit(rec, (u32)got, KPRW_CREC_COMMITTED | KPRW_CREC_DISCARDED);
			if (tt)
				kprw_triggers_post(tg, tt, &hit);
			return 0;
		}
	}
	commit(rec, (u32)got, KPRW_CREC_COMMITTED);
	synth_flush(&sq, c);
	if (tt)
		kprw_triggers_post(tg, tt, &hit);
	return (int)kprw_rt.rec_hits;
}

/* hist_hit is trace_hit for the hit of an event that writes no record now (switched
 * off, or tracing off) and whose triggers are all hist triggers reading neither the
 * time nor the name: the data fetched by its plan onto the stack, the histograms
 * updated, nothing else (a histogram's update is most of what such a hit costs) */
static __attribute__((noinline)) int hist_hit(u32 pi, struct pt_regs *regs, struct kprw_tctx *c,
					      const struct kprw_evtrig *tg, u32 e, u32 dlen)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	u8 tmp[FILTER_STACK];
	int fast = kprw_fast_ok(c);
	if (dlen)
		kprw_fetch_plan_run(&kprw_rt.ev_plan[e], regs, tmp, fast);
	struct kprw_fenv fe; /* no time, no name: the histograms read neither */
	filter_env(&fe, tg->needs, likely(c != NULL) ? kprw_tctx_tid_fast(c) : kprw_gettid(), NULL,
		   kprw_rt.events[e].id, kprw_rt.points[p->point].site + kprw_rt.bias, 0, 0);
	fe.data = tmp;
	fe.dlen = dlen;
	fe.regs = regs;
	fe.fast = fast;
	kprw_triggers_run(tg, &fe); /* (hist triggers only: none runs after the record) */
	return 0; /* the caller counts the hit */
}

static __attribute__((noinline)) int trace_hit_filtered(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip,
							 const u8 *edata, u32 elen, struct kprw_tctx *c)
{
	u32 e = kprw_rt.probes[pi].event;
	const struct kprw_fprog *flt = kprw_rt.ev_filter[e];
	const struct kprw_evtrig *tg = kprw_rt.ev_trig[e];
	if (!flt && tg && tg->histonly && type == KPRW_REC_KPROBE && !elen && kprw_rt.trace && kprw_rt.ev_fixed &&
	    !(tg->needs & (KPRW_FNEED_TS | KPRW_FNEED_COMM)) && closed(e)) {
		long fixed = kprw_rt.ev_fixed[e];
		if (fixed == 0 || (fixed > 0 && fixed <= FILTER_STACK && kprw_rt.ev_plan && kprw_rt.ev_plan[e].n != ~0u))
			return hist_hit(pi, regs, c, tg, e, (u32)fixed);
	}
	return trace_hit(pi, regs, type, ret_ip, edata, elen, c, flt, tg);
}

int kprw_trace_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip, const u8 *edata, u32 elen,
		   struct kprw_tctx *c)
{
	u32 e = kprw_rt.probes[pi].event;
	if (unlikely(kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen))
		kprw_ctl_sync(); /* filters or triggers changed while it runs (rt_ctl.c) */
	if (unlikely(e < kprw_rt.nevents && kprw_rt.ev_filter && (kprw_rt.ev_filter[e] || kprw_rt.ev_trig[e])))
		return trace_hit_filtered(pi, regs, type, ret_ip, edata, elen, c);
	if (kprw_rt.trace && closed(e))
		return 0; /* the caller counts the hit */
	return trace_hit(pi, regs, type, ret_ip, edata, elen, c, NULL, NULL);
}

/* kprw_trace_stack writes the user stack of a hit (a stacktrace trigger): a record of
 * its own right after the event's, as the kernel's stack entry follows its event. The
 * walk goes into the thread's scratch buffer (free once the event's record is written),
 * or 16 frames on this stack without one. */
void kprw_trace_stack(const struct kprw_hit *hit)
{
	const struct kprw_probe *p = &kprw_rt.probes[hit->pi];
	struct kprw_tctx *c = hit->c;
	u64 small[16], *buf = small;
	u32 max = ARRAY_SIZE(small);
	if (!kprw_rt.trace)
		return;
	if (c && kprw_rt.scratch) {
		buf = (u64 *)(kprw_rt.scratch + (uptr)(c - kprw_tctx_tab) * KPRW_MAX_REC_DATA);
		max = KPRW_STACK_MAX;
	}
	u32 n = kprw_stack_walk(hit->regs, buf, max, kprw_fast_ok(c));
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(n * 8, 0, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, n * 8, KPRW_NO_PROBE, 0, 1, KPRW_REC_STACK,
		     p->event < kprw_rt.nevents ? kprw_rt.events[p->event].id : KPRW_NO_EVENT,
		     kprw_rt.points[p->point].site, 0, &w);
	kprw_memcpy(d, buf, n * 8);
	commit(rec, n * 8, KPRW_CREC_COMMITTED);
}

/* emit_record writes a record of type at site (link-time) whose data (dlen bytes) is
 * fetched already, or NULL to fetch with the plan into the record; with ret, the word
 * (a return's return address, an entry's stack pointer) */
static inline __attribute__((always_inline)) int emit_record_ops(u32 pi, u32 evid, u32 nops,
								 const struct kprw_fplan_op *ops,
								 const struct pt_regs *regs, struct kprw_tctx *c,
								 u32 dlen, const void *data, u8 type, u64 site, int ret,
								 u64 word)
{
	struct who w;
	who(&w, c);
	int ext = need_ext(w.now);
	struct kprw_crec *rec = reserve(rec_size(dlen, ret, ext), c, &w);
	if (unlikely(!rec))
		return 0;
	u8 *d = fill(rec, dlen, pi, ret, ext, type, evid, site, word, &w);
	if (data)
		kprw_memcpy(d, data, dlen);
	else if (dlen)
		kprw_fetch_ops_into(nops, ops, regs, d, kprw_fast_ok(c));
	commit(rec, dlen, KPRW_CREC_COMMITTED);
	return (int)kprw_rt.rec_hits;
}

static inline __attribute__((always_inline)) int emit_record(u32 pi, const struct kprw_probe *p,
							     const struct kprw_fplan *pl, const struct pt_regs *regs,
							     struct kprw_tctx *c, u32 dlen, const void *data, u8 type,
							     u64 site, int ret, u64 word)
{
	/* (dlen > 0 without data: a compiled plan, pl->n != ~0) */
	return emit_record_ops(pi, kprw_rt.events[p->event].id, dlen && !data ? pl->n : 0, pl->op, regs, c, dlen,
			       data, type, site, ret, word);
}

/* emit_event writes the record of kprw_trace_event: data (dlen bytes) fetched already, or
 * NULL to fetch with the plan into the record */
static inline __attribute__((always_inline)) int emit_event(u32 pi, const struct kprw_probe *p,
							    const struct kprw_fplan *pl, const struct pt_regs *regs,
							    struct kprw_tctx *c, u32 dlen, const void *data)
{
	if (kprw_rt.spev && unlikely(kprw_rt.spev[p->point / 64] >> (p->point % 64) & 1)) {
		/* the entry of a function whose return events are recorded at its exits: the
		 * stack pointer, as kprw_trace_hit writes it */
		u64 word = entry_sp_word(regs);
		return emit_record(pi, p, pl, regs, c, dlen, data, KPRW_REC_KPROBE, regs->ip - kprw_rt.bias, 1, word);
	}
	return emit_record(pi, p, pl, regs, c, dlen, data, KPRW_REC_KPROBE, regs->ip - kprw_rt.bias, 0, 0);
}

/* trace_event_filtered is kprw_trace_event for an event with a filter: the plan fetches
 * into this frame (at most 8 * KPRW_PLAN_MAX bytes), the filter judges, and only an
 * accepted hit takes the clock and writes */
static __attribute__((noinline)) int trace_event_filtered(u32 pi, const struct kprw_probe *p,
							   const struct kprw_fplan *pl, const struct pt_regs *regs,
							   struct kprw_tctx *c, const struct kprw_fprog *flt)
{
	u32 dlen = pl->n == ~0u ? 0 : pl->fixed;
	u64 tmp[KPRW_PLAN_MAX];
	struct kprw_fenv fe;
	if (dlen) {
		kprw_memset(tmp, 0, dlen);
		kprw_fetch_plan_into(pl, regs, (u8 *)tmp, kprw_fast_ok(c));
	}
	if ((flt->needs & KPRW_FNEED_COMM) && unlikely(c->comm_ns == 0))
		kprw_tctx_comm(c, kprw_clock_fast());
	filter_env(&fe, flt->needs, kprw_tctx_tid_fast(c), c->comm, kprw_rt.events[p->event].id, regs->ip, 0, 0);
	fe.data = (const u8 *)tmp;
	fe.dlen = dlen;
	if (!kprw_filter_match(flt, &fe) || closed(p->event))
		return 0; /* the caller counts the hit */
	return emit_event(pi, p, pl, regs, c, dlen, tmp);
}

/* kprw_trace_event writes the record of probe pi, an event whose point is jump-optimized
 * and has it alone, whose arguments a compiled plan fetches (or that has none): the path
 * of kprw_trace_hit with what kprw_rt.fastev guarantees taken out (kprw_fastev_init).
 * regs->ip is the site. 1 when written (the hit), 0 when lost or filtered out (the
 * caller counts it). */
int kprw_trace_event(u32 pi, const struct pt_regs *regs, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	if (unlikely(__atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen)) {
		kprw_ctl_sync(); /* filters or triggers changed while it runs (rt_ctl.c) */
		if (kprw_rt.ev_trig[p->event]) /* triggers now: they run on kprw_trace_hit's path */
			return kprw_trace_hit(pi, (struct pt_regs *)regs, KPRW_REC_KPROBE, 0, NULL, 0, c);
	}
	if (closed(p->event))
		return 0; /* the caller counts the hit */
	const struct kprw_fplan *pl = &kprw_rt.ev_plan[p->event];
	const struct kprw_fprog *flt = kprw_rt.ev_filter[p->event];
	if (unlikely(flt != NULL))
		return trace_event_filtered(pi, p, pl, regs, c, flt);
	return emit_event(pi, p, pl, regs, c, pl->n == ~0u ? 0 : pl->fixed, NULL);
}

/* kprw_trace_exit writes the return record of probe pi, a return event without entry
 * data, at a KPRW_DF_EXIT point or from the return trampoline (regs as after the ret:
 * ip = ret_ip, the return address), on kprw_trace_event's path when its event has
 * nothing else (no filter or trigger, a compiled plan), else on kprw_trace_hit's. 1
 * when written (the hit). */
int kprw_trace_exit(u32 pi, struct pt_regs *regs, u64 ret_ip, struct kprw_tctx *c)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	u32 e = p->event;
	if (unlikely(e >= kprw_rt.nevents || !kprw_rt.ev_plan || !kprw_rt.ev_fixed || !kprw_rt.ev_filter ||
		     (kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen) ||
		     kprw_rt.ev_filter[e] || (kprw_rt.ev_trig && kprw_rt.ev_trig[e]) ||
		     (kprw_rt.events[e].fetch_len && (kprw_rt.ev_plan[e].n == ~0u || kprw_rt.ev_fixed[e] < 0))))
		return kprw_trace_hit(pi, regs, KPRW_REC_KRETPROBE, ret_ip, NULL, 0, c);
	if (closed(e))
		return 0; /* the caller counts the hit */
	const struct kprw_fplan *pl = &kprw_rt.ev_plan[e];
	return emit_record(pi, p, pl, regs, c, pl->n == ~0u ? 0 : pl->fixed, NULL, KPRW_REC_KRETPROBE,
			   kprw_rt.points[p->point].site, 1, ret_ip);
}

/* kprw_trace_event_hot is kprw_trace_event for a KPRW_HOT_EVENT point, from its kprw_hot
 * line instead of the point's, probe's, event's and plan's: what can change while the
 * program runs (controls, filters, triggers) sends it to kprw_trace_event. */
int kprw_trace_event_hot(const struct kprw_hot *h, const struct pt_regs *regs, struct kprw_tctx *c)
{
	if (unlikely(__atomic_load_n(&h->deleg, __ATOMIC_RELAXED) ||
		     __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen))
		return kprw_trace_event(h->pi, regs, c);
	if (closed(h->e))
		return 0; /* the caller counts the hit */
	if (unlikely(h->nops == KPRW_HOT_PLAN))
		return emit_event(h->pi, &kprw_rt.probes[h->pi], &kprw_rt.ev_plan[h->e], regs, c, h->dlen, NULL);
	if (h->spev) {
		u64 word = entry_sp_word(regs);
		return emit_record_ops(h->pi, h->evid, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KPROBE, h->site,
				       1, word);
	}
	return emit_record_ops(h->pi, h->evid, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KPROBE, h->site, 0, 0);
}

/* kprw_trace_exit_hot is kprw_trace_exit for a KPRW_HOT_EXIT point, as
 * kprw_trace_event_hot is kprw_trace_event */
int kprw_trace_exit_hot(const struct kprw_hot *h, struct pt_regs *regs, u64 ret_ip, struct kprw_tctx *c)
{
	if (unlikely(__atomic_load_n(&h->deleg, __ATOMIC_RELAXED) || h->nops == KPRW_HOT_PLAN ||
		     (kprw_rt.ctl_gen && __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_RELAXED) != kprw_rt.ctl_seen)))
		return kprw_trace_exit(h->pi, regs, ret_ip, c);
	if (closed(h->e))
		return 0; /* the caller counts the hit */
	return emit_record_ops(h->pi, h->evid, h->nops, h->op, regs, c, h->dlen, NULL, KPRW_REC_KRETPROBE, h->site, 1,
			       ret_ip);
}

/* kprw_hot_init fills kprw_rt.hot (or, out of memory, takes kprw_rt.fastev away): a
 * KPRW_HOT_EVENT line for each kprw_rt.fastev point,
 * a KPRW_HOT_EXIT line for each exit point at a ret whose one return event
 * kprw_trace_exit writes on its own path (no filter or trigger now, a compiled plan or
 * none). Start-up, after kprw_fastev_init and kprw_spev_init. */
void kprw_hot_init(void)
{
	if (!kprw_rt.ev_plan || !kprw_rt.ev_fixed || !kprw_rt.ev_filter || !kprw_rt.npoints)
		return;
	struct kprw_hot *hot = kprw_mmap_anon((u64)kprw_rt.npoints * sizeof *hot);
	if (!hot) {
		kprw_rt.fastev = NULL; /* its points take the general path (kprewrite_rt_optcall) */
		return;
	}
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		struct kprw_hot *h = &hot[k];
		if (pt->xmode != KPRW_X_OPTIMIZED || pt->nprobes != 1)
			continue;
		u32 i = pt->first_probe, e = kprw_rt.probes[i].event;
		if (e >= kprw_rt.nevents)
			continue;
		const struct kprw_event *ev = &kprw_rt.events[e];
		const struct kprw_fplan *pl = &kprw_rt.ev_plan[e];
		if (pt->dflags & KPRW_DF_EXIT) {
			if (kprw_rt.probes[i].type == KPRW_T_KRETPROBE)
				continue; /* a tail call's jmp: its return address is hooked */
			if (ev->fetch_len && (pl->n == ~0u || kprw_rt.ev_fixed[e] < 0))
				continue;
			h->kind = KPRW_HOT_EXIT;
		} else if (kprw_rt.fastev && (kprw_rt.fastev[k / 64] >> (k % 64) & 1)) {
			h->kind = KPRW_HOT_EVENT;
		} else {
			continue;
		}
		h->site = pt->site;
		h->pi = i;
		h->e = e;
		h->evid = ev->id;
		h->dlen = pl->n == ~0u ? 0 : pl->fixed;
		h->deleg = kprw_rt.ev_filter[e] || (kprw_rt.ev_trig && kprw_rt.ev_trig[e]);
		h->spev = kprw_rt.spev && (kprw_rt.spev[k / 64] >> (k % 64) & 1);
		h->nops = KPRW_HOT_PLAN;
		if (pl->n == ~0u) {
			h->nops = 0;
		} else if (pl->n <= KPRW_HOT_OPS) {
			h->nops = (u8)pl->n;
			kprw_memcpy(h->op, pl->op, pl->n * sizeof pl->op[0]);
		}
	}
	kprw_rt.hot = hot;
}

/* kprw_fastev_init marks the points kprw_trace_event may serve (kprw_rt.fastev, one bit
 * each): jump-optimized, one probe, a kprobe event with nothing else (no C handler, no
 * pre or post handler) whose arguments have a compiled plan or that has none. Start-up,
 * after the plans exist. */
void kprw_fastev_init(void)
{
	if (!kprw_rt.ev_plan || !kprw_rt.ev_fixed || !kprw_rt.ev_filter || !kprw_rt.npoints)
		return;
	u64 *bits = kprw_mmap_anon(((u64)kprw_rt.npoints + 63) / 64 * 8);
	if (!bits)
		return;
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		if (pt->xmode != KPRW_X_OPTIMIZED || pt->nprobes != 1 || (pt->dflags & KPRW_DF_EXIT))
			continue;
		const struct kprw_probe *p = &kprw_rt.probes[pt->first_probe];
		if (p->type != KPRW_T_KPROBE || p->flags != KPRW_F_TRACE || p->pre_handler || p->post_handler ||
		    p->event >= kprw_rt.nevents)
			continue;
		const struct kprw_event *ev = &kprw_rt.events[p->event];
		if (ev->fetch_len && (kprw_rt.ev_plan[p->event].n == ~0u || kprw_rt.ev_fixed[p->event] < 0))
			continue;
		if (kprw_rt.ev_trig && kprw_rt.ev_trig[p->event]) /* triggers: kprw_trace_hit */
			continue;
		bits[k / 64] |= 1ull << (k % 64);
	}
	kprw_rt.fastev = bits;
}

/* kprewrite_rt_pf_ctlgen is what the inline filters of detours read (KPRW_DF_PREFILTER,
 * "Inline filters" in kprewrite_abi.h): 0, or the trace file's ctl_gen once every such
 * probe's pfgen says under which generation its inline filter is its event's filter. */
__attribute__((visibility("hidden"))) u64 kprewrite_rt_pf_ctlgen;
/* kprewrite_rt_trig_base is what inline histogram updates read (KPRW_DF_INLINEHIST): the
 * control area's slot 0, from which the event's switch word and its table are at offsets
 * the rewrite knows */
__attribute__((visibility("hidden"))) u64 kprewrite_rt_trig_base;

/* inline_hist_ok says whether the inline update of probe i's event e (a
 * KPRW_DF_INLINEHIST point) does what the runtime would: the event's filter and
 * triggers the rewrite's, its one trigger a plain histogram on a trace file */
static int inline_hist_ok(u32 i, u32 e)
{
	if (e >= kprw_rt.nevents || !kprw_rt.trace || !kprw_rt.ev_trig || !kprw_rt.ev_filter || !kprw_probe_enabled(i))
		return 0;
	const struct kprw_evtrig *tg = kprw_rt.ev_trig[e];
	if (kprw_rt.ev_filter[e] || !tg || (kprw_rt.ev_trig0 && kprw_rt.ev_trig0[e] != tg))
		return 0;
	return tg->n == 1 && tg->histonly && tg->t[0].cmd == KPRW_TRIG_HIST && !tg->t[0].filter && tg->t[0].hist &&
	       tg->t[0].hist->simple && tg->t[0].hist->nkeys == 1;
}

/* kprw_pf_update sets the pfgen of every probe with an inline filter: the generation of
 * the controls this process applied when the inline code decides as the runtime would
 * (the probe enabled, served by kprw_trace_event, its event's filter the rewrite's, no
 * trigger), ~0 when it does not; then publishes the trace file's ctl_gen. Start-up, and
 * kprw_ctl_sync after each change. An image with C handlers keeps the full path: a hit
 * inside a handler is a miss there, and only the runtime knows the thread is in one. */
void kprw_pf_update(void)
{
	if (!kprw_rt.ctl_gen || (kprw_rt.has & KPRW_HAS_USER))
		return;
	u32 gen = __atomic_load_n(&kprw_rt.ctl_seen, __ATOMIC_ACQUIRE);
	__atomic_store_n(&kprewrite_rt_trig_base, (u64)(uptr)kprw_rt.trig_count, __ATOMIC_RELEASE);
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		if (pt->dflags & KPRW_DF_INLINEHIST) {
			u32 i = pt->first_probe;
			__atomic_store_n(&kprw_rt.state[i].pfgen, inline_hist_ok(i, kprw_rt.probes[i].event) ? gen : ~0u,
					 __ATOMIC_RELEASE);
			continue;
		}
		if (!(pt->dflags & KPRW_DF_PREFILTER))
			continue;
		u32 i = pt->first_probe, e = kprw_rt.probes[i].event, ok = 0;
		if (e < kprw_rt.nevents && kprw_rt.ev_filter && kprw_rt.fastev && (kprw_rt.fastev[k / 64] >> (k % 64) & 1))
			ok = kprw_probe_enabled(i) && kprw_rt.ev_filter[e] &&
			     (!kprw_rt.ev_filter0 || kprw_rt.ev_filter[e] == kprw_rt.ev_filter0[e]) &&
			     !(kprw_rt.ev_trig && kprw_rt.ev_trig[e]);
		__atomic_store_n(&kprw_rt.state[i].pfgen, ok ? gen : ~0u, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&kprewrite_rt_pf_ctlgen, (u64)(uptr)kprw_rt.ctl_gen, __ATOMIC_RELEASE);
}

/* kprw_spev_init marks the points whose entry records carry the stack pointer
 * (kprw_rt.spev): a return event (an r: definition, traced) at the point, or a
 * KPRW_DF_SPENTRY point. Start-up. */
void kprw_spev_init(void)
{
	u64 *bits = NULL;
	for (u32 k = 0; k < kprw_rt.npoints; k++) {
		const struct kprw_point *pt = &kprw_rt.points[k];
		if (pt->dflags & KPRW_DF_SPENTRY) {
			if (!bits && !(bits = kprw_mmap_anon(((u64)kprw_rt.npoints + 63) / 64 * 8)))
				return;
			bits[k / 64] |= 1ull << (k % 64);
			continue;
		}
		for (u32 j = 0; j < pt->nprobes; j++) {
			const struct kprw_probe *p = &kprw_rt.probes[pt->first_probe + j];
			if (p->type != KPRW_T_KRETPROBE || !(p->flags & KPRW_F_TRACE) || (p->flags & KPRW_F_USER) ||
			    p->entry_handler || p->event >= kprw_rt.nevents)
				continue;
			if (!bits && !(bits = kprw_mmap_anon(((u64)kprw_rt.npoints + 63) / 64 * 8)))
				return;
			bits[k / 64] |= 1ull << (k % 64);
			break;
		}
	}
	kprw_rt.spev = bits;
}

/* kprw_trace_violation counts a --verify-regions violation in the point's KPRW_T_VERIFY
 * probe and writes a record for the first KPRW_VIOLATION_RECORDS of them. */
void kprw_trace_violation(const struct kprw_point *pt, struct kprw_tctx *c)
{
	u32 pi = pt->first_probe;
	u64 n = atomic_add((u64 *)(kprw_rt.ctr_base + (u64)pi * kprw_rt.ctr_stride), 1);
	if (!kprw_rt.trace || n >= KPRW_VIOLATION_RECORDS)
		return;
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(8, 0, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, 8, KPRW_NO_PROBE, 0, 1, KPRW_REC_VIOLATION, KPRW_NO_EVENT, pt->site, 0, &w);
	kprw_memcpy(d, &pt->target, 8);
	commit(rec, 8, KPRW_CREC_COMMITTED);
}

/* kprw_trace_text writes a KPRW_REC_PRINTK record (trace_printk from a C handler): the
 * site of the probe whose handler wrote it (0 outside handlers), the caller's address,
 * and the data "func\0text". */
void kprw_trace_text(u64 site, u64 caller, const char *func, const char *text, u32 len,
		     struct kprw_tctx *c)
{
	if (!kprw_rt.trace) {
		atomic_add(&kprewrite_rt_stats.lost, 1);
		return;
	}
	u32 flen = (u32)kprw_strlen(func);
	if (flen > 63)
		flen = 63;
	if (len > KPRW_PRINTK_MAX)
		len = KPRW_PRINTK_MAX;
	u32 dlen = flen + 1 + len;
	struct who w;
	who(&w, c);
	struct kprw_crec *rec = reserve(rec_size(dlen, 1, 1), c, &w);
	if (!rec)
		return;
	u8 *d = fill(rec, dlen, KPRW_NO_PROBE, 1, 1, KPRW_REC_PRINTK, KPRW_NO_EVENT, site, caller, &w);
	kprw_memcpy(d, func, flen);
	d[flen] = 0;
	kprw_memcpy(d + flen + 1, text, len);
	commit(rec, dlen, KPRW_CREC_COMMITTED);
}
