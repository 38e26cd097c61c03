/* ctlcheck.c - runs the runtime's reader of KPREWRITE_CONTROL files (src/rt_ctl.c:
 * kprw_ctl_install at start-up, then kprw_ctl_sync as the first hit does) on one file, in
 * a process of its own (ctl_test.go gives it damaged control files). argv: FILE
 * IMAGE_ID NEVENTS TRACE (a trace file it makes: header, a counters area holding the
 * image's control area). kprw_mmap_anon is wrapped (ld --wrap): each allocation ends at
 * a guard page, so a read or write past its end faults. Stdout: "installed" or "not
 * installed", then the events given run-time filters and triggers; stderr: the
 * runtime's lines. */
#include "rt.h"

struct kprw_rt kprw_rt;
struct kprw_stats kprewrite_rt_stats;

/* nothing here walks a stack, writes a record or reads the clock */
u32 kprw_stack_walk(const struct pt_regs *regs, u64 *out, u32 max, int fast)
{
	(void)regs, (void)out, (void)max, (void)fast;
	return 0;
}
void kprw_trace_stack(const struct kprw_hit *hit) { (void)hit; }
void kprw_trace_synth(u32 id, u64 site, const u64 *data, u32 n, const struct kprw_fenv *e)
{
	(void)id, (void)site, (void)data, (void)n, (void)e;
}
u64 kprw_clock(void) { return 1; }
void kprw_pf_update(void) {}

void *__real_kprw_mmap_anon(unsigned long size);

/* __wrap_kprw_mmap_anon: size bytes ending 16-aligned at a page no access is allowed to */
void *__wrap_kprw_mmap_anon(unsigned long size)
{
	unsigned long pages = (size + 4095) / 4096 + 1;
	u8 *p = __real_kprw_mmap_anon(pages * 4096);
	if (!p)
		return NULL;
	u8 *guard = p + (pages - 1) * 4096;
	if (sys3(SYS_mprotect, (long)guard, 4096, 0) != 0)
		return NULL;
	return guard - ((size + 15) & ~15ul);
}

static void out(const char *s) { sys3(SYS_write, 1, (long)s, (long)kprw_strlen(s)); }

static u64 num(const char *s)
{
	u64 v = 0;
	while (*s >= '0' && *s <= '9')
		v = v * 10 + (u64)(*s++ - '0');
	return v;
}

#define TRACE_SIZE (1ul << 20)
#define COUNTERS_OFF (2ul * KPRW_TRACE_HDR_SIZE)

int main(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	kprw_rt.ctl_path = argv[1];
	kprw_rt.image_id = num(argv[2]);
	kprw_rt.nevents = (u32)num(argv[3]);
	if (kprw_rt.nevents > 4096)
		return 2;
	u32 n = kprw_rt.nevents;
	kprw_rt.events = __real_kprw_mmap_anon(n * sizeof(struct kprw_event) + 8); /* none has triggers */
	kprw_rt.ev_filter = __real_kprw_mmap_anon(n * sizeof(void *) + 8);
	kprw_rt.ev_trig = __real_kprw_mmap_anon(n * sizeof(void *) + 8);

	long fd = sys3(SYS_open, (long)argv[4], 02 /* O_RDWR */ | 0100 /* O_CREAT */ | 01000 /* O_TRUNC */, 0600);
	if (fd < 0 || sys2(SYS_ftruncate, fd, TRACE_SIZE) != 0)
		return 3;
	u8 *map = (u8 *)sys6(SYS_mmap, 0, TRACE_SIZE, 3, 1 /* MAP_SHARED */, fd, 0);
	if ((long)map < 0 && (long)map > -4096)
		return 3;
	struct kprw_trace_hdr *h = (struct kprw_trace_hdr *)map;
	kprw_memcpy(h->magic, KPRW_TRACE_MAGIC, 8);
	h->counters_off = COUNTERS_OFF;
	h->counters_size = TRACE_SIZE - COUNTERS_OFF;
	u64 ctl = kprw_ctl_size();
	h->counters_used = (ctl + 63) & ~63ul;
	kprw_ctl_fill(map + COUNTERS_OFF);
	kprw_ctl_attach(map + COUNTERS_OFF);
	kprw_rt.trace = h;
	kprw_rt.trace_mapped = TRACE_SIZE;

	u32 gen = h->ctl_gen;
	kprw_ctl_install(fd, h);
	kprw_rt.ctl_gen = &h->ctl_gen;
	out(h->ctl_gen != gen ? "installed\n" : "not installed\n");
	kprw_ctl_sync(); /* the first hit: the frame read back, checked, compiled */
	for (u32 e = 0; e < n; e++) {
		char line[64] = "event ";
		u32 i = 6;
		char d[12];
		u32 k = 0, v = e;
		do
			d[k++] = (char)('0' + v % 10);
		while ((v /= 10) != 0);
		while (k)
			line[i++] = d[--k];
		if (!kprw_rt.ev_filter[e] && !kprw_rt.ev_trig[e])
			continue;
		kprw_memcpy(line + i, kprw_rt.ev_filter[e] ? " filter" : "", kprw_rt.ev_filter[e] ? 7 : 0);
		i += kprw_rt.ev_filter[e] ? 7 : 0;
		kprw_memcpy(line + i, kprw_rt.ev_trig[e] ? " triggers" : "", kprw_rt.ev_trig[e] ? 9 : 0);
		i += kprw_rt.ev_trig[e] ? 9 : 0;
		line[i++] = '\n';
		line[i] = 0;
		out(line);
	}
	return 0;
}
