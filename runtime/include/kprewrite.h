/*
 * kprewrite.h - the kernel's kprobes vocabulary for handlers written in C and linked into
 * user-space programs by `kprewrite rewrite --handlers FILE.c`.
 *
 * `kprewrite include` prints this header (`kprewrite include -o DIR` writes DIR/kprewrite.h);
 * the tool also carries it and puts it on the include path when it compiles handlers.
 *
 * Handlers are compiled as freestanding position-independent code, with the runtime's rules:
 * gcc -std=gnu11 -O2 -ffreestanding -fno-builtin -nostdinc -fPIC -fvisibility=hidden
 * -mgeneral-regs-only -mno-red-zone -fno-stack-protector -fcf-protection=none -fno-common
 * -fno-asynchronous-unwind-tables -fno-jump-tables -Werror=implicit-function-declaration.
 * So: no libc (only this header, and the compiler's own freestanding headers such as
 * <stdint.h> and <stdarg.h>), no floating point or vector registers, no thread-local
 * variables, no constructors. Handlers run in a signal handler (int3 probes) or on the
 * probed thread's stack below its red zone (jump-optimized probes and return probes):
 * keep their stack use small (gcc's -fstack-usage is reported; over 1 KiB is a warning).
 *
 * Declaring probes. The rewriter patches every probe site at rewrite time, so a probe is
 * declared statically, with the site written as in a kprobe event: SYMBOL, SYMBOL+OFFSET
 * or 0xADDR (a virtual address of the binary):
 *
 *	static int handler_pre(struct kprobe *p, struct pt_regs *regs) { ...; return 0; }
 *	DEFINE_KPROBE(kp, "do_work", .pre_handler = handler_pre, .post_handler = handler_post);
 *	DEFINE_KRETPROBE(rp, "do_work", .handler = ret_handler, .maxactive = 20);
 *
 * Each defines a global struct kprobe / struct kretprobe named by its first argument
 * (so it must not be static, and names are unique across the handler files) and records
 * "kind name site" in a non-loaded section (.kprewrite.decl) that the rewriter reads. The
 * rewriter reads the static initializer too: a .post_handler there makes the site a
 * single-stepped one (a post handler needs the probed instruction to trap afterwards, as
 * in the kernel: such probes are never jump-optimized), .maxactive and .data_size size
 * the kretprobe instances, .offset is added to the site, and .flags = KPROBE_FLAG_DISABLED
 * registers it disabled. symbol_name holds the site as written.
 *
 * Registration. Without a kprewrite_init() function, every declared probe is registered
 * when the program starts (the declarative way). With one - `int kprewrite_init(void)`, or
 * module_init(fn) - nothing is registered until it calls register_kprobe() and friends;
 * it runs once at start-up, before the program's own code and before libc is initialised.
 * A non-zero return value unregisters every probe (reported on stderr) and the program
 * runs without them. register_*() of a struct that was not declared fails with -ENOENT;
 * probes may be unregistered, re-registered, disabled and enabled at any time from any
 * handler or from kprewrite_init(). `void kprewrite_exit(void)` (or module_exit(fn)), if
 * defined, runs when the program calls exit() or returns from main (glibc: the runtime
 * registers it through the atexit function the process entry hands to libc; musl and
 * _exit() do not run it), in the process that started.
 *
 * Handler powers (as in the kernel):
 *   - a pre_handler sees ip = probe address + 1 (as after the int3); it may change any
 *     general register and the arithmetic flags; to redirect execution it sets regs->ip
 *     (and whatever else, e.g. override_function_with_return()) and returns non-zero:
 *     execution resumes there, the probed instruction and the post_handler are skipped;
 *   - a post_handler runs after the probed instruction (ip = the next instruction);
 *   - a kretprobe's entry_handler runs at function entry (non-zero: skip this instance),
 *     its handler at the return with regs->ax the return value, which it may change
 *     (fault injection: regs_set_return_value()), and ri->data is the instance's private
 *     data (data_size bytes, zeroed at entry) carried from entry to return;
 *   - a probe hit while this thread runs any handler is not run: kp->nmissed counts it
 *     (for a kretprobe, rp->kp.nmissed; rp->nmissed counts entries that found no free
 *     instance, i.e. maxactive too low);
 *   - a fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL) in a handler calls the probe's
 *     fault_handler(p, regs, trapnr) with the registers at the fault; if it returns
 *     non-zero the fault was handled and execution resumes at regs as it left them;
 *     otherwise the handler is abandoned (it returns 0 for the runtime), the fault is
 *     reported on stderr, and the program goes on. (If the program installs its own
 *     handler for one of those signals, a handler fault reaches that one instead.)
 *
 * Helpers: printk/pr_info/pr_err... write to stderr (one write(2) per call, like the
 * kernel's console), trace_printk() writes a line into the trace file that
 * `kprewrite trace` prints, ktime_get_ns() and friends (CLOCK_MONOTONIC), current->pid
 * (the thread id, as in the kernel), current->tgid, current->comm, smp_processor_id(),
 * copy_from_user_nofault() and strncpy_from_user_nofault() that never fault, snprintf,
 * and the string functions below. To call a function of the probed program (or read its
 * variables), declare it and name it with KPREWRITE_PROGRAM_SYMBOL(name): the rewriter
 * resolves it in the binary (any other undefined name is an error: handlers cannot call
 * libc).
 */
