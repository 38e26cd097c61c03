/* Event triggers (rewrite --trigger): the kernel's traceon, traceoff, enable_event,
 * disable_event and stacktrace with their counts and conditions, run at a hit in the kernel's order
 * (kernel/trace/trace_events_trigger.c, include/linux/trace_events.h). An event's
 * triggers are internal/evtrigger's program, after its filter program in the tables,
 * decoded at start-up. What they switch is shared by every process of the trace file,
 * as the kernel's switches are system-wide: tracing_off in the file's header, and the
 * image's control area after its counters (a u32 of KPRW_CTL_* per event, then a u64
 * count per trigger slot; src/rt_tracefile.c maps it). */
#include "rt.h"

#define TRIG_HDR 8
#define TRIG_ENT 20
#define KIND_ONOFF 1u
#define KIND_STACK 2u
#define KIND_ENABLE 8u
#define MAX_TRIGGERS 1024
#define UNLIMITED (~0ull)
#define FLAG_POST 1u
#define FLAG_ALLOC 2u /* a run-time histogram whose table is not placed yet (rt_ctl.c) */
#define MAX_SLOTS (1u << 24) /* words of a control area's counts and histograms */

static inline u32 rd16(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8; }
static inline u32 rd32(const u8 *p) { return rd16(p) | rd16(p + 2) << 16; }
static inline u64 rd64(const u8 *p) { return (u64)rd32(p) | (u64)rd32(p + 4) << 32; }

/* sane says whether b looks like a trigger program of len bytes (its header) */
static int sane(const u8 *b, u32 len)
{
	u32 n = rd32(b), cnt = rd16(b + 4);
	return len >= TRIG_HDR && n == len && !(n & 3) && cnt != 0 && cnt <= MAX_TRIGGERS;
}

/* blob is event i's trigger program and its length, NULL when it has none or its
 * header is not sane */
static const u8 *blob(u32 i, u32 *len)
{
	const struct kprw_event *ev = &kprw_rt.events[i];
	if (!(ev->flags & KPRW_EF_TRIGGERS))
		return NULL;
	const u8 *p = (const u8 *)RT_ADDR(ev->fetch) + ev->fetch_len + ev->filter_len;
	if (!sane(p, rd32(p)))
		return NULL;
	*len = rd32(p);
	return p;
}

/* kept finds the hist trigger of slot in an event's triggers as the rewrite decoded them
 * (a run-time control frame keeps them: a hist trigger with no program) */
static const struct kprw_trig *kept(const struct kprw_evtrig *orig, u32 slot)
{
	for (u32 k = 0; orig && k < orig->n; k++)
		if (orig->t[k].cmd == KPRW_TRIG_HIST && orig->t[k].slot == slot)
			return &orig->t[k];
	return NULL;
}

/* walk_blob checks a trigger program (b, len bytes) and, with out, decodes it (filters
 * into *fmem); with counts, stores each trigger's first count in its slot (from slot
 * from on). Returns the bytes its decoded form needs (filters included), 0 when
 * malformed; *slots is raised past its highest count slot. orig: the event's triggers
 * as rewritten, whose hist triggers a program may keep (a run-time control frame), NULL
 * for none. bd (NULL: none): where the counts of triggers from bd->from on may be, checked
 * before any count is stored (a control file's frame, kprw_trig_counts). */
