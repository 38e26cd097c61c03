/* Hist triggers (rewrite --trigger 'G/E:hist:keys=...'): the kernel's event histograms
 * (kernel/trace/trace_events_hist.c, tracing_map.c) kept in the trace file's control
 * area, so that every process of the file adds to them and a crash leaves them there.
 * internal/evhist describes the program and the table and prints them; this file
 * decodes the program at start-up and adds a hit. The table is open addressing over
 * twice its entries, lock-free: a writer claims an empty bucket with a compare and
 * swap, writes the key and publishes its hash; counts are atomic adds. */
#include "rt.h"

#define H_HDR 16
#define H_FIELD 16
#define H_HEADER_WORDS 4
#define H_PAUSED 1
#define H_COMM 2
#define TAG_BUSY 1ull
#define TAG_DEAD 2ull /* a bucket won when the table filled: no entry, never claimed again */
#define TAG_BIT (1ull << 63)
#define STRING_WORDS 32 /* evhist.StringKeyLen / 8 */
#define COMM_WORDS 2
#define MAX_TABLE_BYTES (64ull << 20)
#define REC_DISABLED 1 /* the record block's flags (evhist's recDisabled, recFiltered) */
#define REC_FILTERED 2
#define SPIN 4096 /* waits for a bucket being filled before looking further */
#define TARGET_FILTER (1u << 31) /* a target's length word: a filter follows its program */
#define SNAP_WORDS 4 /* after the buckets, with onmax().snapshot(): lock, the global
		      * tracked value, the bucket (+1) that set it, reserved */

enum { SrcData, SrcPID, SrcCPU, SrcComm, SrcType, SrcZero, SrcIP, SrcRetIP, SrcTS, SrcStack };
#define STACK_WORDS 16 /* evhist.StackDepth */
enum { ModNone, ModHex, ModSym, ModSymOffset, ModExecname, ModSyscall, ModLog2, ModBuckets, ModUsecs };

static inline u32 rd16(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8; }
static inline u32 rd32(const u8 *p) { return rd16(p) | rd16(p + 2) << 16; }
static inline u64 rd64(const u8 *p) { return (u64)rd32(p) | (u64)rd32(p + 4) << 32; }

#define OP_NONE 0
#define OP_FIELD 1
#define OP_REF 2
#define OP_CONST 3
#define OP_VAR 4

static inline u64 align8(u64 n) { return (n + 7) & ~7ull; }

/* check_filter checks the filter at *off of a program of len bytes (u32 length, an
 * evfilter program, to 4 bytes): 1 with *off past it and *ds grown by its compiled
 * size, 0 when malformed */
static int check_filter(const u8 *p, u32 len, u64 *off, u64 *ds)
{
	if (len < *off + 4)
		return 0;
	u32 fl = rd32(p + *off);
	if (fl > len - *off - 4)
		return 0;
	u32 fsz = kprw_filter_size(p + *off + 4, fl);
	if (!fsz)
		return 0;
	*ds += align8(fsz);
	*off += 4ull + ((fl + 3) & ~3u);
	return *off <= len;
}

/* check validates a program (as evhist.CheckProgram) and returns its table's words, 0
 * when malformed: *used its bytes, *dsize the bytes of its decoded form (nested
 * histograms included), *end raised past the tables it reads and feeds */
