/*
 * rt_livedef.c - events added to a running program (kprewrite probe): the kernel's
 * `echo 'p:...' >> kprobe_events` for the sites a rewrite prepared (--prepare).
 *
 * A prepared site carries placeholder probes (an entry kprobe and a kretprobe whose
 * events are KPRW_EF_SPARE): they record nothing of their own. `kprewrite probe`
 * compiles an event's fetch program, names a spare probe for it and writes the image's
 * whole list of live events as a frame (struct kprw_liveent) into the trace file's
 * counters area, linked into the control frames' chain, then bumps ctl_gen. The
 * live-probe thread (rt_live.c) reads the image's newest live frame into memory of its
 * own, checks it, builds each spare probe's list (struct kprw_livelist, immutable) and
 * publishes it with a release store before it arms the sites that now have events and
 * disarms those that have none. A hit of a spare probe reads its list once and writes
 * one record per event (the kernel's aggregated probe): the record carries the event's
 * id (the ext part), so readers name it from the frames. Lists are never freed: a
 * thread may still be walking an old one (changes are made by hand, a page each).
 */
#include "rt.h"
#include "rt_ring.h"

#define MAX_STEPS 65536

struct kprw_livedef {
	u32 id, flags;
	const u8 *fetch;
	u32 fetch_len;
	long fixed; /* kprw_fetch_fixed_size: its data's size, -1 when it varies */
	u64 *hits;  /* in the trace file: every hit of the event */
	u64 *state; /* in the trace file: its site's state (KPRW_LE_STATE), NULL: none */
	u64 *ctl;   /* in the trace file: its switch (KPRW_LE_CTL), NULL: none */
	const struct kprw_fprog *filter; /* its filter (kprewrite filter), NULL: none */
	const struct kprw_evtrig *trig;  /* its triggers (kprewrite trigger), NULL: none */
};

struct kprw_livelist {
	u32 n;
	const struct kprw_point *at; /* a free live point's: where the tool placed it */
	const u8 *slot;              /* and its slot's KPRW_FREE_SLOT bytes */
	struct kprw_livedef d[];
};

static u64 applied;     /* file offset of the live frame applied (0: none) */
/* per free live point: the newest frame's list, published once the point is placed
 * where the list says (kprw_livedef_placed), so that a hit at its old site records
 * none of its events */
static struct kprw_livelist **free_next;
static int live_any;    /* some list is published */
static u32 pad8(u32 n) { return (n + 7) & ~7u; }

/* spare says whether probe pi is a prepared site's placeholder */
static int spare(u32 pi)
{
	u32 e = kprw_rt.probes[pi].event;
	return e < kprw_rt.nevents && (kprw_rt.events[e].flags & KPRW_EF_SPARE);
}

/* kprw_livedef_init makes room for the spare probes' lists (start-up). */
void kprw_livedef_init(void)
{
	u32 n = 0;
	for (u32 i = 0; !n && i < kprw_rt.nprobes; i++) /* (one is enough: the table stays unread) */
		n += spare(i);
	if (n) {
		kprw_rt.live_lists = kprw_mmap_anon((u64)kprw_rt.nprobes * sizeof(void *));
		kprw_rt.spare_user = kprw_mmap_anon((u64)kprw_rt.nprobes * sizeof(void *));
	}
	if (kprw_rt.nfree && kprw_rt.live_lists && !(free_next = kprw_mmap_anon((u64)kprw_rt.nfree * sizeof(void *))))
		kprw_rt.nfree = 0; /* (out of memory: no event is placed at an unprepared site) */
}

/* newest_live finds this image's newest live frame, walking the control frames' chain
 * back from off: its offset (0: none, or a broken chain) and header */
static u64 newest_live(const u8 *base, u64 mapped, u64 off, struct kprw_ctlframe *h)
{
	for (u32 steps = 0; off && steps < MAX_STEPS; steps++) {
		if (off < KPRW_TRACE_HDR_SIZE || (off & 7) || off > mapped || mapped - off < sizeof *h)
			return 0;
		kprw_memcpy(h, base + off, sizeof *h);
		int live = kprw_strncmp(h->magic, KPRW_LIVEFRAME_MAGIC, 8) == 0;
		if (!live && kprw_strncmp(h->magic, KPRW_CTLFRAME_MAGIC, 8) != 0)
			return 0;
		if (live && h->image_id == kprw_rt.image_id)
			return off;
		if (h->prev >= off) /* frames link backwards: no loop */
			return 0;
		off = h->prev;
	}
	return 0;
}