static u64 walk_blob(const u8 *b, u32 len, const struct kprw_evtrig *orig, struct kprw_evtrig *out, u8 **fmem,
		     u32 *slots, u64 *counts, u32 from, const struct kprw_trig_bounds *bd)
{
	u32 cnt = rd16(b + 4), off = TRIG_HDR;
	u64 need = sizeof(struct kprw_evtrig) + (u64)cnt * sizeof(struct kprw_trig);
	if (out) {
		out->n = cnt;
		out->cond = b[6] != 0;
		out->needs = 0;
		out->histonly = 1;
	}
	for (u32 k = 0; k < cnt; k++) {
		if (len - off < TRIG_ENT)
			return 0;
		const u8 *h = b + off;
		u32 nt = rd16(h + 2), slot = rd32(h + 4), fl = rd32(h + 16);
		int hist = h[0] == KPRW_TRIG_HIST, stack = h[0] == KPRW_TRIG_STACKTRACE;
		int hsw = h[0] == KPRW_TRIG_ENABLE_HIST || h[0] == KPRW_TRIG_DISABLE_HIST;
		int known = (h[0] >= KPRW_TRIG_TRACEON && h[0] <= KPRW_TRIG_DISABLE) || hist || stack ||
			    h[0] == KPRW_TRIG_SNAPSHOT || hsw;
		if (!known || slot >= MAX_SLOTS || (stack && !(h[1] & FLAG_POST)) /* a stack needs its hit */ ||
		    (h[1] & FLAG_ALLOC)) /* placed by kprw_ctl_install before anything runs it */
			return 0;
		off += TRIG_ENT;
		if (nt > (len - off) / 4)
			return 0;
		if (hist && nt == 0) { /* kept: the rewrite's hist trigger of that slot */
			const struct kprw_trig *o = kept(orig, slot);
			if ((!o && (orig || out)) || fl) /* (a pass that only stores counts has no orig) */
				return 0;
			if (out) {
				out->t[k] = *o;
				out->needs |= kprw_hist_needs(o->hist) | (o->filter ? o->filter->needs : 0);
			}
			continue;
		}
		const u8 *targets = b + off;
		u64 words = 1; /* the slots it takes: a count, or a histogram */
		u32 hsize = 0;
		u64 hend = 0;
		if (hist) { /* targets: the histogram's program (internal/evhist) */
			words = kprw_hist_words(targets, 4 * nt, &hsize, &hend);
			if (!words || words > MAX_SLOTS - slot || hend > MAX_SLOTS)
				return 0;
			if (hend > *slots) /* the synthetic events' tables it feeds */
				*slots = (u32)hend;
			need += (hsize + 7) & ~7u;
		} else {
			for (u32 j = 0; j < nt; j++) { /* events (or live events' words), or enable_hist's table slots */
				u32 x = rd32(targets + 4 * j);
				if (!hsw && (x & KPRW_TRIG_LIVE_TARGET))
					x &= ~KPRW_TRIG_LIVE_TARGET;
				else if (!hsw && x >= kprw_rt.nevents)
					return 0;
				if (x >= MAX_SLOTS)
					return 0;
			}
		}
		off += 4 * nt;
		if (fl > len - off)
			return 0;
		u32 fsz = fl ? kprw_filter_size(b + off, fl) : 0;
		if (fl && !fsz)
			return 0;
		need += (fsz + 7) & ~7u;
		if (slot + words > *slots)
			*slots = (u32)(slot + words);
		if (bd && (hist ? slot < bd->from || slot < bd->lo || bd->hi < slot || words > bd->hi - slot || hend
				: slot >= bd->from && slot >= bd->nslots))
			return 0; /* a count or table where none was given out (a new histogram's is placed) */
		if (counts && slot >= from) /* a histogram's first word is its flags: paused or not */
			counts[slot] = hist ? (targets[2] & 1) : rd64(h + 8);
		if (counts && hist) /* and the synthetic events' histograms it feeds */
			kprw_hist_first_words(targets, counts, from);
		if (out) {
			struct kprw_trig *t = &out->t[k];
			if (!hist)
				out->histonly = 0;
			if (h[0] == KPRW_TRIG_SNAPSHOT) /* a conditional one keeps the hit: its time */
				out->needs |= KPRW_FNEED_TS;
			t->cmd = h[0];
			t->post = h[1] & 1;
			t->ntargets = (u16)nt;
			t->slot = slot;
			t->targets = targets;
			t->filter = NULL;
			t->hist = NULL;
			if (hist) {
				struct kprw_hist *hd = (struct kprw_hist *)*fmem;
				kprw_hist_decode(targets, hd);
				t->hist = hd;
				*fmem += (hsize + 7) & ~7u;
				out->needs |= kprw_hist_needs(hd);
			}
			if (fl) {
				struct kprw_fprog *f = (struct kprw_fprog *)*fmem;
				if (kprw_filter_compile(b + off, fl, f) != 0)
					return 0;
				t->filter = f;
				out->needs |= f->needs;
				*fmem += (fsz + 7) & ~7u;
			}
		}
		off += (fl + 3) & ~3u;
	}
	return off == len ? need : 0;
}

/* walk is walk_blob on event i's program as rewritten */
static u64 walk(u32 i, struct kprw_evtrig *out, u8 **fmem, u32 *slots, u64 *counts)
{
	u32 len;
	const u8 *b = blob(i, &len);
	return b ? walk_blob(b, len, NULL, out, fmem, slots, counts, 0, NULL) : 0;
}

/* nslots is the trigger slots of the image's events: counted once (the tables do not
 * change; start-up asked up to six times, a pass over every event each: 13,500 in
 * python3.11 prepared whole) */
