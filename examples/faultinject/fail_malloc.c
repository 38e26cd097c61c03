/*
 * fail_malloc.c - fault injection with a return probe: every FAIL_NTH-th call of malloc()
 * in the target program returns NULL (the kernel's fail_nth / failslab idea, done the way
 * kprobes allow: a kretprobe handler that changes the return value).
 *
 * The target is linked statically, so malloc() is inside the binary where kprewrite can
 * probe it (shared libraries cannot be probed yet). Only calls made once main() has
 * started count: a second probe, on main, arms the injection (the C library's own start-up
 * allocations are left alone: it does not expect them to fail). The memory of a failed call is
 * allocated and leaked: a return handler decides after the fact. (A pre_handler could
 * skip the call instead, with regs_set_return_value() and override_function_with_return().)
 *
 *	kprewrite rewrite --handlers fail_malloc.c -o target.kp target && ./target.kp
 */
#include <kprewrite.h>

#define FAIL_NTH 3

static int armed;
static atomic_t calls = ATOMIC_INIT(0);
static atomic_t failed = ATOMIC_INIT(0);

struct call {
	unsigned long size;
	int nth;
};

static int arm(struct kprobe *p, struct pt_regs *regs)
{
	(void)p;
	(void)regs;
	WRITE_ONCE(armed, 1);
	return 0;
}

static int entry_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct call *c = (struct call *)ri->data;

	if (!READ_ONCE(armed))
		return 1; /* not yet in main: no return handler for this call */
	c->size = regs->di;
	c->nth = atomic_inc_return(&calls);
	return 0;
}

static int ret_handler(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct call *c = (struct call *)ri->data;

	if (c->nth % FAIL_NTH != 0 || regs_return_value(regs) == 0)
		return 0;
	pr_info("fail_malloc: call #%d: malloc(%lu) = %p, made to return NULL\n", c->nth, c->size,
		(void *)regs_return_value(regs));
	regs_set_return_value(regs, 0);
	atomic_inc(&failed);
	return 0;
}

DEFINE_KPROBE(main_started, "main", .pre_handler = arm);

DEFINE_KRETPROBE(fail_malloc, "malloc",
		 .handler = ret_handler,
		 .entry_handler = entry_handler,
		 .data_size = sizeof(struct call),
		 .maxactive = 16);

void kprewrite_exit(void)
{
	pr_info("fail_malloc: %d of %d malloc() calls failed\n", atomic_read(&failed), atomic_read(&calls));
}
