/*
 * rt_usersite.c - register_kprobe() of a plain struct kprobe at a site no rewrite
 * prepared (docs/runtime.md, "register_kprobe at unprepared sites").
 *
 * `kprewrite probe` places an event at an unprepared site because the tool runs the
 * analysis and hands the runtime a finished point and slot (rt_live.c, "Free live
 * points"). A C handler has no tool to ask, so the rewrite embeds the analysis of the
 * functions the handler files name (struct kprw_sites, kprw_hooks.sites): for each
 * instruction boundary, the point `kprewrite probe` would make there, or its refusal.
 * register_kprobe() finds kp->symbol_name + kp->offset there, reads the instruction
 * from memory (its check sum says it is the original), builds the point and the slot's
 * bytes for a free live point's slot as the tool does (the copy, its RIP-relative
 * displacement moved to the slot, a jmp back), and hands them to the live-probe thread
 * (kprw_usersite_free), which places and arms them as the tool's (reconcile_free).
 * Free points are taken from the last one down (the tool takes them from the first
 * up); unregister_kprobe() gives the point back, and it is placed elsewhere only after
 * a drain round, as the tool's are.
 */
#define KPRW_RUNTIME_INTERNAL
#include "kprewrite.h"
#include "rt.h"

/* want is a free point as a C handler wants it: immutable once published (a new
 * registration makes a new one), so the live-probe thread reads it without a lock */
struct want {
	struct kprw_point pt;
	u8 slot[KPRW_FREE_SLOT];
};

static struct want **held; /* per free point: the C handler's want, NULL: none */
static u8 *arena;          /* where the next wants are made */
static u32 arena_left;

static const struct kprw_site_func *funcs(const struct kprw_sites *t) { return (const void *)(t + 1); }

static const struct kprw_site *sites(const struct kprw_sites *t)
{
	return (const void *)(funcs(t) + t->nfuncs);
}

/* sound says whether table t keeps within its size: every function's sites, every
 * name and refusal inside it (its last byte a NUL, which ends them), every site an
 * instruction whose displacement is inside it */
static int sound(const struct kprw_sites *t)
{
	u64 fixed = sizeof *t + (u64)t->nfuncs * sizeof(struct kprw_site_func) + (u64)t->nsites * sizeof(struct kprw_site);
	if (t->nfuncs > (1u << 24) || t->nsites > (1u << 28) || fixed >= t->size || ((const u8 *)t)[t->size - 1])
		return 0;
	for (u32 i = 0; i < t->nfuncs; i++) {
		const struct kprw_site_func *f = &funcs(t)[i];
		if (f->name < fixed || f->name >= t->size || f->first > t->nsites || f->nsites > t->nsites - f->first ||
		    (f->ret_why && (f->ret_why < fixed || f->ret_why >= t->size)))
			return 0;
	}
	for (u32 k = 0; k < t->nsites; k++) {
		const struct kprw_site *s = &sites(t)[k];
		if ((s->why && (s->why < fixed || s->why >= t->size)) || !s->insn_len || s->insn_len > 15 ||
		    (s->disp && s->disp + 4u > s->insn_len))
			return 0;
	}
	return 1;
}

/* table is the image's embedded analysis, NULL: none, or not sound (said once) */
static const struct kprw_sites *table(void)
{
	static int checked; /* 1 sound, -1 not (registrations hold the lock) */
	const struct kprw_hooks *h = kprw_rt.hdr->hooks ? (const struct kprw_hooks *)RT_ADDR(kprw_rt.hdr->hooks) : NULL;
	const struct kprw_sites *t = h && h->sites ? (const struct kprw_sites *)RT_ADDR(h->sites) : NULL;
	if (t && !checked) {
		checked = sound(t) ? 1 : -1;
		if (checked < 0)
			kprw_puts("kprewrite: the embedded analysis of the image is malformed: register_kprobe() "
				  "places no probe at an unprepared site\n");
	}
	return checked > 0 ? t : NULL;
}

static const char *str(const struct kprw_sites *t, u32 off) { return (const char *)t + off; }