static u64 check(const u8 *p, u32 len, int top, u32 *used, u64 *dsize, u64 *end)
{
	if (len < H_HDR)
		return 0;
	u32 nk = p[0], nv = p[1], nvars = p[3], nx = p[12], nrefs = p[13], nparams = p[14], ntargets = p[15];
	if (nk == 0 || nk > KPRW_HIST_MAXKEYS || nv > 6 || nvars > KPRW_HIST_MAXVARS || nx > 4 * KPRW_HIST_MAXVARS ||
	    nrefs > KPRW_HIST_MAXREFS || nparams > KPRW_HIST_MAXVARS || ntargets > KPRW_HIST_MAXTARGETS)
		return 0;
	if (!top && (nrefs | nparams | ntargets))
		return 0;
	u32 nf = nk + nv + nx;
	u64 off = H_HDR + (u64)H_FIELD * nf;
	if (len < off + 16ull * nvars + 16ull * nrefs + 4ull * nparams)
		return 0;
	u32 size = rd32(p + 4), kw = rd16(p + 8), ew = rd16(p + 10);
	if (size < 128 || size > 131072 || (size & (size - 1)))
		return 0;
	u32 sum = 0;
	for (u32 i = 0; i < nf; i++) {
		const u8 *e = p + H_HDR + i * H_FIELD;
		u32 w = rd16(e + 6);
		if (e[0] > SrcStack || e[1] > ModUsecs || e[2] == 0 || e[2] > 8)
			return 0;
		int stack = (e[3] & 8) != 0;
		if (stack != (e[0] == SrcStack) || (stack && (i >= nk || w != STACK_WORDS || e[3] != 8)))
			return 0;
		if (!stack && ((e[3] & 2) ? (i >= nk || (w != STRING_WORDS && w != COMM_WORDS)) : w != 1))
			return 0;
		if (e[1] == ModBuckets && rd64(e + 8) == 0)
			return 0;
		if (i < nk)
			sum += w;
	}
	u32 want = 1 + sum + 1 + nv + (nvars ? 1 + nvars : 0) + ((p[2] & H_COMM) ? COMM_WORDS : 0);
	if (sum != kw || ew < want || (!(p[2] & KPRW_HIST_TRACK) && ew != want) || (p[2] & KPRW_HIST_TRACK && !top))
		return 0;
	for (u32 v = 0; v < nvars; v++)
		for (u32 k = 0; k < 4; k++) {
			const u8 *op = p + off + 16 * v + 4 * k;
			u32 idx = rd16(op + 2);
			if (op[0] > OP_CONST || (op[0] == OP_FIELD && (idx < nk + nv || idx >= nf)) ||
			    (op[0] == OP_REF && idx >= nrefs))
				return 0;
		}
	off += 16ull * nvars;
	for (u32 r = 0; r < nrefs; r++) {
		const u8 *e = p + off + 16 * r;
		u32 slot = rd32(e), rs = rd32(e + 4), rew = rd16(e + 8), setw = rd16(e + 10), varw = rd16(e + 12);
		if (rs < 128 || rs > 131072 || (rs & (rs - 1)) || setw < 2 + kw || setw >= varw || varw >= rew ||
		    rd16(e + 14) >= 64)
			return 0;
		u64 words = H_HEADER_WORDS + 2ull * rs * rew;
		if (words * 8 > MAX_TABLE_BYTES)
			return 0;
		if ((u64)slot + words > *end)
			*end = (u64)slot + words;
	}
	off += 16ull * nrefs;
	for (u32 q = 0; q < nparams; q++) {
		const u8 *e = p + off + 4 * q;
		u32 idx = rd16(e + 2);
		if (!((e[0] == OP_REF && idx < nrefs) || (e[0] == OP_VAR && idx < nvars)))
			return 0;
	}
	off += 4ull * nparams;
	u64 ds = align8(sizeof(struct kprw_hist) + nf * sizeof(struct kprw_hfield)) + nvars * sizeof(struct kprw_hvar) +
		 nrefs * sizeof(struct kprw_href) + align8(nparams * sizeof(struct kprw_hparam)) +
		 ntargets * sizeof(struct kprw_htarget);
	for (u32 t = 0; t < ntargets; t++) {
		if (len < off + 8)
			return 0;
		u32 slot = rd32(p + off), n = rd32(p + off + 4) & ~TARGET_FILTER, u;
		int filtered = (rd32(p + off + 4) & TARGET_FILTER) != 0;
		if (n > len - off - 8)
			return 0;
		u64 tds, tend = 0;
		u64 words = check(p + off + 8, n, 0, &u, &tds, &tend);
		if (!words || u != n)
			return 0;
		ds += tds;
		if ((u64)slot + words > *end)
			*end = (u64)slot + words;
		off += 8ull + n;
		if (filtered && !check_filter(p, len, &off, &ds))
			return 0;
	}
	u64 words = H_HEADER_WORDS + 2ull * size * ew;
	if (p[2] & KPRW_HIST_TRACK) { /* the track block: handler, variable, saved fields */
		if (len < off + 8)
			return 0;
		const u8 *t = p + off;
		u32 nsave = t[2], tdo = t[3], sw = 0;
		if (t[0] < 1 || t[0] > 2 || t[1] >= nvars || nsave > KPRW_HIST_MAXSAVE || !tdo || tdo > 7 ||
		    !(tdo & KPRW_HDO_SAVE) != !nsave || rd16(t + 4) != want || rd16(t + 6) || len - off - 8 < 16 * nsave)
			return 0;
		for (u32 i = 0; i < nsave; i++) {
			const u8 *e = t + 8 + 16 * i;
			u32 w = rd16(e + 6);
			if (e[0] >= SrcStack || e[1] != ModNone || e[2] == 0 || e[2] > 8 || (e[3] & 8) ||
			    ((e[3] & 2) ? (w != STRING_WORDS && w != COMM_WORDS) : w != 1))
				return 0;
			sw += w;
		}
		if (ew != want + 2 + sw)
			return 0;
		if (tdo & KPRW_HDO_SNAPSHOT)
			words += SNAP_WORDS;
		off += 8 + 16 * nsave;
		ds += nsave * sizeof(struct kprw_hfield);
	}
	if (p[2] & KPRW_HIST_RECORD) { /* the synthetic event's id, its switch's slot, flags, fields */
		if (!top || !nparams || len < off + 12)
			return 0;
		const u8 *r = p + off;
		u32 slot = rd32(r + 4);
		if (!rd32(r) || slot >= (1u << 24) || r[8] > (REC_DISABLED | REC_FILTERED) || r[9] != nparams || r[10] || r[11])
			return 0;
		if ((u64)slot + 1 > *end)
			*end = (u64)slot + 1;
		off += 12;
		if ((r[8] & REC_FILTERED) && !check_filter(p, len, &off, &ds)) /* the event's filter */
			return 0;
	}
	if (p[2] & ~(H_PAUSED | H_COMM | KPRW_HIST_TRACK | KPRW_HIST_RECORD))
		return 0;
	if (words * 8 > MAX_TABLE_BYTES)
		return 0;
	*used = (u32)off;
	*dsize = ds;
	return words;
}