/* ent_ok checks live entry e of a private copy of a frame (size bytes) at *off and
 * moves *off past it: 1 when it is sound for this image */
static int ent_ok(const u8 *f, u32 size, u32 *off, const struct kprw_liveent **e)
{
	if (*off > size || size - *off < sizeof(struct kprw_liveent))
		return 0;
	const struct kprw_liveent *le = (const struct kprw_liveent *)(f + *off);
	u64 end = *off + sizeof *le + (u64)pad8(le->fetch_len) + pad8(le->text_len) + pad8(le->filter_len) +
		  pad8(le->trig_len);
	int at = (le->flags & KPRW_LE_POINT) != 0; /* a free live point's: its point and slot follow */
	if (at)
		end += sizeof(struct kprw_point) + KPRW_FREE_SLOT;
	if (le->fetch_len > size || le->text_len > size || le->filter_len > size || le->trig_len > size || end > size ||
	    le->probe >= kprw_rt.nprobes || !spare(le->probe) || at != (kprw_rt.probes[le->probe].point >= kprw_rt.npoints))
		return 0;
	int ret = kprw_rt.probes[le->probe].type == KPRW_T_KRETPROBE;
	if (ret != !!(le->flags & KPRW_LE_RETURN))
		return 0;
	u64 c0 = kprw_rt.trace->counters_off;
	if ((le->hits_off & 7) || le->hits_off < c0 || le->hits_off > kprw_rt.trace_mapped - 8)
		return 0;
	*e = le;
	*off = (u32)end;
	return 1;
}

/* build makes the per-probe lists of frame f (a checked private copy); NULL when an
 * entry is unsound (the frame is ignored whole, said once) */
static struct kprw_livelist **build(const u8 *f, u32 size, u32 n)
{
	struct kprw_livelist **ls = kprw_mmap_anon((u64)kprw_rt.nprobes * sizeof(void *));
	if (!ls)
		return NULL;
	u32 off = sizeof(struct kprw_ctlframe);
	const struct kprw_liveent *le;
	for (u32 k = 0; k < n; k++) {
		if (!ent_ok(f, size, &off, &le))
			return NULL;
		struct kprw_livelist *l = ls[le->probe];
		if (!l) { /* room for every entry: frames are small */
			l = ls[le->probe] = kprw_mmap_anon(sizeof *l + (u64)n * sizeof l->d[0]);
			if (!l)
				return NULL;
		}
		if (le->flags & KPRW_LE_POINT) { /* (the first entry's place is the site's) */
			const u8 *tail = (const u8 *)(le + 1) + pad8(le->fetch_len) + pad8(le->text_len) + pad8(le->filter_len) +
				       pad8(le->trig_len);
			if (!l->at) {
				l->at = (const struct kprw_point *)tail;
				l->slot = tail + sizeof(struct kprw_point);
			}
		}
		struct kprw_livedef *d = &l->d[l->n++];
		d->id = le->id;
		d->flags = le->flags;
		d->fetch = (const u8 *)(le + 1);
		d->fetch_len = le->fetch_len;
		d->fixed = le->fetch_len ? kprw_fetch_fixed_size(d->fetch, d->fetch_len) : 0;
		d->hits = (u64 *)((u8 *)kprw_rt.trace + le->hits_off);
		d->state = (le->flags & KPRW_LE_STATE) && le->hits_off + 16 <= kprw_rt.trace_mapped ? d->hits + 1 : NULL;
		d->ctl = d->state && (le->flags & KPRW_LE_CTL) && le->hits_off + 24 <= kprw_rt.trace_mapped ? d->hits + 2 : NULL;
		if (d->fixed > KPRW_MAX_REC_DATA)
			return NULL;
		d->filter = NULL;
		if (le->filter_len) { /* after the fetch program and the text */
			const u8 *prog = d->fetch + pad8(le->fetch_len) + pad8(le->text_len);
			u32 sz = kprw_filter_size(prog, le->filter_len);
			struct kprw_fprog *fp = sz ? kprw_mmap_anon(sz) : NULL;
			if (!fp || kprw_filter_compile(prog, le->filter_len, fp) != 0)
				return NULL;
			d->filter = fp;
		}
		d->trig = NULL;
		if (le->trig_len) { /* after the filter program; its counts in the counters area */
			const u8 *prog = d->fetch + pad8(le->fetch_len) + pad8(le->text_len) + pad8(le->filter_len);
			if (!(d->trig = kprw_trig_decode(~0u, prog, le->trig_len)))
				return NULL;
		}
	}
	return ls;
}

