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
#define TAG_BIT (1ull << 63)
#define STRING_WORDS 32 /* evhist.StringKeyLen / 8 */
#define COMM_WORDS 2
#define MAX_TABLE_BYTES (64ull << 20)
#define SPIN 4096 /* waits for a bucket being filled before looking further */

enum { SrcData, SrcPID, SrcCPU, SrcComm, SrcType, SrcZero, SrcIP, SrcRetIP, SrcTS };
enum { ModNone, ModHex, ModSym, ModSymOffset, ModExecname, ModSyscall, ModLog2, ModBuckets, ModUsecs };

static inline u32 rd16(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8; }
static inline u32 rd32(const u8 *p) { return rd16(p) | rd16(p + 2) << 16; }
static inline u64 rd64(const u8 *p) { return (u64)rd32(p) | (u64)rd32(p + 4) << 32; }

/* kprw_hist_words checks a program (as evhist.CheckProgram) and returns the table's
 * words, 0 when malformed; *dsize is the bytes its decoded form takes */
u64 kprw_hist_words(const u8 *p, u32 len, u32 *dsize)
{
	if (len < H_HDR)
		return 0;
	u32 nk = p[0], nv = p[1];
	if (nk == 0 || nk > KPRW_HIST_MAXKEYS || nv > 6 || len != H_HDR + H_FIELD * (nk + nv))
		return 0;
	u32 size = rd32(p + 4), kw = rd16(p + 8), ew = rd16(p + 10);
	if (size < 128 || size > 131072 || (size & (size - 1)))
		return 0;
	u32 sum = 0;
	for (u32 i = 0; i < nk + nv; i++) {
		const u8 *e = p + H_HDR + i * H_FIELD;
		u32 w = rd16(e + 6);
		if (e[0] > SrcTS || e[1] > ModUsecs || e[2] == 0 || e[2] > 8)
			return 0;
		if ((e[3] & 2) ? (i >= nk || (w != STRING_WORDS && w != COMM_WORDS)) : w != 1)
			return 0;
		if (e[1] == ModBuckets && rd64(e + 8) == 0)
			return 0;
		if (i < nk)
			sum += w;
	}
	u32 want = 1 + sum + 1 + nv + ((p[2] & H_COMM) ? COMM_WORDS : 0);
	if (sum != kw || ew != want)
		return 0;
	u64 words = H_HEADER_WORDS + 2ull * size * ew;
	if (words * 8 > MAX_TABLE_BYTES)
		return 0;
	*dsize = (u32)(sizeof(struct kprw_hist) + (nk + nv) * sizeof(struct kprw_hfield));
	return words;
}

