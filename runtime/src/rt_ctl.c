/*
 * rt_ctl.c - run-time controls: filters and triggers changed after the rewrite, without
 * rewriting (kprewrite filter|trigger on a trace file, KPREWRITE_CONTROL at start-up).
 *
 * They arrive as frames (struct kprw_ctlframe) in the trace file's counters area, linked
 * newest first from the header's ctl_last; the header's ctl_gen changes after each. A
 * probe hit that sees ctl_gen differ from what this process applied reads its image's
 * latest frame (a private copy, checked before use: the file is another program's
 * writing), compiles its filters and triggers into new memory and swaps the per-event
 * pointers the hit path reads. Old programs are never freed: a thread may be running
 * one (a change costs a few pages per process; changes are made by hand).
 */
#include "rt.h"

#define SYS_pwrite64 18
#define MAX_STEPS 65536 /* frames walked back to find this image's (other images' between) */

struct ent {
	u32 event, flags, flen, tlen;
	const u8 *filter, *trig;
};

static u32 pad8(u32 n) { return (n + 7) & ~7u; }

/* frame_ok checks a frame's header (a private copy of size bytes) for this image */
static int frame_ok(const u8 *f, u64 size)
{
	const struct kprw_ctlframe *h = (const struct kprw_ctlframe *)f;
	return size >= sizeof *h && h->size == size && !(size & 7) && size <= KPRW_CTLFRAME_MAX &&
	       kprw_strncmp(h->magic, KPRW_CTLFRAME_MAGIC, 8) == 0 && h->image_id == kprw_rt.image_id &&
	       h->nevents == kprw_rt.nevents;
}

/* ent_next reads the entry at *off of a checked frame: 1 when there is one (in bounds,
 * its event known), 0 at the end or when the rest is malformed */
static int ent_next(const u8 *f, u32 size, u32 *off, struct ent *e)
{
	if (*off > size || size - *off < sizeof(struct kprw_ctlent))
		return 0;
	const struct kprw_ctlent *ce = (const struct kprw_ctlent *)(f + *off);
	u64 at = *off + sizeof *ce;
	u64 end = at + pad8(ce->filter_len) + (u64)pad8(ce->trig_len) + pad8(ce->text_len);
	if (ce->filter_len > size || ce->trig_len > size || ce->text_len > size || end > size ||
	    (ce->event >= kprw_rt.nevents &&
	     (!(ce->event & KPRW_CTL_SYNTH) || (ce->event & ~KPRW_CTL_SYNTH) >= KPRW_CTL_MAX_SYNTH)))
		return 0;
	e->event = ce->event;
	e->flags = ce->flags;
	e->flen = ce->filter_len;
	e->tlen = ce->trig_len;
	e->filter = f + at;
	e->trig = f + at + pad8(ce->filter_len);
	*off = (u32)end;
	return 1;
}

/* newest finds this image's newest frame in the trace file mapped at base (mapped
 * bytes), walking back from off: its offset and header in *h, 0 when it has none or
 * the chain is broken */
static u64 newest(const u8 *base, u64 mapped, u64 off, struct kprw_ctlframe *h)
{
	for (u32 steps = 0; off && steps < MAX_STEPS; steps++) {
		if (off < KPRW_TRACE_HDR_SIZE || (off & 7) || off > mapped || mapped - off < sizeof *h)
			return 0;
		kprw_memcpy(h, base + off, sizeof *h);
		int live = kprw_strncmp(h->magic, KPRW_LIVEFRAME_MAGIC, 8) == 0; /* (rt_livedef.c's) */
		if (!live && kprw_strncmp(h->magic, KPRW_CTLFRAME_MAGIC, 8) != 0)
			return 0;
		if (!live && h->image_id == kprw_rt.image_id)
			return off;
		if (h->prev >= off) /* frames link backwards: no loop */
			return 0;
		off = h->prev;
	}
	return 0;
}

/* latest copies this image's newest frame out of the trace file: NULL when it has none
 * (its filters and triggers are the rewrite's) */
static const u8 *latest(u32 *size)
{
	const u8 *base = (const u8 *)kprw_rt.trace;
	u64 mapped = kprw_rt.trace_mapped;
	struct kprw_ctlframe h;
	u64 off = newest(base, mapped, __atomic_load_n(&kprw_rt.trace->ctl_last, __ATOMIC_ACQUIRE), &h);
	if (!off || h.size < sizeof h || h.size > KPRW_CTLFRAME_MAX || h.size > mapped - off)
		return NULL;
	u8 *f = kprw_mmap_anon(h.size);
	if (!f)
		return NULL;
	kprw_memcpy(f, base + off, h.size);
	if (!frame_ok(f, h.size)) /* (another build of the image: as rewritten) */
		return NULL;
	*size = h.size;
	return f;
}