/* kprw_hist_words checks a program and returns the table's words, 0 when malformed;
 * *dsize is the bytes its decoded form takes, *end is raised past the other tables it
 * reads (variables) and feeds (synthetic events' histograms) */
u64 kprw_hist_words(const u8 *p, u32 len, u32 *dsize, u64 *end)
{
	u32 used;
	u64 ds;
	u64 w = check(p, len, 1, &used, &ds, end);
	if (!w || used != len || ds > (1u << 20))
		return 0;
	*dsize = (u32)ds;
	return w;
}

/* decode reads a checked program into out; returns the bytes of out it used */
static u64 decode(const u8 *p, struct kprw_hist *out)
{
	out->nkeys = p[0];
	out->nvals = p[1];
	out->flags = p[2];
	out->nvars = p[3];
	out->size = rd32(p + 4);
	out->kwords = rd16(p + 8);
	out->ewords = rd16(p + 10);
	out->nx = p[12];
	out->nrefs = p[13];
	out->nparams = p[14];
	out->ntargets = p[15];
	out->nbuckets = 2ull * out->size;
	u32 nf = out->nkeys + out->nvals + out->nx;
	for (u32 i = 0; i < nf; i++) {
		const u8 *e = p + H_HDR + i * H_FIELD;
		struct kprw_hfield *f = &out->f[i];
		f->src = e[0];
		f->mod = e[1];
		f->size = e[2];
		f->flags = e[3];
		f->off = (u16)rd16(e + 4);
		f->words = (u16)rd16(e + 6);
		f->arg = rd64(e + 8);
	}
	u8 *mem = (u8 *)out + align8(sizeof(struct kprw_hist) + nf * sizeof(struct kprw_hfield));
	const u8 *q = p + H_HDR + nf * H_FIELD;
	struct kprw_hvar *vars = (struct kprw_hvar *)mem;
	for (u32 v = 0; v < out->nvars; v++, q += 16)
		for (u32 k = 0; k < 4; k++) {
			vars[v].kind[k] = q[4 * k];
			vars[v].minus[k] = q[4 * k + 1];
			vars[v].idx[k] = (u16)rd16(q + 4 * k + 2);
		}
	out->vars = vars;
	mem += out->nvars * sizeof(struct kprw_hvar);
	struct kprw_href *refs = (struct kprw_href *)mem;
	for (u32 r = 0; r < out->nrefs; r++, q += 16) {
		refs[r].slot = rd32(q);
		refs[r].size = rd32(q + 4);
		refs[r].ewords = (u16)rd16(q + 8);
		refs[r].setw = (u16)rd16(q + 10);
		refs[r].varw = (u16)rd16(q + 12);
		refs[r].bit = (u16)rd16(q + 14);
	}
	out->refs = refs;
	mem += out->nrefs * sizeof(struct kprw_href);
	struct kprw_hparam *ps = (struct kprw_hparam *)mem;
	for (u32 k = 0; k < out->nparams; k++, q += 4) {
		ps[k].kind = q[0];
		ps[k].idx = (u16)rd16(q + 2);
	}
	out->params = ps;
	mem += align8(out->nparams * sizeof(struct kprw_hparam));
	struct kprw_htarget *ts = (struct kprw_htarget *)mem;
	mem += out->ntargets * sizeof(struct kprw_htarget);
	for (u32 t = 0; t < out->ntargets; t++) {
		u32 n = rd32(q + 4) & ~TARGET_FILTER;
		int filtered = (rd32(q + 4) & TARGET_FILTER) != 0;
		ts[t].slot = rd32(q);
		ts[t].h = (const struct kprw_hist *)mem;
		ts[t].filter = NULL;
		mem += decode(q + 8, (struct kprw_hist *)mem);
		q += 8 + n;
		if (filtered) {
			u32 fl = rd32(q);
			struct kprw_fprog *f = (struct kprw_fprog *)mem;
			if (kprw_filter_compile(q + 4, fl, f) == 0) /* checked: it compiles */
				ts[t].filter = f;
			mem += align8(kprw_filter_size(q + 4, fl));
			q += 4 + ((fl + 3) & ~3u);
		}
	}
	out->targets = ts;
	out->handler = out->tvar = out->nsave = out->tdo = 0;
	out->tword = 0;
	out->save = NULL;
	out->rec_id = out->rec_slot = out->rec_init = 0;
	out->simple = !out->nvars && !out->nrefs && !out->ntargets &&
		      !(out->flags & (KPRW_HIST_TRACK | KPRW_HIST_RECORD | H_COMM)) && out->kwords == out->nkeys;
	for (u32 i = 0; i < out->nkeys; i++)
		if (out->f[i].flags & (2 | 8)) /* a string or a stack */
			out->simple = 0;
	if (out->flags & KPRW_HIST_TRACK) {
		out->handler = q[0];
		out->tvar = q[1];
		out->nsave = q[2];
		out->tdo = q[3];
		out->tword = rd16(q + 4);
		struct kprw_hfield *sv = (struct kprw_hfield *)mem;
		for (u32 i = 0; i < out->nsave; i++) {
			const u8 *e = q + 8 + 16 * i;
			sv[i].src = e[0];
			sv[i].mod = e[1];
			sv[i].size = e[2];
			sv[i].flags = e[3];
			sv[i].off = (u16)rd16(e + 4);
			sv[i].words = (u16)rd16(e + 6);
			sv[i].arg = rd64(e + 8);
		}
		out->save = sv;
		mem += out->nsave * sizeof(struct kprw_hfield);
		q += 8 + 16 * out->nsave;
	}
	out->rec_filter = NULL;
	if (out->flags & KPRW_HIST_RECORD) {
		out->rec_id = rd32(q);
		out->rec_slot = rd32(q + 4);
		out->rec_init = q[8] & REC_DISABLED;
		if (q[8] & REC_FILTERED) {
			u32 fl = rd32(q + 12);
			struct kprw_fprog *f = (struct kprw_fprog *)mem;
			if (kprw_filter_compile(q + 16, fl, f) == 0) /* checked: it compiles */
				out->rec_filter = f;
			mem += align8(kprw_filter_size(q + 16, fl));
		}
	}
	return (u64)(mem - (u8 *)out);
}

