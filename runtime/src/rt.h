/* rt.h - internal declarations of the kprewrite runtime (freestanding: no libc). */
#ifndef KPRW_RT_H
#define KPRW_RT_H

#include "kprewrite_abi.h"

/* Everything here is hidden: references are PC-relative, never through a GOT. */
#pragma GCC visibility push(hidden)

typedef kprw_u8 u8;
typedef kprw_u16 u16;
typedef kprw_u32 u32;
typedef kprw_u64 u64;
typedef long long s64;
typedef unsigned long uptr;

#define NULL ((void *)0)
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- raw system calls ---- */
#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_fstat 5
#define SYS_mmap 9
#define SYS_mprotect 10
#define SYS_munmap 11
#define SYS_rt_sigaction 13
#define SYS_rt_sigprocmask 14
#define SYS_rt_sigreturn 15
#define SYS_sched_yield 24
#define SYS_madvise 28
#define SYS_getpid 39
#define SYS_exit_group 231
#define SYS_flock 73
#define SYS_ftruncate 77
#define SYS_prctl 157
#define SYS_gettid 186
#define SYS_clock_gettime 228
#define SYS_tgkill 234
#define SYS_sched_getaffinity 204
#define SYS_process_vm_readv 310
#define SYS_openat 257

static inline long sys0(long n)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", "memory");
	return r;
}
static inline long sys1(long n, long a)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory");
	return r;
}
static inline long sys2(long n, long a, long b)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b) : "rcx", "r11", "memory");
	return r;
}
static inline long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}
static inline long sys4(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
}
static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}

/* ---- kernel ABI structures (x86-64) ---- */
#define SIGTRAP 5
#define SIGABRT 6
#define SIG_DFL 0ul
#define SIG_IGN 1ul
#define SA_SIGINFO 0x4ul
#define SA_ONSTACK 0x08000000ul
#define SA_RESTORER 0x04000000ul
#define SA_NODEFER 0x40000000ul
#define SA_RESTART 0x10000000ul
#define SIG_UNBLOCK 1
#define SI_KERNEL 0x80
#define TRAP_BRKPT 1
#define TRAP_TRACE 2
#define X86_TF 0x100ul

struct k_sigaction {
	unsigned long handler;
	unsigned long flags;
	unsigned long restorer;
	unsigned long mask;
};

struct k_siginfo {
	int si_signo;
	int si_errno;
	int si_code;
	int pad;
	unsigned long si_addr;
	char rest[128 - 24];
};

struct k_sigcontext {
	unsigned long r8, r9, r10, r11, r12, r13, r14, r15;
	unsigned long di, si, bp, bx, dx, ax, cx, sp, ip, flags;
	unsigned short cs, gs, fs, ss;
	unsigned long err, trapno, oldmask, cr2, fpstate;
	unsigned long reserved1[8];
};

struct k_ucontext {
	unsigned long uc_flags;
	void *uc_link;
	void *ss_sp;
	int ss_flags;
	int pad;
	unsigned long ss_size;
	struct k_sigcontext mc;
	unsigned long sigmask;
};

struct k_timespec {
	long sec, nsec;
};

struct k_iovec {
	void *base;
	unsigned long len;
};

struct k_stat {
	unsigned long st_dev, st_ino, st_nlink;
	unsigned int st_mode, st_uid, st_gid, pad0;
	unsigned long st_rdev;
	long st_size, st_blksize, st_blocks;
	unsigned long rest[9];
};

