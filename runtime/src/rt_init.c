/*
 * rt_init.c - start-up: find the tables, read auxv and the environment from the initial
 * stack, rebase absolute words, apply KPREWRITE_* switches, allocate kretprobe pools,
 * open the trace file, install the SIGTRAP handler. Runs once, single-threaded, before
 * the program's own entry point (and so before libc: no TLS, no errno, no malloc).
 *
 * It runs in two parts. The first (start_early) makes probes fire: tables, switches,
 * kretprobe instances, the trace file, the SIGTRAP handler, the detours' gates. In a
 * dynamically linked glibc image it runs while the dynamic loader relocates the image
 * (kprewrite_rt_reloc_entry, the resolver of an R_X86_64_IRELATIVE relocation the
 * rewriter puts before the image's others: elfio.EarlyStart), so before any code of
 * the image can run: its IFUNC resolvers, .preinit_array, other libraries'
 * constructors, the C library's start-up calling a program's own malloc. It then
 * reads auxv and the KPREWRITE_* variables from /proc/self (a resolver is given
 * neither); without /proc it leaves everything to the entry point or DT_INIT, as in a
 * static program or an image without the relocation. The second part (start_late)
 * needs everything relocated: the signal guard rewrites GOT words the loader fills,
 * fast reads need the guard, C handlers' kprewrite_init() runs as the program starts.
 * It runs at the entry point (a program) or DT_INIT (a library). In between, fetches
 * read memory by system call, and C handler probes are not registered yet.
 *
 * Environment (ignored when AT_SECURE is set, i.e. setuid/setgid/capabilities):
 *   KPREWRITE_TRACE=path        trace file instead of the rewrite-time default; "" = off
 *   KPREWRITE_TRACE_SIZE=n[KMG] record area of a NEW trace file (default: header's), 4K to 64G
 *   KPREWRITE_APPEND=1          a new run appends to the trace file there instead of moving
 *                               it to FILE.old (rt_tracefile.c, "the run")
 *   KPREWRITE_QUIET=1           a new run does not say on stderr where its trace goes
 *   KPREWRITE_CLOCK=tsc|mono|counter  the record clock of a trace file this run creates
 *                               (rewrite --clock; a file that has one keeps it: rt_clock.c)
 *
 * A value a switch does not understand is said on stderr, with what is done instead;
 * boolean switches take 1/yes/on/true (or empty) and 0/no/off/false.
 *   KPREWRITE_DISABLE=all | ev,grp/ev,grp/(star)  disarm all probes, or the named events (grp/(star) = whole group)
 *   KPREWRITE_TRACE_PREFAULT=1  populate the whole record area at start-up (~1-3 us per
 *                               4 KiB; then no record ever takes a page fault)
 *   KPREWRITE_DEBUG=1           say on stderr what start-up did
 *   KPREWRITE_SIGGUARD=off      diagnostics: leave the program's signal functions alone
 *                               (rt_sigguard.c); fetches then read by system call
 *   KPREWRITE_SAFE_READ=syscall diagnostics: fetches read memory with process_vm_readv,
 *                               not the fault-catching copy (src/nofault.S, rt_fault.c)
 *   KPREWRITE_NO_RSEQ=1         diagnostics: count-only detours count with lock incq, not
 *                               per CPU in restartable sequences (rt_rseq.c)
 *   KPREWRITE_THREADKEY=fs0|tid diagnostics: find thread contexts by %fs:0 (as without
 *                               FSGSBASE) or by gettid (as without TLS) instead of rdfsbase
 */
#include "rt.h"
#include "countprobe.h"

struct kprw_rt kprw_rt;
struct kprw_stats kprewrite_rt_stats __attribute__((visibility("hidden")));

#define AT_NULL 0
#define AT_SECURE 23
#define AT_HWCAP2 26
#define AT_BASE 7
#define AT_MINSIGSTKSZ 51
#define AT_ENTRY 9