void kprw_hist_decode(const u8 *p, struct kprw_hist *out) { decode(p, out); }

/* kprw_hist_first_words writes the first word of each synthetic event's histogram a
 * checked program feeds (its table's flags: paused or not, as rewritten) into counts,
 * for the tables from slot from on: a new control area's first contents */
void kprw_hist_first_words(const u8 *p, u64 *counts, u32 from)
{
	u32 nf = (u32)p[0] + p[1] + p[12];
	u64 off = H_HDR + (u64)H_FIELD * nf + 16ull * p[3] + 16ull * p[13] + 4ull * p[14];
	for (u32 t = 0; t < p[15]; t++) {
		u32 slot = rd32(p + off), lw = rd32(p + off + 4), n = lw & ~TARGET_FILTER;
		if (slot >= from)
			counts[slot] = p[off + 8 + 2] & H_PAUSED;
		off += 8ull + n;
		if (lw & TARGET_FILTER)
			off += 4ull + ((rd32(p + off) + 3) & ~3u);
	}
}

/* kprw_hist_needs is what of the hit's environment a histogram and the ones it feeds
 * read besides the data (KPRW_FNEED_*) */
u32 kprw_hist_needs(const struct kprw_hist *h)
{
	u32 n = 0;
	for (u32 i = 0; i < h->nkeys + h->nvals + h->nx; i++) {
		if (h->f[i].src == SrcCPU)
			n |= KPRW_FNEED_CPU;
		if (h->f[i].src == SrcTS)
			n |= KPRW_FNEED_TS;
		if ((h->f[i].flags & 4) || h->f[i].mod == ModExecname)
			n |= KPRW_FNEED_COMM;
	}
	for (u32 i = 0; i < h->nsave; i++) {
		if (h->save[i].src == SrcCPU)
			n |= KPRW_FNEED_CPU;
		if (h->save[i].src == SrcTS)
			n |= KPRW_FNEED_TS;
		if (h->save[i].flags & 4)
			n |= KPRW_FNEED_COMM;
	}
	if (h->tdo & KPRW_HDO_SNAPSHOT) /* the snapshot keeps the hit: its time */
		n |= KPRW_FNEED_TS;
	for (u32 t = 0; t < h->ntargets; t++)
		n |= kprw_hist_needs(h->targets[t].h) | (h->targets[t].filter ? h->targets[t].filter->needs : 0);
	return n;
}

/* value is a numeric field's value at this hit, sign-extended when signed, with the
 * key modifiers applied (the kernel's hist_field_* functions) */