#ifndef KPREWRITE_H
#define KPREWRITE_H

#define KPREWRITE_H_VERSION 1

/* ---- types ---- */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char s8;
typedef short s16;
typedef int s32;
typedef long long s64;
typedef __SIZE_TYPE__ size_t;
typedef long ssize_t;
typedef int pid_t;
typedef s64 ktime_t;
typedef unsigned char kprobe_opcode_t;

#ifndef NULL
#define NULL ((void *)0)
#endif

/* ---- error numbers (negative returns, as in the kernel) ---- */
#ifndef ENOENT
#define EPERM 1
#define ENOENT 2
#define ESRCH 3
#define EINTR 4
#define EIO 5
#define E2BIG 7
#define EAGAIN 11
#define ENOMEM 12
#define EFAULT 14
#define EBUSY 16
#define EEXIST 17
#define EINVAL 22
#define ENOSPC 28
#define ERANGE 34
#define ENOSYS 38
#endif

/* ---- struct pt_regs: the kernel's x86-64 layout ---- */
#ifndef KPRW_PT_REGS_DEFINED
#define KPRW_PT_REGS_DEFINED
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax;
	unsigned long ip, cs, flags, sp, ss;
};
#endif

static inline unsigned long regs_return_value(struct pt_regs *regs) { return regs->ax; }
static inline void regs_set_return_value(struct pt_regs *regs, unsigned long rc) { regs->ax = rc; }
static inline unsigned long instruction_pointer(struct pt_regs *regs) { return regs->ip; }
static inline void instruction_pointer_set(struct pt_regs *regs, unsigned long val) { regs->ip = val; }
static inline unsigned long kernel_stack_pointer(struct pt_regs *regs) { return regs->sp; }
static inline unsigned long user_stack_pointer(struct pt_regs *regs) { return regs->sp; }

/* regs_get_kernel_argument returns argument n (0-based) of a function probed at its entry:
 * di si dx cx r8 r9, then the stack above the return address. */
static inline unsigned long regs_get_kernel_argument(struct pt_regs *regs, unsigned int n)
{
	switch (n) {
	case 0: return regs->di;
	case 1: return regs->si;
	case 2: return regs->dx;
	case 3: return regs->cx;
	case 4: return regs->r8;
	case 5: return regs->r9;
	}
	return ((unsigned long *)regs->sp)[n - 5];
}

/* override_function_with_return makes a pre handler at a function's entry return from the
 * function at once (set the return value first; the handler must then return 1). */
static inline void override_function_with_return(struct pt_regs *regs)
{
	regs->ip = *(unsigned long *)regs->sp;
	regs->sp += 8;
}

