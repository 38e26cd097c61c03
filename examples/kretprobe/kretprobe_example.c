// SPDX-License-Identifier: GPL-2.0-only
/*
 * kretprobe_example.c - the kernel's samples/kprobes/kretprobe_example.c, ported to user
 * space, with the 2.6 sample's report of failed calls.
 *
 * Here's a sample of the use of return probes to report the return value of lookup() of
 * the target program, and the time it took, when it failed (a negative errno); at exit
 * it reports maxactive and how many instances were missed. lookup() is recursive and
 * maxactive is small, so deep searches miss some.
 *
 *	kprewrite rewrite --handlers kretprobe_example.c -o target.kp target && ./target.kp
 */
#include <kprewrite.h>

static const char func_name[] = "lookup";

/* per-instance private data */
struct my_data {
	ktime_t entry_stamp;
	long depth;
};

/* Here we use the entry_handler to timestamp function entry */
static int entry_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct my_data *data;

	data = (struct my_data *)ri->data;
	data->entry_stamp = ktime_get();
	data->depth = (long)regs->dx; /* lookup(dir, name, depth) */
	return 0;
}
NOKPROBE_SYMBOL(entry_handler);

static const char *errname(long err)
{
	switch (err) {
	case -2: return "ENOENT";
	case -13: return "EACCES";
	case -20: return "ENOTDIR";
	case -36: return "ENAMETOOLONG";
	}
	return "?";
}

/*
 * Return-probe handler: Log the return value and duration of a failed call. Duration
 * may turn out to be zero consistently, depending upon the granularity of time
 * accounting on the platform.
 */
static int ret_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	long retval = (long)regs_return_value(regs);
	struct my_data *data = (struct my_data *)ri->data;
	s64 delta;
	ktime_t now;

	if (retval >= 0)
		return 0;
	now = ktime_get();
	delta = ktime_to_ns(ktime_sub(now, data->entry_stamp));
	pr_info("%s(depth %ld) returned %ld (%s) and took %lld ns to execute\n",
		func_name, data->depth, retval, errname(retval), (long long)delta);
	return 0;
}
NOKPROBE_SYMBOL(ret_handler);

DEFINE_KRETPROBE(my_kretprobe, "lookup",
		 .handler = ret_handler,
		 .entry_handler = entry_handler,
		 .data_size = sizeof(struct my_data),
		 /* Probe up to 4 instances concurrently. */
		 .maxactive = 4);

static int __init kretprobe_init(void)
{
	int ret;

	ret = register_kretprobe(&my_kretprobe);
	if (ret < 0) {
		pr_err("register_kretprobe failed, returned %d\n", ret);
		return ret;
	}
	pr_info("Planted return probe at %s: %p (maxactive %d)\n",
		my_kretprobe.kp.symbol_name, my_kretprobe.kp.addr, my_kretprobe.maxactive);
	return 0;
}

static void __exit kretprobe_exit(void)
{
	unregister_kretprobe(&my_kretprobe);
	pr_info("kretprobe at %p unregistered\n", my_kretprobe.kp.addr);

	/* nmissed > 0 suggests that maxactive was set too low. */
	pr_info("Missed probing %d instances of %s (maxactive %d)\n",
		my_kretprobe.nmissed, my_kretprobe.kp.symbol_name, my_kretprobe.maxactive);
}

module_init(kretprobe_init)
module_exit(kretprobe_exit)
MODULE_LICENSE("GPL");