static inline u64 value(const struct kprw_hfield *f, const struct kprw_fenv *e)
{
	u64 x = 0;
	switch (f->src) {
	case SrcData:
		if ((u32)f->off + f->size > e->dlen)
			return 0;
		x = kprw_le_read(e->data + f->off, f->size);
		if ((f->flags & 1) && f->size < 8) {
			u32 sh = 64 - 8 * f->size;
			x = (u64)((s64)(x << sh) >> sh);
		}
		break;
	case SrcPID: x = e->tid; break;
	case SrcCPU: x = e->cpu; break;
	case SrcType: x = e->type; break;
	case SrcIP: x = e->ip; break;
	case SrcRetIP: x = e->ret_ip; break;
	case SrcTS: x = e->ts; break;
	}
	switch (f->mod) {
	case ModLog2: /* ilog2(roundup_pow_of_two(x)) */
		return x <= 1 ? 0 : 64 - (u64)__builtin_clzll(x - 1);
	case ModBuckets:
		return x / f->arg * f->arg;
	case ModUsecs:
		return x / 1000;
	case ModSym:
	case ModSymOffset: /* in the image: its link-time address, the same in every run */
		if (x >= e->bias && x - e->bias < f->arg)
			return x - e->bias;
		return x;
	}
	return x;
}

/* a key's fields at this hit: numbers computed once, strings where they are, the
 * stack walked once */
struct hkey {
	u64 num[KPRW_HIST_MAXKEYS];
	const u8 *str[KPRW_HIST_MAXKEYS];
	u32 slen[KPRW_HIST_MAXKEYS];
	u64 stack[STACK_WORDS];
};

/* stack_key walks the hit's stack into k->stack: the frames in the image as link-time
 * addresses (the same entry in every run of a PIE), up to the first frame outside it,
 * zero after */
static void stack_key(const struct kprw_hfield *f, const struct kprw_fenv *e, struct hkey *k)
{
	u32 n = e->regs ? kprw_stack_walk(e->regs, k->stack, STACK_WORDS, e->fast) : 0, i = 0;
	for (; i < n; i++) {
		u64 pc = k->stack[i];
		if (pc < e->bias || pc - e->bias >= f->arg)
			break;
		k->stack[i] = pc - e->bias;
	}
	for (; i < STACK_WORDS; i++)
		k->stack[i] = 0;
}

/* str_at is a string field's bytes at this hit (the thread's comm, or a string
 * fetcharg's __data_loc), at most max of them up to a NUL; NULL with *n 0 when absent */
static const u8 *str_at(const struct kprw_hfield *f, const struct kprw_fenv *e, u32 max, u32 *n)
{
	const u8 *s = NULL;
	*n = 0;
	if (f->flags & 4) {
		s = (const u8 *)e->comm;
		if (s)
			while (*n < max && s[*n])
				(*n)++;
	} else if ((u32)f->off + 4 <= e->dlen) {
		u32 item;
		__builtin_memcpy(&item, e->data + f->off, 4);
		u32 loc = item & 0xffff, sl = item >> 16;
		if (loc <= e->dlen) {
			s = e->data + loc;
			u32 avail = e->dlen - loc;
			if (sl > avail)
				sl = avail;
			while (*n < sl && *n < max && s[*n])
				(*n)++;
		}
	}
	return s;
}

static void key_at(const struct kprw_hist *h, const struct kprw_fenv *e, struct hkey *k)
{
	for (u32 i = 0; i < h->nkeys; i++) {
		const struct kprw_hfield *f = &h->f[i];
		k->num[i] = 0;
		k->str[i] = NULL;
		k->slen[i] = 0;
		if (f->flags & 8) {
			stack_key(f, e, k);
			continue;
		}
		if (!(f->flags & 2)) {
			k->num[i] = value(f, e);
			continue;
		}
		u32 n;
		k->str[i] = str_at(f, e, f->words * 8 - 1, &n); /* NUL-padded: at least one NUL */
		k->slen[i] = n;
	}
}

/* kword is word w of key field i */
static inline u64 kword(const struct hkey *k, const struct kprw_hfield *f, u32 i, u32 w)
{
	if (f->flags & 8)
		return k->stack[w];
	if (!(f->flags & 2))
		return k->num[i];
	u64 x = 0;
	u32 o = w * 8;
	for (u32 b = 0; b < 8 && o + b < k->slen[i]; b++)
		x |= (u64)k->str[i][o + b] << (8 * b);
	return x;
}

static inline u64 mix(u64 h, u64 w)
{
	h = (h ^ w) * 0x9e3779b97f4a7c15ull;
	return h ^ (h >> 29);
}

static int key_eq(const struct kprw_hist *h, const void *key, const u64 *ent)
{
	const struct hkey *k = key;
	const u64 *kw = ent + 1;
	for (u32 i = 0; i < h->nkeys; i++) {
		const struct kprw_hfield *f = &h->f[i];
		for (u32 w = 0; w < f->words; w++)
			if (*kw++ != kword(k, f, i, w))
				return 0;
	}
	return 1;
}