/* kprw_hist_decode reads a checked program into out (*dsize bytes) */
void kprw_hist_decode(const u8 *p, struct kprw_hist *out)
{
	out->nkeys = p[0];
	out->nvals = p[1];
	out->flags = p[2];
	out->size = rd32(p + 4);
	out->kwords = rd16(p + 8);
	out->ewords = rd16(p + 10);
	out->nbuckets = 2ull * out->size;
	for (u32 i = 0; i < out->nkeys + out->nvals; i++) {
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
		switch (f->size) {
		case 8: __builtin_memcpy(&x, e->data + f->off, 8); break;
		case 4: { u32 y; __builtin_memcpy(&y, e->data + f->off, 4); x = y; break; }
		case 2: { u16 y; __builtin_memcpy(&y, e->data + f->off, 2); x = y; break; }
		default:
			for (u32 k = f->size; k-- > 0;)
				x = x << 8 | e->data[f->off + k];
		}
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

/* a key's fields at this hit: numbers computed once, strings where they are */
struct hkey {
	u64 num[KPRW_HIST_MAXKEYS];
	const u8 *str[KPRW_HIST_MAXKEYS];
	u32 slen[KPRW_HIST_MAXKEYS];
};

static void key_at(const struct kprw_hist *h, const struct kprw_fenv *e, struct hkey *k)
{
	for (u32 i = 0; i < h->nkeys; i++) {
		const struct kprw_hfield *f = &h->f[i];
		k->num[i] = 0;
		k->str[i] = NULL;
		k->slen[i] = 0;
		if (!(f->flags & 2)) {
			k->num[i] = value(f, e);
			continue;
		}
		u32 max = f->words * 8 - 1; /* NUL-padded: at least one NUL */
		const u8 *s = NULL;
		u32 n = 0;
		if (f->flags & 4) {
			s = (const u8 *)e->comm;
			if (s)
				while (n < max && s[n])
					n++;
		} else if ((u32)f->off + 4 <= e->dlen) {
			u32 item;
			__builtin_memcpy(&item, e->data + f->off, 4);
			u32 loc = item & 0xffff, sl = item >> 16;
			if (loc <= e->dlen) {
				s = e->data + loc;
				u32 avail = e->dlen - loc;
				if (sl > avail)
					sl = avail;
				while (n < sl && n < max && s[n])
					n++;
			}
		}
		k->str[i] = s;
		k->slen[i] = n;
	}
}

/* kword is word w of key field i */
static inline u64 kword(const struct hkey *k, const struct kprw_hfield *f, u32 i, u32 w)
{
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

static int key_eq(const struct kprw_hist *h, const struct hkey *k, const u64 *ent)
{
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

/* kprw_hist_update adds a hit to the histogram at tab (its trigger's condition held).
 * A key that finds no free entry is a drop; the program never waits longer than a
 * bounded spin for another writer's bucket. */
void kprw_hist_update(const struct kprw_hist *h, u64 *tab, const struct kprw_fenv *e)
{
	if (__atomic_load_n(&tab[0], __ATOMIC_RELAXED) & H_PAUSED)
		return;
	struct hkey k;
	key_at(h, e, &k);
	u64 hash = 0x6a09e667f3bcc908ull;
	for (u32 i = 0; i < h->nkeys; i++)
		for (u32 w = 0; w < h->f[i].words; w++)
			hash = mix(hash, kword(&k, &h->f[i], i, w));
	u64 tag = hash | TAG_BIT, mask = h->nbuckets - 1;
	u64 *base = tab + H_HEADER_WORDS;
	u64 idx = hash & mask;
	for (u64 n = 0; n < h->nbuckets; n++, idx = (idx + 1) & mask) {
		u64 *ent = base + idx * h->ewords;
		u64 t = __atomic_load_n(&ent[0], __ATOMIC_ACQUIRE);
		if (t == 0) {
			if (__atomic_fetch_add(&tab[3], 1, __ATOMIC_RELAXED) >= h->size)
				break; /* the table holds its entries: a drop */
			u64 zero = 0;
			if (__atomic_compare_exchange_n(&ent[0], &zero, TAG_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				u64 *kw = ent + 1;
				for (u32 i = 0; i < h->nkeys; i++)
					for (u32 w = 0; w < h->f[i].words; w++)
						*kw++ = kword(&k, &h->f[i], i, w);
				if ((h->flags & H_COMM) && e->comm) {
					u8 *cm = (u8 *)(ent + 2 + h->kwords + h->nvals);
					for (u32 b = 0; b < 16; b++)
						cm[b] = (u8)e->comm[b];
				}
				__atomic_store_n(&ent[0], tag, __ATOMIC_RELEASE);
				add(h, ent, e);
				return;
			}
			__atomic_fetch_sub(&tab[3], 1, __ATOMIC_RELAXED);
			t = zero;
		}
		for (u32 s = 0; t == TAG_BUSY && s < SPIN; s++) {
			__builtin_ia32_pause();
			t = __atomic_load_n(&ent[0], __ATOMIC_ACQUIRE);
		}
		if (t == tag && key_eq(h, &k, ent)) {
			add(h, ent, e);
			return;
		}
		/* another key, or a bucket whose writer never finished (killed): look further */
	}
	__atomic_fetch_add(&tab[2], 1, __ATOMIC_RELAXED);
}
