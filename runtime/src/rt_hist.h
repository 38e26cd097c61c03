/* rt_hist.h - hist triggers (rt_hist.c), included by rt.h */
#ifndef KPRW_RT_HIST_H
#define KPRW_RT_HIST_H
#ifndef KPRW_RT_H
#error "included by rt.h"
#endif

/* a hist trigger's shape, decoded at start-up (rt_hist.c; internal/evhist's program) */
struct kprw_hfield {
	u8 src, mod, size, flags; /* flags: 1 signed, 2 string, 4 comm */
	u16 off, words;
	u64 arg;             /* .buckets=N, or the image's link-time limit for .sym */
};
#define KPRW_HIST_MAXKEYS 3
#define KPRW_HIST_MAXVARS 8
/* synthetic events' records a hit generated before its own record was written: they
 * follow it, as the kernel's nested events follow the one whose triggers wrote them */
#define KPRW_SYNTHQ 2
struct kprw_synthq {
	u32 n, pad;
	struct {
		u32 id, nfields;
		u64 site;
		u64 data[KPRW_HIST_MAXVARS];
	} r[KPRW_SYNTHQ];
};
#define KPRW_HIST_MAXREFS 4
#define KPRW_HIST_MAXTARGETS 32
#define KPRW_HIST_MAXSAVE 8
#define KPRW_HIST_TRACK 4 /* program flag: a track block follows the targets */
#define KPRW_HIST_RECORD 8 /* program flag: a record block follows: the synthetic event is
			    * written to the trace file too (evhist's recordBlock) */
#define KPRW_HDO_SAVE 1
#define KPRW_HDO_SNAPSHOT 2
#define KPRW_HDO_TRACE 4 /* the onmatch-style targets run only when the tracked value passes */
struct kprw_hvar { u8 kind[4], minus[4]; u16 idx[4]; }; /* a sum of operands */
struct kprw_href { u32 slot, size; u16 ewords, setw, varw, bit; }; /* another histogram's variable */
struct kprw_hparam { u8 kind, pad; u16 idx; };
struct kprw_hist;
struct kprw_htarget { /* a synthetic event's histogram, and its "if" (NULL: none) */
	u32 slot, pad;
	const struct kprw_hist *h;
	const struct kprw_fprog *filter;
};
struct kprw_hist {
	u32 nkeys, nvals, flags, size; /* size: entries */
	u32 kwords, ewords;
	u64 nbuckets;
	u32 nvars, nx, nrefs, nparams, ntargets, pad;
	/* onmax($v)/onchange($v) (flags KPRW_HIST_TRACK): the tracked variable, the
	 * actions (KPRW_HDO_*), the tracked value's word in an entry (a lock word and the
	 * saved fields follow it) and the saved fields */
	u8 handler, tvar, nsave, tdo;
	u32 tword;
	/* KPRW_HIST_RECORD: the synthetic event's id (0: not recorded), its switch's slot
	 * and its rewrite state (bit 0: disabled; the switch word's bit 0 flips it) */
	u32 rec_id, rec_slot, rec_init;
	u32 simple; /* keys of one number word each, values, nothing else: update_simple */
	const struct kprw_fprog *rec_filter; /* KPRW_HIST_RECORD: the synthetic event's filter as rewritten */
	const struct kprw_hfield *save;
	const struct kprw_hvar *vars;
	const struct kprw_href *refs;
	const struct kprw_hparam *params;
	const struct kprw_htarget *targets;
	struct kprw_hfield f[]; /* keys, values, the variables' operand fields */
};
void kprw_hist_first_words(const u8 *p, u64 *counts, u32 from);
u64 kprw_hist_words(const u8 *prog, u32 plen, u32 *dsize, u64 *end);
void kprw_hist_decode(const u8 *prog, struct kprw_hist *out);
u32 kprw_hist_needs(const struct kprw_hist *h);
void kprw_hist_update(const struct kprw_hist *h, u64 *tab, const struct kprw_fenv *e);

#endif