static const struct kprw_fprog *compile(const u8 *prog, u32 len)
{
	u32 sz = kprw_filter_size(prog, len);
	struct kprw_fprog *f = sz ? kprw_mmap_anon(sz) : NULL;
	if (!f || kprw_filter_compile(prog, len, f) != 0)
		return NULL;
	return f;
}

/* apply makes frame f (NULL: none) the image's filters and triggers */
static void apply(const u8 *f, u32 size)
{
	u32 n = kprw_rt.nevents;
	const struct kprw_fprog **nf = kprw_mmap_anon((u64)n * 2 * sizeof(void *));
	if (!nf)
		return;
	const struct kprw_evtrig **nt = (const struct kprw_evtrig **)(nf + n);
	for (u32 e = 0; e < n; e++) {
		nf[e] = kprw_rt.ev_filter0[e];
		nt[e] = kprw_rt.ev_trig0[e];
	}
	struct ent en;
	u32 off = sizeof(struct kprw_ctlframe), bad = 0;
	const struct kprw_evtrig **ns = NULL; /* synthetic events' run-time histograms */
	struct kprw_synthflt *nsf = NULL;     /* and filters */
	/* histograms added at run time have their tables after the control area */
	__atomic_store_n(&kprw_rt.trig_limit, kprw_trig_place_limit(), __ATOMIC_RELAXED);
	for (u32 k = 0; f && k < ((const struct kprw_ctlframe *)f)->nentries; k++) {
		if (!ent_next(f, size, &off, &en)) {
			bad = 1;
			break;
		}
		if (en.event & KPRW_CTL_SYNTH) { /* its filter, its histograms (hist only), for synth() */
			if (en.flags & KPRW_CE_FILTER) {
				if (!nsf && !(nsf = kprw_mmap_anon(KPRW_CTL_MAX_SYNTH * sizeof *nsf))) {
					bad = 1;
					continue;
				}
				struct kprw_synthflt *sf = &nsf[en.event & ~KPRW_CTL_SYNTH];
				sf->f = en.flen ? compile(en.filter, en.flen) : NULL;
				sf->set = !en.flen || sf->f;
				if (en.flen && !sf->f)
					bad = 1;
			}
			if (!(en.flags & KPRW_CE_TRIG) || !en.tlen)
				continue;
			if (!ns && !(ns = kprw_mmap_anon(KPRW_CTL_MAX_SYNTH * sizeof *ns))) {
				bad = 1;
				continue;
			}
			const struct kprw_evtrig *tg = kprw_trig_decode(~0u, en.trig, en.tlen);
			if (!tg || !tg->histonly)
				bad = 1;
			else
				ns[en.event & ~KPRW_CTL_SYNTH] = tg;
			continue;
		}
		if (en.flags & KPRW_CE_FILTER) {
			nf[en.event] = en.flen ? compile(en.filter, en.flen) : NULL;
			if (en.flen && !nf[en.event]) {
				bad = 1;
				nf[en.event] = kprw_rt.ev_filter0[en.event];
			}
		}
		if (en.flags & KPRW_CE_TRIG) {
			nt[en.event] = en.tlen ? kprw_trig_decode(en.event, en.trig, en.tlen) : NULL;
			if (en.tlen && !nt[en.event]) {
				bad = 1;
				nt[en.event] = kprw_rt.ev_trig0[en.event];
			}
		}
	}
	if (bad)
		kprw_puts("kprewrite: a run-time control of the trace file is malformed; those events keep their "
			  "filters and triggers\n");
	for (u32 e = 0; e < n; e++) {
		__atomic_store_n(&kprw_rt.ev_filter[e], nf[e], __ATOMIC_RELEASE);
		__atomic_store_n(&kprw_rt.ev_trig[e], nt[e], __ATOMIC_RELEASE);
	}
	__atomic_store_n(&kprw_rt.synth_trig, ns, __ATOMIC_RELEASE);
	__atomic_store_n(&kprw_rt.synth_filter, nsf, __ATOMIC_RELEASE);
	/* an event with triggers takes kprw_trace_hit: off kprw_trace_event's path */
	for (u32 k = 0; kprw_rt.fastev && k < kprw_rt.npoints; k++) {
		u32 e = kprw_rt.probes[kprw_rt.points[k].first_probe].event;
		if ((kprw_rt.fastev[k / 64] >> (k % 64) & 1) && e < n && nt[e])
			__atomic_and_fetch(&kprw_rt.fastev[k / 64], ~(1ull << (k % 64)), __ATOMIC_RELAXED);
	}
	/* and off the kprw_hot lines' paths: a filter or triggers are for kprw_trace_event
	 * or kprw_trace_exit to run, an event's triggers for kprw_trace_hit (an entry
	 * event's, of an EVENT or a CALL line, on the general path) */
	for (u32 k = 0; kprw_rt.hot && k < kprw_rt.npoints; k++) {
		struct kprw_hot *h = &kprw_rt.hot[k];
		if (h->kind == KPRW_HOT_NONE || h->e >= n)
			continue;
		if ((h->kind == KPRW_HOT_EVENT || h->kind == KPRW_HOT_CALL) && nt[h->e])
			__atomic_store_n(&h->kind, KPRW_HOT_NONE, __ATOMIC_RELAXED);
		__atomic_store_n(&h->deleg, nf[h->e] || nt[h->e], __ATOMIC_RELAXED);
		if ((h->kind == KPRW_HOT_CALL || h->kind == KPRW_HOT_TAIL) && h->re < n)
			__atomic_store_n(&h->rdeleg, nf[h->re] || nt[h->re], __ATOMIC_RELAXED);
	}
}