static u32 nslots(void)
{
	static u32 memo; /* the count + 1, 0: not counted yet (two threads count alike) */
	u32 m = __atomic_load_n(&memo, __ATOMIC_RELAXED);
	if (m)
		return m - 1;
	if (kprw_rt.tables_late)
		return 0; /* an idle image's events have no triggers (kprw_tables_check) */
	u32 s = 0;
	for (u32 i = 0; i < kprw_rt.nevents; i++)
		walk(i, NULL, NULL, &s, NULL);
	__atomic_store_n(&memo, s + 1, __ATOMIC_RELAXED);
	return s;
}

static u64 flags_bytes(void) { return ((u64)kprw_rt.nevents * 4 + 7) & ~7ull; }

/* user_bytes is the bytes of the C handlers' registrations at a control area's end
 * (KPRW_TIF_USER) */
static u64 user_bytes(void) { return (kprw_rt.has & KPRW_HAS_USER) ? (u64)kprw_rt.nprobes * 16 : 0; }

/* kprw_ctl_size is the bytes of this image's control area */
u64 kprw_ctl_size(void)
{
	return flags_bytes() + ((u64)nslots() + KPRW_CTL_SPARE) * 8 + user_bytes();
}

/* kprw_ctl_fill writes the control area's first contents: the events that start
 * soft-disabled, the triggers' counts */
void kprw_ctl_fill(u8 *p)
{
	u32 *fl = (u32 *)p;
	u64 *cnt = (u64 *)(p + flags_bytes());
	u32 s = 0;
	if (kprw_rt.tables_late) { /* an idle image's events all start soft-disabled (its tables
				    * checked later: kprw_tables_check), their table unread */
		for (u32 i = 0; i < kprw_rt.nevents; i++)
			fl[i] = KPRW_CTL_SOFT_DISABLED;
		return;
	}
	for (u32 i = 0; i < kprw_rt.nevents; i++) {
		u32 f = kprw_rt.events[i].flags;
		fl[i] = (f & KPRW_EF_SOFT) ? KPRW_CTL_SOFT_DISABLED : 0;
		if (f & KPRW_EF_TRIGGERS) /* (walk's own test, without a call per event) */
			walk(i, NULL, NULL, &s, cnt);
	}
}

void kprw_ctl_attach(u8 *p)
{
	kprw_rt.ev_ctl = (u32 *)p;
	kprw_rt.trig_count = (u64 *)(p + flags_bytes());
	kprw_rt.trig_nslots = nslots() + KPRW_CTL_SPARE;
	kprw_rt.trig_limit = kprw_rt.trig_nslots;
	if (user_bytes())
		kprw_rt.user_regs = kprw_rt.trig_count + kprw_rt.trig_nslots;
}

/* kprw_trig_place_limit is the slots a run-time trigger program may name: the control
 * area's, and every word after it in the trace file's mapping when the area is in it (a
 * histogram added at run time has its table in the counters area after the image's) */
u32 kprw_trig_place_limit(void)
{
	u64 lim = kprw_rt.trig_nslots;
	const u8 *base = (const u8 *)kprw_rt.trace, *c = (const u8 *)kprw_rt.trig_count;
	if (base && c && c >= base && c < base + kprw_rt.trace_mapped) {
		u64 w = (u64)(base + kprw_rt.trace_mapped - c) / 8;
		if (w > lim)
			lim = w;
	}
	return lim > MAX_SLOTS ? MAX_SLOTS : (u32)lim;
}

/* kprw_trig_decode decodes a run-time control frame's trigger program of event e (b, len
 * bytes) into memory of its own, NULL when it is malformed or names a slot past the
 * control area. The program stays referenced (targets): b must outlive the result. */
const struct kprw_evtrig *kprw_trig_decode(u32 e, const u8 *b, u32 len)
{
	u32 s = 0;
	const struct kprw_evtrig *orig = kprw_rt.ev_trig0 && e < kprw_rt.nevents ? kprw_rt.ev_trig0[e] : NULL;
	if (!sane(b, len))
		return NULL;
	u64 n = walk_blob(b, len, orig, NULL, NULL, &s, NULL, 0, NULL);
	if (!n || s > kprw_trig_place_limit() || !kprw_rt.trig_count)
		return NULL;
	u8 *mem = kprw_mmap_anon(n);
	if (!mem)
		return NULL;
	struct kprw_evtrig *tg = (struct kprw_evtrig *)mem;
	u8 *fmem = mem + sizeof(struct kprw_evtrig) + (u64)rd16(b + 4) * sizeof(struct kprw_trig);
	if (!walk_blob(b, len, orig, tg, &fmem, &s, NULL, 0, NULL)) {
		sys2(SYS_munmap, (long)mem, (long)n);
		return NULL;
	}
	return tg;
}