/* ---- struct kprobe, struct kretprobe ---- */
struct kprobe;
struct kretprobe;
struct kretprobe_instance;

typedef int (*kprobe_pre_handler_t)(struct kprobe *, struct pt_regs *);
typedef void (*kprobe_post_handler_t)(struct kprobe *, struct pt_regs *, unsigned long flags);
typedef int (*kprobe_fault_handler_t)(struct kprobe *, struct pt_regs *, int trapnr);
typedef int (*kprobe_break_handler_t)(struct kprobe *, struct pt_regs *);
typedef int (*kretprobe_handler_t)(struct kretprobe_instance *, struct pt_regs *);

/* kprobe.flags */
#define KPROBE_FLAG_GONE 1      /* not used in user space */
#define KPROBE_FLAG_DISABLED 2  /* registered disabled / disabled by disable_kprobe() */
#define KPROBE_FLAG_OPTIMIZED 4 /* set by register_kprobe() on a jump-optimized site */
#define KPROBE_FLAG_FTRACE 8    /* not used in user space */
#define KPRW_KPROBE_JPROBE 0x10000 /* (kprewrite's) a jprobe's kprobe: `kprewrite list` says j */

struct kprobe {
	const char *symbol_name;     /* the declared site: SYMBOL, SYMBOL+OFFSET or 0xADDR; a
	                                struct no DEFINE_KPROBE declares: the function */
	unsigned int offset;         /* added to the site at rewrite time; or at run time, to
	                                the function of an undeclared struct's symbol_name */
	unsigned int flags;          /* KPROBE_FLAG_* */
	kprobe_opcode_t *addr;       /* set by register_kprobe(): the probed instruction; an
	                                undeclared struct without symbol_name may give it */
	kprobe_pre_handler_t pre_handler;
	kprobe_post_handler_t post_handler;
	kprobe_fault_handler_t fault_handler;
	kprobe_break_handler_t break_handler; /* (2.6) a hit of this probe while its own handler
	                                runs on the thread: non-zero, the hit is taken (not
	                                counted in nmissed); its instruction runs either way */
	unsigned long nmissed;       /* hits not run because a handler was running */
	unsigned long kprw_private[2];
};

struct kretprobe {
	struct kprobe kp;
	kretprobe_handler_t handler;       /* at the function's return */
	kretprobe_handler_t entry_handler; /* at its entry; non-zero: skip this instance */
	int maxactive;                     /* instances (<= 0: max(10, 2 * CPUs)); fixed at rewrite time */
	int nmissed;                       /* entries that found no free instance */
	size_t data_size;                  /* bytes of ri->data; fixed at rewrite time */
	unsigned long kprw_private[2];
};

struct task_struct;
#ifndef KPRW_RI_DEFINED
#define KPRW_RI_DEFINED
struct kretprobe_instance {
	struct kretprobe *rp;      /* the kretprobe */
	kprobe_opcode_t *ret_addr; /* the real return address */
	unsigned long entry_sp;    /* where the return address is (sp at function entry) */
	unsigned int tid;          /* thread that entered */
	unsigned int reserved0;
	struct task_struct *task;  /* the thread running the handler (the kernel's ri->task;
	                              set before each handler, valid until it returns) */
	unsigned long reserved1;
	char data[];               /* data_size bytes, 16-byte aligned, zeroed at entry */
};
#endif

static inline struct kretprobe *get_kretprobe(struct kretprobe_instance *ri) { return ri->rp; }
static inline unsigned long get_kretprobe_retaddr(struct kretprobe_instance *ri)
{
	return (unsigned long)ri->ret_addr;
}

/* ---- declarations (see the top of this file) ---- */
#define KPRW_STR_(x) #x
#define KPRW_STR(x) KPRW_STR_(x)
/* one NUL-terminated line "KIND\tNAME\tSITE\tFILE\tLINE" in the non-loaded .kprewrite.decl */
#define KPREWRITE_DECL_(kind, name, site)                                                   \
	__asm__(".pushsection .kprewrite.decl,\"\",@progbits\n\t.asciz \"" kind "\\t" #name \
		"\\t" site "\\t" __FILE__ "\\t" KPRW_STR(__LINE__) "\"\n\t.popsection")

