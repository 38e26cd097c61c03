/* histcheck.c - runs the runtime's hist program check (src/rt_hist.c) on programs
 * (hist_test.go compares its verdicts with evhist.CheckProgram). Input file
 * (argv[1]): repeated u32 length, program bytes. Output: per program u64 table words
 * (0: refused) and u64 the end of the other tables it names. */
#include "rt.h"

struct kprw_rt kprw_rt;
struct kprw_stats kprewrite_rt_stats;

/* the check never walks a stack (stacktrace keys: src/rt_stack.c) */
u32 kprw_stack_walk(const struct pt_regs *regs, u64 *out, u32 max, int fast)
{
	(void)regs, (void)out, (void)max, (void)fast;
	return 0;
}

/* nor takes a snapshot (onmax().snapshot(): src/rt_trigger.c) */
void kprw_snapshot(u64 ts) { (void)ts; }

/* nor writes a synthetic event's record (src/rt_dispatch.c) */
void kprw_trace_synth(u32 id, u64 site, const u64 *data, u32 n, const struct kprw_fenv *e)
{
	(void)id, (void)site, (void)data, (void)n, (void)e;
}

/* nor runs a synthetic event's run-time histograms (src/rt_trigger.c) */
u32 kprw_triggers_run(const struct kprw_evtrig *tg, const struct kprw_fenv *fe)
{
	(void)tg, (void)fe;
	return 0;
}

static u8 in[1 << 22], out[1 << 16];

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	long fd = sys3(SYS_open, (long)argv[1], 0, 0), r, n = 0;
	if (fd < 0)
		return 3;
	while ((r = sys3(SYS_read, fd, (long)(in + n), (long)(sizeof in - (unsigned long)n))) > 0)
		n += r;
	long o = 0;
	for (long i = 0; i + 4 <= n && o + 16 <= (long)sizeof out;) {
		u32 len;
		__builtin_memcpy(&len, in + i, 4);
		i += 4;
		if (len > n - i)
			return 4;
		u32 ds = 0;
		u64 end = 0, w = kprw_hist_words(in + i, len, &ds, &end);
		if (!w)
			end = 0;
		__builtin_memcpy(out + o, &w, 8);
		__builtin_memcpy(out + o + 8, &end, 8);
		o += 16;
		i += len;
	}
	sys3(SYS_write, 1, (long)out, o);
	return 0;
}