/* kprw_trig_check checks a control file frame's trigger program (b, len bytes, its
 * histograms placed) before it is installed: well-formed, every new trigger's count
 * (slot bd->from on) in the control area's spare slots and every new histogram's table
 * among those placed for it, no slot past what a hit may name. 0 when it may be
 * installed, -1 when not. */
int kprw_trig_check(const u8 *b, u32 len, const struct kprw_trig_bounds *bd)
{
	u32 s = 0;
	if (!sane(b, len) || !kprw_rt.trig_count || !walk_blob(b, len, NULL, NULL, NULL, &s, NULL, 0, bd))
		return -1;
	return s > kprw_trig_place_limit() ? -1 : 0;
}

/* kprw_trig_counts stores the first counts of a control frame's new triggers (those in
 * the spare slots, bd->from on; kprw_trig_check passed it): KPREWRITE_CONTROL at
 * start-up */
void kprw_trig_counts(const u8 *b, u32 len, const struct kprw_trig_bounds *bd)
{
	if (kprw_trig_check(b, len, bd) == 0) {
		u32 s = 0;
		walk_blob(b, len, NULL, NULL, NULL, &s, kprw_rt.trig_count, bd->from, bd);
	}
}

static inline void wr32(u8 *p, u32 v)
{
	p[0] = (u8)v;
	p[1] = (u8)(v >> 8);
	p[2] = (u8)(v >> 16);
	p[3] = (u8)(v >> 24);
}

/* kprw_trig_place places the tables of a KPREWRITE_CONTROL file's new histograms
 * (FLAG_ALLOC) in trigger program b (len bytes, the installing process's copy): each
 * takes the next cache line of the trace file's counters area from *at on, up to end
 * (file offsets), and its slot counts from slot0 (the file offset of the control
 * area's first slot). Only self-contained histograms (no other table named). Returns
 * 0, or -1 when the program is malformed or the area has no room. */
int kprw_trig_place(u8 *b, u32 len, u64 slot0, u64 *at, u64 end)
{
	if (!sane(b, len))
		return -1;
	u32 cnt = rd16(b + 4), off = TRIG_HDR;
	for (u32 k = 0; k < cnt; k++) {
		if (len - off < TRIG_ENT)
			return -1;
		u8 *h = b + off;
		u32 nt = rd16(h + 2), fl = rd32(h + 16);
		off += TRIG_ENT;
		if (nt > (len - off) / 4)
			return -1;
		if (h[1] & FLAG_ALLOC) {
			u32 hsize = 0;
			u64 refs = 0, a = (*at + 63) & ~63ull;
			u64 words = h[0] == KPRW_TRIG_HIST ? kprw_hist_words(b + off, 4 * nt, &hsize, &refs) : 0;
			if (!words || refs || a < slot0 || a > end || words > (end - a) / 8 ||
			    (a - slot0) / 8 + words > MAX_SLOTS)
				return -1;
			wr32(h + 4, (u32)((a - slot0) / 8));
			h[1] &= (u8)~FLAG_ALLOC;
			*at = a + words * 8;
		}
		off += 4 * nt;
		if (fl > len - off)
			return -1;
		off += (fl + 3) & ~3u;
	}
	return off == len ? 0 : -1;
}

/* kprw_trig_spare is the first spare slot of the control area */
u32 kprw_trig_spare(void) { return nslots(); }

/* kprw_trig_init decodes every event's triggers (records_init, after ev_filter); a
 * malformed program is said on stderr and the event has none */