static const char *getenv_(char **envp, const char *name)
{
	unsigned long n = kprw_strlen(name);
	for (; envp && *envp; envp++)
		if (kprw_strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* bad_switch says, once per switch, that a KPREWRITE_* value is not understood and
 * what is done instead: a switch is never silently clamped or ignored. */
static void bad_switch(const char *name, const char *value, const char *why, const char *instead)
{
	kprw_puts("kprewrite: ");
	kprw_puts(name);
	kprw_puts("=");
	kprw_puts(value);
	kprw_puts(": ");
	kprw_puts(why);
	kprw_puts("; ");
	kprw_puts(instead);
	kprw_puts("\n");
}

#define TRACE_SIZE_MIN 4096ull
#define TRACE_SIZE_MAX (64ull << 30)

/* parse_size reads N, NK, NM or NG (a power-of-two unit, "KiB"/"MiB"/"GiB" too); it
 * returns 0 for anything else, or for a size outside [TRACE_SIZE_MIN, TRACE_SIZE_MAX]
 * (after saying why). */
static u64 parse_size(const char *name, const char *s, const char *instead)
{
	u64 v = 0;
	const char *p = s;
	int digits = 0;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		if (v > (TRACE_SIZE_MAX << 1)) /* far past the limit: stop before overflowing */
			v = TRACE_SIZE_MAX << 1;
		v = v * 10 + (u64)(*p - '0');
	}
	int shift = 0;
	if (*p == 'K' || *p == 'k')
		shift = 10;
	else if (*p == 'M' || *p == 'm')
		shift = 20;
	else if (*p == 'G' || *p == 'g')
		shift = 30;
	if (shift) {
		p++;
		if (p[0] == 'i' && p[1] == 'B')
			p += 2;
		else if (p[0] == 'B')
			p++;
	}
	if (!digits || *p) {
		bad_switch(name, s, "not a size (N, NK, NM or NG bytes)", instead);
		return 0;
	}
	if (v > (TRACE_SIZE_MAX >> shift) || (v << shift) > TRACE_SIZE_MAX) {
		bad_switch(name, s, "larger than the 64G a trace file's record area can be", instead);
		return 0;
	}
	v <<= shift;
	if (v < TRACE_SIZE_MIN) {
		bad_switch(name, s, "smaller than the 4K a trace file's record area needs", instead);
		return 0;
	}
	return v;
}

/* on_switch reads a boolean switch: set (empty, 1, yes, on, true) or not (unset, 0,
 * no, off, false); anything else is taken as set, and said. */
static int on_switch(char **envp, const char *name)
{
	const char *v = getenv_(envp, name);
	if (!v)
		return 0;
	/* no tables of string pointers: the runtime has no absolute relocations */
	if (!kprw_strcmp(v, "0") || !kprw_strcmp(v, "no") || !kprw_strcmp(v, "off") || !kprw_strcmp(v, "false"))
		return 0;
	if (!v[0] || !kprw_strcmp(v, "1") || !kprw_strcmp(v, "yes") || !kprw_strcmp(v, "on") || !kprw_strcmp(v, "true"))
		return 1;
	bad_switch(name, v, "want 1 or 0", "taken as 1");
	return 1;
}

/* one_of checks a diagnostics switch's value against its choices. */
static int one_of(const char *name, const char *value, const char *a, const char *b, const char *instead)
{
	if (!value || !value[0]) /* unset, or set empty: the default */
		return 0;
	if (kprw_strcmp(value, a) == 0 || (b && kprw_strcmp(value, b) == 0))
		return 1;
	bad_switch(name, value, "unknown value", instead);
	return 0;
}

static const char *str(u64 vaddr)
{
	return vaddr ? (const char *)RT_ADDR(vaddr) : "";
}

/* match a KPREWRITE_DISABLE token [s, s+n) against an event: "ev", "grp/ev", "grp/ *". */
static int token_matches(const char *s, unsigned long n, const struct kprw_event *ev)
{
	const char *g = str(ev->group), *e = str(ev->name);
	unsigned long slash = n;
	for (unsigned long i = 0; i < n; i++)
		if (s[i] == '/')
			slash = i;
	if (slash == n)
		return kprw_strlen(e) == n && kprw_strncmp(s, e, n) == 0;
	if (kprw_strlen(g) != slash || kprw_strncmp(s, g, slash) != 0)
		return 0;
	s += slash + 1;
	n -= slash + 1;
	if (n == 1 && s[0] == '*')
		return 1;
	return kprw_strlen(e) == n && kprw_strncmp(s, e, n) == 0;
}

static void apply_disable(const char *list)
{
	while (*list) {
		const char *s = list;
		unsigned long n = 0;
		while (s[n] && s[n] != ',')
			n++;
		list = s[n] ? s + n + 1 : s + n;
		if (n == 3 && kprw_strncmp(s, "all", 3) == 0) {
			kprw_rt.disable_all = 1;
			continue;
		}
		for (u32 i = 0; i < kprw_rt.nprobes; i++) {
			u32 e = kprw_rt.probes[i].event;
			if (e < kprw_rt.nevents && token_matches(s, n, &kprw_rt.events[e])) {
				kprw_rt.state[i].flags |= KPRW_SF_DISABLED;
				kprw_rt.has |= KPRW_HAS_DISABLED;
			}
		}
	}
}

static int validate_point(const struct kprw_header *h, const struct kprw_point *pt)
{
	if (pt->nprobes == 0 || pt->nprobes > KPRW_MAX_PROBES_PER_POINT ||
	    pt->first_probe > h->nprobes || pt->nprobes > h->nprobes - pt->first_probe)
		return 0;
	if (pt->xmode < KPRW_X_SSTEP || pt->xmode > KPRW_X_OPTIMIZED || pt->insn_len == 0)
		return 0;
	if (pt->pflags & KPRW_PF_INNER) {
		/* --verify-regions: one KPRW_T_VERIFY probe; slot 0 = cannot run out of line */
		return pt->xmode == KPRW_X_BOOST && pt->nprobes == 1 &&
		       kprw_rt.probes[pt->first_probe].type == KPRW_T_VERIFY && (!pt->slot || pt->slot_len);
	}
	if (pt->pflags & KPRW_PF_COUNT) {
		/* count-only: plain event kprobes, hit counters in the window */
		if (pt->xmode != KPRW_X_OPTIMIZED || !h->counters)
			return 0;
		for (u32 k = 0; k < pt->nprobes; k++) {
			const struct kprw_probe *p = &kprw_rt.probes[pt->first_probe + k];
			if (p->type != KPRW_T_KPROBE || (p->flags & (KPRW_F_TRACE | KPRW_F_USER)) ||
			    p->event == KPRW_NO_EVENT ||
			    (p->pre_handler | p->post_handler | p->fault_handler | p->entry_handler | p->ret_handler | p->user))
				return 0;
		}
	}
	if (pt->xmode == KPRW_X_OPTIMIZED) {
		if (pt->slot == 0 || pt->insn_len < 5)
			return 0;
		for (u32 k = 0; k < pt->nprobes; k++)
			if (kprw_rt.probes[pt->first_probe + k].post_handler)
				return 0; /* post handlers need a single-step: never optimized */
		return 1;
	}
	if (pt->insn_len > 15)
		return 0;
	if (pt->xmode != KPRW_X_EMULATE && (pt->slot == 0 || pt->slot_len == 0))
		return 0;
	if (pt->xmode == KPRW_X_EMULATE && (pt->emu_op < KPRW_EMU_NOP || pt->emu_op > KPRW_EMU_LOOPNE))
		return 0;
	return 1;
}

/* validate_free checks the free live points after the sorted ones (kprw_header.nfree):
 * each unplaced (site 0), its one probe a KPRW_EF_SPARE kprobe or kretprobe (a free
 * return point: *has gets KPRW_HAS_KRET, its instances), the last probes from next on;
 * 1 when they (and the count of every probe) are sound */
static int validate_free(const struct kprw_header *h, u32 next, u32 *has)
{
	if (h->header_size < sizeof *h || h->nfree > KPRW_MAX_FREE)
		return next == h->nprobes;
	for (u32 k = 0; k < h->nfree; k++) {
		const struct kprw_point *pt = &kprw_rt.points[h->npoints + k];
		if (pt->site || pt->first_probe != next || pt->nprobes != 1 || next >= h->nprobes || !pt->slot)
			return 0;
		const struct kprw_probe *p = &kprw_rt.probes[next++];
		if (p->point != h->npoints + k || (p->type != KPRW_T_KPROBE && p->type != KPRW_T_KRETPROBE) ||
		    p->event >= h->nevents || !(kprw_rt.events[p->event].flags & KPRW_EF_SPARE))
			return 0;
		if (p->type == KPRW_T_KRETPROBE)
			*has |= KPRW_HAS_KRET;
	}
	kprw_rt.nfree = h->nfree;
	return next == h->nprobes;
}

/* live_on says whether live point pt starts wanted with the file's default controls:
 * a probe on it that is not of a soft-disabled event (a C handler's, or an event
 * rewritten enabled). Without one, the start-up reconcile has nothing to arm. */
static int live_on(const struct kprw_point *pt)
{
	for (u32 k = pt->first_probe; k < pt->first_probe + pt->nprobes; k++) {
		u32 e = kprw_rt.probes[k].event;
		if (e == KPRW_NO_EVENT || !(kprw_rt.events[e].flags & KPRW_EF_SOFT))
			return 1;
	}
	return 0;
}

/* validate checks the tables and sums up what they hold in kprw_rt.has: the one pass over
 * every probe and point start-up makes (python3.11 with a probe on every function has
 * 1.4 MB of them; each further pass cost ~0.1 ms) */
static int check_tables(const struct kprw_header *h, u32 *hasp);

static int validate(const struct kprw_header *h)
{
	u32 has;
	if (!check_tables(h, &has))
		return 0;
	kprw_rt.has = has;
	return 1;
}

/* start_idle takes an idle image's tables (KPRW_HF_IDLE) unchecked, but for its header
 * and its free points: the pass over every point and probe (~1 ms of python3.11's start-up
 * with every function prepared) is the live-probe thread's (kprw_tables_check). */
static int start_idle(const struct kprw_header *h)
{
	if (!(h->flags & KPRW_HF_IDLE) || h->npoints > KPRW_MAX_POINTS || h->nfree > h->nprobes ||
	    (h->hooks && ((const struct kprw_hooks *)RT_ADDR(h->hooks))->init))
		return 0;
	u32 has = KPRW_HAS_IDLE;
	if (!validate_free(h, h->nprobes - h->nfree, &has))
		return 0;
	kprw_rt.has = has;
	kprw_rt.tables_late = 1;
	return 1;
}

/* all_live says whether every point is a live point or a gated live one (nothing armed
 * at start-up) and every event a soft-disabled live one without triggers (start-up
 * filled their control words so), as an idle image's must be */
static int all_live(void)
{
	for (u32 i = 0; i < kprw_rt.npoints; i++)
		if (!(kprw_rt.points[i].dflags & KPRW_DF_LIVE) && !kprw_live_gated(&kprw_rt.points[i]))
			return 0;
	for (u32 e = 0; e < kprw_rt.nevents; e++)
		if ((kprw_rt.events[e].flags & (KPRW_EF_SOFT | KPRW_EF_LIVE | KPRW_EF_TRIGGERS)) != (KPRW_EF_SOFT | KPRW_EF_LIVE))
			return 0;
	return 1;
}

/* kprw_tables_check checks an idle image's tables as start-up checks any other's, once,
 * before anything reads them (the live-probe thread's first pass, or start-up's when a
 * control or live frame wants a site already): 1 when they are sound and idle as the
 * rewrite said, so that the start-up that skipped them did right; else it says so and
 * no live probe is armed. Its int3-step index is made here too. */
int kprw_tables_check(void)
{
	static int state; /* 0: not yet, 1 sound, -1 not */
	if (!kprw_rt.tables_late || state)
		return state >= 0;
	u32 has;
	int ok = check_tables(kprw_rt.hdr, &has) && !(has & ~(KPRW_HAS_IDLE | KPRW_HAS_ISTEP)) && all_live();
	if (ok && (has & KPRW_HAS_ISTEP))
		kprw_istep_init();
	if (!ok)
		kprw_puts("kprewrite: inconsistent kprewrite probe tables (an idle image's): no live probe is armed\n");
	state = ok ? 1 : -1;
	return ok;
}

static int check_tables(const struct kprw_header *h, u32 *hasp)
{
	u32 has = 0, next = 0; /* the probes of each point follow those of the one before */
	if (h->npoints > KPRW_MAX_POINTS)
		return 0;
	for (u32 i = 0; i < h->npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (i > 0 && pt->site <= kprw_rt.points[i - 1].site)
			return 0;
		if (pt->first_probe != next || pt->nprobes > h->nprobes - next)
			return 0;
		next += pt->nprobes;
		for (u32 k = pt->first_probe; k < next; k++) {
			const struct kprw_probe *p = &kprw_rt.probes[k];
			if (p->point != i || (p->event != KPRW_NO_EVENT && p->event >= h->nevents))
				return 0;
			if (p->type < KPRW_T_KPROBE || p->type > KPRW_T_VERIFY)
				return 0;
			if (p->data_size > KPRW_MAX_DATA_SIZE)
				return 0;
			if (p->type == KPRW_T_VERIFY && !(pt->pflags & KPRW_PF_INNER))
				return 0;
			if ((p->flags & KPRW_F_USER) &&
			    (!p->user || p->type == KPRW_T_VERIFY ||
			     (p->pre_handler | p->post_handler | p->fault_handler | p->entry_handler | p->ret_handler)))
				return 0; /* a C handler probe: its struct holds the handlers */
			if (p->flags & KPRW_F_USER)
				has |= KPRW_HAS_USER | KPRW_HAS_RECORDS;
			if (p->type == KPRW_T_KRETPROBE)
				has |= KPRW_HAS_KRET;
			if ((p->flags & KPRW_F_TRACE) || p->type == KPRW_T_VERIFY)
				has |= KPRW_HAS_RECORDS;
			if (p->event != KPRW_NO_EVENT)
				has |= KPRW_HAS_EVENTS;
			if ((p->flags & KPRW_F_DISABLED) ||
			    (p->event != KPRW_NO_EVENT && (kprw_rt.events[p->event].flags & KPRW_EF_DISABLED)))
				has |= KPRW_HAS_DISABLED;
		}
		if (!validate_point(h, pt))
			return 0;
		if (pt->dflags & KPRW_DF_LIVE) {
			has |= KPRW_HAS_TRAPS; /* (a live jump site is an int3 while it is written) */
			if (live_on(pt))
				has |= KPRW_HAS_LIVE_ON;
		}
		if (pt->xmode != KPRW_X_OPTIMIZED)
			has |= KPRW_HAS_TRAPS;
		else if (pt->pflags & KPRW_PF_COUNT)
			has |= KPRW_HAS_COUNT;
		else
			has |= KPRW_HAS_GATED;
		if (pt->pflags & KPRW_PF_INT3STEP)
			has |= KPRW_HAS_ISTEP;
		if (pt->dflags & (KPRW_DF_PREFILTER | KPRW_DF_INLINEHIST)) {
			if (pt->xmode != KPRW_X_OPTIMIZED || (pt->pflags & KPRW_PF_COUNT) || pt->nprobes != 1)
				return 0;
			has |= KPRW_HAS_PREFILTER;
		}
	}
	if (!validate_free(h, next, &has))
		return 0;
	if (kprw_rt.nfree)
		has |= KPRW_HAS_TRAPS; /* (an int3 placed live at an unprepared site) */
	if (kprw_rt.nfree && !h->npoints) /* a handler file's image with no probe of its own: the */
		has |= KPRW_HAS_EVENTS | KPRW_HAS_RECORDS; /* trace file carries the live-probe thread's controls */
	/* a kprewrite_init() may register struct kprobes by name at prepared sites */
	if (h->hooks && ((const struct kprw_hooks *)RT_ADDR(h->hooks))->init)
		has |= KPRW_HAS_USER;
	*hasp = has;
	return 1;
}

/* count_layout finds, in a count-only detour (copied from src/countprobe.S, whose
 * assembly checks the offsets of countprobe.h), the locked increments (one
 * KPRW_CD_INC_LEN instruction a probe) and, with per-CPU counting, the calls of
 * kprewrite_rt_rseq_count (KPRW_CD_CALL_LEN a probe; NULL without) or, in the inline
 * form (one probe), its restartable sequence's commit (NULL in the other forms) */
struct count_code {
	u8 *incs, *calls, *commit;
};

static struct count_code count_layout(const struct kprw_point *pt)
{
	u8 *d = (u8 *)RT_ADDR(pt->slot);
	u32 n = pt->nprobes, p = KPRW_CD_REDZONE_LEN;
	struct count_code c = {d, NULL, NULL};
	if (d[0] == 0x53 && d[1] == 0x30 && d[2] == 0x05 && d[3] == 0x53) {
		/* RSEQ_SIG: the inline form's cold part, then the entry */
		p = KPRW_CDI_ENTRY + KPRW_CD_REDZONE_LEN;
		if (d[p] == 0x50)
			p += KPRW_CD_FLAGS_LEN;
		c.incs = d + KPRW_CDI_LOCKED;
		/* the PIC form pushes %rdx after the head (push %rcx; mov; jrcxz) */
		c.commit = d + p + (d[p + KPRW_CD_HEAD_LEN] == 0x52 ? KPRW_CDI_PIC_COMMIT : KPRW_CDI_COMMIT);
		return c;
	}
	if (d[0] == 0xf0)
		return c; /* lock incq only, the flags dead */
	if (d[p] == 0x50)
		p += KPRW_CD_FLAGS_LEN; /* push %rax; lahf; seto %al: the flags live */
	c.incs = d + p;
	if (d[p] == 0xf0)
		return c; /* lock incq only */
	p += KPRW_CD_HEAD_LEN; /* push %rcx; mov kprewrite_rt_rseq_off(%rip),%rcx; jrcxz */
	if (n <= KPRW_COUNT_SHORT_N) {
		c.calls = d + p + 1; /* after push %rdx */
		c.incs = c.calls + KPRW_CD_CALL_LEN * n + 1 + KPRW_CD_JMP_LEN; /* after pop %rdx; jmp */
		return c;
	}
	p += KPRW_CD_JMP_LEN; /* jmp to the calls */
	c.incs = d + p;
	c.calls = c.incs + KPRW_CD_INC_LEN * n + KPRW_CD_JMP_LEN + 1; /* after jmp, push %rdx */
	return c;
}

static void span(uptr *lo, uptr *hi, const u8 *at, u32 len)
{
	*lo = (uptr)at < *lo ? (uptr)at : *lo;
	*hi = (uptr)at + len > *hi ? (uptr)at + len : *hi;
}

/* count_disable overwrites the increment (lock incq) and the per-CPU call or commit of
 * each disabled probe of the count-only detours with nops (see "Count-only detours" in
 * kprewrite_abi.h): the one write to text the runtime makes, at start-up, before the
 * program runs; one mprotect pair for all of them (RWX, not RW: the runtime's own code
 * may share the pages). */
static void count_disable(void)
{
	static const u8 nop8[8] = {0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00};
	static const u8 nop7[7] = {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00};
	static const u8 nop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
	uptr lo = ~(uptr)0, hi = 0;
	/* nothing disabled: not even the probes' state (bss) is read, its pages stay unmapped */
	if (!(kprw_rt.has & KPRW_HAS_COUNT) || !(kprw_rt.disable_all || (kprw_rt.has & KPRW_HAS_DISABLED)))
		return;
	for (u32 i = 0; i < kprw_rt.npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (!(pt->pflags & KPRW_PF_COUNT))
			continue;
		for (u32 k = 0; k < pt->nprobes; k++)
			if (!kprw_probe_enabled(pt->first_probe + k)) {
				struct count_code c = count_layout(pt);
				span(&lo, &hi, c.incs + 8 * k, 8);
				if (c.calls)
					span(&lo, &hi, c.calls + 10 * k, 10);
				if (c.commit)
					span(&lo, &hi, c.commit, 7);
			}
	}
	if (!hi)
		return;
	lo &= ~4095ul;
	hi = (hi + 4095) & ~4095ul;
	long r = sys3(SYS_mprotect, (long)lo, (long)(hi - lo), 7);
	if (r < 0) {
		kprw_puts("kprewrite: cannot disable count-only probes (mprotect of their detours failed); they still count\n");
		return;
	}
	for (u32 i = 0; i < kprw_rt.npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (!(pt->pflags & KPRW_PF_COUNT))
			continue;
		struct count_code c = count_layout(pt);
		u8 *at = c.incs;
		for (u32 k = 0; k < pt->nprobes; k++, at += 8) {
			u8 *call = c.calls ? c.calls + 10 * k : NULL;
			if (at[0] != 0xf0 || at[1] != 0x48 || at[2] != 0xff || at[3] != 0x05 ||
			    (call && (call[0] != 0xba || call[5] != 0xe8)) ||
			    (c.commit && (c.commit[0] != 0x48 || c.commit[1] != 0xff || c.commit[2] != 0x81)))
				kprw_fatal("count-only detour not as the tables say at", (unsigned long)at);
			if (!kprw_probe_enabled(pt->first_probe + k)) {
				kprw_memcpy(at, nop8, 8);
				if (call)
					kprw_memcpy(call + 5, nop5, 5); /* the call: nopl 0(%rax,%rax) */
				if (c.commit)
					kprw_memcpy(c.commit, nop7, 7); /* the commit: nopl 0(%rax) */
			}
		}
	}
	sys3(SYS_mprotect, (long)lo, (long)(hi - lo), 5);
}

/* arm_detours opens the gate of every jump-optimized point with an enabled probe; the
 * others (and all of them before this runs) go straight to their relocated DCR.
 * Count-only detours have no gate: their disabled probes' increments are removed. */
static void arm_detours(void)
{
	count_disable();
	/* (an idle image's gated points are all live ones: nothing to open here) */
	for (u32 i = 0; (kprw_rt.has & KPRW_HAS_GATED) && !kprw_rt.tables_late && i < kprw_rt.npoints; i++) {
		const struct kprw_point *pt = &kprw_rt.points[i];
		if (pt->xmode != KPRW_X_OPTIMIZED)
			continue;
		if (pt->pflags & (KPRW_PF_COUNT))
			continue;
		if ((pt->dflags & KPRW_DF_LIVE) || kprw_live_gated(pt))
			continue; /* the live-probe thread opens its gate before it writes its jmp (or,
				   * a gated one, when an event wants it): the probes' state of 10,000s
				   * of prepared sites stays untouched (bss pages a write would fault in) */
		u32 armed = 0;
		for (u32 k = 0; k < pt->nprobes; k++)
			if (kprw_probe_enabled(pt->first_probe + k))
				armed = 1;
		atomic_store(&kprw_rt.state[pt->first_probe].gate, armed);
	}
}

static void records_init(void);

/* kprw_live_records readies records started late, from the live-probe thread before
 * it arms the first site (every event live: kprw_live_only): the clock, the record area,
 * the fetch plans and what hits need. Once; 0 when records can be written. */
int kprw_live_records(void)
{
	static int done, ok;
	if (done)
		return ok ? 0 : -1;
	done = 1;
	if (!kprw_rt.records_late) { /* no trace file: the instances still wait */
		ok = kprw_kretprobe_init() >= 0;
		return ok ? 0 : -1;
	}
	kprw_clock_init();
	if (kprw_kretprobe_init() < 0 || kprw_trace_records_late() < 0)
		return -1;
	records_init();
	ok = 1;
	return 0;
}

/* records_init prepares what writing records needs (rt_dispatch.c): each event's record
 * size when fixed and its compiled fetch plan, once; and, when some event's size is not
 * fixed (strings), the per-thread-context buffers its records are fetched into once:
 * KPRW_NTCTX * 4 KiB of address space, a page of memory for each thread that uses it. */
static void records_init(void)
{
	u64 n = kprw_rt.nevents, fbytes = 0;
	for (u32 i = 0; i < kprw_rt.nevents; i++) {
		const struct kprw_event *ev = &kprw_rt.events[i];
		if (ev->filter_len)
			fbytes += (kprw_filter_size((const u8 *)RT_ADDR(ev->fetch) + ev->fetch_len, ev->filter_len) + 7) & ~7u;
	}
	long *fixed = kprw_mmap_dense(n * (sizeof(long) + sizeof(struct kprw_fplan) + 2 * sizeof(void *)) + fbytes + 1);
	struct kprw_fplan *plan = fixed ? (struct kprw_fplan *)(fixed + n) : NULL;
	const struct kprw_fprog **filter = fixed ? (const struct kprw_fprog **)(plan + n) : NULL;
	const struct kprw_evtrig **trig = fixed ? (const struct kprw_evtrig **)(filter + n) : NULL;
	u8 *fmem = fixed ? (u8 *)(trig + n) : NULL;
	for (u32 i = 0; fixed && i < kprw_rt.nevents; i++) {
		const struct kprw_event *ev = &kprw_rt.events[i];
		const u8 *prog = (const u8 *)RT_ADDR(ev->fetch);
		/* an event that fetches nothing keeps its zeros (size 0, a plan of no ops: what
		 * kprw_fetch_plan would write): a table of such events (--calls) is never
		 * written, and its 2 MiB pages are never made (~1-2 ms each here when the
		 * host backs them anew; issue 49) */
		if (ev->fetch_len && !kprw_fetch_none(prog, ev->fetch_len)) {
			fixed[i] = kprw_fetch_fixed_size(prog, ev->fetch_len);
			if (kprw_fetch_reads_xmm(prog, ev->fetch_len))
				kprw_rt.reads_xmm = 1;
			if (!kprw_fetch_plan(prog, ev->fetch_len, &plan[i]))
				plan[i].n = ~0u;
		}
		if (ev->filter_len) {
			u32 sz = kprw_filter_size(prog + ev->fetch_len, ev->filter_len);
			struct kprw_fprog *f = (struct kprw_fprog *)fmem;
			if (sz && kprw_filter_compile(prog + ev->fetch_len, ev->filter_len, f) == 0) {
				filter[i] = f;
				fmem += (sz + 7) & ~7u;
			} else {
				kprw_puts("kprewrite: an event's filter program is malformed; its hits are all recorded\n");
			}
		}
	}
	kprw_rt.ev_fixed = fixed;
	kprw_rt.ev_plan = plan;
	kprw_rt.ev_filter = filter;
	kprw_rt.ev_trig = trig;
	kprw_trig_init(); /* the triggers, and the control area when the trace file has none */
	kprw_fastev_init();
	kprw_spev_init();
	kprw_hot_init();
	kprw_pf_update();
	/* per-thread scratch buffers: for records of variable size, and for the stacks
	 * of stacktrace triggers (an image with an unwind table) */
	int scratch = kprw_rt.hdr->unwind != 0;
	for (u32 i = 0; i < kprw_rt.nevents && !scratch; i++) {
		const struct kprw_event *ev = &kprw_rt.events[i];
		long f = fixed ? fixed[i] : ev->fetch_len ? kprw_fetch_fixed_size((const u8 *)RT_ADDR(ev->fetch), ev->fetch_len) : 0;
		scratch = f < 0;
	}
	if (scratch) {
		unsigned long size = (unsigned long)KPRW_NTCTX * KPRW_MAX_REC_DATA;
		long r = sys6(SYS_mmap, 0, (long)size, 3 /* RW */, 0x4022 /* PRIVATE|ANON|NORESERVE */, -1, 0);
		if (!(r < 0 && r > -4096))
			kprw_rt.scratch = (u8 *)r;
	}
}

static u32 count_cpus(void)
{
	unsigned long mask[16];
	long n = sys3(SYS_sched_getaffinity, 0, sizeof mask, (long)mask);
	u32 c = 0;
	for (long i = 0; i < n / 8; i++)
		for (unsigned long m = mask[i]; m; m &= m - 1) /* no libgcc __popcountdi2 */
			c++;
	return c ? c : 1;
}

static void install_sigtrap(void)
{
	struct k_sigaction sa, old;
	unsigned long set = 1ul << (SIGTRAP - 1);
	if (!kprw_proc_take(SIGTRAP)) { /* another image's handler is in: it asks this one */
		sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&set, 0, 8);
		return;
	}
	kprw_memset(&sa, 0, sizeof sa);
	kprw_memset(&old, 0, sizeof old);
	sa.handler = (unsigned long)kprw_sigtrap;
	/* SA_NODEFER: an int3 in a handler (a nested hit) must be delivered, not turned into
	 * a kill by force_sig; SA_ONSTACK: use the thread's sigaltstack if it has one (Go
	 * and other small-stack runtimes). Async signals are blocked while handlers run;
	 * synchronous fault signals are not, so a faulting handler reaches the program's
	 * own SIGSEGV handler or the default action. */
	sa.flags = SA_SIGINFO | SA_RESTORER | SA_NODEFER | SA_ONSTACK | SA_RESTART;
	sa.restorer = (unsigned long)kprw_restorer;
	sa.mask = ~0ul & ~((1ul << (SIGTRAP - 1)) | (1ul << (4 - 1)) /* ILL */ | (1ul << (7 - 1)) /* BUS */ |
			   (1ul << (8 - 1)) /* FPE */ | (1ul << (11 - 1)) /* SEGV */ | (1ul << (31 - 1)) /* SYS */);
	long r = sys4(SYS_rt_sigaction, SIGTRAP, (long)&sa, (long)&old, 8);
	if (r < 0)
		kprw_fatal("rt_sigaction(SIGTRAP) failed:", (unsigned long)-r);
	kprw_rt.old_trap_handler = old.handler;
	kprw_sg_initial(SIGTRAP, &old); /* the program's, as far as the signal guard knows */
	/* a blocked SIGTRAP inherited across exec would turn every hit into a kill */
	sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&set, 0, 8);
}

