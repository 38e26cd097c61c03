/*
 * rt_filter.c - event filters (internal/evfilter's program), run on a hit's fetched
 * data before its record is written: a filtered-out hit writes nothing.
 *
 * The program is the kernel's filter program (trace_events_filter.c): one entry per
 * predicate, a branch to target when the predicate's result equals when, a match when
 * the walk falls off the end. evfilter.Match is the reference interpreter; this one
 * must agree with it on every program and record (filter_test.go).
 */
#include "rt.h"

#define FL_MAGIC 'F'
#define FL_VERSION 1
#define FL_HDR 8
#define FL_ENT 32

enum { FnNop, FnEq, FnCmp, FnCPU, FnString, FnFunc };
enum { SrcData, SrcPID, SrcCPU, SrcComm, SrcType, SrcZero, SrcIP, SrcRetIP };
enum { OpGlob, OpNE, OpEQ, OpLE, OpLT, OpGE, OpGT, OpBand };
enum { MatchFull, MatchFront, MatchMiddle, MatchEnd, MatchGlob };

static u32 le16(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8; }
static u64 le64(const u8 *p)
{
	u64 v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int bcmp_(const u8 *a, const u8 *b, u32 n)
{
	for (u32 i = 0; i < n; i++)
		if (a[i] != b[i])
			return 1;
	return 0;
}

/* kprw_filter_size is the bytes kprw_filter_compile needs for a program, or 0 when it
 * is malformed. */
u32 kprw_filter_size(const u8 *prog, u32 plen)
{
	if (plen < FL_HDR || prog[0] != FL_MAGIC || prog[1] != FL_VERSION || le16(prog + 6) != plen)
		return 0;
	u32 n = le16(prog + 2);
	if (n == 0 || FL_HDR + (u64)n * FL_ENT > plen)
		return 0;
	for (u32 i = 0; i < n; i++) {
		const u8 *b = prog + FL_HDR + i * FL_ENT;
		u32 t = le16(b + 8);
		if (t <= i || t > n + 1 || b[0] > FnFunc || b[1] > SrcRetIP)
			return 0;
		if (b[0] == FnString) {
			u32 po = le16(b + 12), pl = le16(b + 14);
			if (po < FL_HDR + n * FL_ENT || po + pl >= plen || prog[po + pl] != 0 || b[7] > MatchGlob)
				return 0;
		}
	}
	return (u32)sizeof(struct kprw_fprog) + n * (u32)sizeof(struct kprw_fpred);
}

/* kprw_filter_compile decodes a program into out (kprw_filter_size bytes, once at
 * start-up), so that a hit reads native fields: values masked to their size, the
 * patterns' addresses. 0 when done, -1 when the program is malformed. */
int kprw_filter_compile(const u8 *prog, u32 plen, struct kprw_fprog *out)
{
	if (!kprw_filter_size(prog, plen))
		return -1;
	u32 n = le16(prog + 2);
	out->n = n;
	out->needs = prog[4];
	for (u32 i = 0; i < n; i++) {
		const u8 *b = prog + FL_HDR + i * FL_ENT;
		struct kprw_fpred *p = &out->p[i];
		p->fn = b[0];
		p->src = b[1];
		p->op = b[2];
		p->size = b[3];
		p->sgn = b[4] & 1;
		p->biased = (b[4] & 2) != 0;
		p->not = b[5];
		p->when = b[6];
		p->match = b[7];
		p->target = (u16)le16(b + 8);
		p->off = (u16)le16(b + 10);
		p->plen = (u16)le16(b + 14);
		p->pat = b[0] == FnString ? prog + le16(b + 12) : NULL;
		p->mask = p->size < 8 ? (1ull << (8 * p->size)) - 1 : ~0ull;
		p->val = le64(b + 16);
		p->val2 = le64(b + 24);
		if (p->fn == FnEq || (p->fn == FnCmp && (p->op == OpBand || !p->sgn)))
			p->val &= p->mask;
	}
	return 0;
}

/* value reads the field's value (zero-extended from its size); 0 when the record is too
 * short to hold it */
static inline __attribute__((always_inline)) int value(const struct kprw_fpred *p, const struct kprw_fenv *e, u64 *v)
{
	u64 x;
	switch (p->src) {
	case SrcData:
		if (unlikely((u32)p->off + p->size > e->dlen || p->size > 8))
			return 0;
		*v = kprw_le_read(e->data + p->off, p->size);
		return 1;
	case SrcPID: x = e->tid; break;
	case SrcType: x = e->type; break;
	case SrcIP: x = e->ip; break;
	case SrcRetIP: x = e->ret_ip; break;
	case SrcCPU: x = e->cpu; break;
	default: x = 0; break;
	}
	*v = x & p->mask;
	return 1;
}

static s64 sext(u64 v, u32 size)
{
	u32 sh = 64 - 8 * size;
	return (s64)(v << sh) >> sh;
}

static u32 cstrlen(const u8 *s, u32 max)
{
	u32 n = 0;
	while (n < max && s[n])
		n++;
	return n;
}

/* strncmp(a, b, n) == 0 where a has alen readable bytes (NUL past them) and b is a
 * NUL-terminated pattern */
static int strn_eq(const u8 *a, u32 alen, const u8 *b, u32 n)
{
	for (u32 i = 0; i < n; i++) {
		u8 x = i < alen ? a[i] : 0, y = b[i];
		if (x != y)
			return 0;
		if (x == 0)
			return 1;
	}
	return 1;
}

/* the kernel's glob_match on the pattern and the string of slen bytes (then NUL) */
static int glob(const u8 *pat, const u8 *str, u32 slen)
{
	u32 p = 0, s = 0, back_str = 0;
	long back_pat = -1;
#define SAT(i) ((i) < slen ? str[i] : 0)
	for (;;) {
		u8 c = SAT(s), d = pat[p];
		s++;
		p++;
		switch (d) {
		case '?':
			if (c == 0)
				return 0;
			continue;
		case '*':
			if (pat[p] == 0)
				return 1;
			back_pat = p;
			back_str = --s;
			continue;
		case '[': {
			if (c == 0)
				return 0;
			int match = 0, inverted = pat[p] == '!', malformed = 0;
			u32 cl = p + (u32)inverted;
			u8 a = pat[cl++];
			for (;;) {
				u8 hi = a;
				if (a == 0) {
					malformed = 1;
					break;
				}
				if (pat[cl] == '-' && pat[cl + 1] != ']') {
					hi = pat[cl + 1];
					if (hi == 0) {
						malformed = 1;
						break;
					}
					cl += 2;
				}
				if (a <= c && c <= hi)
					match = 1;
				a = pat[cl++];
				if (a == ']')
					break;
			}
			if (!malformed) {
				if (match == inverted)
					break;
				p = cl;
				continue;
			}
			if (c == d)
				continue;
			break;
		}
		case '\\':
			d = pat[p++];
			/* fallthrough */
		default:
			if (c == d) {
				if (d == 0)
					return 1;
				continue;
			}
		}
		if (c == 0 || back_pat < 0)
			return 0;
		p = (u32)back_pat;
		s = ++back_str;
	}
#undef SAT
}

/* the kernel's regex_match_*: str has avail readable bytes; n is the kernel's len (the
 * string's bytes with its NUL; 0: a C string) */
static int str_match(u8 type, const u8 *pat, u32 plen, const u8 *str, u32 avail, u32 n)
{
	switch (type) {
	case MatchFull:
		if (n == 0) {
			u32 l = cstrlen(str, avail);
			return l == plen && (plen == 0 || bcmp_(str, pat, plen) == 0);
		}
		return strn_eq(str, avail, pat, n);
	case MatchFront:
		if (n && n < plen)
			return 0;
		return strn_eq(str, avail, pat, plen);
	case MatchMiddle: {
		u32 l = n;
		if (n == 0)
			l = cstrlen(str, avail);
		if (plen == 0)
			return 1;
		for (u32 k = 0; k + plen <= l; k++) {
			if (k + plen > avail)
				return 0;
			if (bcmp_(str + k, pat, plen) == 0)
				return 1;
		}
		return 0;
	}
	case MatchEnd: {
		if (n == 0)
			return 0;
		u32 sl = n - 1;
		if (sl < plen || sl > avail)
			return 0;
		return bcmp_(str + sl - plen, pat, plen) == 0;
	}
	case MatchGlob:
		return glob(pat, str, cstrlen(str, avail));
	}
	return 0;
}

static int entry_match(const struct kprw_fpred *p, const struct kprw_fenv *e)
{
	u64 v, val = p->val;
	switch (p->fn) {
	case FnEq:
		if (!value(p, e, &v))
			return 0;
		return (v == val) ^ p->not;
	case FnCmp: {
		if (!value(p, e, &v))
			return 0;
		if (p->op == OpBand)
			return (v & val) != 0;
		int c;
		if (p->sgn) {
			s64 x = sext(v, p->size), y = sext(val, p->size);
			c = x < y ? -1 : x > y;
		} else {
			c = v < val ? -1 : v > val;
		}
		switch (p->op) {
		case OpLT: return c < 0;
		case OpLE: return c <= 0;
		case OpGT: return c > 0;
		case OpGE: return c >= 0;
		}
		return 0;
	}
	case FnCPU: {
		int cpu = (int)e->cpu, want = (int)val;
		switch (p->op) {
		case OpEQ: return cpu == want;
		case OpNE: return cpu != want;
		case OpLT: return cpu < want;
		case OpLE: return cpu <= want;
		case OpGT: return cpu > want;
		case OpGE: return cpu >= want;
		}
		return 0;
	}
	case FnFunc: {
		if (!value(p, e, &v))
			return 0;
		u64 lo = val, hi = p->val2;
		if (p->biased) {
			lo += e->bias;
			hi += e->bias;
		}
		int in = v >= lo && v < hi;
		return in == (p->op == OpEQ);
	}
	case FnString: {
		if (p->src == SrcComm)
			return str_match(p->match, p->pat, p->plen, (const u8 *)e->comm, 16, 16) ^ p->not;
		u32 off = p->off;
		if (off + 4 > e->dlen)
			return 0;
		u32 item;
		__builtin_memcpy(&item, e->data + off, 4);
		u32 loc = item & 0xffff, sl = item >> 16;
		if (loc > e->dlen)
			loc = e->dlen;
		u32 avail = e->dlen - loc;
		if (sl > avail)
			sl = 0; /* cut by the record's end: as a C string */
		if (sl)
			avail = sl;
		return str_match(p->match, p->pat, p->plen, e->data + loc, avail, sl) ^ p->not;
	}
	}
	return 0;
}

/* kprw_filter_match runs a compiled filter: 1 when the record is to be written. */
int kprw_filter_match(const struct kprw_fprog *f, const struct kprw_fenv *e)
{
	u32 n = f->n, i = 0;
	while (i < n) {
		const struct kprw_fpred *p = &f->p[i];
		if (entry_match(p, e) == p->when)
			i = p->target;
		else
			i++;
	}
	return i == n;
}