/* say tells stderr why register_kprobe(name+off) (or register_kretprobe) failed */
static void say(u8 type, const char *name, u64 off, const char *why, const char *more)
{
	kprw_puts(type == KPRW_T_KRETPROBE ? "kprewrite: register_kretprobe(" : "kprewrite: register_kprobe(");
	kprw_puts(name);
	kprw_puts("+");
	kprw_put_dec(off);
	kprw_puts("): ");
	kprw_puts(why);
	kprw_puts(more);
	kprw_puts("\n");
}

/* kprw_site_sum is runtime/abi.go's SiteSum of n bytes */
static u16 site_sum(const u8 *b, u32 n)
{
	u32 h = 0x811c;
	for (u32 k = 0; k < n; k++)
		h = (h * 31 + b[k]) & 0xffff;
	return (u16)h;
}

/* by_addr names the function holding run-time address addr (kp->addr without a
 * symbol_name) and sets *off to addr's offset in it: 0 on success */
static int by_addr(const struct kprw_sites *t, uptr addr, char *name, u32 cap, u64 *off)
{
	u64 v = (u64)addr - kprw_rt.bias;
	for (u32 i = 0; i < t->nfuncs; i++) {
		const struct kprw_site_func *f = &funcs(t)[i];
		if (v >= f->addr && v - f->addr < f->size) {
			const char *n = str(t, f->name);
			u32 k = 0;
			for (; n[k] && k + 1 < cap; k++)
				name[k] = n[k];
			name[k] = 0;
			*off = v - f->addr;
			return 0;
		}
	}
	return -1;
}

/* lookup is the site at name+off (*fn its function), NULL: not a boundary there */
static const struct kprw_site *lookup(const struct kprw_sites *t, const char *name, u64 off,
				      const struct kprw_site_func **fn)
{
	*fn = NULL;
	for (u32 i = 0; i < t->nfuncs && !*fn; i++)
		if (kprw_strcmp(str(t, funcs(t)[i].name), name) == 0)
			*fn = &funcs(t)[i];
	if (!*fn || off >= (*fn)->size)
		return NULL;
	const struct kprw_site *s = sites(t) + (*fn)->first;
	for (u32 k = 0; k < (*fn)->nsites; k++)
		if (s[k].off == off)
			return &s[k];
	return NULL;
}

/* build makes site s of function f as a point at free entry cur and its slot's bytes,
 * from the instruction's bytes (orig): what tracectl's encode makes for `kprewrite
 * probe`. -1: the slot is too far from the site for the displacement. */
static int build(const struct kprw_site_func *f, const struct kprw_site *s, const struct kprw_point *cur,
		 const u8 *orig, struct want *w)
{
	struct kprw_point *pt = &w->pt;
	u64 site = f->addr + s->off;
	kprw_memset(w, 0, sizeof *w);
	kprw_memset(w->slot, 0xcc, KPRW_FREE_SLOT);
	pt->site = site;
	pt->slot = cur->slot;
	pt->target = (s->flags & KPRW_SITE_TARGET) ? site + (u64)(long)(int)s->target : 0;
	pt->first_probe = cur->first_probe;
	pt->nprobes = 1;
	pt->xmode = s->xmode;
	pt->insn_len = s->insn_len;
	pt->emu_op = s->emu_op;
	pt->emu_cc = s->emu_cc;
	pt->pflags = s->pflags;
	pt->ret_imm = s->ret_imm;
	pt->aux = site; /* the address asked for */
	kprw_memcpy(pt->orig, orig, s->insn_len);
	if (!(s->flags & KPRW_SITE_SLOT))
		return 0;
	u32 n = s->insn_len;
	kprw_memcpy(w->slot, orig, n);
	if (s->disp) { /* the displacement is from the copy's end now */
		int d;
		kprw_memcpy(&d, orig + s->disp, 4);
		long nd = (long)d + (long)(site - cur->slot);
		if (nd != (int)nd)
			return -1;
		d = (int)nd;
		kprw_memcpy(w->slot + s->disp, &d, 4);
	}
	int back = (int)(long)((site + n) - (cur->slot + n + 5));
	w->slot[n] = 0xe9;
	kprw_memcpy(w->slot + n + 1, &back, 4);
	pt->slot_len = (u8)n;
	return 0;
}