/* kprw_ctl_sync brings this process to the trace file's current controls (a hit saw
 * ctl_gen change). One thread at a time; a hit that finds another at it (or that
 * interrupted it, in a signal handler) goes on with the programs it has. */
void kprw_ctl_sync(void)
{
	if (__atomic_exchange_n(&kprw_rt.ctl_lock, 1, __ATOMIC_ACQUIRE))
		return;
	u32 gen = __atomic_load_n(kprw_rt.ctl_gen, __ATOMIC_ACQUIRE);
	if (gen != kprw_rt.ctl_seen && kprw_rt.ev_filter && kprw_rt.ev_trig && kprw_rt.trace) {
		if (!kprw_rt.ev_filter0) { /* the rewrite's, kept: a frame changes some events only */
			u32 n = kprw_rt.nevents;
			const struct kprw_fprog **f0 = kprw_mmap_anon((u64)n * 2 * sizeof(void *));
			if (f0) {
				const struct kprw_evtrig **t0 = (const struct kprw_evtrig **)(f0 + n);
				for (u32 e = 0; e < n; e++) {
					f0[e] = kprw_rt.ev_filter[e];
					t0[e] = kprw_rt.ev_trig[e];
				}
				kprw_rt.ev_trig0 = t0;
				kprw_rt.ev_filter0 = f0;
			}
		}
		if (kprw_rt.ev_filter0) {
			u32 size = 0;
			const u8 *f = latest(&size);
			apply(f, size);
		}
	}
	__atomic_store_n(&kprw_rt.ctl_seen, gen, __ATOMIC_RELEASE);
	kprw_disarm_sync();
	kprw_pf_update(); /* inline filters: valid under the new generation, or not at all */
	__atomic_store_n(&kprw_rt.ctl_lock, 0, __ATOMIC_RELEASE);
}

static void ctl_warn(const char *what)
{
	kprw_puts("kprewrite: KPREWRITE_CONTROL ");
	kprw_puts(kprw_rt.ctl_path);
	kprw_puts(": ");
	kprw_puts(what);
	kprw_puts("\n");
}

/* installed says whether this image's latest frame in the trace file (h, mapped) came
 * from the control file frame whose hash is src: installed by an earlier process of the
 * file, whose counts and histograms are the file's */
static int installed(const struct kprw_trace_hdr *h, u64 src)
{
	struct kprw_ctlframe fh;
	return newest((const u8 *)h, kprw_rt.trace_mapped, h->ctl_last, &fh) && fh.source == src;
}

/* kprw_ctl_install applies KPREWRITE_CONTROL (a file of frames kprewrite control wrote)
 * at start-up: this image's frame becomes the trace file's latest (the next hit of every
 * process of the file reads it), its new triggers get their first counts and its events
 * are switched on or off. Called with the trace file open and locked (fd), after the
 * image registered. */