/* same says whether the n bytes at a and b are equal */
static int same(const void *a, const void *b, u32 n)
{
	const u8 *x = a, *y = b;
	for (u32 k = 0; k < n; k++)
		if (x[k] != y[k])
			return 0;
	return 1;
}

/* held is list l of spare probe i as it is published now: a free live point's is
 * kept back (NULL) until the point is placed where it says */
static struct kprw_livelist *held(u32 i, struct kprw_livelist *l)
{
	u32 pt = kprw_rt.probes[i].point;
	if (pt < kprw_rt.npoints || !free_next)
		return l;
	free_next[pt - kprw_rt.npoints] = l;
	return l && same(&kprw_rt.points[pt], l->at, sizeof *l->at) ? l : NULL;
}

/* kprw_livedef_placed publishes the list of free live point k, placed now where the
 * newest frame wants it (rt_live.c) */
void kprw_livedef_placed(u32 k)
{
	struct kprw_livelist *l = free_next ? free_next[k] : NULL;
	u32 pi = kprw_rt.points[kprw_rt.npoints + k].first_probe;
	if (l && __atomic_load_n(&kprw_rt.live_lists[pi], __ATOMIC_RELAXED) != l)
		__atomic_store_n(&kprw_rt.live_lists[pi], l, __ATOMIC_RELEASE);
}

/* kprw_livedef_sync applies the image's newest live frame, if it changed: from the
 * live-probe thread, before it arms and disarms (rt_live.c). */
void kprw_livedef_sync(void)
{
	if (!kprw_rt.live_lists || !kprw_rt.trace)
		return;
	const u8 *base = (const u8 *)kprw_rt.trace;
	u64 mapped = kprw_rt.trace_mapped;
	struct kprw_ctlframe h;
	u64 off = newest_live(base, mapped, __atomic_load_n(&kprw_rt.trace->ctl_last, __ATOMIC_ACQUIRE), &h);
	if (off == applied)
		return;
	applied = off;
	struct kprw_livelist **ls = NULL;
	if (off) {
		if (h.size < sizeof h || h.size > KPRW_CTLFRAME_MAX || h.size > mapped - off || (h.size & 7) ||
		    h.nevents != kprw_rt.nevents || h.nentries > KPRW_LIVE_MAX)
			goto bad;
		u8 *f = kprw_mmap_anon(h.size);
		if (!f)
			return;
		kprw_memcpy(f, base + off, h.size);
		if (!(ls = build(f, h.size, h.nentries)))
			goto bad;
	}
	if (ls || live_any) {
		for (u32 i = 0; i < kprw_rt.nprobes; i++)
			if (spare(i))
				__atomic_store_n(&kprw_rt.live_lists[i], held(i, ls ? ls[i] : NULL), __ATOMIC_RELEASE);
		__atomic_store_n(&live_any, ls != NULL, __ATOMIC_RELEASE); /* (none: the lists' pages are never read) */
	}
	return;
bad:
	kprw_puts("kprewrite: a live-event frame of the trace file is malformed: its events are not added\n");
}

/* kprw_livedef_boot_wanted says whether this image has prepared sites and no live frame
 * in the trace file yet: start-up events (rt_liveboot.c) are added for it */
int kprw_livedef_boot_wanted(void)
{
	u32 n = 0;
	for (u32 i = 0; i < kprw_rt.nprobes && !n; i++)
		n += spare(i);
	if (!n || !kprw_rt.trace)
		return 0;
	struct kprw_ctlframe h;
	return newest_live((const u8 *)kprw_rt.trace, kprw_rt.trace_mapped,
			   __atomic_load_n(&kprw_rt.trace->ctl_last, __ATOMIC_ACQUIRE), &h) == 0;
}

/* kprw_livedef_free is where the newest live frame places free live point k (its
 * point as the tool made it, *slot its slot's bytes), NULL: no event rides it */
const struct kprw_point *kprw_livedef_free(u32 k, const u8 **slot)
{
	const struct kprw_livelist *l = free_next && k < kprw_rt.nfree ? free_next[k] : NULL;
	if (!l || !l->at)
		return NULL;
	*slot = l->slot;
	return l->at;
}

/* kprw_live_wants says whether spare probe pi has events now */
int kprw_live_wants(u32 pi)
{
	if (kprw_spare_user(pi))
		return 1; /* a C handler's struct kprobe registered on it by name */
	return kprw_rt.live_lists && __atomic_load_n(&live_any, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&kprw_rt.live_lists[pi], __ATOMIC_ACQUIRE) != NULL;
}