static void aux_value(uptr type, uptr val)
{
	if (type == AT_SECURE)
		kprw_rt.secure = val != 0;
	else if (type == AT_HWCAP2)
		kprw_rt.hwcap2 = val;
	else if (type == AT_BASE)
		kprw_rt.at_base = val;
	else if (type == AT_MINSIGSTKSZ && val < (1u << 20))
		kprw_rt.minsigstk = (u32)val;
	else if (type == AT_ENTRY)
		kprw_rt.at_entry = val;
	else if (type == 33 /* AT_SYSINFO_EHDR */)
		kprw_rt.at_vdso = val;
}

/* own_header finds this image's tables (PC-relatively, through kprewrite_rt_hdr_rel)
 * and sets the load bias. */
static const struct kprw_header *own_header(void)
{
	long rel = kprewrite_rt_hdr_rel;
	if (rel == 0)
		kprw_fatal("runtime not linked to its tables (kprewrite_rt_hdr_rel is 0) at",
			   (unsigned long)&kprewrite_rt_hdr_rel);
	const struct kprw_header *h = (const struct kprw_header *)((uptr)&kprewrite_rt_hdr_rel + rel);
	if (h->magic != KPRW_MAGIC || h->version != KPRW_VERSION || h->header_size != sizeof *h)
		kprw_fatal("bad kprewrite table header at", (unsigned long)h);
	kprw_rt.bias = (u64)(uptr)h - h->self;
	return h;
}