void kprw_trig_init(void)
{
	u64 total = 0;
	u32 s = 0;
	for (u32 i = 0; i < kprw_rt.nevents; i++) {
		if (!(kprw_rt.events[i].flags & KPRW_EF_TRIGGERS))
			continue;
		u64 n = walk(i, NULL, NULL, &s, NULL);
		if (!n)
			kprw_puts("kprewrite: an event's trigger program is malformed; it runs no triggers\n");
		total += (n + 7) & ~7ull;
	}
	if (!kprw_rt.ev_ctl) { /* no trace file area: this process's own */
		u8 *p = kprw_mmap_anon(kprw_ctl_size() + 8);
		if (!p)
			return;
		kprw_ctl_fill(p);
		kprw_ctl_attach(p);
	}
	if (!total || !kprw_rt.ev_trig)
		return;
	u8 *mem = kprw_mmap_anon(total);
	if (!mem)
		return;
	for (u32 i = 0; i < kprw_rt.nevents; i++) {
		if (!(kprw_rt.events[i].flags & KPRW_EF_TRIGGERS))
			continue;
		struct kprw_evtrig *tg = (struct kprw_evtrig *)mem;
		u64 n = walk(i, NULL, NULL, &s, NULL);
		if (!n)
			continue;
		u32 len;
		u8 *fmem = mem + sizeof(struct kprw_evtrig) + (u64)rd16(blob(i, &len) + 4) * sizeof(struct kprw_trig);
		if (walk(i, tg, &fmem, &s, NULL))
			kprw_rt.ev_trig[i] = tg;
		mem += (n + 7) & ~7ull;
	}
}

/* take spends one of a trigger's fires: 1 when it may fire (unlimited, or a count
 * left, now one less), 0 when its count is spent. The count is shared by every
 * process of the trace file. */