/* live_refused says whether event d's filter refuses the hit whose data (dlen bytes
 * at data) is fetched: the common fields as the rewrite's events' filters see them */
static int live_refused(const struct kprw_livedef *d, u32 pi, const u8 *data, u32 dlen, u64 ret_ip,
			const struct who *w)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	struct kprw_fenv fe;
	filter_env(&fe, d->filter->needs, w->tid, w->comm, d->id, kprw_rt.points[p->point].site + kprw_rt.bias, ret_ip,
		   w->now);
	fe.data = data;
	fe.dlen = dlen;
	return !kprw_filter_match(d->filter, &fe);
}

/* live_fetch fetches event d's data once, into the thread's scratch buffer or tmp (256
 * bytes): its length */
static u32 live_fetch(const struct kprw_livedef *d, struct pt_regs *regs, struct kprw_tctx *c, const char *comm,
		      u8 *tmp, const u8 **out)
{
	u8 *buf = c && kprw_rt.scratch ? kprw_rt.scratch + (uptr)(c - kprw_tctx_tab) * KPRW_MAX_REC_DATA : tmp;
	u32 cap = buf == tmp ? 256 : KPRW_MAX_REC_DATA;
	long m = d->fetch_len ? kprw_fetch_run(d->fetch, d->fetch_len, regs, NULL, 0, comm, buf, cap, kprw_fast_ok(c)) : 0;
	*out = buf;
	return m > 0 ? (u32)m : 0;
}

/* live_write writes event d's record of a hit of spare probe pi: its data fetched
 * already (once, dlen bytes), or fetched into the record (once NULL) */
static void live_write(u32 pi, const struct kprw_livedef *d, struct pt_regs *regs, u8 type, u64 ret_ip,
		       struct kprw_tctx *c, const struct who *w, const u8 *once, u32 dlen)
{
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	int ret = type == KPRW_REC_KRETPROBE;
	u64 word = ret_ip;
	if (type == KPRW_REC_KPROBE && kprw_rt.spev && p->point < kprw_rt.npoints &&
	    (kprw_rt.spev[p->point / 64] >> (p->point % 64) & 1)) {
		word = (u64)regs->sp | (*(const u64 *)regs->sp == (u64)(uptr)kprewrite_rt_rettramp);
		ret = 1; /* the entry of a function with a return event: its stack pointer */
	}
	/* the ext part names the event (a compact record's probe would name the spare's);
	 * no probe: the record is not the spare's hit */
	struct kprw_crec *rec = reserve(rec_size(dlen, ret, 1), c, w);
	if (!rec)
		return;
	u8 *out = fill(rec, dlen, KPRW_NO_PROBE, ret, 1, type, d->id, kprw_rt.points[p->point].site, word, w);
	long got = dlen;
	if (once)
		kprw_memcpy(out, once, dlen);
	else if (dlen)
		got = kprw_fetch_run(d->fetch, d->fetch_len, regs, NULL, 0, w->comm, out, dlen, kprw_fast_ok(c));
	commit(rec, got > 0 ? (u32)got : 0, KPRW_CREC_COMMITTED);
}

/* live_record writes event d's record of a hit of spare probe pi, if its filter takes it */
static __attribute__((noinline)) void live_record(u32 pi, const struct kprw_livedef *d, struct pt_regs *regs,
						  u8 type, u64 ret_ip, struct kprw_tctx *c)
{
	struct who w;
	who(&w, c);
	u32 dlen = 0;
	const u8 *once = NULL;
	u8 tmp[256];
	if (d->filter || (d->fixed < 0 && c && kprw_rt.scratch)) { /* fetched once: judged, or measured */
		dlen = live_fetch(d, regs, c, w.comm, tmp, &once);
		if (d->filter && live_refused(d, pi, once, dlen, ret_ip, &w))
			return;
	} else if (d->fixed > 0) {
		dlen = (u32)d->fixed;
	} else if (d->fixed < 0) {
		long m = kprw_fetch_run(d->fetch, d->fetch_len, regs, NULL, 0, w.comm, NULL, KPRW_MAX_REC_DATA,
					kprw_fast_ok(c));
		dlen = m > 0 ? (u32)m : 0;
	}
	live_write(pi, d, regs, type, ret_ip, c, &w, once, dlen);
}

