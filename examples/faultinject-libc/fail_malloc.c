/*
 * fail_malloc.c - fault injection in a shared library: every FAIL_NTH-th call of the C
 * library's malloc() in a dynamically linked program returns NULL. The handlers are the
 * static example's (examples/faultinject), their probes in libc.so.6: the sites name
 * the library as uprobe_events do ("libc.so.6:malloc"), and `kprewrite rewrite` writes
 * the program and a rewritten copy of the C library beside it (OUT.libs/libc.so.6),
 * with these handlers linked into the copy. Only calls made once the program's own
 * start-up has begun count: a probe on __libc_start_main, which the program's entry
 * calls once the dynamic loader and the C library are initialised, arms the injection.
 * kprewrite_exit() runs at exit from the library's DT_FINI.
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
		return 1; /* the loader's and the C library's start-up: left alone */
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

DEFINE_KPROBE(start_main, "libc.so.6:__libc_start_main", .pre_handler = arm);

DEFINE_KRETPROBE(fail_malloc, "libc.so.6:malloc",
		 .handler = ret_handler,
		 .entry_handler = entry_handler,
		 .data_size = sizeof(struct call),
		 .maxactive = 16);

void kprewrite_exit(void)
{
	pr_info("fail_malloc: %d of %d malloc() calls failed\n", atomic_read(&failed), atomic_read(&calls));
}