static void start_early(const struct kprw_header *h, char **envp);
static void start_late(const struct kprw_header *h);

/* kprewrite_rt_init runs the start-up of a rewritten program and returns the run-time
 * address of the original entry point. initial_sp points at argc (the process entry
 * stack). Safe to call twice. */
__attribute__((visibility("hidden"))) uptr kprewrite_rt_init(uptr *initial_sp)
{
	const struct kprw_header *h = own_header();
	if (!kprw_rt.init_done) {
		/* argc, argv, envp, auxv */
		char **envp = NULL;
		if (initial_sp) {
			uptr argc = initial_sp[0];
			envp = (char **)(initial_sp + 1 + argc + 1);
			uptr *av = (uptr *)envp;
			while (*av)
				av++;
			for (av++; av[0] != AT_NULL; av += 2)
				aux_value(av[0], av[1]);
		}
		start_early(h, envp);
	}
	start_late(h);
	return RT_ADDR(h->orig_entry);
}

/* read_auxv reads the process's auxiliary vector from /proc/self/auxv: a library's
 * start-up has no view of the initial stack (the environment it is given may be a copy
 * the program made). Without /proc (a bare chroot), AT_SECURE is inferred from the
 * real and effective ids, as glibc's own fallback does. */
static void read_auxv(void)
{
	uptr buf[128];
	int got = 0;
	long fd = sys3(SYS_open, (long)"/proc/self/auxv", O_RDONLY | 02000000 /* O_CLOEXEC */, 0);
	if (fd >= 0) {
		long n, off = 0;
		while (off < (long)sizeof buf && (n = sys3(SYS_read, fd, (long)buf + off, (long)sizeof buf - off)) > 0)
			off += n;
		sys1(SYS_close, fd);
		for (long i = 0; i + 1 < off / 8 && buf[i] != AT_NULL; i += 2, got = 1)
			aux_value(buf[i], buf[i + 1]);
	}
	if (!got)
		kprw_rt.secure = sys0(SYS_getuid) != sys0(SYS_geteuid) || sys0(SYS_getgid) != sys0(SYS_getegid);
}