/* ---- atomics ---- */
#define atomic_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define atomic_load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define atomic_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define atomic_cas(p, o, n) \
	__atomic_compare_exchange_n((p), (o), (n), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* ---- runtime global state (rt_init.c) ---- */
struct kprw_rt {
	const struct kprw_header *hdr;
	u64 bias;
	const struct kprw_point *points;
	const struct kprw_probe *probes;
	const struct kprw_event *events;
	struct kprw_probe_state *state;
	u32 npoints, nprobes, nevents;
	u32 secure;        /* AT_SECURE */
	u32 disable_all;   /* KPREWRITE_DISABLE=all or KPRW_HF_DISABLE_ALL */
	u32 debug;
	u32 ncpus;
	int init_done;
	unsigned long old_trap_handler; /* SIGTRAP disposition before ours */
	/* counters: {hit, nmissed} of probe i at ctr_base + i*ctr_stride */
	u8 *ctr_base;
	u64 ctr_stride;
	/* trace file */
	struct kprw_trace_hdr *trace;
	u8 *trace_data;
	u64 trace_data_size;
	/* kretprobe instances */
	u64 *ri_keys;      /* ri_total keys: address of the replaced return address, 0 = free */
	u8 *ri_mem;        /* instance memory */
	u32 ri_total;
	u32 *ri_first;     /* per probe: first instance index (kretprobes) */
	u32 *ri_count;     /* per probe: instances */
	u32 *ri_stride;    /* per probe: bytes per instance */
	u64 *ri_off;       /* per probe: byte offset of its first instance in ri_mem */
	u32 *ri_elen;      /* per probe: fetch-program entry data bytes per instance */
};

extern struct kprw_rt kprw_rt;
extern struct kprw_stats kprewrite_rt_stats;
extern const volatile long long kprewrite_rt_hdr_rel;
extern void kprewrite_rt_rettramp(void);
extern void kprw_restorer(void);

#define RT_ADDR(vaddr) ((uptr)(kprw_rt.bias + (u64)(vaddr)))

/* ---- per-thread state (rt_thread.c) ---- */
#define KPRW_MAX_STEP 4
struct kprw_step {
	u32 point;
	u32 saved_tf;
};
struct kprw_thread {
	u32 tid; /* 0 = free */
	u32 pid;
	u32 busy;  /* handlers running: probes hit now are missed */
	u32 nstep; /* single-steps in flight (nested only through signal handlers) */
	struct kprw_step step[KPRW_MAX_STEP];
};
int kprw_thread_init(void);
u32 kprw_pid(void); /* cached getpid() */
struct kprw_thread *kprw_thread_find(u32 pid, u32 tid);
struct kprw_thread *kprw_thread_get(u32 pid, u32 tid);
void kprw_thread_put(struct kprw_thread *t);

/* ---- helpers (rt_util.c) ---- */
void kprw_memcpy(void *d, const void *s, unsigned long n);
void kprw_memset(void *d, int c, unsigned long n);
unsigned long kprw_strlen(const char *s);
int kprw_strcmp(const char *a, const char *b);
int kprw_strncmp(const char *a, const char *b, unsigned long n);
void kprw_puts(const char *s);          /* to stderr */
void kprw_put_hex(unsigned long v);
void kprw_put_dec(unsigned long v);
void kprw_fatal(const char *msg, unsigned long v) __attribute__((noreturn));
u32 kprw_getpid(void);
u32 kprw_gettid(void);
u64 kprw_now_ns(void);
u32 kprw_cpu(void);
long kprw_read_user(void *dst, uptr src, unsigned long n); /* fault-safe; bytes read or <0 */
void *kprw_mmap_anon(unsigned long size);

/* ---- probes (rt_trap.c, rt_kretprobe.c, rt_trace.c) ---- */
void kprw_sigtrap(int sig, struct k_siginfo *si, struct k_ucontext *uc);
int kprw_probe_enabled(u32 i);
void kprw_count_hit(u32 i);
void kprw_count_miss(u32 i);
void kprw_kretprobe_entry(u32 pi, struct pt_regs *regs);
int kprw_kretprobe_init(void);
void kprw_rethook(struct pt_regs *regs);
void kprw_trace_open(const char *path, u64 size);
void kprw_trace_hit(u32 pi, struct pt_regs *regs, u16 type, u64 ret_ip, const u8 *edata, u32 elen);

/* ---- fetch programs (rt_fetch.c) ---- */
u32 kprw_fetch_edata_size(const u8 *prog, u32 plen);
int kprw_fetch_entry(const u8 *prog, u32 plen, const struct pt_regs *regs, u8 *edata, u32 elen);
long kprw_fetch_run(const u8 *prog, u32 plen, const struct pt_regs *regs, const u8 *edata, u32 elen,
		    const char *comm, u8 *out, u32 cap);

#pragma GCC visibility pop
#endif