#define DEFINE_KPROBE(name, site, ...)          \
	KPREWRITE_DECL_("kprobe", name, site); \
	struct kprobe name = {.symbol_name = site, __VA_ARGS__}

#define DEFINE_KRETPROBE(name, site, ...)         \
	KPREWRITE_DECL_("kretprobe", name, site); \
	struct kretprobe name = {.kp.symbol_name = site, __VA_ARGS__}

/* KPREWRITE_PROGRAM_SYMBOL(name) lets handlers use a function or variable of the probed
 * program: declare it as usual first, then name it here (which also makes references to
 * it direct, PC-relative: the program is in the same image). It runs in the handler's
 * context: a function of the program that takes locks, allocates or uses vector
 * registers is not safe there. */
#define KPREWRITE_PROGRAM_SYMBOL(name)         \
	KPREWRITE_DECL_("extern", name, ""); \
	extern __typeof__(name) name __attribute__((visibility("hidden")))

/* The runtime's functions are linked into the same image: direct calls, no GOT. */
#pragma GCC visibility push(hidden)

/* ---- registration (return 0 or a negative errno) ---- */
int kprewrite_register_kprobe(struct kprobe *p);
void kprewrite_unregister_kprobe(struct kprobe *p);
int kprewrite_register_kretprobe(struct kretprobe *rp);
void kprewrite_unregister_kretprobe(struct kretprobe *rp);
int kprewrite_enable_kprobe(struct kprobe *p);
int kprewrite_disable_kprobe(struct kprobe *p);

static inline int register_kprobe(struct kprobe *p) { return kprewrite_register_kprobe(p); }
static inline void unregister_kprobe(struct kprobe *p) { kprewrite_unregister_kprobe(p); }
static inline int register_kretprobe(struct kretprobe *rp) { return kprewrite_register_kretprobe(rp); }
static inline void unregister_kretprobe(struct kretprobe *rp) { kprewrite_unregister_kretprobe(rp); }
static inline int enable_kprobe(struct kprobe *p) { return kprewrite_enable_kprobe(p); }
static inline int disable_kprobe(struct kprobe *p) { return kprewrite_disable_kprobe(p); }
static inline int enable_kretprobe(struct kretprobe *rp) { return kprewrite_enable_kprobe(&rp->kp); }
static inline int disable_kretprobe(struct kretprobe *rp) { return kprewrite_disable_kprobe(&rp->kp); }

/* register_kprobes registers each probe of the array; if one fails, the ones before it
 * are unregistered and its error is returned (the kernel's roll-back). */
static inline int register_kprobes(struct kprobe **kps, int num)
{
	if (num <= 0)
		return -EINVAL;
	for (int i = 0; i < num; i++) {
		int ret = register_kprobe(kps[i]);
		if (ret < 0) {
			while (--i >= 0)
				unregister_kprobe(kps[i]);
			return ret;
		}
	}
	return 0;
}

static inline void unregister_kprobes(struct kprobe **kps, int num)
{
	for (int i = 0; i < num; i++)
		unregister_kprobe(kps[i]);
}

static inline int register_kretprobes(struct kretprobe **rps, int num)
{
	if (num <= 0)
		return -EINVAL;
	for (int i = 0; i < num; i++) {
		int ret = register_kretprobe(rps[i]);
		if (ret < 0) {
			while (--i >= 0)
				unregister_kretprobe(rps[i]);
			return ret;
		}
	}
	return 0;
}

static inline void unregister_kretprobes(struct kretprobe **rps, int num)
{
	for (int i = 0; i < num; i++)
		unregister_kretprobe(rps[i]);
}

