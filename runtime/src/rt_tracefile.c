/*
 * rt_tracefile.c - the trace file: opening, sizing and mapping it, its header, the
 * image's counters, description, shards and control area in it, and what a SIGBUS in
 * its mappings means. The file is MAP_SHARED: every thread and process of the run
 * appends to it (fork children share the mapping; exec'd rewritten programs open the
 * same path again), so nothing is lost on a crash, abort or _exit: the kernel owns the
 * pages. The file also holds per-image {hit, nmissed} counters (kprobe_profile), shared
 * the same way; a probe's hit that writes a record is counted by the record. Its record
 * area is written by rt_ring.c (blocks, the ring) and rt_dispatch.c (a hit's records).
 */
#include "rt.h"
#include "rt_ring.h"

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
	kprw_rt.trace_data_size = 0; /* kprw_new_block refuses, populate does nothing */
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
#define SYS_rt_sigpending 127
#define SYS_rt_sigtimedwait 128
#define SYS_getrlimit 97
#define K_RLIMIT_FSIZE 1
#define K_SIGXFSZ 25

/* fsize_limit is RLIMIT_FSIZE's soft limit in bytes (ulimit -f), ~0 for none, read when
 * the file is opened. Growing a file past it (ftruncate, fallocate, a write) raises
 * SIGXFSZ, which kills a program that does not handle it: the runtime never grows the
 * trace file past it (grow_ok), sizes a new file to fit it, and takes a growth that would
 * not fit as a full disk. */
static u64 fsize_limit = ~0ull;
static const char *open_path; /* the file kprw_trace_open opens */

static int grow_ok(u64 end)
{
	return end <= fsize_limit;
}

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
	if (!grow_ok(off + hdr->desc_size)) {
		kprw_puts("kprewrite: trace file ");
		kprw_puts(open_path);
		kprw_puts(": no room for this program's description under the file size limit (ulimit -f): "
			  "its readers need -b BINARY\n");
		return 0;
	}
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
	if (!grow_ok(off + len))
		return 0;
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
	if (!grow_ok(off + n * stride))
		return 0;
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
/* put writes len bytes at off of the file, which holds them already: with pwrite, or,
 * past the file size limit (where a write fails with SIGXFSZ whatever the file's size),
 * through a mapping. 0 when it could not. */
static int put(long fd, u8 *map, u64 mapped, const void *buf, u64 len, u64 off)
{
	if (grow_ok(off + len))
		return sys4(SYS_pwrite64, fd, (long)buf, (long)len, (long)off) == (long)len;
	u8 *p = file_span(fd, map, mapped, off, len);
	if (!p)
		return 0;
	kprw_memcpy(p, buf, len);
	return 1;
}