/* exe_trace finds the tables of the program's executable when it is a rewritten
 * program too (its entry point, AT_ENTRY, is a runtime's kprewrite_rt_entry, preceded
 * by the entry mark of src/entry.S) and copies its default trace file and size: a
 * library's runtime starts before the executable's, and both must write one file.
 * Every read is a system call that cannot fault: the entry may be anything. */
static int exe_trace(char *path, unsigned long cap, u64 *size)
{
	struct {
		char magic[8];
		int rel;
		u32 pad;
	} mark;
	uptr at = kprw_rt.at_entry;
	long rel;
	struct kprw_header eh;
	if (!at || at < 16 || kprw_read_mode(&mark, at - 16, sizeof mark, 0) != (long)sizeof mark ||
	    kprw_strncmp(mark.magic, "KPRWENTR", 8) != 0)
		return 0;
	uptr relw = at - 16 + 8 + (uptr)(long)mark.rel;
	if (kprw_read_mode(&rel, relw, 8, 0) != 8 || kprw_read_mode(&eh, relw + (uptr)rel, sizeof eh, 0) != (long)sizeof eh)
		return 0;
	if (eh.magic != KPRW_MAGIC || eh.version != KPRW_VERSION || eh.header_size != sizeof eh)
		return 0;
	u64 bias = (u64)(relw + (uptr)rel) - eh.self;
	path[0] = 0;
	if (eh.trace_path) {
		long n = kprw_read_mode(path, (uptr)(bias + eh.trace_path), cap - 1, 0);
		if (n <= 0)
			return 0;
		path[n] = 0; /* a path nearer than cap to an unmapped page: read up to it */
	}
	*size = eh.trace_size;
	return 1;
}