static void add(const struct kprw_hist *h, u64 *ent, const struct kprw_fenv *e)
{
	u64 *c = ent + 1 + h->kwords;
	__atomic_fetch_add(&c[0], 1, __ATOMIC_RELAXED);
	for (u32 i = 0; i < h->nvals; i++) {
		u64 v = value(&h->f[h->nkeys + i], e);
		if (v)
			__atomic_fetch_add(&c[1 + i], v, __ATOMIC_RELAXED);
	}
}

/* lookup finds the entry of key k (hashed to hash) in the table tab of nb buckets of
 * ew words, NULL when there is none */
static u64 *lookup(const struct kprw_hist *h, const struct hkey *k, u64 hash, u64 *tab, u64 nb, u32 ew)
{
	u64 tag = hash | TAG_BIT, mask = nb - 1, idx = hash & mask;
	for (u64 n = 0; n < nb; n++, idx = (idx + 1) & mask) {
		u64 *ent = tab + H_HEADER_WORDS + idx * ew;
		u64 t = __atomic_load_n(&ent[0], __ATOMIC_ACQUIRE);
		if (t == 0)
			return NULL;
		if (t == tag && key_eq(h, k, ent))
			return ent;
	}
	return NULL;
}

static void synth(const struct kprw_hist *h, const u64 *refv, const u64 *varv, const struct kprw_fenv *e);

/* passes: the value v a hit computed is a new maximum (onmax) or a change (onchange)
 * of the tracked value cur (the kernel's check_track_val_max and _changed; unsigned,
 * from 0) */
static inline int passes(const struct kprw_hist *h, u64 cur, u64 v) { return h->handler == 1 ? v > cur : v != cur; }

/* try_lock takes a lock word, waiting a bounded spin for its holder: 0 when it could
 * not (a holder killed while holding it keeps the word: its entry's value stays) */