void kprw_ctl_install(long fd, struct kprw_trace_hdr *h)
{
	if (!kprw_rt.ctl_path || !kprw_rt.ctl_path[0])
		return;
	if (!kprw_rt.ev_ctl) {
		ctl_warn("the trace file has no control area for this program; ignored");
		return;
	}
	/* O_NONBLOCK: a FIFO without a writer would hold the program at its start */
	long cf = sys3(SYS_open, (long)kprw_rt.ctl_path, 0 /* O_RDONLY */ | 04000 /* O_NONBLOCK */ | 02000000 /* O_CLOEXEC */, 0);
	if (cf < 0) {
		ctl_warn("cannot be opened; ignored");
		return;
	}
	struct k_stat st;
	kprw_memset(&st, 0, sizeof st);
	u8 *buf = NULL;
	u64 len = 0;
	if (sys2(SYS_fstat, cf, (long)&st) == 0 && (st.st_mode & 0170000) != 0100000) {
		sys1(SYS_close, cf);
		ctl_warn("is not a regular file; ignored");
		return;
	}
	if ((st.st_mode & 0170000) == 0100000 && st.st_size >= 8 && st.st_size <= 16 * KPRW_CTLFRAME_MAX) {
		len = (u64)st.st_size;
		buf = kprw_mmap_anon(len);
		u64 got = 0;
		while (buf && got < len) {
			long r = sys3(SYS_read, cf, (long)(buf + got), (long)(len - got));
			if (r <= 0)
				break;
			got += (u64)r;
		}
		if (got != len)
			buf = NULL;
	}
	sys1(SYS_close, cf);
	if (!buf || kprw_strncmp((const char *)buf, KPRW_CTLFILE_MAGIC, 8) != 0) {
		ctl_warn("is not a kprewrite control file (kprewrite control -o FILE); ignored");
		return;
	}
	u8 *f = NULL;
	u32 size = 0;
	for (u64 off = 8; off + sizeof(struct kprw_ctlframe) <= len;) {
		struct kprw_ctlframe *fh = (struct kprw_ctlframe *)(buf + off);
		if (fh->size < sizeof *fh || fh->size > len - off || (fh->size & 7))
			break;
		if (frame_ok(buf + off, fh->size)) {
			f = buf + off;
			size = fh->size;
			break;
		}
		off += fh->size;
	}
	if (!f) {
		ctl_warn("has no controls for this program (made for another build?); ignored");
		return;
	}
	u64 src = ((struct kprw_ctlframe *)f)->source;
	if (src && installed(h, src)) /* another process of the file started with it */
		return;
	/* histograms it adds: their tables first, in the counters area */
	u64 at = h->counters_off + h->counters_used, end = h->counters_off + h->counters_size;
	const u8 *slots = (const u8 *)kprw_rt.trig_count;
	u64 slot0 = slots > (const u8 *)h && slots < (const u8 *)h + kprw_rt.trace_mapped ? (u64)(slots - (const u8 *)h)
											     : ~0ull; /* (no table can be placed) */
	/* where its new triggers' counts and tables may be: the spare slots, the tables placed */
	struct kprw_trig_bounds bd = {kprw_trig_spare(), kprw_rt.trig_nslots, 0, 0};
	if (slot0 != ~0ull && at >= slot0 && (at - slot0) / 8 < (1u << 24))
		bd.lo = bd.hi = (u32)((at - slot0 + 7) / 8);
	struct ent en;
	u32 off = sizeof(struct kprw_ctlframe), k = 0;
	for (; k < ((const struct kprw_ctlframe *)f)->nentries && ent_next(f, size, &off, &en); k++) {
		if (!(en.flags & KPRW_CE_TRIG) || !en.tlen)
			continue;
		if (kprw_trig_place((u8 *)en.trig, en.tlen, slot0, &at, end) != 0) {
			ctl_warn("has a histogram that does not fit the trace file's counters area (or is malformed); ignored");
			return;
		}
	}
	if (slot0 != ~0ull && bd.hi && at >= slot0 && (at - slot0) / 8 < (1u << 24))
		bd.hi = (u32)((at - slot0) / 8);
	/* nothing is written before the whole frame is known good: every entry in bounds and
	 * for a known event, every filter and trigger program well-formed, every count and
	 * table where it was given room, the switches inside the frame (the file is another
	 * program's writing, and may be damaged) */
	int bad = k != ((const struct kprw_ctlframe *)f)->nentries;
	off = sizeof(struct kprw_ctlframe);
	for (u32 j = 0; !bad && j < ((const struct kprw_ctlframe *)f)->nentries; j++) {
		if (!ent_next(f, size, &off, &en) ||
		    ((en.event & KPRW_CTL_SYNTH) && (en.flags & (KPRW_CE_ENABLE | KPRW_CE_DISABLE))) ||
		    ((en.flags & KPRW_CE_FILTER) && en.flen && !kprw_filter_size(en.filter, en.flen)) ||
		    ((en.flags & KPRW_CE_TRIG) && en.tlen && kprw_trig_check(en.trig, en.tlen, &bd) != 0))
			bad = 1;
	}
	u32 nsw = ((const struct kprw_ctlframe *)f)->nswitches;
	if (bad || off > size || nsw > (size - off) / sizeof(struct kprw_ctlswitch)) {
		ctl_warn("is malformed (damaged?); ignored");
		return;
	}
	at = (at - h->counters_off + 7) & ~7ull;
	if (at > h->counters_size || size > h->counters_size - at) {
		ctl_warn("does not fit the trace file's counters area; ignored");
		return;
	}
	((struct kprw_ctlframe *)f)->prev = h->ctl_last;
	if (sys4(SYS_pwrite64, fd, (long)f, size, (long)(h->counters_off + at)) != (long)size) {
		ctl_warn("could not be written into the trace file; ignored");
		return;
	}
	h->counters_used = at + size;
	__atomic_store_n(&h->ctl_last, h->counters_off + at, __ATOMIC_RELEASE);
	off = sizeof(struct kprw_ctlframe);
	for (k = 0; k < ((const struct kprw_ctlframe *)f)->nentries && ent_next(f, size, &off, &en); k++) {
		if ((en.flags & KPRW_CE_TRIG) && en.tlen)
			kprw_trig_counts(en.trig, en.tlen, &bd);
		if (en.event & KPRW_CTL_SYNTH)
			continue;
		if (en.flags & KPRW_CE_ENABLE)
			__atomic_and_fetch(&kprw_rt.ev_ctl[en.event], ~(u32)KPRW_CTL_SOFT_DISABLED, __ATOMIC_RELAXED);
		if (en.flags & KPRW_CE_DISABLE)
			__atomic_or_fetch(&kprw_rt.ev_ctl[en.event], KPRW_CTL_SOFT_DISABLED, __ATOMIC_RELAXED);
	}
	/* the synthetic events' switches, after the entries */
	for (u32 j = 0; k == ((const struct kprw_ctlframe *)f)->nentries && j < nsw; j++) {
		struct kprw_ctlswitch sw;
		if (off > size || size - off < sizeof sw)
			break;
		kprw_memcpy(&sw, f + off, sizeof sw);
		off += sizeof sw;
		if (sw.slot >= kprw_rt.trig_nslots || !kprw_rt.trig_count)
			continue;
		if (sw.bit & 1)
			__atomic_or_fetch(&kprw_rt.trig_count[sw.slot], 1ull, __ATOMIC_RELAXED);
		else
			__atomic_and_fetch(&kprw_rt.trig_count[sw.slot], ~1ull, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&h->ctl_gen, 1, __ATOMIC_RELEASE);
	kprw_sw_bump(); /* (for the run's other processes: h's, set before this) */
}

/* kprw_disarm_sync applies the trace file's switch of every probe (KPRW_TRACE_DISARMED,
 * `kprewrite disable FILE all`: the kernel's kprobes/enabled) to disable_all: from a hit
 * that sees ctl_gen change, or the live-probe thread. */
void kprw_disarm_sync(void)
{
	if (!kprw_rt.trace)
		return;
	if (__atomic_load_n(&kprw_rt.trace->flags, __ATOMIC_ACQUIRE) & KPRW_TRACE_DISARMED) {
		if (!(__atomic_fetch_or(&kprw_rt.disable_all, KPRW_DISARM, __ATOMIC_RELAXED) & KPRW_DISARM))
			kprw_sw_bump(); /* (closed now) */
	} else
		__atomic_and_fetch(&kprw_rt.disable_all, ~KPRW_DISARM, __ATOMIC_RELAXED);
}

/* kprw_disarm_recheck is kprw_probe_enabled's look at the switch while it is off (a
 * disarmed probe's hit sees no ctl_gen change): whether probes are enabled again. */
int kprw_disarm_recheck(void)
{
	if (kprw_rt.trace && !(__atomic_load_n(&kprw_rt.trace->flags, __ATOMIC_ACQUIRE) & KPRW_TRACE_DISARMED))
		__atomic_and_fetch(&kprw_rt.disable_all, ~KPRW_DISARM, __ATOMIC_RELAXED);
	return !__atomic_load_n(&kprw_rt.disable_all, __ATOMIC_RELAXED);
}
