// SPDX-License-Identifier: GPL-2.0-only
/*
 * kprobe_example.c - the kernel's samples/kprobes/kprobe_example.c, ported to user space.
 *
 * Here's a sample of the use of kprobes to dump the registers whenever handle_request()
 * of the target program is called (the kernel's sample probes kernel_clone()). The
 * pre-handler and post-handler print the probe address and registers; the fault-handler
 * (from the sample's 2.6 version) reports a fault the pre-handler takes when it reads
 * the request name through a NULL pointer, and the program goes on.
 *
 *	kprewrite rewrite --handlers kprobe_example.c -o target.kp target && ./target.kp
 */
#define pr_fmt(fmt) "%s: " fmt, __func__

#include <kprewrite.h>

/* For each probe you need to allocate a kprobe structure; kprewrite needs its site at
 * rewrite time, so it is declared with DEFINE_KPROBE (see below). */

/* kprobe pre_handler: called just before the probed instruction is executed */
static int __kprobes handler_pre(struct kprobe *p, struct pt_regs *regs)
{
	pr_info("<%s> p->addr = 0x%p, ip = %lx, flags = 0x%lx\n",
		p->symbol_name, p->addr, regs->ip, regs->flags);
	pr_info("<%s> id (di) = %ld, name (si) = 0x%lx, sp = 0x%lx\n",
		p->symbol_name, (long)regs->di, regs->si, regs->sp);
	/* the first letter of the name: a NULL name makes this fault */
	pr_info("<%s> name starts with '%c'\n", p->symbol_name, *(const char *)regs->si);
	/* A dump_stack() here will give a stack backtrace */
	return 0;
}

/* kprobe post_handler: called after the probed instruction is executed */
static void __kprobes handler_post(struct kprobe *p, struct pt_regs *regs,
				unsigned long flags)
{
	pr_info("<%s> p->addr = 0x%p, flags = 0x%lx, ax = 0x%lx\n",
		p->symbol_name, p->addr, regs->flags, regs->ax);
}

/*
 * fault_handler: this is called if an exception is generated for any
 * instruction within the pre- or post-handler.
 */
static int handler_fault(struct kprobe *p, struct pt_regs *regs, int trapnr)
{
	pr_info("p->addr = 0x%p, trap #%d, at ip 0x%lx\n", p->addr, trapnr, regs->ip);
	/* Return 0 because we don't handle the fault. */
	return 0;
}
NOKPROBE_SYMBOL(handler_fault);

DEFINE_KPROBE(kp, "handle_request",
	      .pre_handler = handler_pre,
	      .post_handler = handler_post,
	      .fault_handler = handler_fault);

static int __init kprobe_init(void)
{
	int ret;

	ret = register_kprobe(&kp);
	if (ret < 0) {
		pr_err("register_kprobe failed, returned %d\n", ret);
		return ret;
	}
	pr_info("Planted kprobe at %p\n", kp.addr);
	return 0;
}

static void __exit kprobe_exit(void)
{
	unregister_kprobe(&kp);
	pr_info("kprobe at %p unregistered (%lu hits missed)\n", kp.addr, kp.nmissed);
}

module_init(kprobe_init)
module_exit(kprobe_exit)
MODULE_LICENSE("GPL");