/* ---- jprobes (the 2.6 API) ----
 * A jprobe's entry has the probed function's signature and sees its arguments; it ends
 * with jprobe_return(). Here the runtime calls the entry at each hit, as a C handler,
 * with the six integer argument registers (rdi, rsi, rdx, rcx, r8, r9): arguments passed
 * on the stack or in vector registers are not seen. jprobe_return() returns to the
 * probe, which goes on with the function (the kernel's int3 and break_handler dance is
 * not needed: the entry runs on its own frame, not the probed function's). A jprobe's
 * kprobe carries KPRW_KPROBE_JPROBE (`kprewrite list` says j). jp->kp.symbol_name names
 * a function declared with DEFINE_JPROBE, or prepared (rewrite --prepare FUNC). */
struct jprobe {
	struct kprobe kp;
	void *entry; /* the probed function's signature */
};
#define JPROBE_ENTRY(fn) ((void *)(fn))
#define DEFINE_JPROBE(name, site, fn)          \
	KPREWRITE_DECL_("jprobe", name, site); \
	struct jprobe name = {.kp = {.symbol_name = site, .flags = KPRW_KPROBE_JPROBE}, .entry = JPROBE_ENTRY(fn)}

static inline void jprobe_return(void) {}

static inline int register_jprobe(struct jprobe *jp)
{
	jp->kp.flags |= KPRW_KPROBE_JPROBE;
	return register_kprobe(&jp->kp);
}

static inline void unregister_jprobe(struct jprobe *jp) { unregister_kprobe(&jp->kp); }

/* ---- start-up and exit ---- */
int kprewrite_init(void);
void kprewrite_exit(void);
#define module_init(fn) \
	int kprewrite_init(void) { return fn(); }
#define module_exit(fn) \
	void kprewrite_exit(void) { fn(); }
#define MODULE_LICENSE(x) extern int kprewrite_module_info_unused_
#define MODULE_PARM_DESC(p, d) extern int kprewrite_module_info_unused_
#define module_param_string(name, s, len, perm) extern int kprewrite_module_info_unused_
#define module_param(name, type, perm) extern int kprewrite_module_info_unused_
#ifndef NAME_MAX
#define NAME_MAX 255
#endif
#define S_IRUGO 0444
#define MODULE_AUTHOR(x) extern int kprewrite_module_info_unused_
#define MODULE_DESCRIPTION(x) extern int kprewrite_module_info_unused_
#define __init
#define __exit
#define __kprobes
#define __user
#define NOKPROBE_SYMBOL(fn) extern int kprewrite_module_info_unused_

/* ---- printing ---- */
#define KERN_SOH "\001"
#define KERN_EMERG KERN_SOH "0"
#define KERN_ALERT KERN_SOH "1"
#define KERN_CRIT KERN_SOH "2"
#define KERN_ERR KERN_SOH "3"
#define KERN_WARNING KERN_SOH "4"
#define KERN_NOTICE KERN_SOH "5"
#define KERN_INFO KERN_SOH "6"
#define KERN_DEBUG KERN_SOH "7"
#define KERN_CONT KERN_SOH "c"

/* kprewrite_printk formats into a 512-byte line (longer output is cut) and writes it to
 * stderr with one write(2); a leading KERN_* level is dropped. Returns the bytes written. */