static int try_lock(u64 *l)
{
	for (u32 s = 0; s < SPIN; s++) {
		u64 zero = 0;
		if (__atomic_load_n(l, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(l, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return 1;
		__builtin_ia32_pause();
	}
	return 0;
}

static inline void unlock(u64 *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* track runs an onmax()/onchange() handler on entry ent (bucket b of tab) for the value
 * v: when it passes, the entry keeps v and the save() fields of this hit, under the
 * entry's lock so that they are one hit's; a snapshot() action then takes the file's
 * snapshot when v also passes the histogram's global value. Returns whether it passed. */
static __attribute__((noinline)) int track(const struct kprw_hist *h, u64 *tab, u64 *ent, u64 b, u64 v,
					    const struct kprw_fenv *e)
{
	u64 *tw = ent + h->tword;
	if (!passes(h, __atomic_load_n(&tw[0], __ATOMIC_RELAXED), v) || !try_lock(&tw[1]))
		return 0;
	int ok = passes(h, tw[0], v);
	if (ok) {
		u64 *d = tw + 2;
		for (u32 i = 0; i < h->nsave; i++) {
			const struct kprw_hfield *f = &h->save[i];
			if (!(f->flags & 2)) {
				*d++ = value(f, e);
				continue;
			}
			u32 n;
			const u8 *s = str_at(f, e, f->words * 8 - 1, &n);
			u8 *out = (u8 *)d;
			for (u32 c = 0; c < f->words * 8u; c++)
				out[c] = c < n ? s[c] : 0;
			d += f->words;
		}
		__atomic_store_n(&tw[0], v, __ATOMIC_RELEASE);
	}
	unlock(&tw[1]);
	if (ok && (h->tdo & KPRW_HDO_SNAPSHOT)) {
		u64 *g = tab + H_HEADER_WORDS + h->nbuckets * h->ewords;
		int snap = 0;
		if (try_lock(&g[0])) {
			if ((snap = passes(h, g[1], v))) {
				g[1] = v;
				g[2] = b + 1;
			}
			unlock(&g[0]);
		}
		if (snap)
			kprw_snapshot(e->ts);
	}
	return ok;
}

/* kprw_hist_update adds a hit to the histogram at tab (its trigger's condition held).
 * A key that finds no free entry is a drop; the program never waits longer than a
 * bounded spin for another writer's bucket. With variable references, a hit whose key
 * has no entry with the variables set in their histograms adds nothing (the kernel's
 * resolve_var_refs); with an onmatch() action, each hit that adds generates the
 * synthetic event: its histograms get the action's parameters as their data. */
/* fill_key writes a new entry's key (and comm) words; fill_words and words_eq are
 * fill_key and key_eq for keys of one number word each (update_simple) */
static inline __attribute__((always_inline)) void fill_key(const struct kprw_hist *h, const void *key, u64 *b,
							    const struct kprw_fenv *e)
{
	const struct hkey *k = key;
	u64 *kw = b + 1;
	for (u32 i = 0; i < h->nkeys; i++)
		for (u32 w = 0; w < h->f[i].words; w++)
			*kw++ = kword(k, &h->f[i], i, w);
	if ((h->flags & H_COMM) && e->comm) {
		u8 *cm = (u8 *)(b + h->ewords - COMM_WORDS);
		for (u32 c = 0; c < 16; c++)
			cm[c] = (u8)e->comm[c];
	}
}

static inline __attribute__((always_inline)) void fill_words(const struct kprw_hist *h, const void *key, u64 *b,
							      const struct kprw_fenv *e)
{
	const u64 *k = key;
	(void)e;
	for (u32 i = 0; i < h->nkeys; i++)
		b[1 + i] = k[i];
}

static inline __attribute__((always_inline)) int words_eq(const struct kprw_hist *h, const void *key, const u64 *b)
{
	const u64 *k = key;
	for (u32 i = 0; i < h->nkeys; i++)
		if (b[1 + i] != k[i])
			return 0;
	return 1;
}

/* find_or_claim is the entry of key k (hashed to hash) in the table at tab: found, or an
 * empty bucket claimed (a compare-and-swap of its tag), filled by fill and published;
 * NULL when the table holds its entries (a drop). A bucket being filled is waited for a
 * bounded spin, then passed (its writer may have been killed). Inlined with its eq and
 * fill (constants at each call), so each caller's key comparison is its own. */
static inline __attribute__((always_inline)) u64 *
find_or_claim(const struct kprw_hist *h, u64 *tab, u64 hash, const void *k,
	      int (*eq)(const struct kprw_hist *, const void *, const u64 *),
	      void (*fill)(const struct kprw_hist *, const void *, u64 *, const struct kprw_fenv *),
	      const struct kprw_fenv *e)
{
	u64 tag = hash | TAG_BIT, mask = h->nbuckets - 1, idx = hash & mask;
	u64 *base = tab + H_HEADER_WORDS;
	for (u64 n = 0; n < h->nbuckets; n++, idx = (idx + 1) & mask) {
		u64 *b = base + idx * h->ewords;
		u64 t = __atomic_load_n(&b[0], __ATOMIC_ACQUIRE);
		if (t == 0) {
			/* the count is taken after the bucket is won, so only a writer that holds
			 * a bucket raises it: once it reaches size the table holds size entries
			 * and never fewer, and a full count is never a passing one (a count
			 * raised before the claim and lowered when the claim failed made a third
			 * writer drop a key the table had room for) */
			if (__atomic_load_n(&tab[3], __ATOMIC_RELAXED) >= h->size)
				return NULL; /* the table holds its entries: a drop */
			u64 zero = 0;
			if (__atomic_compare_exchange_n(&b[0], &zero, TAG_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				if (__atomic_fetch_add(&tab[3], 1, __ATOMIC_RELAXED) >= h->size) {
					/* filled while this bucket was won: given up, but never empty
					 * again (a writer may have passed it while busy and put its key
					 * further on; a lookup claims at the first empty bucket) */
					__atomic_fetch_sub(&tab[3], 1, __ATOMIC_RELAXED);
					__atomic_store_n(&b[0], TAG_DEAD, __ATOMIC_RELEASE);
					return NULL;
				}
				fill(h, k, b, e);
				__atomic_store_n(&b[0], tag, __ATOMIC_RELEASE);
				return b;
			}
			t = zero;
		}
		for (u32 s = 0; t == TAG_BUSY && s < SPIN; s++) {
			__builtin_ia32_pause();
			t = __atomic_load_n(&b[0], __ATOMIC_ACQUIRE);
		}
		if (t == tag && eq(h, k, b))
			return b;
		/* else another key, or a bucket whose writer never finished (killed): look further */
	}
	return NULL;
}

/* update_simple is kprw_hist_update for a histogram whose keys are one number word
 * each and that has no variables, references, actions or comm: the same hash, buckets
 * and counts, without the general path's key and variable machinery */
static void update_simple(const struct kprw_hist *h, u64 *tab, const struct kprw_fenv *e)
{
	u64 k[KPRW_HIST_MAXKEYS];
	u64 hash = 0x6a09e667f3bcc908ull;
	u32 nk = h->nkeys;
	for (u32 i = 0; i < nk; i++) {
		k[i] = value(&h->f[i], e);
		hash = mix(hash, k[i]);
	}
	u64 *ent = find_or_claim(h, tab, hash, k, words_eq, fill_words, e);
	if (!ent) {
		__atomic_fetch_add(&tab[2], 1, __ATOMIC_RELAXED);
		return;
	}
	add(h, ent, e);
}

void kprw_hist_update(const struct kprw_hist *h, u64 *tab, const struct kprw_fenv *e)
{
	if (__atomic_load_n(&tab[0], __ATOMIC_RELAXED) & H_PAUSED)
		return;
	if (h->simple) {
		update_simple(h, tab, e);
		return;
	}
	struct hkey k;
	key_at(h, e, &k);
	u64 hash = 0x6a09e667f3bcc908ull;
	for (u32 i = 0; i < h->nkeys; i++)
		for (u32 w = 0; w < h->f[i].words; w++)
			hash = mix(hash, kword(&k, &h->f[i], i, w));
	u64 refv[KPRW_HIST_MAXREFS], varv[KPRW_HIST_MAXVARS];
	for (u32 r = 0; r < h->nrefs; r++) {
		const struct kprw_href *rf = &h->refs[r];
		u64 *ent = lookup(h, &k, hash, kprw_rt.trig_count + rf->slot, 2ull * rf->size, rf->ewords);
		if (!ent || !(__atomic_load_n(&ent[rf->setw], __ATOMIC_ACQUIRE) & (1ull << rf->bit)))
			return;
		refv[r] = __atomic_load_n(&ent[rf->varw], __ATOMIC_RELAXED);
	}
	for (u32 v = 0; v < h->nvars; v++) {
		const struct kprw_hvar *hv = &h->vars[v];
		u64 x = 0;
		for (u32 o = 0; o < 4; o++) {
			u64 y;
			switch (hv->kind[o]) {
			case OP_FIELD: y = value(&h->f[hv->idx[o]], e); break;
			case OP_REF: y = refv[hv->idx[o]]; break;
			case OP_CONST: y = hv->idx[o]; break;
			default: continue;
			}
			x = hv->minus[o] ? x - y : x + y;
		}
		varv[v] = x;
	}
	u64 *ent = find_or_claim(h, tab, hash, &k, key_eq, fill_key, e);
	if (!ent) {
		__atomic_fetch_add(&tab[2], 1, __ATOMIC_RELAXED);
		return;
	}
	add(h, ent, e);
	if (h->nvars) {
		u64 *vw = ent + 2 + h->kwords + h->nvals;
		for (u32 v = 0; v < h->nvars; v++)
			__atomic_store_n(&vw[1 + v], varv[v], __ATOMIC_RELAXED);
		__atomic_or_fetch(&vw[0], (1ull << h->nvars) - 1, __ATOMIC_RELEASE);
	}
	int passed = h->handler ? track(h, tab, ent, (u64)(ent - (tab + H_HEADER_WORDS)) / h->ewords, varv[h->tvar], e) : 0;
	if ((h->ntargets || h->rec_id) && (passed || !(h->tdo & KPRW_HDO_TRACE)))
		synth(h, refv, varv, e);
}

/* synth runs an onmatch().trace() action: the synthetic event's data is its
 * parameters, added to each of its histograms (which have no actions: one level) */
static __attribute__((noinline)) void synth(const struct kprw_hist *h, const u64 *refv, const u64 *varv,
					     const struct kprw_fenv *e)
{
	u64 data[KPRW_HIST_MAXVARS];
	for (u32 q = 0; q < h->nparams; q++)
		data[q] = h->params[q].kind == OP_VAR ? varv[h->params[q].idx] : refv[h->params[q].idx];
	struct kprw_fenv se = *e;
	se.data = (const u8 *)data;
	se.dlen = 8 * h->nparams;
	/* written when switched on (its rewrite state, flipped by the switch word's bit 0)
	 * and its filter (run-time, else the rewrite's) passes: the kernel's enabled
	 * synthetic event, before its histograms as the kernel's trace_synth() writes it and
	 * then runs its triggers (which a filter does not stop) */
	if (h->rec_id && !((__atomic_load_n(&kprw_rt.trig_count[h->rec_slot], __ATOMIC_RELAXED) ^ h->rec_init) & 1)) {
		const struct kprw_fprog *flt = h->rec_filter;
		const struct kprw_synthflt *sf = __atomic_load_n(&kprw_rt.synth_filter, __ATOMIC_ACQUIRE);
		u32 k = h->rec_id - kprw_rt.nevents - 1;
		if (unlikely(sf != NULL) && h->rec_id > kprw_rt.nevents && k < KPRW_CTL_MAX_SYNTH && sf[k].set)
			flt = sf[k].f;
		if (!flt || kprw_filter_match(flt, &se))
			kprw_trace_synth(h->rec_id, e->ip - e->bias, data, h->nparams, e);
	}
	for (u32 t = 0; t < h->ntargets; t++) /* each histogram's "if": on the event's fields */
		if (!h->targets[t].filter || kprw_filter_match(h->targets[t].filter, &se))
			kprw_hist_update(h->targets[t].h, kprw_rt.trig_count + h->targets[t].slot, &se);
	/* and the histograms added at run time (kprewrite trigger FILE synthetic/NAME) */
	const struct kprw_evtrig **st = __atomic_load_n(&kprw_rt.synth_trig, __ATOMIC_ACQUIRE);
	if (unlikely(st != NULL) && h->rec_id > kprw_rt.nevents && h->rec_id - kprw_rt.nevents - 1 < KPRW_CTL_MAX_SYNTH) {
		const struct kprw_evtrig *tg = st[h->rec_id - kprw_rt.nevents - 1];
		if (tg)
			kprw_triggers_run(tg, &se);
	}
}