static int take(u64 *cnt)
{
	u64 v = __atomic_load_n(cnt, __ATOMIC_RELAXED);
	for (;;) {
		if (v == UNLIMITED)
			return 1;
		if (v == 0)
			return 0;
		if (__atomic_compare_exchange_n(cnt, &v, v - 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return 1;
	}
}

/* kprw_snapshot takes a snapshot at time ts (0: now): the trace as it is is kept as
 * the file's snapshot, every record up to ts (kprewrite trace --snapshot); a recorder in
 * overwrite mode copies its ring when it sees the count change. The latest time wins. */
void kprw_snapshot(u64 ts)
{
	struct kprw_trace_hdr *h = kprw_rt.trace;
	if (!h)
		return;
	if (!ts)
		ts = kprw_clock();
	u64 cur = __atomic_load_n(&h->snap_ts, __ATOMIC_RELAXED);
	while (cur < ts && !__atomic_compare_exchange_n(&h->snap_ts, &cur, ts, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
	__atomic_fetch_add(&h->snap_count, 1, __ATOMIC_RELEASE);
}

static inline u32 kind(u32 cmd)
{
	if (cmd == KPRW_TRIG_STACKTRACE)
		return KIND_STACK;
	return cmd == KPRW_TRIG_TRACEON || cmd == KPRW_TRIG_TRACEOFF ? KIND_ONOFF : KIND_ENABLE;
}

/* live_word is the switch word of the live event enable_event/disable_event target x
 * names (KPRW_TRIG_LIVE_TARGET: a slot of trig_count), NULL when it is past the words a
 * hit may name (a program is checked when installed; the mapping is checked now) */
static u64 *live_word(u32 x)
{
	u32 slot = x & ~KPRW_TRIG_LIVE_TARGET;
	return kprw_rt.trig_count && slot < kprw_trig_place_limit() ? &kprw_rt.trig_count[slot] : NULL;
}

/* switched_off says whether target x (an event index, or a live event's word) is
 * soft-disabled: 1, 0, or -1 when it names nothing */
static int switched_off(u32 x)
{
	if (!(x & KPRW_TRIG_LIVE_TARGET))
		return (__atomic_load_n(&kprw_rt.ev_ctl[x], __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED) != 0;
	u64 *w = live_word(x);
	return w ? (__atomic_load_n(w, __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED) != 0 : -1;
}

/* switch_target soft-enables or soft-disables target x */
static void switch_target(u32 x, int enable)
{
	if (x & KPRW_TRIG_LIVE_TARGET) {
		u64 *w = live_word(x);
		if (w && enable)
			__atomic_and_fetch(w, ~(u64)KPRW_CTL_SOFT_DISABLED, __ATOMIC_RELAXED);
		else if (w)
			__atomic_or_fetch(w, (u64)KPRW_CTL_SOFT_DISABLED, __ATOMIC_RELAXED);
		return;
	}
	u32 *w = &kprw_rt.ev_ctl[x];
	if (enable) {
		__atomic_and_fetch(w, ~(u32)KPRW_CTL_SOFT_DISABLED, __ATOMIC_RELAXED); /* (opens: no bump) */
		return;
	}
	if (!(__atomic_fetch_or(w, KPRW_CTL_SOFT_DISABLED, __ATOMIC_RELAXED) & KPRW_CTL_SOFT_DISABLED))
		kprw_sw_bump(); /* (closed now) */
}

/* fire runs one trigger as the kernel's count variants do: traceon and traceoff do
 * nothing (and keep their count) when tracing is already in the state they set, a
 * counted enable_event/disable_event likewise when its event is */
static void fire(const struct kprw_trig *t, const struct kprw_hit *hit, u64 ts)
{
	u64 *cnt = &kprw_rt.trig_count[t->slot];
	u32 *off = kprw_rt.tracing_off;
	switch (t->cmd) {
	case KPRW_TRIG_HIST: /* runs on the fetched data only (kprw_triggers_run) */
		return;
	case KPRW_TRIG_SNAPSHOT: /* before the record: an unconditional one (ts 0, now) leaves
				  * the hit out, a conditional one (the hit's time) keeps it, as
				  * the kernel's run before and after the event is reserved */
		if (take(cnt))
			kprw_snapshot(ts);
		return;
	case KPRW_TRIG_STACKTRACE: /* after the record (a post trigger: hit is known) */
		if (hit && !__atomic_load_n(off, __ATOMIC_RELAXED) && take(cnt))
			kprw_trace_stack(hit);
		return;
	case KPRW_TRIG_ENABLE_HIST: /* the target event's histograms: continue or pause them
				     * (the kernel's hist_enable_trigger; no state check) */
	case KPRW_TRIG_DISABLE_HIST:
		if (!take(cnt))
			return;
		for (u32 j = 0; j < t->ntargets; j++) {
			u32 slot = rd32(t->targets + 4 * j);
			if (slot >= __atomic_load_n(&kprw_rt.trig_limit, __ATOMIC_RELAXED))
				continue;
			if (t->cmd == KPRW_TRIG_ENABLE_HIST)
				__atomic_and_fetch(&kprw_rt.trig_count[slot], ~1ull, __ATOMIC_RELAXED);
			else
				__atomic_or_fetch(&kprw_rt.trig_count[slot], 1ull, __ATOMIC_RELAXED);
		}
		return;
	case KPRW_TRIG_TRACEON:
		if (__atomic_load_n(off, __ATOMIC_RELAXED) && take(cnt))
			__atomic_store_n(off, 0, __ATOMIC_RELAXED); /* (opens: no bump) */
		return;
	case KPRW_TRIG_TRACEOFF:
		if (!__atomic_load_n(off, __ATOMIC_RELAXED) && take(cnt)) {
			__atomic_store_n(off, 1, __ATOMIC_RELAXED);
			kprw_sw_bump();
		}
		return;
	}
	if (!t->ntargets || !kprw_rt.ev_ctl)
		return;
	int enable = t->cmd == KPRW_TRIG_ENABLE;
	int soft = switched_off(rd32(t->targets));
	if (soft < 0 || (__atomic_load_n(cnt, __ATOMIC_RELAXED) != UNLIMITED && enable == !soft))
		return;
	if (!take(cnt))
		return;
	for (u32 j = 0; j < t->ntargets; j++)
		switch_target(rd32(t->targets + 4 * j), enable);
}

/* kprw_triggers_run runs an event's triggers at a hit, in their order (the kernel's
 * event_triggers_call): with fe NULL (no trigger has a condition or runs after the
 * record) all of them, before anything is fetched; else those whose condition holds
 * on the fetched data, except the ones that run after the record (traceoff), whose
 * kinds it returns for kprw_triggers_post */
u32 kprw_triggers_run(const struct kprw_evtrig *tg, const struct kprw_fenv *fe)
{
	u32 tt = 0;
	for (u32 k = 0; k < tg->n; k++) {
		const struct kprw_trig *t = &tg->t[k];
		if (fe) {
			if (t->filter && !kprw_filter_match(t->filter, fe))
				continue;
			if (t->hist) {
				kprw_hist_update(t->hist, kprw_rt.trig_count + t->slot, fe);
				continue;
			}
			if (t->post) {
				tt |= kind(t->cmd);
				continue;
			}
		}
		fire(t, NULL, fe ? fe->ts : 0);
	}
	return tt;
}

/* kprw_triggers_post runs the deferred triggers once the record is written or
 * dropped (the kernel's event_triggers_post_call) */
void kprw_triggers_post(const struct kprw_evtrig *tg, u32 tt, const struct kprw_hit *hit)
{
	for (u32 k = 0; k < tg->n; k++)
		if (tg->t[k].post && (tt & kind(tg->t[k].cmd)))
			fire(&tg->t[k], hit, 0);
}
