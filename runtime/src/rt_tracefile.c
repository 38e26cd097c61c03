/*
 * rt_tracefile.c - the trace file: which run it holds (a new run moves the previous
 * file to FILE.old), opening, sizing and mapping it, its header, the image's counters,
 * description, shards and control area in it, readying its record area chunk by chunk,
 * and what a SIGBUS in its mappings means. The file is MAP_SHARED: every thread and
 * process of the run appends to it (fork children share the mapping; exec'd rewritten
 * programs open the same path again and join the run), so nothing is lost on a crash,
 * abort or _exit: the kernel owns the pages. The file also holds per-image {hit,
 * nmissed} counters (kprobe_profile), shared the same way; a probe's hit that writes a
 * record is counted by the record. Its record area is written by rt_ring.c (blocks,
 * the ring) and rt_dispatch.c (a hit's records).
 */
#include "rt.h"
#include "rt_ring.h"

#define O_RDONLY 0
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
		__atomic_store_n(&kprw_tblk_tab[i].rec, 0, __ATOMIC_RELAXED);
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
static u32 open_quiet;        /* KPREWRITE_QUIET: no stderr line about the run's file */

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

/* fill_page writes [off, off+len) of the file with copies of one page (pwritev of up to
 * 16 at a time); 1 when all was written. */
#define SYS_pwritev 296
static int fill_page(long fd, u64 off, u64 len, const void *page)
{
	struct k_iovec iov[16];
	while (len) {
		u32 k = 0;
		for (u64 part = 0; k < 16 && part < len; k++) {
			iov[k].base = (void *)page;
			iov[k].len = len - part < 4096 ? len - part : 4096;
			part += iov[k].len;
		}
		long r = sys6(SYS_pwritev, fd, (long)iov, k, (long)off, 0, 0);
		if (r <= 0)
			return 0;
		off += (u64)r;
		len -= (u64)r;
	}
	return 1;
}

/* fill_zero writes zeros over [off, off+len) of the file. Pages a new file will have
 * touched through the mapping are written this way first: on ext4 the first write
 * fault on a hole of a file costs ~2 ms here (a write(2) of the same page ~20 us),
 * which would double the start-up time of a short program. */
static const u8 zero_page[4096];

static void fill_zero(long fd, u64 off, u64 len) { fill_page(fd, off, len, zero_page); }

/* fill_soft writes the control words of n events that all start soft-disabled at off
 * (an idle image's: kprw_ctl_fill's words without its buffer, 14 page faults fewer for
 * python3.11 prepared whole); the trigger counts after them are the area's zeros. */
static const u32 soft_page[1024] = {[0 ... 1023] = KPRW_CTL_SOFT_DISABLED};

static int fill_soft(long fd, u64 off, u32 n) { return fill_page(fd, off, (u64)n * 4, soft_page); }

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
	if (n * stride <= SHARDS_POPULATE_MAX && !kprw_live_only()) /* the CPUs' shards: no first */
		fill_zero(fd, off, (n - 1) * stride); /* write fault on a hole (see fill_zero); the last
						       * is rarely used (live only: late_pages) */
	return off;
}

/* Pages a live-only image's hits will write (its counters, its CPUs' shards): start-up
 * neither writes them nor makes them present (~0.5 ms of python3.11's with every
 * function prepared); kprw_trace_records_late does, before the first site is armed, with
 * MADV_POPULATE_WRITE, which keeps what another process of the image counted there. */
static struct { long at; u64 len; } late_pages[2]; /* the counters, the shards */

/* late_or_now makes [at, at+len) present and writable now, or, live only, notes it as
 * late_pages[k] */