/* kprewrite_rt_lib_init runs the start-up of a rewritten shared library, called from its
 * DT_INIT (src/entry.S) with what the dynamic loader gives init functions, and returns
 * the run-time address of the library's original DT_INIT, or 0. */
__attribute__((visibility("hidden"))) uptr kprewrite_rt_lib_init(long argc, char **argv, char **envp)
{
	(void)argc;
	(void)argv;
	const struct kprw_header *h = own_header();
	if (!kprw_rt.init_done) {
		kprw_rt.library = 1;
		read_auxv();
		start_early(h, envp);
	}
	start_late(h);
	return h->orig_entry ? RT_ADDR(h->orig_entry) : 0;
}

/* The KPREWRITE_* entries of /proc/self/environ, for a start-up the dynamic loader runs
 * while relocating (it passes a resolver no environment): copies, kept for good (start-up
 * keeps pointers to some values). Other variables are not kept: an environment may be
 * megabytes. */
static char env_copy[8192];
static char *env_vec[32];

/* read_environ fills env_vec; 0 when /proc/self/environ cannot be read. */
static int read_environ(void)
{
	static const char prefix[] = "KPREWRITE_";
	long fd = sys3(SYS_open, (long)"/proc/self/environ", O_RDONLY | 02000000 /* O_CLOEXEC */, 0);
	if (fd < 0)
		return 0;
	char buf[1024];
	u32 used = 0, start = 0, pos = 0, n = 0;
	int keep = 1;
	long got;
	while ((got = sys3(SYS_read, fd, (long)buf, sizeof buf)) > 0) {
		for (long i = 0; i < got; i++) {
			char c = buf[i];
			if (c == 0) {
				if (keep && pos >= sizeof prefix - 1 && n < ARRAY_SIZE(env_vec) - 1) {
					env_copy[used++] = 0;
					env_vec[n++] = env_copy + start;
				} else {
					used = start; /* what was copied of it */
				}
				start = used;
				pos = 0;
				keep = 1;
				continue;
			}
			if (pos < sizeof prefix - 1 && c != prefix[pos])
				keep = 0;
			if (keep && used + 2 >= sizeof env_copy)
				keep = 0; /* too long to keep: dropped, as if unset */
			if (keep)
				env_copy[used++] = c;
			pos++;
		}
	}
	sys1(SYS_close, fd);
	env_vec[n] = NULL;
	return got == 0;
}

/* kprewrite_rt_reloc_entry is the resolver of the image's early-start relocation
 * (elfio.EarlyStart): glibc's dynamic loader calls it while it relocates the image,
 * before any other IRELATIVE relocation of the image, and stores what it returns (0) in
 * a word of ours. It runs the first part of start-up. */
__attribute__((visibility("hidden"))) uptr kprewrite_rt_reloc_entry(void)
{
	const struct kprw_header *h = own_header();
	if (kprw_rt.init_done || !read_environ())
		return 0;
	kprw_rt.library = (h->flags & KPRW_HF_LIBRARY) != 0;
	kprw_rt.at_reloc = 1;
	read_auxv();
	start_early(h, env_vec);
	return 0;
}

/* the switches start_late reads, looked up by start_early (whose environment may be
 * the copy above) */