/* live_triggered is a hit of event d, which has triggers, in the kernel's order (as
 * rt_dispatch.c's trace_hit): without conditions they all run first, whether tracing
 * is on or not, and it returns 0: the record is the caller's, as without them (its
 * frame not on top of this one: the probed thread's stack may be a goroutine's); else
 * the data is fetched once, the triggers whose conditions hold run on it, the record is
 * written (tracing on, the event not soft-disabled: off 0, its filter taking it), those
 * that run after the record (traceoff, stacktrace) run last, and it returns 1. */
static __attribute__((noinline)) int live_triggered(u32 pi, const struct kprw_livedef *d, struct pt_regs *regs,
						    u8 type, u64 ret_ip, struct kprw_tctx *c, int off)
{
	const struct kprw_evtrig *tg = d->trig;
	if (!tg->cond) {
		kprw_triggers_run(tg, NULL);
		return 0;
	}
	struct who w;
	who(&w, c);
	u8 tmp[256];
	const u8 *once;
	u32 dlen = live_fetch(d, regs, c, w.comm, tmp, &once);
	const struct kprw_probe *p = &kprw_rt.probes[pi];
	struct kprw_fenv fe;
	filter_env(&fe, tg->needs | (d->filter ? d->filter->needs : 0), w.tid, w.comm, d->id,
		   kprw_rt.points[p->point].site + kprw_rt.bias, ret_ip, w.now);
	fe.data = once;
	fe.dlen = dlen;
	fe.regs = regs;
	fe.fast = kprw_fast_ok(c);
	u32 tt = kprw_triggers_run(tg, &fe);
	if (!off && !__atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED) && (!d->filter || kprw_filter_match(d->filter, &fe)))
		live_write(pi, d, regs, type, ret_ip, c, &w, once, dlen);
	if (tt) {
		const struct kprw_hit hit = {pi, regs, c, d->id}; /* a stack names the live event */
		kprw_triggers_post(tg, tt, &hit);
	}
	return 1;
}

/* kprw_live_hit is a hit of spare probe pi (type KPRW_REC_KPROBE at its entry,
 * KPRW_REC_KRETPROBE at its return): a record of each of its events. It returns 1: the
 * spare itself counts no hit (each event counts its own). */
int kprw_live_hit(u32 pi, struct pt_regs *regs, u8 type, u64 ret_ip, struct kprw_tctx *c)
{
	const struct kprw_livelist *l = kprw_rt.live_lists ? __atomic_load_n(&kprw_rt.live_lists[pi], __ATOMIC_ACQUIRE) : NULL;
	if (!l)
		return 1;
	for (u32 k = l->n; k-- > 0;) { /* newest first, as the uprobe tracer runs its consumers */
		const struct kprw_livedef *d = &l->d[k];
		__atomic_add_fetch(d->hits, 1, __ATOMIC_RELAXED);
		if (!kprw_rt.trace)
			continue;
		/* soft-disabled (the kernel's SOFT_DISABLED): its triggers run, no record */
		int off = d->ctl && (__atomic_load_n(d->ctl, __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED);
		if (d->trig && live_triggered(pi, d, regs, type, ret_ip, c, off))
			continue;
		if (!off && !__atomic_load_n(kprw_rt.tracing_off, __ATOMIC_RELAXED))
			live_record(pi, d, regs, type, ret_ip, c);
	}
	return 1;
}

/* kprw_livedef_any says whether some live frame's lists are published (an event was
 * added to this image) */
int kprw_livedef_any(void)
{
	return __atomic_load_n(&live_any, __ATOMIC_ACQUIRE);
}

/* kprw_livedef_state writes s (KPRW_LS_*) into the state word of each event of spare
 * probe pi's newest list (a free point's: the one its frame wants, placed or not), for
 * `kprewrite list TARGET`; a word that holds s already is not written */
void kprw_livedef_state(u32 pi, u64 s)
{
	u32 pt = kprw_rt.probes[pi].point;
	const struct kprw_livelist *l = NULL;
	if (pt >= kprw_rt.npoints)
		l = free_next ? free_next[pt - kprw_rt.npoints] : NULL;
	else if (kprw_rt.live_lists && __atomic_load_n(&live_any, __ATOMIC_ACQUIRE))
		l = __atomic_load_n(&kprw_rt.live_lists[pi], __ATOMIC_ACQUIRE);
	for (u32 k = 0; l && k < l->n; k++)
		if (l->d[k].state && __atomic_load_n(l->d[k].state, __ATOMIC_RELAXED) != s)
			__atomic_store_n(l->d[k].state, s, __ATOMIC_RELAXED);
}