static void late_or_now(u32 k, long at, u64 len)
{
	if (kprw_live_only()) {
		late_pages[k].at = at;
		late_pages[k].len = len;
		return;
	}
	sys3(SYS_madvise, at, (long)len, MADV_POPULATE_WRITE);
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
		late_or_now(1, r, (kprw_rt.rseq_shards - 1) * stride);
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
	if (kprw_rt.tables_late && grow_ok(off + size)) /* (an idle image: no buffer to fault in) */
		return fill_soft(fd, off, kprw_rt.nevents);
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

	u32 max = h->version >= KPRW_TRACE_VERSION_SWGEN ? KPRW_TRACE_SWGEN_IMAGE : KPRW_TRACE_MAX_IMAGES;
	for (u32 i = 0; i < h->nimages && i < max; i++)
		if (h->images[i].image_id == hdr->image_id && h->images[i].nprobes == hdr->nprobes)
			im = &h->images[i];
	/* each image's counters start on a page of the file, so they can be mapped over
	 * the image's counter window */
	u64 start = (h->counters_used + 4095) & ~4095ull;
	struct kprw_trace_image_ext ext;
	kprw_memset(&ext, 0, sizeof ext);
	if (im && (im->flags & KPRW_TIF_EXT)) /* registered by an earlier process: its shards */
		sys4(SYS_pread64, fd, (long)&ext, sizeof ext, (long)(im->counters_off + cbytes));
	if (!im && h->nimages < max) { /* (sw_gen's entry is no image's) */
		u64 off = 0;
		if (start <= h->counters_size && need <= h->counters_size - start) {
			off = h->counters_off + start;
			/* the area is a hole but for what images took: this image's blocks, or no
			 * room (a counter written on a full disk would be a SIGBUS) */
			if (reserve_blocks(fd, off, (need + 4095) & ~4095ull) < 0)
				off = 0;
			else
				h->counters_used = start + need;
			if (off && !counts_only() && !kprw_live_only() && grow_ok(off + need))
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
			u32 gen = __atomic_load_n(&h->ctl_gen, __ATOMIC_ACQUIRE); /* (before: a switch after
										   * it bumps ctl_gen past) */
			if (ctl && write_ctl(fd, (u8 *)h, mapped, off + cbytes + sizeof ext, ctl)) {
				ext.ctl_size = (u32)ctl;
				kprw_rt.ctl_fresh = 1;
				kprw_rt.ctl_fresh_gen = gen;
			}
			if (put(fd, (u8 *)h, mapped, &ext, sizeof ext, off + cbytes)) {
				im = &h->images[h->nimages];
				im->image_id = hdr->image_id;
				im->nprobes = hdr->nprobes;
				im->counters_off = off;
				im->flags = KPRW_TIF_EXT | (ext.ctl_size ? KPRW_TIF_SPARE : 0) |
					    (ext.ctl_size && (kprw_rt.has & KPRW_HAS_USER) ? KPRW_TIF_USER : 0);
				h->nimages++;
			}
		}
	}
	kprw_rt.rec_ext = 1; /* until the file is known to describe the image */
	kprw_rt.rec_fast = 0;
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
	kprw_rt.rec_fast = kprw_rt.rec_hits && !kprw_rt.rec_ext;
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
			if (!lazy || kprw_live_only())
				late_or_now(0, r, (cbytes + 4095) & ~4095ull);
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
	if (!lazy || kprw_live_only())
		late_or_now(0, (long)lo, hi - lo); /* as above */
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
 * two bytes, at least two granules, filling the record area (or, in a ring that grows by
 * extents, its first data_size / ring_bs, the extents' table inside the file's first
 * mapping), the queue inside the file's first mapping */
static int ring_ok(const struct kprw_trace_hdr *h, u64 total)
{
	u64 n = h->ring_nblocks, bs = h->ring_bs;
	if (!n)
		return 1;
	if (!(bs >= 2 * GRANULE && bs <= (1ull << 30) && !(bs & (bs - 1)) && !(h->ring_queue_off & 7) &&
	      h->ring_queue_off >= sizeof *h && h->ring_queue_off <= total && n * 8 <= total - h->ring_queue_off))
		return 0;
	u64 n0 = h->data_size / bs, e = h->ring_ext_blocks, ext = h->ring_queue_off + n * 8;
	if (!e)
		return n * bs == h->data_size;
	return h->data_size % bs == 0 && n0 && n0 < n && e * bs <= (1ull << 30) &&
	       !(h->ring_flags & KPRW_RING_OVERWRITE) && (n - n0 + e - 1) / e * 8 <= total - ext;
}

/* ---- a ring that grows by extents (kprw_trace_hdr.ring_ext_blocks) ----
 *
 * The blocks a ring grows by are not in the file's ring: a file that held them all from
 * the start would be as large as the ring could grow (hundreds of MB for a trace of a few
 * records, holes that copies without hole support pay for). The writer that first needs
 * an extent appends it to the file, as the recorder appends its chunks, and each process
 * maps an extent where ring_reserve left room after the file's mapping, so a block's
 * offset from trace_data stays what a thread's block word holds (rt_ring.c). */
#define RING_ALIGN (2ull << 20) /* extents and their room start on 2 MiB pages */
static void huge_pages(u8 *map, u64 len);

static u64 ring_ext_bytes(void) { return (u64)kprw_rt.ring_ext_blocks * kprw_rt.trace_block; }

/* ring_reserve moves the file's mapping (total bytes at map, h's) to the start
 * of a reservation with room after it for every extent the ring may grow by, and sets
 * ring_g0. Returns the new mapping, or map when there is no room (this process does not
 * map extents: a grown block it takes is lost, counted). */
static u8 *ring_reserve(long fd, u8 *map, u64 total, const struct kprw_trace_hdr *h)
{
	u64 bs = h->ring_bs, n0 = h->data_size / bs, e = h->ring_ext_blocks;
	u64 room = (h->ring_nblocks - n0 + e - 1) / e * e * bs;
	u64 mlen = (total + RING_ALIGN - 1) & ~(RING_ALIGN - 1), g0 = mlen - h->data_off;
	if (g0 + room > REC_AREA_MAX)
		return map;
	u64 len = RING_ALIGN + mlen + room;
	long r = sys6(SYS_mmap, 0, (long)len, 0 /* PROT_NONE */, 0x4022 /* PRIVATE|ANONYMOUS|NORESERVE */, -1, 0);
	if (r < 0 && r > -4096)
		return map;
	u64 a = ((u64)r + RING_ALIGN - 1) & ~(RING_ALIGN - 1);
	long m = sys6(SYS_mmap, (long)a, (long)total, 3, 0x11 /* SHARED|FIXED */, fd, 0);
	if (m != (long)a) {
		sys2(SYS_munmap, r, (long)len);
		return map;
	}
	if (a > (u64)r) /* (the reservation's unaligned head) */
		sys2(SYS_munmap, r, (long)(a - (u64)r));
	sys2(SYS_munmap, (long)map, (long)total);
	for (u32 k = 0; k < kprw_rt.ntrace_maps; k++)
		if (kprw_rt.trace_maps[k].addr == (uptr)map)
			kprw_rt.trace_maps[k].addr = a;
	kprw_rt.ring_grow_va = (u8 *)(a + mlen);
	kprw_rt.ring_g0 = g0; /* (h is gone with map) */
	map_add((long)kprw_rt.ring_grow_va, room); /* (a fault there: the file shrank) */
	return (u8 *)a;
}

/* ring_path is the trace file's path, copied at open: KPREWRITE_TRACE's value is in the
 * program's environment block, which a program may write over (setproctitle) */
static char ring_path[4096];

/* open_again opens path again (flags), checked to be the file dev and ino name: -1 when
 * it is not (removed, replaced). Not inlined: its k_stat would grow the frame of
 * kprw_ring_map, on a writer's path, from 32 bytes to 208. */
static __attribute__((noinline)) long open_again(const char *path, int flags, u64 dev, u64 ino)
{
	long fd = path[0] ? sys3(SYS_open, (long)path, flags | O_CLOEXEC, 0) : -1;
	if (fd < 0)
		return -1;
	struct k_stat st;
	kprw_memset(&st, 0, sizeof st);
	if (sys2(SYS_fstat, fd, (long)&st) < 0 || st.st_dev != dev || st.st_ino != ino) {
		sys1(SYS_close, fd);
		return -1;
	}
	return fd;
}

/* ring_fd opens the trace file again, checked to be the file this process mapped */
static long ring_fd(void)
{
	return open_again(ring_path, O_RDWR, kprw_rt.trace_dev, kprw_rt.trace_ino);
}

static int ext_is_mapped(u64 k);

/* wait_a_while sleeps 50 us before try tries + 1 (none before the first): 0 once ~100 ms
 * have gone, for a holder that may be the thread a signal handler interrupted */
static int wait_a_while(int tries)
{
	if (tries >= 2000)
		return 0;
	struct k_timespec ts = {0, 50000};
	if (tries)
		sys2(35 /* SYS_nanosleep */, (long)&ts, 0);
	return 1;
}

/* ext_busy: a bit per extent a thread of this process is mapping (MADV_WIPEONFORK: a
 * fork child starts with none). Two threads that both found an extent unmapped (a
 * writer and the runtime's thread readying it) must not both map it: the second
 * MAP_FIXED would drop the first one's pages under a writer, or, failing, leave a hole
 * there. */
static u64 *ext_busy;

/* ext_claim makes this thread the one that maps extent k: 1; 0 when another one mapped
 * it meanwhile; -1 when another one still holds it after ~100 ms (its holder may be the
 * thread a signal handler interrupted) */
static int ext_claim(u64 k)
{
	u64 bit = 1ull << (k % 64);
	for (int tries = 0; ext_busy && (__atomic_fetch_or(&ext_busy[k / 64], bit, __ATOMIC_ACQUIRE) & bit); tries++) {
		if (ext_is_mapped(k))
			return 0;
		if (!wait_a_while(tries + 1))
			return -1;
	}
	return 1;
}

static void ext_unclaim(u64 k)
{
	if (ext_busy)
		__atomic_fetch_and(&ext_busy[k / 64], ~(1ull << (k % 64)), __ATOMIC_RELEASE);
}

/* ext_mmap_once maps extent k, at file offset at (ext_mmap's, claimed) */
static int ext_mmap_once(u64 k, u64 at, long fd)
{
	u64 len = ring_ext_bytes();
	u8 *va = kprw_rt.ring_grow_va + k * len;
	if (__atomic_load_n(&kprw_rt.trace_detached, __ATOMIC_ACQUIRE))
		return -1;
	long r = sys6(SYS_mmap, (long)va, (long)len, 3, 0x11 /* SHARED|FIXED */, fd, (long)at);
	if (r != (long)va)
		return -1;
	if (__atomic_load_n(&kprw_rt.trace_detached, __ATOMIC_ACQUIRE)) {
		/* the file shrank meanwhile (kprw_trace_fault made the mappings memory): this
		 * one too, or a writer in it would fault for ever */
		sys6(SYS_mmap, (long)va, (long)len, 3, 0x32 /* PRIVATE|ANONYMOUS|FIXED */, -1, 0);
		return -1;
	}
	huge_pages(va, len);
	__atomic_fetch_or(&kprw_rt.ring_ext_mapped[k / 64], 1ull << (k % 64), __ATOMIC_RELEASE);
	return 0;
}

/* ext_mmap maps extent k, at file offset at, where ring_reserve left its room, unless
 * another thread of the process has (0) */
static int ext_mmap(u64 k, u64 at, long fd)
{
	int c = ext_claim(k);
	if (c <= 0)
		return c;
	int r = ext_is_mapped(k) ? 0 : ext_mmap_once(k, at, fd);
	ext_unclaim(k);
	return r;
}

/* ext_is_mapped says whether this process has mapped extent k */
static int ext_is_mapped(u64 k)
{
	return (__atomic_load_n(&kprw_rt.ring_ext_mapped[k / 64], __ATOMIC_ACQUIRE) & (1ull << (k % 64))) != 0;
}

/* kprw_ring_map maps extent k in this process (another writer appended it). 0, or -1. */
int kprw_ring_map(u64 k)
{
	if (ext_is_mapped(k))
		return 0;
	u64 at = __atomic_load_n(&kprw_rt.ring_ext[k], __ATOMIC_ACQUIRE);
	long fd = at ? ring_fd() : -1;
	if (fd < 0)
		return -1;
	int r = ext_mmap(k, at, fd);
	sys1(SYS_close, fd);
	return r;
}

/* fsize_fits says whether the file may grow to end under RLIMIT_FSIZE as it is now (a
 * program may have lowered it since the file was opened): past it, ftruncate raises
 * SIGXFSZ, which kills a program that does not handle it */
static int fsize_fits(u64 end)
{
	u64 lim[2] = {~0ull, ~0ull};
	return sys2(SYS_getrlimit, K_RLIMIT_FSIZE, (long)lim) < 0 || end <= lim[0];
}

/* lock_append takes the file lock appends take, without waiting for ever: the holder may
 * be this thread, interrupted by the signal whose handler asks (a recorder's chunk write
 * holds it for milliseconds). 0, or -1 after ~100 ms. */
static int lock_append(long fd)
{
	for (int tries = 0; wait_a_while(tries); tries++) {
		long r = sys2(SYS_flock, fd, LOCK_EX | 4 /* LOCK_NB */);
		if (r == 0)
			return 0;
		if (r != -11 /* EWOULDBLOCK */)
			return -1;
	}
	return -1;
}

/* kprw_ring_extend appends extent k to the file (unless another writer did: then it only
 * maps it), its blocks reserved on the disk, and maps it. 0, or -1: a full disk, the file
 * size limit, a file removed or replaced (the record is lost, counted). */
int kprw_ring_extend(u64 k)
{
	if (__atomic_load_n(&kprw_rt.trace_detached, __ATOMIC_ACQUIRE))
		return -1; /* (the file shrank: its header and table read as zeros now) */
	long fd = ring_fd();
	if (fd < 0)
		return -1;
	u64 len = ring_ext_bytes(), at = 0;
	if (lock_append(fd) == 0) {
		at = __atomic_load_n(&kprw_rt.ring_ext[k], __ATOMIC_ACQUIRE);
		struct k_stat st;
		kprw_memset(&st, 0, sizeof st);
		/* (not once the recorder has finished: its punch would miss the extent) */
		int done = (__atomic_load_n(&kprw_rt.trace->ring_flags, __ATOMIC_ACQUIRE) & KPRW_RING_DONE) != 0;
		if (!at && !done && sys2(SYS_fstat, fd, (long)&st) >= 0) {
			u64 size = (u64)st.st_size, end;
			at = (size + RING_ALIGN - 1) & ~(RING_ALIGN - 1);
			end = at + len;
			if (!fsize_fits(end) || sys2(SYS_ftruncate, fd, (long)end) < 0)
				at = 0;
			else if (reserve_blocks(fd, at, len) < 0) {
				sys2(SYS_ftruncate, fd, (long)size);
				at = 0;
			} else {
				__atomic_store_n(&kprw_rt.ring_ext[k], at, __ATOMIC_RELEASE);
			}
		}
		sys2(SYS_flock, fd, LOCK_UN);
	}
	int r = -1;
	if (ext_is_mapped(k))
		r = 0; /* (another thread of this process appended it) */
	else if (at)
		r = ext_mmap(k, at, fd);
	sys1(SYS_close, fd);
	return r;
}

/* ring_extents sets this process up for a ring that grows by extents (ring_reserve made
 * room for them) */
static void ring_extents(const struct kprw_trace_hdr *h, u8 *map, const struct k_stat *st)
{
	u64 e = h->ring_ext_blocks, next = (h->ring_nblocks - kprw_rt.ring_n0 + e - 1) / e;
	u64 bits = (next + 63) / 64 * 8;
	kprw_rt.ring_ext_mapped = kprw_mmap_anon(bits);
	if (!kprw_rt.ring_ext_mapped)
		return;
	ext_busy = kprw_mmap_wipe_on_fork(bits); /* (NULL: no guard, as before) */
	u64 plen = kprw_rt.trace_path ? kprw_strlen(kprw_rt.trace_path) : 0;
	if (!plen || plen >= sizeof ring_path)
		return; /* (a path longer than the copy: no extents) */
	kprw_memcpy(ring_path, kprw_rt.trace_path, plen + 1);
	kprw_rt.ring_ext_blocks = (u32)e;
	kprw_rt.trace_dev = st->st_dev;
	kprw_rt.trace_ino = st->st_ino;
	kprw_rt.trace_data_size = kprw_rt.ring_g0 + next * e * h->ring_bs;
	__atomic_store_n(&kprw_rt.ring_ext, (u64 *)(map + h->ring_queue_off) + h->ring_nblocks, __ATOMIC_RELEASE);
}

/* ---- the run: which process starts a new trace, which joins the one there ----
 *
 * A rewritten program run directly starts a new trace (the previous file kept as
 * FILE.old, perf record's rule); the processes it starts join it. The header records
 * the run's first process by pid and start time (run_pid, run_start); a process that
 * opens the file joins the run when it, or an ancestor, is that process (a fork child
 * that execs, an exec without fork, a rewritten library in the same process) or the
 * recorder that made the file (kprewrite record). Else it starts a new run, or, with
 * KPREWRITE_APPEND=1, appends and leads the run from then on. No environment marker:
 * the runtime runs before the C library and cannot add to the environment, and what
 * the program does to its environment cannot break the rule. A child whose run
 * ancestors all exited before it opened the file (a daemon's, reparented) starts a
 * new run. */
#define SYS_rename 82
#define SYS_getppid 110
#define RUN_DEPTH 64 /* ancestors looked at */

static char old_path[4096 + 8]; /* FILE.old */
static int run_rotated;       /* this process moved the previous trace to FILE.old */

/* put_dec_str writes v in decimal at p, returns the end */
static char *put_dec_str(char *p, u64 v)
{
	char t[24];
	int n = 0;
	do
		t[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < 24);
	while (n)
		*p++ = t[--n];
	return p;
}

/* proc_stat reads the parent and the start time of process pid (pid 0: this process;
 * /proc/PID/stat's fields 4 and 22): 0 when it cannot be read (no /proc, the process is
 * gone) */
static int proc_stat(u32 pid, u32 *ppid, u64 *start)
{
	char path[40], buf[512];
	char *p = path;
	kprw_memcpy(p, "/proc/", 6);
	p += 6;
	if (pid) {
		p = put_dec_str(p, pid);
	} else {
		kprw_memcpy(p, "self", 4);
		p += 4;
	}
	kprw_memcpy(p, "/stat", 6);
	long fd = sys3(SYS_open, (long)path, O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	long n = sys3(SYS_read, fd, (long)buf, sizeof buf - 1);
	sys1(SYS_close, fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	u64 parent;
	if (!kprw_stat_field(buf, 4, &parent) || !kprw_stat_field(buf, 22, start))
		return 0;
	*ppid = (u32)parent;
	return 1;
}

/* in_run: this process or an ancestor started the run of the file whose header says
 * run_pid/run_start/recorder_pid */
static int in_run(u32 run_pid, u64 run_start, u32 recorder)
{
	u32 pid, ppid = 0;
	u64 start = 0;
	if (!proc_stat(0, &ppid, &start)) { /* no /proc: by pid, self and parent only */
		u32 self = kprw_getpid(), parent = (u32)sys0(SYS_getppid);
		return (run_pid && (self == run_pid || parent == run_pid)) || (recorder && parent == recorder);
	}
	pid = kprw_getpid();
	for (int depth = 0; depth < RUN_DEPTH; depth++) {
		if ((run_pid && pid == run_pid && start == run_start) || (recorder && pid == recorder))
			return 1;
		u32 parent = ppid; /* 0: pid was the first process (init) */
		if (!parent || !proc_stat(parent, &ppid, &start))
			return 0;
		pid = parent;
	}
	return 0;
}

#define SYS_stat 4

/* The FILE.old a rotation replaces is held open (O_PATH) across the rename, so that
 * freeing its blocks and page cache (2-18 ms on this ext4 for a 1 MB trace, the largest
 * part of a short run's start-up) happens at its last close, which a runtime thread
 * does once it runs (kprw_trace_release_old), not in the program's start-up. */
#define O_PATH_ 010000000
#define S_IFMT_ 0170000
#define S_IFREG_ 0100000
static long old_fd = -1;

/* rotate renames path to old_path (FILE.old), which must not exist or be a regular
 * file: nothing but a regular file is written over (-EEXIST then) */
static long rotate(const char *path)
{
	long keep = sys3(SYS_open, (long)old_path, O_PATH_ | O_NOFOLLOW | O_CLOEXEC, 0);
	if (keep >= 0) {
		struct k_stat os;
		kprw_memset(&os, 0, sizeof os);
		if (sys2(SYS_fstat, keep, (long)&os) < 0 || (os.st_mode & S_IFMT_) != S_IFREG_) {
			sys1(SYS_close, keep);
			return -17; /* EEXIST: FILE.old is not a regular file */
		}
	}
	long r = sys2(SYS_rename, (long)path, (long)old_path);
	if (keep >= 0 && r < 0)
		sys1(SYS_close, keep);
	else if (keep >= 0 && (keep = __atomic_exchange_n(&old_fd, keep, __ATOMIC_ACQ_REL)) >= 0)
		sys1(SYS_close, keep); /* (one is held at most: an earlier rotation's is closed) */
	return r;
}

/* kprw_trace_release_old closes the replaced FILE.old this process holds (its blocks
 * are freed then): called by the runtime's threads when they start, else at the end of
 * start-up; while a writer may still start rt_ahead.c's thread, left to it (a run that
 * records little never starts it: the process's exit closes the file) */
void kprw_trace_release_old(void)
{
	long fd = __atomic_exchange_n(&old_fd, -1, __ATOMIC_ACQ_REL);
	if (fd >= 0)
		sys1(SYS_close, fd);
}

/* run_decide: fd is the file at path, locked, st its status. Returns 1 when this process
 * writes into it: a new file or one it appends to (*lead: this process starts the run),
 * the file of its run, or not a trace file (open_file says so); 0 when it moved the file
 * to FILE.old, or another process moved or replaced it meanwhile: open the path again. */
static int run_decide(long fd, const char *path, const struct k_stat *st, int flags, int *lead)
{
	char magic[8];
	struct {
		u32 recorder_pid, flags, run_pid, run_pad;
		u64 run_start;
	} run;
	*lead = 1;
	if (st->st_size == 0)
		return 1;
	*lead = 0;
	if (st->st_size < KPRW_TRACE_HDR_SIZE || sys4(SYS_pread64, fd, (long)magic, 8, 0) != 8 ||
	    kprw_strncmp(magic, KPRW_TRACE_MAGIC, 8) != 0 ||
	    sys4(SYS_pread64, fd, (long)&run, sizeof run, __builtin_offsetof(struct kprw_trace_hdr, recorder_pid)) !=
		    (long)sizeof run)
		return 1;
	if (in_run(run.run_pid, run.run_start, run.recorder_pid))
		return 1;
	*lead = 1;
	if (flags & KPRW_OPEN_APPEND)
		return 1;
	struct k_stat now;
	kprw_memset(&now, 0, sizeof now);
	if (sys2(SYS_stat, (long)path, (long)&now) < 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino)
		return 0;
	unsigned long n = kprw_strlen(path);
	long r = -36; /* ENAMETOOLONG */
	if (n + 5 <= sizeof old_path - 1) {
		kprw_memcpy(old_path, path, n);
		kprw_memcpy(old_path + n, ".old", 5);
		r = rotate(path);
	}
	if (r < 0) {
		kprw_puts("kprewrite: trace file ");
		kprw_puts(path);
		kprw_puts(": cannot keep the previous trace as FILE.old (");
		if (r == -17) {
			kprw_puts("it exists and is not a regular file");
		} else {
			kprw_puts("errno ");
			kprw_put_dec((unsigned long)-r);
		}
		kprw_puts("); this run is appended to it\n");
		return 1;
	}
	run_rotated = 1;
	return 0;
}

/* open_run opens the trace file at path and locks it: the file of this process's run,
 * or a new run's (see run_decide). Returns the descriptor, st its status, or a negative
 * errno. */
static long open_run(const char *path, int flags, struct k_stat *st, int *lead)
{
	int oflags = O_RDWR | O_CREAT | O_CLOEXEC | (kprw_rt.secure ? O_NOFOLLOW : 0);
	for (int tries = 0;; tries++) {
		long fd = sys3(SYS_open, (long)path, oflags, 0644);
		if (fd < 0)
			return fd;
		sys2(SYS_flock, fd, LOCK_EX);
		kprw_memset(st, 0, sizeof *st);
		long r = sys2(SYS_fstat, fd, (long)st);
		*lead = 0;
		if (r >= 0 && (tries == 4 || run_decide(fd, path, st, flags, lead)))
			return fd; /* (four unrelated runs started at once: this one appends) */
		sys2(SYS_flock, fd, LOCK_UN);
		sys1(SYS_close, fd);
		if (r < 0)
			return r;
	}
}

/* lead_run makes this process the run's first in the header and says once, on stderr,
 * where the run's trace goes (unless KPREWRITE_QUIET) */
static void lead_run(struct kprw_trace_hdr *h, const char *path, int flags, int appended)
{
	u32 ppid;
	u64 start = 0;
	proc_stat(0, &ppid, &start);
	h->run_pid = kprw_getpid();
	h->run_start = start;
	if (flags & KPRW_OPEN_QUIET)
		return;
	kprw_puts(appended ? "kprewrite: appending this run's trace to " : "kprewrite: tracing into ");
	kprw_puts(path);
	if (run_rotated) {
		kprw_puts(" (the previous trace is ");
		kprw_puts(old_path);
		kprw_puts(")");
	}
	kprw_puts("\n");
}

/* huge_pages asks for the trace file's mapping on 2 MiB pages, where the file system
 * gives them (ext4's large folios; the kernel aligns the mapping, and a fault or a
 * populate in it reads a whole 2 MiB folio in): each 4 KiB page's first touch in a
 * process costs ~7 us on this VM even when present (a 32 MiB ring ~57 ms), a 2 MiB
 * page's about what one 4 KiB page's does. Issue 49: a hot event under `record` 18.1
 * against 20.0 ns a hit (the recorder asks the same for its mapping), written directly
 * 18.7 against 24.8, and steadier (17.6-21.0 against 21.0-56.2). */
static void huge_pages(u8 *map, u64 len)
{
	sys3(SYS_madvise, (long)map, (long)len, MADV_HUGEPAGE);
}

/* The record area takes the disk its records need: its pages are made present for
 * writing (MADV_POPULATE_WRITE, which reserves their blocks in the file, or fails on a
 * full disk rather than raise SIGBUS) a chunk ahead of the blocks given out, never the
 * whole area at once (a 10-record trace took 64 MiB before). kprw_trace_ready: the area is
 * ready in the file below it, from the chunk of head when this process opened the file
 * (every block it takes lies past that); it only grows, from any thread. */
u64 kprw_trace_ready;

/* touch_pages reads a byte of each 4 KiB page of [p, p+len): on this VM a page's first
 * touch in a process costs ~6.4 us even after MADV_POPULATE_WRITE made it present
 * (issue 49), so the thread that readies pages (rt_ahead.c's, off the writers' path)
 * takes that too; on 2 MiB pages it costs one touch a huge page. Reads only: the bytes
 * may be records another thread is writing. */
static void touch_pages(const u8 *p, u64 len)
{
	for (u64 o = 0; o < len; o += 4096)
		(void)*(volatile const u8 *)(p + o);
}

/* kprw_trace_ready_to makes the record area ready up to to; 0 when the disk is full
 * (also rt_ahead.c's thread) */
int kprw_trace_ready_to(u64 to)
{
	u64 from = __atomic_load_n(&kprw_trace_ready, __ATOMIC_RELAXED);
	if (to > kprw_rt.trace_data_size)
		to = kprw_rt.trace_data_size;
	if (from >= to)
		return 1;
	long r = sys3(SYS_madvise, (long)(kprw_rt.trace_data + from), (long)(to - from), MADV_POPULATE_WRITE);
	if (r == -22 || kprw_refused(r)) {
		/* EINVAL: a kernel before 5.14; a seccomp filter the program put itself under
		 * (a sandbox) refused it. Pages fault in as written (a hole's page written on
		 * a full disk is then a SIGBUS, which kprw_trace_fault takes for a file that
		 * shrank: the mappings become memory, every later record and count lost, one
		 * line says so): before, a refusal read as a full disk, and every record
		 * after the first chunks was lost */
		kprw_rt.populate = 0;
		return 1;
	}
	if (r < 0)
		return 0;
	touch_pages(kprw_rt.trace_data + from, to - from);
	while (from < to && !__atomic_compare_exchange_n(&kprw_trace_ready, &from, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return 1;
}

/* kprw_trace_grow readies the record area for a block that ends at end (rt_ring.c, when
 * it is less than a chunk from kprw_trace_ready): to a chunk past end's chunk, or, on a
 * full disk, to end only. With rt_ahead.c's thread readying the chunks (a writer got
 * past it: a hot loop outruns the disk), to end only: the writer waits for its own
 * block's pages, the thread readies the rest. -1 when not even that: the block's
 * records are lost, counted (a page of a hole written on a full disk would be a
 * SIGBUS). */
static u32 said_full; /* the line below, once per process */

int kprw_trace_grow(u64 end)
{
	u64 c = 1ull << CHUNK_SHIFT;
	u64 page = (end + 4095) & ~4095ull;
	if (!kprw_rt.populate || (!kprw_ahead_owned() && kprw_trace_ready_to((end + 2 * c - 1) & ~(c - 1))) ||
	    kprw_trace_ready_to(page))
		return 0;
	if (!__atomic_exchange_n(&said_full, 1, __ATOMIC_RELAXED)) {
		kprw_puts("kprewrite: trace file ");
		kprw_puts(kprw_rt.trace_path ? kprw_rt.trace_path : open_path);
		kprw_puts(": no space left for records (disk full?): they are lost, counted\n");
	}
	return -1;
}

/* kprw_trace_said_full says once per process, on stderr (unless KPREWRITE_QUIET), that
 * a trace file written directly has no room left in its record area: the records from
 * here on are lost (counted: `trace` and `profile` say how many), and how to make room.
 * Without it a run that outgrew the default 64 MiB ended silently with most of its trace
 * missing (python3.11 --calls '*': 2.8 of 5.8 million records kept). */
static u32 said_area_full;

void kprw_trace_said_full(void)
{
	if (open_quiet || __atomic_exchange_n(&said_area_full, 1, __ATOMIC_RELAXED))
		return;
	kprw_puts("kprewrite: trace file ");
	kprw_puts(kprw_rt.trace_path ? kprw_rt.trace_path : open_path);
	kprw_puts(" is full (");
	u64 size = kprw_rt.trace_data_size;
	kprw_put_dec(size >= 1 << 20 ? size >> 20 : size >> 10);
	kprw_puts(size >= 1 << 20 ? " MiB" : " KiB");
	kprw_puts(" of records): later records are lost, counted; KPREWRITE_TRACE_SIZE=SIZE "
		  "(or rewrite --trace-size, or kprewrite record) keeps them\n");
}

/* ---- a direct trace's record area given back behind its writers ----
 *
 * A trace file written directly takes page-cache memory for each record, and on a VM
 * new memory can cost far more than the records: here ~1.1 ms a MiB once the guest has
 * handed its free pages back to the host, which it does within seconds (issue 49: a hot
 * event run directly after a 5 s pause paid 110-140 ns a hit, 22-25 right after another
 * run, 21-26 under `record`, whose ring is reused). So rt_ahead.c's thread, once it has
 * readied what the writers asked for, gives back what lies more than RETIRE_LAG below
 * the ready mark: that part of the file is written to the disk (sync_file_range, started
 * one call and waited for the next), then its pages are dropped from this process's
 * mapping and from the page cache, and the pages the thread readies next are the ones
 * just freed. The page cache a direct run holds stays small too (~16-40 MiB). Nothing is
 * lost: POSIX_FADV_DONTNEED drops only clean pages no one maps; a writer that still
 * writes below the mark (a thread with an old block) faults its page back in, with what
 * it wrote, and a write after the write-back makes the page dirty again, kept. The file
 * is opened again by its path for each call and checked to be the one mapped (a program
 * may close every descriptor it did not open, or replace the file); on any doubt,
 * nothing more is given back. */
#define RETIRE_LAG (8ull << 20)
#define RETIRE_STEP (2ull << 20) /* (a huge page of the file: 2 MiB folios drop whole) */
#define RETIRE_MAX (4ull << 20)  /* started a call at most: the thread readies first */
#define SYS_fadvise64 221
#define SYS_sync_file_range 277
#define SYS_getcwd 79
#define SFR_WAIT_BEFORE 1
#define SFR_WRITE 2
#define SFR_WAIT_AFTER 4
#define K_MADV_DONTNEED 4
#define K_POSIX_FADV_DONTNEED 4
static char retire_path[4096]; /* absolute; empty: nothing is given back */
static u64 retire_dev, retire_ino;
/* file offsets, multiples of RETIRE_STEP: given back below retired, written back (started)
 * below started (the thread's own: only it calls kprw_trace_retire) */
static u64 retired, started;

/* retire_setup notes the file a direct trace's writers write (open_file) */
static void retire_setup(const char *path, const struct k_stat *st)
{
	u64 n = 0, plen = kprw_strlen(path);
	retire_path[0] = 0;
	if (path[0] != '/') {
		long r = sys2(SYS_getcwd, (long)retire_path, sizeof retire_path);
		if (r <= 0)
			return;
		n = kprw_strlen(retire_path);
		if (n > 1)
			retire_path[n++] = '/';
	}
	if (n + plen >= sizeof retire_path) {
		retire_path[0] = 0;
		return;
	}
	kprw_memcpy(retire_path + n, path, plen + 1);
	retire_dev = st->st_dev;
	retire_ino = st->st_ino;
	u64 lo = KPRW_TRACE_HDR_SIZE + kprw_trace_ready;
	retired = started = (lo + RETIRE_STEP - 1) & ~(RETIRE_STEP - 1);
}

/* retire_drop waits for the write-back of the file's [from, to) and drops its pages: 0
 * when that cannot be done (a write error keeps them, and nothing more is given back) */
static int retire_drop(long fd, u64 from, u64 to)
{
	if (sys4(SYS_sync_file_range, fd, (long)from, (long)(to - from), SFR_WAIT_BEFORE | SFR_WRITE | SFR_WAIT_AFTER) < 0)
		return 0;
	u8 *at = kprw_rt.trace_data + (from - KPRW_TRACE_HDR_SIZE);
	sys3(SYS_madvise, (long)at, (long)(to - from), K_MADV_DONTNEED);
	sys4(SYS_fadvise64, fd, (long)from, (long)(to - from), K_POSIX_FADV_DONTNEED);
	return 1;
}

/* kprw_trace_retire gives back the record area more than RETIRE_LAG below the ready
 * mark, a step of it (rt_ahead.c's thread, after it readied what was asked, while the
 * writers ask nothing more): 1 when it did, 0 when nothing is left to give back */
int kprw_trace_retire(void)
{
	u64 ready = __atomic_load_n(&kprw_trace_ready, __ATOMIC_RELAXED);
	if (!retire_path[0] || ready < RETIRE_LAG || ready > kprw_rt.trace_data_size)
		return 0;
	u64 to = (KPRW_TRACE_HDR_SIZE + ready - RETIRE_LAG) & ~(RETIRE_STEP - 1);
	if (to > started + RETIRE_MAX)
		to = started + RETIRE_MAX;
	if (to <= started && started <= retired)
		return 0;
	long fd = open_again(retire_path, O_RDONLY, retire_dev, retire_ino);
	if (fd < 0) {
		retire_path[0] = 0;
		return 0;
	}
	if (started > retired) { /* (started last call: written by now, mostly) */
		if (!retire_drop(fd, retired, started))
			retire_path[0] = 0;
		retired = started;
	}
	if (retire_path[0] && to > started) {
		sys4(SYS_sync_file_range, fd, (long)started, (long)(to - started), SFR_WRITE);
		started = to;
	}
	sys1(SYS_close, fd);
	return retire_path[0] != 0;
}

/* ready_from starts this process's ready mark at head's chunk and readies two chunks
 * from there (with prefault, the whole area) */
static void ready_from(u64 head, int prefault)
{
	u64 lo = head & ~((1ull << CHUNK_SHIFT) - 1);
	kprw_trace_ready = lo < kprw_rt.trace_data_size ? lo : kprw_rt.trace_data_size;
	kprw_trace_grow(prefault ? kprw_rt.trace_data_size : kprw_trace_ready + 1);
}

/* unmap_trace gives up the file's mapping kprw_trace_open made (start-up: nothing
 * else has it yet) */
static void unmap_trace(u8 *map, u64 total)
{
	sys2(SYS_munmap, (long)map, (long)total);
	kprw_rt.ntrace_maps = 0;
}

static void open_file(const char *path, u64 size, int flags, int records);

/* adopt_clock makes the file's record clock this image's: the first image to open a file
 * without records (a new one, or kprewrite record's ring) sets it to its own (rewrite
 * --clock, KPREWRITE_CLOCK), every later one adopts it, so all of a file's times are of
 * one clock. Counter times start at 1: their base is 0. Under the file lock. */
static void adopt_clock(struct kprw_trace_hdr *h)
{
	if (h->clock == KPRW_CLOCK_UNSET && atomic_load(&h->head) == 0 && atomic_load(&h->ring_take) == 0) {
		h->clock = kprw_rt.clock_want;
		if (h->clock == KPRW_CLOCK_COUNTER)
			h->ts_base = 0;
	}
	kprw_clock_set(h->clock, &h->counter);
}

/* kprw_trace_open opens, sizes and maps the trace file. Under a file size limit,
 * SIGXFSZ is blocked while it does (and one it raised discarded): the sizes are checked
 * against the limit first, so this is only a second guard. */
void kprw_trace_open(const char *path, u64 size, int flags, int records)
{
	u64 lim[2] = {~0ull, ~0ull};
	open_path = path;
	open_quiet = (flags & KPRW_OPEN_QUIET) != 0;
	if (sys2(SYS_getrlimit, K_RLIMIT_FSIZE, (long)lim) < 0 || lim[0] == ~0ull) {
		open_file(path, size, flags, records);
		return;
	}
	fsize_limit = lim[0];
	u64 set = SIGBIT(K_SIGXFSZ), old = 0, before = 0, after = 0;
	sys4(SYS_rt_sigprocmask, 0 /* SIG_BLOCK */, (long)&set, (long)&old, 8);
	sys2(SYS_rt_sigpending, (long)&before, 8);
	open_file(path, size, flags, records);
	sys2(SYS_rt_sigpending, (long)&after, 8);
	if ((after & set) && !(before & set)) {
		struct k_timespec zero = {0, 0};
		sys4(SYS_rt_sigtimedwait, (long)&set, 0, (long)&zero, 8);
	}
	sys4(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&old, 0, 8);
}

static void open_file(const char *path, u64 size, int flags, int records)
{
	struct k_stat st;
	u8 *map = NULL;
	u64 total, csize = 0;
	int lead = 0;
	long r, fd = open_run(path, flags, &st, &lead);

	if (fd < 0) {
		warn("cannot open", path, fd);
		return;
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
		/* the file takes the disk it needs: the header's blocks now, an image's counters
		 * when it registers (register_image), the record area's chunk by chunk as it is
		 * written (kprw_trace_grow); the rest is a hole */
		r = reserve_blocks(fd, 0, KPRW_TRACE_HDR_SIZE);
		if (r < 0) { /* a full disk: no tracing, rather than a SIGBUS at the first record */
			sys2(SYS_ftruncate, fd, 0);
			warn("has no space (disk full?)", path, r);
			goto out;
		}
		fill_zero(fd, 0, KPRW_TRACE_HDR_SIZE);
		if (records) /* the chunks ready_from readies first */
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
		h->version = KPRW_TRACE_VERSION_DIRECT;
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
		h->flags = 0;
		kprw_memcpy(h->magic, KPRW_TRACE_MAGIC, 8);
	} else if (kprw_strncmp(h->magic, KPRW_TRACE_MAGIC, 8) != 0 ||
		   h->version < 3 || h->version > KPRW_TRACE_VERSION ||
		   h->data_off != KPRW_TRACE_HDR_SIZE || h->data_size > total ||
		   h->counters_off < KPRW_TRACE_HDR_SIZE + h->data_size ||
		   h->counters_off > total || h->counters_size > total - h->counters_off ||
		   h->counters_used > h->counters_size || h->block_size != GRANULE || !ring_ok(h, total)) {
		warn("is not a kprewrite trace file (or another version)", path, 0);
		unmap_trace(map, total);
		goto out;
	}
	if (h->ring_nblocks && h->ring_ext_blocks) { /* before anything keeps a pointer into map */
		map = ring_reserve(fd, map, total, h);
		h = (struct kprw_trace_hdr *)map;
	}
	if (lead)
		lead_run(h, path, flags, st.st_size != 0);
	register_image(h, fd, total);
	kprw_rt.trace_mapped = total;
	kprw_rt.trace = h;
	/* (an older file may have writers of an older runtime, which do not bump sw_gen:
	 * no kprw_hot line is found open there, and its hits take the C paths) */
	if (h->version >= KPRW_TRACE_VERSION_SWGEN)
		__atomic_store_n(&kprw_rt.sw_gen, &h->images[KPRW_TRACE_SWGEN_IMAGE].image_id, __ATOMIC_RELEASE);
	kprw_fast_pick();
	kprw_ctl_install(fd, h);
	kprw_rt.ctl_gen = &h->ctl_gen;
	kprw_rt.tracing_off = &h->tracing_off;
	kprw_rt.trace_path = path;
	kprw_rt.trace_data = map + h->data_off;
	/* (a larger area, which no kprewrite makes, is written in its first REC_AREA_MAX bytes) */
	kprw_rt.trace_data_size = h->data_size < REC_AREA_MAX ? h->data_size : REC_AREA_MAX;
	kprw_rt.trace_block = big_block(h->data_size);
	adopt_clock(h);
	kprw_rt.ts_base = h->ts_base;
	kprw_rt.populate = records; /* count-only runs write no records: nothing to populate */
	if (h->ring_nblocks || records)
		huge_pages(map, total);
	if (h->ring_nblocks) {
		/* kprewrite record's ring: its blocks are reused, so making them all present
		 * once is what keeps a record from ever paying for a page */
		kprw_rt.ring_queue = (u64 *)(map + h->ring_queue_off);
		kprw_rt.ring_over = (h->ring_flags & KPRW_RING_OVERWRITE) != 0;
		kprw_rt.ring_nblocks = h->ring_nblocks;
		kprw_rt.trace_block = h->ring_bs;
		kprw_rt.ring_mapped = kprw_mmap_anon(((u64)h->ring_nblocks + 63) / 64 * 8);
		kprw_rt.populate = 0;
		kprw_rt.ring_n0 = (u32)(h->data_size / h->ring_bs);
		if (h->ring_ext_blocks && kprw_rt.ring_grow_va)
			ring_extents(h, map, &st);
		if (kprw_rt.ring_ext && records)
			kprw_ahead_prepare(); /* (its thread starts when the ring first grows) */
	} else if (records) {
		ready_from(atomic_load(&h->head), flags & KPRW_OPEN_PREFAULT);
		/* the next chunks readied off the writers' threads, by a thread the first
		 * writer to ask starts, and what they wrote given back behind them, not under a
		 * seccomp filter (a container's may not allow those calls) */
		if (kprw_rt.populate && !(flags & KPRW_OPEN_PREFAULT) && !kprw_ahead_prepare())
			retire_setup(path, &st);
	}
out:
	sys2(SYS_flock, fd, LOCK_UN);
	sys1(SYS_close, fd);
}

/* kprw_trace_records_late readies an open trace file for records that start later
 * than start-up (live probes switched on, src/rt_live.c): the record area's first chunks
 * from head ready (kprw_trace_grow). 0 on success; else the trace is closed for records. */
int kprw_trace_records_late(void)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	if (!h)
		return -1;
	if (!h->ring_nblocks) {
		kprw_rt.populate = 1;
		ready_from(atomic_load(&h->head), 0);
	}
	for (u32 k = 0; k < 2; k++) /* (the counters and shards start-up left) */
		if (late_pages[k].len)
			sys3(SYS_madvise, late_pages[k].at, (long)late_pages[k].len, MADV_POPULATE_WRITE);
	return 0;
}