static const char *sw_sigguard, *sw_safe_read;

/* start_early is the first part of start-up, common to programs and libraries: tables,
 * switches, kretprobe instances, the trace file, the SIGTRAP handler, detours. */
/* sig_own: is this signal this image's? (asked by the image whose handler is installed) */
static int sig_own(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	return sig == SIGTRAP ? kprw_trap_own(si, uc) : kprw_fault_own(sig, si, uc);
}

static void start_early(const struct kprw_header *h, char **envp)
{
	kprw_stderr_init(); /* before any diagnostic: the stderr the program starts with */
	kprw_proc_join(sig_own); /* the process's other images, if any (rt_proc.c) */
	kprw_rt.hdr = h;
	kprw_rt.image_id = h->image_id;
	kprw_rt.points = (const void *)RT_ADDR(h->points);
	kprw_rt.probes = (const void *)RT_ADDR(h->probes);
	kprw_rt.events = (const void *)RT_ADDR(h->events);
	kprw_rt.state = (void *)RT_ADDR(h->state);
	kprw_rt.npoints = h->npoints;
	kprw_rt.nprobes = h->nprobes;
	kprw_rt.nevents = h->nevents;
	kprw_rt.ctr_base = (u8 *)kprw_rt.state;
	kprw_rt.ctr_stride = sizeof(struct kprw_probe_state);
	if (h->counters) {
		if ((h->counters & 4095) || h->counters_size < (u64)h->nprobes * 16 || (h->counters_size & 4095))
			kprw_fatal("bad kprewrite counter window at", (unsigned long)h->counters);
		kprw_rt.ctr_base = (u8 *)RT_ADDR(h->counters);
		kprw_rt.ctr_stride = 16;
	}
	if (!start_idle(h) && !validate(h))
		kprw_fatal("inconsistent kprewrite probe tables at", (unsigned long)h);

	/* absolute words in writable data (function pointers of user handlers) */
	if (kprw_rt.bias) {
		const u64 *slots = (const u64 *)RT_ADDR(h->abs_slots);
		for (u32 i = 0; i < h->nabs; i++)
			*(u64 *)RT_ADDR(slots[i]) += kprw_rt.bias;
	}
	if (kprw_rt.secure)
		envp = NULL;

	if (!kprw_rt.minsigstk)
		kprw_rt.minsigstk = 8192; /* a kernel before 5.14: room for the largest xsave frames */
	kprw_rt.ncpus = count_cpus();
	kprw_rt.opt_tmpl_len = (u32)(kprewrite_rt_optprobe_template_end - kprewrite_rt_optprobe_template);
	kprw_thread_init();
	/* the TSC calibration (CPUID, which a VM traps, and system calls): only for what
	 * timestamps records or reads the clock and CPU number for C handlers; everything
	 * else reads them, rarely, by system call */
	if ((kprw_rt.has & (KPRW_HAS_RECORDS | KPRW_HAS_USER)) && !kprw_live_only())
		kprw_clock_init(); /* (live only: when the first event is switched on) */
	/* diagnostics: fs0 | tid | hash (the thread's context by its hash, not the TCB's word) */
	const char *tk = getenv_(envp, "KPREWRITE_THREADKEY");
	if (tk && kprw_strcmp(tk, "hash") == 0)
		kprw_rt.no_tcb_slot = 1;
	else if (!one_of("KPREWRITE_THREADKEY", tk, "fs0", "tid", "want fs0, tid or hash; ignored"))
		tk = NULL;
	if (tk && kprw_strcmp(tk, "fs0") == 0 && kprw_rt.keymode == KPRW_KEY_FSBASE)
		kprw_rt.keymode = kprw_thread_keymode_fs0();
	else if (tk && kprw_strcmp(tk, "tid") == 0)
		kprw_rt.keymode = KPRW_KEY_NONE;
	kprw_tcb_slot_check();
	kprw_rt.debug = (h->flags & KPRW_HF_DEBUG) || on_switch(envp, "KPREWRITE_DEBUG");
	kprw_rt.disable_all = (h->flags & KPRW_HF_DISABLE_ALL) != 0;
	for (u32 i = 0; (kprw_rt.has & KPRW_HAS_DISABLED) && i < kprw_rt.nprobes; i++) {
		const struct kprw_probe *p = &kprw_rt.probes[i];
		if ((p->flags & KPRW_F_DISABLED) ||
		    (p->event < kprw_rt.nevents && (kprw_rt.events[p->event].flags & KPRW_EF_DISABLED)))
			kprw_rt.state[i].flags |= KPRW_SF_DISABLED;
	}
	const char *dis = getenv_(envp, "KPREWRITE_DISABLE");
	if (dis)
		apply_disable(dis);
	kprw_user_prepare(); /* C handler probes start unregistered; the disables so far are forced */

	/* (every event live: the instances wait for the first switch on, kprw_live_records) */
	if (!kprw_live_only() && kprw_kretprobe_init() < 0)
		kprw_fatal("cannot allocate kretprobe instances, probes:", kprw_rt.nprobes);

	/* events (records or, --count-only, counters), or violations to report */
	int records = (kprw_rt.has & KPRW_HAS_RECORDS) != 0; /* else the record area is not populated */
	/* every event live: nothing records until one is switched on, so the record area,
	 * the fetch plans and the clock wait for that (kprw_live_records) */
	int late = records && kprw_live_only();
	if (late)
		records = 0;
	int tracing = records || (kprw_rt.has & KPRW_HAS_EVENTS);
	const char *path = getenv_(envp, "KPREWRITE_TRACE");
	if (path && kprw_strcmp(path, "none") == 0)
		path = ""; /* off, as `rewrite --trace none` (not a file named none) */
	u64 size = h->trace_size;
	static char exe_path[4096]; /* a library's: the rewritten executable's trace file */
	if (!path && tracing && kprw_rt.library && exe_trace(exe_path, sizeof exe_path, &size))
		path = exe_path;
	if (!path)
		path = str(h->trace_path);
	if (tracing && path[0]) {
		size = size ? size : KPRW_DEFAULT_TRACE_SIZE;
		const char *sz = getenv_(envp, "KPREWRITE_TRACE_SIZE");
		u64 want = sz ? parse_size("KPREWRITE_TRACE_SIZE", sz, "the rewrite's size is used") : 0;
		if (want)
			size = want;
		/* count-only detours, inline filters' refusals and the hits a record does not
		 * stand for may count per CPU */
		if ((kprw_rt.has & (KPRW_HAS_COUNT | KPRW_HAS_PREFILTER | KPRW_HAS_RECORDS)) &&
		    !on_switch(envp, "KPREWRITE_NO_RSEQ"))
			kprw_rseq_probe(kprw_rt.at_reloc);
		kprw_rt.ctl_path = getenv_(envp, "KPREWRITE_CONTROL");
		int flags = (on_switch(envp, "KPREWRITE_TRACE_PREFAULT") ? KPRW_OPEN_PREFAULT : 0) |
			    (on_switch(envp, "KPREWRITE_APPEND") ? KPRW_OPEN_APPEND : 0) |
			    (on_switch(envp, "KPREWRITE_QUIET") ? KPRW_OPEN_QUIET : 0);
		const char *ck = getenv_(envp, "KPREWRITE_CLOCK"); /* (one_of takes two names) */
		if (ck && ck[0] && kprw_strcmp(ck, "counter") != 0 &&
		    !one_of("KPREWRITE_CLOCK", ck, "tsc", "mono", "want tsc, mono or counter; the rewrite's is used"))
			ck = NULL;
		kprw_rt.clock_want = kprw_clock_want(ck, h->flags);
		kprw_trace_open(path, size, flags, records);
	}
	if (kprw_rt.trace && records)
		records_init();
	kprw_rt.records_late = late && kprw_rt.trace;
	int traps = (kprw_rt.has & KPRW_HAS_TRAPS) != 0;
	if (traps) {
		install_sigtrap();
		if (kprw_rt.has & KPRW_HAS_ISTEP)
			kprw_istep_init();
	}
	/* a mapped trace file: SIGBUS, for a file that shrinks under the program (rt_tracefile.c) */
	if (kprw_rt.ntrace_maps)
		kprw_fault_install(SIGBIT(SIGBUS));
	sw_sigguard = getenv_(envp, "KPREWRITE_SIGGUARD");
	sw_safe_read = getenv_(envp, "KPREWRITE_SAFE_READ");
	arm_detours();
	kprw_live_boot(envp, getenv_(envp, "KPREWRITE_EVENTS"), getenv_(envp, "KPREWRITE_TOOL"), getenv_(envp, "PATH"));
	kprw_live_init();
	if (!kprw_ahead_tid && !kprw_ahead_pending() && !kprw_live_running())
		kprw_trace_release_old(); /* no runtime thread to do it off the program's path */
	kprw_rt.trace_path_shown = path;
	kprw_rt.init_done = 1;
	/* C handler probes declared without a kprewrite_init() fire from here on too (a
	 * handler's faults are caught from now on); kprewrite_init() waits for start_late */
	if (kprw_user_any() && !kprw_user_has_init()) {
		kprw_fault_install(SIGBIT(SIGSEGV) | SIGBIT(SIGBUS) | SIGBIT(SIGFPE) | SIGBIT(SIGILL));
		kprw_user_start();
		kprw_rt.user_started = 1;
	}
}