/* taken says whether a point of the rewrite, or a free point a C handler or the newest
 * live frame wants, is at site (a free point left placed there with nothing on it is
 * not: pick takes it again) */
static int taken(u64 site)
{
	for (u32 i = 0; i < kprw_rt.npoints; i++)
		if (kprw_rt.points[i].site == site)
			return 1;
	for (u32 k = 0; k < kprw_rt.nfree; k++) {
		const u8 *slot;
		const struct want *w = __atomic_load_n(&held[k], __ATOMIC_ACQUIRE);
		const struct kprw_point *tool = kprw_livedef_free(k, &slot);
		if ((w && w->pt.site == site) || (tool && tool->site == site))
			return 1;
	}
	return 0;
}

/* pick is the free point of probe type type a C handler takes: one placed at site
 * already, else the last one neither a handler nor the newest live frame uses; -1: none */
static int pick(u64 site, u8 type)
{
	int k = -1;
	for (u32 j = kprw_rt.nfree; j-- > 0;) {
		const u8 *slot;
		u32 fp = kprw_rt.points[kprw_rt.npoints + j].first_probe;
		if (held[j] || kprw_livedef_free(j, &slot) || fp >= kprw_rt.nprobes ||
		    kprw_rt.probes[fp].type != type)
			continue; /* (a free return point's probe is a kretprobe: kretprobes only) */
		if (kprw_rt.points[kprw_rt.npoints + j].site == site)
			return (int)j;
		if (k < 0)
			k = (int)j;
	}
	return k;
}

/* alloc is room for a want (wants are never freed: the live-probe thread may read one
 * still; a page holds 42) */
static struct want *alloc(void)
{
	if (arena_left < sizeof(struct want)) {
		if (!(arena = kprw_mmap_anon(4096)))
			return NULL;
		arena_left = 4096;
	}
	struct want *w = (struct want *)arena;
	arena += sizeof *w;
	arena_left -= sizeof *w;
	return w;
}

/* check says why site s of name cannot take kp (NULL: it can); orig gets its bytes */
static const char *check(const struct kprw_sites *t, const struct kprw_site *s, const struct kprw_site_func *f,
			 const struct kprobe *kp, u8 type, u8 *orig, int *err)
{
	*err = -EINVAL;
	if (s->why)
		return str(t, s->why);
	if (type == KPRW_T_KRETPROBE && s->off)
		return "a kretprobe goes at a function's entry (offset 0)";
	if (type == KPRW_T_KRETPROBE && f->ret_why)
		return str(t, f->ret_why);
	if (kp->post_handler && s->xmode == KPRW_X_EMULATE)
		return "a post_handler needs a single-stepped copy, and this instruction is emulated";
	*err = -EBUSY;
	u64 site = f->addr + s->off;
	if (kprw_read_mode(orig, RT_ADDR(site), s->insn_len, 0) != s->insn_len ||
	    site_sum(orig, s->insn_len) != s->sum || taken(site))
		return "another probe is at this instruction (a site of the rewrite, a live event or another struct kprobe)";
	return NULL;
}

/* kprw_usersite_register registers kp, a struct kprobe or (type KPRW_T_KRETPROBE) the
 * struct kprobe of a struct kretprobe, at kp->symbol_name + kp->offset, an unprepared
 * site the embedded analysis describes (rt_user.c's register_kprobe, its lock held):
 * 0, -ENOENT (not described), -EINVAL (not an instruction boundary, or refused: the
 * rule is said), -EBUSY (another probe is there, or no free point is left). */