static int write_ctl(long fd, u8 *map, u64 mapped, u64 off, u64 size)
{
	u8 *buf = kprw_mmap_anon(size);
	if (!buf)
		return 0;
	kprw_ctl_fill(buf);
	int ok = put(fd, map, mapped, buf, size, off);
	sys2(SYS_munmap, (long)buf, (long)size);
	return ok;
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
			if (!counts_only() && grow_ok(off + need))
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
			if (ctl && write_ctl(fd, (u8 *)h, mapped, off + cbytes + sizeof ext, ctl))
				ext.ctl_size = (u32)ctl;
			if (put(fd, (u8 *)h, mapped, &ext, sizeof ext, off + cbytes)) {
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
	/* records name the image's entry, and count their probes' hits there; not in an
	 * overwrite ring, whose writers take blocks again unread: a hit that a record stood
	 * for would go with it, so there every hit is counted (per CPU where the shards are) */
	kprw_rt.trace_image = (u32)(im - h->images);
	kprw_rt.rec_hits = !(h->ring_nblocks && (h->ring_flags & KPRW_RING_OVERWRITE));
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
	/* (nothing counts until a live event is switched on: the pages fault in then) */
	int lazy = (counts_only() && kprewrite_rt_rseq_off != 0) || kprw_live_only();
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
	if (!lazy)
		sys3(SYS_madvise, (long)lo, (long)(hi - lo), MADV_POPULATE_WRITE); /* as above */
}

/* counters_area sizes the counters area of a new file: room for the creating image's
 * counters and ext record four times over (later images of the run, e.g. exec'd
 * rewritten programs, register into the same area), at least KPRW_TRACE_COUNTERS_SIZE,
 * the slack capped at 256 MiB (the file is sparse; untouched pages cost nothing). A file
 * records its size in counters_size, so readers and later runtimes never assume it. */
#define COUNTERS_SLACK_MAX (256ull << 20)

static u64 counters_need(void)
{
	u64 ctl = (kprw_rt.has & KPRW_HAS_RECORDS) ? kprw_ctl_size() : 0;
	return ((u64)kprw_rt.hdr->nprobes * 16 + sizeof(struct kprw_trace_image_ext) + ctl + 4095) & ~4095ull;
}

static u64 counters_area(void)
{
	u64 need = counters_need();
	u64 slack = 3 * need;
	if (slack > COUNTERS_SLACK_MAX)
		slack = COUNTERS_SLACK_MAX;
	u64 area = need + slack;
	if (area < KPRW_TRACE_COUNTERS_SIZE)
		area = KPRW_TRACE_COUNTERS_SIZE;
	return (area + 4095) & ~4095ull;
}

/* fit_limit sizes a new file's record area (size) and counters area (csize) to fit
 * fsize_limit with what register_image appends to it (the description, the shards):
 * the counters area's slack goes first, then the record area shrinks, saying so; 0 when
 * not even a page of records fits (said: the run is untraced, as with a full disk) */
static int fit_limit(const char *path, u64 *size, u64 *csize, int records)
{
	const struct kprw_header *hdr = kprw_rt.hdr;
	u64 tail = (u64)hdr->desc_size + 8 + 4096, cneed = counters_need();
	if (kprw_rt.rseq_shards)
		tail += (u64)kprw_rt.rseq_shards * (((u64)hdr->nprobes * 8 + 4095) & ~4095ull);
	u64 fixed = KPRW_TRACE_HDR_SIZE + cneed + tail;
	if (fixed <= fsize_limit && *size + *csize - cneed <= fsize_limit - fixed)
		return 1;
	if (fixed > fsize_limit || ((fsize_limit - fixed) & ~4095ull) < 4096) {
		kprw_puts("kprewrite: trace file ");
		kprw_puts(path);
		kprw_puts(": does not fit the file size limit (ulimit -f: ");
		kprw_put_dec(fsize_limit);
		kprw_puts(" bytes); tracing off\n");
		return 0;
	}
	u64 room = (fsize_limit - fixed) & ~4095ull; /* the record area and the slack */
	if (*size <= room) {
		if (*csize - cneed > room - *size)
			*csize = cneed + (room - *size);
		return 1;
	}
	if (records) {
		kprw_puts("kprewrite: trace file ");
		kprw_puts(path);
		kprw_puts(": record area of ");
		kprw_put_dec(room);
		kprw_puts(" bytes, not ");
		kprw_put_dec(*size);
		kprw_puts(", to fit the file size limit (ulimit -f: ");
		kprw_put_dec(fsize_limit);
		kprw_puts(" bytes)\n");
	}
	*size = room;
	*csize = cneed;
	return 1;
}

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

static void open_file(const char *path, u64 size, int prefault, int records);

/* kprw_trace_open opens, sizes and maps the trace file. Under a file size limit,
 * SIGXFSZ is blocked while it does (and one it raised discarded): the sizes are checked
 * against the limit first, so this is only a second guard. */
void kprw_trace_open(const char *path, u64 size, int prefault, int records)
{
	u64 lim[2] = {~0ull, ~0ull};
	open_path = path;
	if (sys2(SYS_getrlimit, K_RLIMIT_FSIZE, (long)lim) < 0 || lim[0] == ~0ull) {
		open_file(path, size, prefault, records);
		return;
	}
	fsize_limit = lim[0];
	u64 set = SIGBIT(K_SIGXFSZ), old = 0, before = 0, after = 0;
	sys4(SYS_rt_sigprocmask, 0 /* SIG_BLOCK */, (long)&set, (long)&old, 8);
	sys2(SYS_rt_sigpending, (long)&before, 8);
	open_file(path, size, prefault, records);
	sys2(SYS_rt_sigpending, (long)&after, 8);
	if ((after & set) && !(before & set)) {
		struct k_timespec zero = {0, 0};
		sys4(SYS_rt_sigtimedwait, (long)&set, 0, (long)&zero, 8);
	}
	sys4(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&old, 0, 8);
}

static void open_file(const char *path, u64 size, int prefault, int records)
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
		if (fsize_limit != ~0ull && !fit_limit(path, &size, &csize, records))
			goto out;
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

/* kprw_trace_records_late readies an open trace file for records that start later
 * than start-up (live probes switched on, src/rt_live.c): the record area reserved when
 * the file was made without it (KPRW_TRACE_UNRESERVED), under the file lock, and its
 * first chunks made present. 0 on success; else the trace is closed for records. */
int kprw_trace_records_late(void)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	if (!h)
		return -1;
	if (h->flags & KPRW_TRACE_UNRESERVED) {
		long fd = sys3(SYS_open, (long)kprw_rt.trace_path, O_RDWR | O_CLOEXEC | (kprw_rt.secure ? O_NOFOLLOW : 0), 0);
		if (fd < 0) {
			warn("cannot open", kprw_rt.trace_path, fd);
			return -1;
		}
		sys2(SYS_flock, fd, LOCK_EX);
		long r = 0;
		if (h->flags & KPRW_TRACE_UNRESERVED)
			r = reserve_blocks(fd, h->data_off, h->data_size);
		if (r >= 0)
			h->flags &= ~KPRW_TRACE_UNRESERVED;
		sys2(SYS_flock, fd, LOCK_UN);
		sys1(SYS_close, fd);
		if (r < 0) {
			warn("has no space for its record area (KPREWRITE_TRACE_SIZE sets a smaller one)", kprw_rt.trace_path, r);
			return -1;
		}
	}
	if (!h->ring_nblocks) {
		kprw_rt.populate = 1;
		u64 head = atomic_load(&h->head);
		populate(head & ~((1ull << CHUNK_SHIFT) - 1), 2ull << CHUNK_SHIFT);
	}
	return 0;
}