/* start_late is the second part of start-up, once the image is relocated: the signal
 * guard, fast reads, C handlers. Safe to call twice. */
static void start_late(const struct kprw_header *h)
{
	if (kprw_rt.late_done)
		return;
	kprw_rt.late_done = 1;
	kprw_rseq_verify();
	int traps = (kprw_rt.has & KPRW_HAS_TRAPS) != 0;
	/* fast reads (src/nofault.S): when the rewriter arranged the signal guard for them
	 * (KPRW_HF_FAST_READ) and it wraps every signal function it was given; else (or with
	 * KPREWRITE_SAFE_READ=syscall, KPREWRITE_SIGGUARD=off) process_vm_readv */
	const char *sgmode = sw_sigguard, *safe = sw_safe_read;
	if (sgmode && !one_of("KPREWRITE_SIGGUARD", sgmode, "off", "on", "want off or on; ignored"))
		sgmode = NULL;
	if (safe && !one_of("KPREWRITE_SAFE_READ", safe, "syscall", "fast", "want syscall or fast; ignored"))
		safe = NULL;
	int user = kprw_user_any();
	int fast = (h->flags & KPRW_HF_FAST_READ) && !(safe && kprw_strcmp(safe, "syscall") == 0) &&
		   !(sgmode && kprw_strcmp(sgmode, "off") == 0) && (kprw_rt.trace || user); /* no trace: no fetches */
	/* the signal guard: with int3 probes or fast reads; always when the tables have one:
	 * a static program's redirected entries need their words filled in every case */
	if (traps || fast || h->sigguard) {
		if (!kprw_sigguard_init(sgmode, traps, fast))
			fast = 0;
	}
	/* a mapped trace file: SIGBUS, for a file that shrinks under the program (rt_tracefile.c) */
	unsigned long tbus = kprw_rt.ntrace_maps ? SIGBIT(SIGBUS) : 0;
	if (user || fast || tbus) /* before any C handler runs, kprewrite_init included */
		kprw_fault_install((fast ? KPRW_FAULT_SIGS : 0) | tbus |
				   (user ? SIGBIT(SIGSEGV) | SIGBIT(SIGBUS) | SIGBIT(SIGFPE) | SIGBIT(SIGILL) : 0));
	/* C handlers with int3 probes: a fault of a single-stepped copy is theirs first (their
	 * fault_handler, rt_trap.c's kprw_step_fault) however the program sets its handlers */
	unsigned long ufaults = user && traps ? SIGBIT(SIGSEGV) | SIGBIT(SIGBUS) | SIGBIT(SIGFPE) | SIGBIT(SIGILL) : 0;
	kprw_sg_guard((traps ? SIGBIT(SIGTRAP) : 0) | (fast ? KPRW_FAULT_SIGS : 0) | tbus | ufaults);
	if (fast) {
		/* a blocked SIGSEGV/SIGBUS inherited across exec would turn a bad fetch into a kill */
		unsigned long fs = KPRW_FAULT_SIGS;
		sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&fs, 0, 8);
		kprw_rt.fast_read = 1;
	}
	if (user && !kprw_rt.user_started)
		kprw_user_start(); /* register the C handlers' probes, or run kprewrite_init() */
	if (kprw_rt.debug) {
		kprw_puts(kprw_rt.library ? "kprewrite: library runtime up: bias " : "kprewrite: runtime up: bias ");
		kprw_put_hex(kprw_rt.bias);
		kprw_puts(", ");
		kprw_put_dec(kprw_rt.npoints);
		kprw_puts(" probepoints, ");
		kprw_put_dec(kprw_rt.nprobes);
		kprw_puts(" probes, ");
		kprw_put_dec(kprw_rt.ri_total);
		kprw_puts(" kretprobe instances, trace ");
		kprw_puts(kprw_rt.trace ? kprw_rt.trace_path_shown : "off");
		if (h->flags & KPRW_HF_FAST_READ)
			kprw_puts(kprw_rt.fast_read ? ", fast reads" : ", reads by system call");
		if (kprw_rt.has & KPRW_HAS_COUNT)
			kprw_puts(kprewrite_rt_rseq_off ? (kprw_rt.hits_per_cpu ? ", count-only hits counted per CPU (rseq), int3 hits too"
										: ", count-only hits counted per CPU (rseq)")
							: ", count-only hits counted with lock incq");
		else if (kprw_rt.has & KPRW_HAS_RECORDS)
			kprw_puts(kprw_rt.hits_per_cpu ? ", hits not recorded counted per CPU (rseq)"
						       : ", hits not recorded counted with lock incq");
		if (kprw_rt.at_reloc)
			kprw_puts(", probes live since the image's relocation");
		if (kprw_rt.proc_shared)
			kprw_puts(", sharing the process's signal handlers and thread contexts with its first image");
		kprw_puts(kprw_rt.disable_all ? ", all probes disabled\n" : "\n");
	}
}
