/*
 * funclatency.c - a function-latency histogram with a return probe (the idea of bcc's
 * funclatency): the entry_handler timestamps each call of work() in ri->data, the return
 * handler adds its duration to a log2 histogram, and kprewrite_exit() prints the
 * histogram when the program exits.
 *
 *	kprewrite rewrite --handlers funclatency.c -o target.kp target && ./target.kp
 */
#include <kprewrite.h>

#define NBUCKETS 40

static atomic64_t hist[NBUCKETS];
static atomic64_t total_ns;
static atomic_t count;

static int entry_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	(void)regs;
	*(u64 *)ri->data = ktime_get_ns();
	return 0;
}

static int ret_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	u64 delta = ktime_get_ns() - *(u64 *)ri->data;
	int slot = 0;

	(void)regs;
	while (slot < NBUCKETS - 1 && (delta >> (slot + 1)))
		slot++;
	atomic64_inc(&hist[slot]);
	atomic64_add((s64)delta, &total_ns);
	atomic_inc(&count);
	return 0;
}

DEFINE_KRETPROBE(work_latency, "work",
		 .handler = ret_handler,
		 .entry_handler = entry_handler,
		 .data_size = sizeof(u64),
		 .maxactive = 64);

static void stars(char *buf, u64 val, u64 max, int width)
{
	int n = max ? (int)(val * width / max) : 0;
	for (int i = 0; i < width; i++)
		buf[i] = i < n ? '*' : ' ';
	buf[width] = 0;
}

void kprewrite_exit(void)
{
	u64 max = 0;
	int lo = NBUCKETS, hi = -1;
	char bar[41];

	for (int i = 0; i < NBUCKETS; i++) {
		u64 v = (u64)atomic64_read(&hist[i]);
		if (v > max)
			max = v;
		if (v) {
			lo = i < lo ? i : lo;
			hi = i;
		}
	}
	pr_info("work(): %d calls, average %llu ns\n", atomic_read(&count),
		atomic_read(&count) ? (unsigned long long)atomic64_read(&total_ns) / (unsigned)atomic_read(&count) : 0ull);
	pr_info("%24s : %-8s %s\n", "nsecs", "count", "distribution");
	for (int i = lo; i <= hi; i++) {
		u64 v = (u64)atomic64_read(&hist[i]);
		stars(bar, v, max, 40);
		pr_info("%10llu -> %-10llu : %-8llu |%s|\n", i ? 1ull << i : 0ull, (2ull << i) - 1,
			(unsigned long long)v, bar);
	}
	pr_info("missed: %d (maxactive %d)\n", work_latency.nmissed, work_latency.maxactive);
}