int kprw_usersite_register(struct kprobe *kp, u8 type)
{
	const struct kprw_sites *t = table();
	char name[256];
	u64 off = kp->offset;
	if (!t || !kprw_rt.nfree)
		return -ENOENT;
	int named = kp->symbol_name != NULL; /* (else kp->addr says where) */
	if (!named && (!kp->addr || by_addr(t, (uptr)kp->addr, name, sizeof name, &off) < 0))
		return -ENOENT;
	if (named) {
		long nl = kp->symbol_name ? kprw_read_user(name, (uptr)kp->symbol_name, sizeof name - 1) : -1;
		if (nl <= 0)
			return -ENOENT;
		name[nl] = 0;
	}
	const struct kprw_site_func *f;
	const struct kprw_site *s = lookup(t, name, off, &f);
	if (!f)
		return -ENOENT; /* (not a function the handler files name) */
	if (!s) {
		say(type, name, off, "not the start of an instruction", "");
		return -EINVAL;
	}
	if (named && kp->addr && (uptr)kp->addr != RT_ADDR(f->addr + s->off))
		return -EINVAL; /* another address than symbol_name's (a struct registered before keeps its own) */
	if (!held && !(held = kprw_mmap_anon((u64)kprw_rt.nfree * sizeof *held)))
		return -ENOMEM;
	u8 orig[16];
	int err;
	const char *why = check(t, s, f, kp, type, orig, &err);
	if (why) {
		say(type, name, off, why, err == -EINVAL ? ": not registered (-EINVAL)" : ": not registered (-EBUSY)");
		return err;
	}
	int k = pick(f->addr + s->off, type);
	struct want *w = k < 0 ? NULL : alloc();
	if (!w) {
		say(type, name, off, "every free live point carries a probe", ": not registered (-EBUSY)");
		return -EBUSY;
	}
	const struct kprw_point *cur = &kprw_rt.points[kprw_rt.npoints + (u32)k];
	if (type == KPRW_T_KRETPROBE && ((struct kretprobe *)kp)->data_size > kprw_rt.probes[cur->first_probe].data_size) {
		say(type, name, off, "data_size is larger than a free return point's", ": not registered (-EINVAL)");
		return -EINVAL;
	}
	if (build(f, s, cur, orig, w) < 0) {
		say(type, name, off, "its copy's RIP-relative displacement does not reach from the slot", "");
		return -EINVAL;
	}
	if (kp->post_handler && w->pt.xmode == KPRW_X_BOOST)
		w->pt.xmode = KPRW_X_SSTEP; /* the post handler runs after a step, as the kernel un-boosts */
	__atomic_store_n(&held[k], w, __ATOMIC_RELEASE);
	kp->addr = (kprobe_opcode_t *)RT_ADDR(w->pt.site);
	kp->nmissed = 0;
	kp->flags &= ~(u32)KPROBE_FLAG_OPTIMIZED;
	kp->kprw_private[0] = cur->first_probe + 1;
	if (type == KPRW_T_KRETPROBE) {
		struct kretprobe *rp = (struct kretprobe *)kp;
		if (kprw_rt.ri_pool)
			rp->maxactive = (int)kprw_rt.ri_pool[cur->first_probe].count;
		rp->nmissed = 0;
	}
	return 0;
}

/* kprw_usersite_release gives back the free point whose probe is pi (unregister; ~0u:
 * every one, kprewrite_init failed): the live-probe thread puts the original byte back
 * at the next reconcile */
void kprw_usersite_release(u32 pi)
{
	for (u32 k = 0; held && k < kprw_rt.nfree; k++)
		if (pi == ~0u || kprw_rt.points[kprw_rt.npoints + k].first_probe == pi)
			__atomic_store_n(&held[k], NULL, __ATOMIC_RELEASE);
}

/* kprw_usersite_free is the point and slot a C handler wants at free point k (NULL:
 * none), for the live-probe thread */
const struct kprw_point *kprw_usersite_free(u32 k, const u8 **slot)
{
	const struct want *w = held && k < kprw_rt.nfree ? __atomic_load_n(&held[k], __ATOMIC_ACQUIRE) : NULL;
	if (!w)
		return NULL;
	*slot = w->slot;
	return &w->pt;
}