int kprewrite_printk(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* kprewrite_trace_printk appends a text record to the trace file (as trace_printk()
 * writes to the ftrace buffer): `kprewrite trace` prints it as "FUNC: text". */
int kprewrite_trace_printk(const char *func, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kprewrite_vsnprintf(char *buf, size_t size, const char *fmt, __builtin_va_list ap);
int kprewrite_snprintf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* kprewrite_write is write(2) (returns bytes written or a negative errno). */
long kprewrite_write(int fd, const void *buf, size_t n);

#define printk(fmt, ...) kprewrite_printk(fmt, ##__VA_ARGS__)
#ifndef pr_fmt
#define pr_fmt(fmt) fmt
#endif
#define pr_emerg(fmt, ...) printk(KERN_EMERG pr_fmt(fmt), ##__VA_ARGS__)
#define pr_alert(fmt, ...) printk(KERN_ALERT pr_fmt(fmt), ##__VA_ARGS__)
#define pr_crit(fmt, ...) printk(KERN_CRIT pr_fmt(fmt), ##__VA_ARGS__)
#define pr_err(fmt, ...) printk(KERN_ERR pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warn(fmt, ...) printk(KERN_WARNING pr_fmt(fmt), ##__VA_ARGS__)
#define pr_warning pr_warn
#define pr_notice(fmt, ...) printk(KERN_NOTICE pr_fmt(fmt), ##__VA_ARGS__)
#define pr_info(fmt, ...) printk(KERN_INFO pr_fmt(fmt), ##__VA_ARGS__)
#define pr_cont(fmt, ...) printk(KERN_CONT fmt, ##__VA_ARGS__)
#ifdef DEBUG
#define pr_debug(fmt, ...) printk(KERN_DEBUG pr_fmt(fmt), ##__VA_ARGS__)
#else
#define pr_debug(fmt, ...) ((void)0)
#endif
#define trace_printk(fmt, ...) kprewrite_trace_printk(__func__, fmt, ##__VA_ARGS__)
#define snprintf kprewrite_snprintf
#define vsnprintf kprewrite_vsnprintf
#define scnprintf(buf, size, fmt, ...) kprewrite_scnprintf_(buf, size, kprewrite_snprintf(buf, size, fmt, ##__VA_ARGS__))
static inline int kprewrite_scnprintf_(char *buf, size_t size, int n)
{
	(void)buf;
	if (size == 0)
		return 0;
	return (size_t)n < size ? n : (int)(size - 1);
}

/* ---- time, thread, CPU ---- */
u64 kprewrite_ktime_get_ns(void);      /* CLOCK_MONOTONIC, ns (no system call when the TSC allows) */
u64 kprewrite_ktime_get_real_ns(void); /* CLOCK_REALTIME, ns */
static inline ktime_t ktime_get(void) { return (ktime_t)kprewrite_ktime_get_ns(); }
static inline u64 ktime_get_ns(void) { return kprewrite_ktime_get_ns(); }
static inline u64 ktime_get_real_ns(void) { return kprewrite_ktime_get_real_ns(); }
static inline u64 local_clock(void) { return kprewrite_ktime_get_ns(); }
static inline ktime_t ktime_sub(ktime_t a, ktime_t b) { return a - b; }
static inline ktime_t ktime_add(ktime_t a, ktime_t b) { return a + b; }
static inline s64 ktime_to_ns(ktime_t kt) { return kt; }
static inline s64 ktime_to_us(ktime_t kt) { return kt / 1000; }
static inline s64 ktime_to_ms(ktime_t kt) { return kt / 1000000; }

#define TASK_COMM_LEN 16
struct task_struct {
	pid_t pid;                 /* the thread id (gettid), as the kernel's task pid */
	pid_t tgid;                /* the process id (getpid) */
	char comm[TASK_COMM_LEN];  /* the thread's name */
	void *mm;                  /* never NULL: every thread here is a user task */
};
/* kprewrite_current describes the calling thread; the pointer is valid until the handler
 * returns. */
struct task_struct *kprewrite_current(void);
#define current (kprewrite_current())
static inline struct task_struct *get_current(void) { return kprewrite_current(); }
static inline pid_t task_pid_nr(struct task_struct *t) { return t->pid; }
static inline pid_t task_tgid_nr(struct task_struct *t) { return t->tgid; }

/* dump_stack(): the user stack at the hit, written into the trace file as a stack record
 * (`kprewrite trace` prints it as the kernel's tracer prints a stacktrace) */
void kprewrite_dump_stack(void);
#define dump_stack() kprewrite_dump_stack()

unsigned int kprewrite_smp_processor_id(void);
#define smp_processor_id() kprewrite_smp_processor_id()
#define raw_smp_processor_id() kprewrite_smp_processor_id()

/* ---- memory reads that never fault (0 or -EFAULT) ----
 * A few nanoseconds when the runtime reads fast (a fault-catching copy: a bad address
 * costs a signal the runtime catches), else a process_vm_readv system call; either way
 * a bad pointer gives -EFAULT, never a crash (see "Fast reads" in the runtime's docs). */
long kprewrite_copy_nofault(void *dst, const void *src, size_t size);
/* kprewrite_strncpy_nofault copies a NUL-terminated string of at most count bytes
 * (including the NUL, which it always writes when count > 0) and returns its length
 * including the NUL, or -EFAULT. */
long kprewrite_strncpy_nofault(char *dst, const void *src, long count);
static inline long copy_from_user_nofault(void *dst, const void *src, size_t size)
{
	return kprewrite_copy_nofault(dst, src, size);
}
static inline long copy_from_kernel_nofault(void *dst, const void *src, size_t size)
{
	return kprewrite_copy_nofault(dst, src, size);
}
static inline long probe_kernel_read(void *dst, const void *src, size_t size)
{
	return kprewrite_copy_nofault(dst, src, size);
}
static inline long strncpy_from_user_nofault(char *dst, const void *src, long count)
{
	return kprewrite_strncpy_nofault(dst, src, count);
}
static inline long strncpy_from_kernel_nofault(char *dst, const void *src, long count)
{
	return kprewrite_strncpy_nofault(dst, src, count);
}

#pragma GCC visibility pop

/* ---- strings and memory (linked with the handlers; gcc may also call the mem* ones) ---- */
#ifndef KPREWRITE_NO_STRING_DECLS
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
size_t strnlen(const char *s, size_t max);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, size_t n);
char *strchr(const char *s, int c);
ssize_t strscpy(char *dst, const char *src, size_t size);
#endif

#define READ_ONCE(x) (*(const volatile __typeof__(x) *)&(x))
#define WRITE_ONCE(x, v) (*(volatile __typeof__(x) *)&(x) = (v))

/* ---- atomics (what histograms and counters need) ---- */
#ifndef KPRW_RUNTIME_INTERNAL /* the runtime has its own atomic_add() and friends */
typedef struct { int counter; } atomic_t;
typedef struct { s64 counter; } atomic64_t;
#define ATOMIC_INIT(i) { (i) }
#define ATOMIC64_INIT(i) { (i) }
static inline int atomic_read(const atomic_t *v) { return __atomic_load_n(&v->counter, __ATOMIC_RELAXED); }
static inline void atomic_set(atomic_t *v, int i) { __atomic_store_n(&v->counter, i, __ATOMIC_RELAXED); }
static inline int atomic_add_return(int i, atomic_t *v) { return __atomic_add_fetch(&v->counter, i, __ATOMIC_SEQ_CST); }
static inline void atomic_add(int i, atomic_t *v) { __atomic_add_fetch(&v->counter, i, __ATOMIC_RELAXED); }
static inline void atomic_inc(atomic_t *v) { atomic_add(1, v); }
static inline void atomic_dec(atomic_t *v) { atomic_add(-1, v); }
static inline int atomic_inc_return(atomic_t *v) { return atomic_add_return(1, v); }
static inline s64 atomic64_read(const atomic64_t *v) { return __atomic_load_n(&v->counter, __ATOMIC_RELAXED); }
static inline void atomic64_set(atomic64_t *v, s64 i) { __atomic_store_n(&v->counter, i, __ATOMIC_RELAXED); }
static inline s64 atomic64_add_return(s64 i, atomic64_t *v) { return __atomic_add_fetch(&v->counter, i, __ATOMIC_SEQ_CST); }
static inline void atomic64_add(s64 i, atomic64_t *v) { __atomic_add_fetch(&v->counter, i, __ATOMIC_RELAXED); }
static inline void atomic64_inc(atomic64_t *v) { atomic64_add(1, v); }

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif /* !KPRW_RUNTIME_INTERNAL */

#endif /* KPREWRITE_H */
