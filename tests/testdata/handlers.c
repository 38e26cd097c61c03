/*
 * handlers.c - C handlers for testdata/handled.c (handlers_test.go): a kprobe with pre,
 * post and fault handlers on add2, a pre-only kprobe on sub2 (jump-optimizable), and a
 * kretprobe with entry data on the recursive sum. What they do depends on the program's
 * hmode; what they see goes to its hseen and to stderr.
 */
#include <kprewrite.h>

extern int hmode;
extern long hseen[8];
long add2(long a, long b);
long alt(long a, long b);
KPREWRITE_PROGRAM_SYMBOL(hmode);
KPREWRITE_PROGRAM_SYMBOL(hseen);
KPREWRITE_PROGRAM_SYMBOL(add2);
KPREWRITE_PROGRAM_SYMBOL(alt);

enum mode { OBSERVE, CHANGE, REDIRECT, REENTER, DISABLE, ENABLE, INJECT, FAULT };

static int add_pre, add_post, sub_pre, add_faults, bad;
static long *volatile bad_ptr = (long *)8;
extern struct kprobe kp_add;

static int pre_add(struct kprobe *p, struct pt_regs *regs)
{
	add_pre++;
	hseen[0] = (long)regs->di * 1000 + (long)regs->si;
	if (regs->ip != (unsigned long)p->addr + 1 || (unsigned long)p->addr != (unsigned long)add2)
		bad++;
	if (hmode == CHANGE)
		regs->si = 100;
	if (hmode == FAULT)
		hseen[1] = *bad_ptr; /* faults: fault_add, then the runtime reports it */
	return 0;
}

static void post_add(struct kprobe *p, struct pt_regs *regs, unsigned long flags)
{
	(void)flags;
	add_post++;
	hseen[1] = (long)regs->ax; /* after mov %rdi,%rax */
	if (regs->ip != (unsigned long)p->addr + 3)
		bad++;
}

static int fault_add(struct kprobe *p, struct pt_regs *regs, int trapnr)
{
	(void)regs;
	add_faults++;
	pr_info("fault_add: %s trap %d\n", p->symbol_name, trapnr);
	return 0;
}

static int pre_sub(struct kprobe *p, struct pt_regs *regs)
{
	sub_pre++;
	hseen[2] = (long)regs->di * 1000 + (long)regs->si;
	if (regs->ip != (unsigned long)p->addr + 1)
		bad++;
	switch (hmode) {
	case CHANGE:
		regs->si = 100;
		break;
	case REDIRECT:
		regs->ip = (unsigned long)alt;
		return 1;
	case REENTER:
		hseen[2] = add2(20, 22); /* a probed function called by a handler: missed */
		break;
	case DISABLE:
		hseen[2] = disable_kprobe(&kp_add);
		break;
	case ENABLE:
		hseen[2] = enable_kprobe(&kp_add);
		break;
	}
	if (sub_pre == 1)
		trace_printk("sub2(%ld, %ld) from %s\n", (long)regs->di, (long)regs->si, current->comm);
	return 0;
}

DEFINE_KPROBE(kp_add, "add2", .pre_handler = pre_add, .post_handler = post_add, .fault_handler = fault_add);
DEFINE_KPROBE(kp_sub, "sub2", .pre_handler = pre_sub);

struct frame {
	long n;
	unsigned long magic;
};
static int entries, returns, data_bad;

static int entry_sum(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct frame *f = (struct frame *)ri->data;
	entries++;
	if (f->n || f->magic)
		data_bad++;
	f->n = (long)regs->di;
	f->magic = 0xfeed0000ul + regs->di;
	return 0;
}

static int ret_sum(struct kretprobe_instance *ri, struct pt_regs *regs)
{
	struct frame *f = (struct frame *)ri->data;
	returns++;
	if (f->magic != 0xfeed0000ul + (unsigned long)f->n)
		data_bad++;
	if (hmode != INJECT && (long)regs_return_value(regs) != f->n * (f->n + 1) / 2)
		data_bad++;
	if (hmode == INJECT)
		regs_set_return_value(regs, 1000 + f->n);
	return 0;
}

DEFINE_KRETPROBE(rp_sum, "sum", .handler = ret_sum, .entry_handler = entry_sum, .maxactive = 4,
		 .data_size = sizeof(struct frame));

void kprewrite_exit(void)
{
	pr_info("exit: add_pre=%d add_post=%d sub_pre=%d add_faults=%d bad=%d add_nmissed=%lu\n", add_pre, add_post,
		sub_pre, add_faults, bad, kp_add.nmissed);
	pr_info("exit: entries=%d returns=%d data_bad=%d rp_nmissed=%d maxactive=%d flags=%u,%u\n", entries, returns,
		data_bad, rp_sum.nmissed, rp_sum.maxactive, kp_add.flags, kp_sub.flags);
}
