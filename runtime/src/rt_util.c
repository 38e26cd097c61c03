/* rt_util.c - small freestanding helpers: memory, strings, stderr, time, ids. */
#include "rt.h"

void kprw_memcpy(void *d, const void *s, unsigned long n)
{
	u8 *dp = d;
	const u8 *sp = s;
	for (; n >= 8; n -= 8, dp += 8, sp += 8) {
		u64 v;
		__builtin_memcpy(&v, sp, 8); /* constant size: a mov, never a call */
		__builtin_memcpy(dp, &v, 8);
	}
	while (n--)
		*dp++ = *sp++;
}

void kprw_memset(void *d, int c, unsigned long n)
{
	u8 *dp = d;
	u64 v = 0x0101010101010101ull * (u8)c;
	/* -fno-tree-loop-distribute-patterns keeps gcc from turning these loops into memset() */
	for (; n >= 8; n -= 8, dp += 8)
		__builtin_memcpy(dp, &v, 8);
	while (n--)
		*dp++ = (u8)c;
}

unsigned long kprw_strlen(const char *s)
{
	unsigned long n = 0;
	while (s[n])
		n++;
	return n;
}

int kprw_strncmp(const char *a, const char *b, unsigned long n)
{
	for (; n; n--, a++, b++) {
		if (*a != *b)
			return (u8)*a - (u8)*b;
		if (!*a)
			return 0;
	}
	return 0;
}

int kprw_strcmp(const char *a, const char *b)
{
	return kprw_strncmp(a, b, ~0ul);
}

/* The program's stderr as the runtime found it at start-up (fd 2's device and inode):
 * diagnostics go to fd 2 only while it is still that file, never into a data file a
 * daemon opened as fd 2 after closing the one it was started with. */
static unsigned long err_dev, err_ino;
static int err_state; /* 0 not looked at yet, 1 recorded, 2 fd 2 was closed */

void kprw_stderr_init(void)
{
	struct k_stat st;
	if (err_state)
		return;
	err_state = 2;
	if (sys2(SYS_fstat, 2, (long)&st) == 0) {
		err_dev = st.st_dev;
		err_ino = st.st_ino;
		err_state = 1;
	}
}

int kprw_stderr_ok(void)
{
	struct k_stat st;
	kprw_stderr_init(); /* (before start-up: fd 2 as it is) */
	return err_state == 1 && sys2(SYS_fstat, 2, (long)&st) == 0 && st.st_dev == err_dev && st.st_ino == err_ino;
}

void kprw_puts(const char *s)
{
	if (kprw_stderr_ok())
		sys3(SYS_write, 2, (long)s, (long)kprw_strlen(s));
}

void kprw_put_hex(unsigned long v)
{
	char b[19];
	int i = 18;
	b[i] = 0;
	do {
		b[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v && i > 2);
	b[--i] = 'x';
	b[--i] = '0';
	kprw_puts(b + i);
}

char *kprw_dec(char buf[24], unsigned long v)
{
	int i = 23;
	buf[i] = 0;
	do {
		buf[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return buf + i;
}

void kprw_put_dec(unsigned long v)
{
	char b[24];
	kprw_puts(kprw_dec(b, v));
}

/* kprw_fatal reports a broken invariant and dies with SIGABRT (as abort() would). */
void kprw_fatal(const char *msg, unsigned long v)
{
	struct k_sigaction sa = {0};
	unsigned long set = 1ul << (SIGABRT - 1);
	kprw_puts("kprewrite: fatal: ");
	kprw_puts(msg);
	kprw_puts(" ");
	kprw_put_hex(v);
	kprw_puts("\n");
	sa.handler = SIG_DFL;
	sys4(SYS_rt_sigaction, SIGABRT, (long)&sa, 0, 8);
	sys4(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&set, 0, 8);
	sys3(SYS_tgkill, kprw_getpid(), kprw_gettid(), SIGABRT);
	sys1(SYS_exit_group, 134);
	__builtin_unreachable();
}

u32 kprw_getpid(void)
{
	return (u32)sys0(SYS_getpid);
}

u32 kprw_gettid(void)
{
	return (u32)sys0(SYS_gettid);
}

/* CLOCK_MONOTONIC through the raw system call (no vDSO: ~60-100 ns, and it cannot
 * fail in a half-initialised process). */
u64 kprw_now_ns(void)
{
	struct k_timespec ts = {0, 0};
	sys2(SYS_clock_gettime, 1, (long)&ts);
	return (u64)ts.sec * 1000000000ull + (u64)ts.nsec;
}

/* The CPU number the way the vDSO's getcpu finds it: rdpid reads TSC_AUX, which Linux
 * sets to node<<12 | cpu; without rdpid, the limit of the per-CPU GDT entry (selector
 * 0x7b) holds the same. lsl leaves 0 if the entry is missing. */
/* on_valgrind: valgrind's client request RUNNING_ON_VALGRIND (valgrind.h: the
 * "special instruction preamble", four rotations of %rdi by 128 bits in all, then
 * xchgq %rbx,%rbx; %rax points at the request, the answer comes back in %rdx). Natively
 * the sequence changes nothing and %rdx keeps its 0; valgrind's JIT recognises it and
 * answers 1 (or more when valgrind runs under valgrind). Valgrind implements neither
 * rdpid (which it may advertise in CPUID, passing the host's bit through) nor lsl: both
 * raise SIGILL there, so the CPU number comes from the getcpu system call (kprw_cpu);
 * nor the trap flag, and its int3 traps come with si_code TRAP_BRKPT (rt_trap.c). */
static int on_valgrind(void)
{
	volatile unsigned long req[6] = {0x1001 /* VG_USERREQ__RUNNING_ON_VALGRIND */, 0, 0, 0, 0, 0};
	unsigned long res = 0;
	__asm__ volatile("rolq $3, %%rdi\n\trolq $13, %%rdi\n\trolq $61, %%rdi\n\trolq $51, %%rdi\n\t"
			 "xchgq %%rbx, %%rbx"
			 : "+d"(res)
			 : "a"(req)
			 : "cc", "memory");
	return res != 0;
}

/* kprw_valgrind: on_valgrind, asked once (the answer cannot change) */
int kprw_valgrind(void)
{
	u32 v = __atomic_load_n(&kprw_rt.valgrind, __ATOMIC_RELAXED);
	if (likely(v))
		return (int)v - 1;
	v = 1 + (u32)on_valgrind();
	__atomic_store_n(&kprw_rt.valgrind, v, __ATOMIC_RELAXED);
	return (int)v - 1;
}

u32 kprw_cpu(void)
{
	unsigned long p = 0;
	if (likely(kprw_rt.has_rdpid)) /* TSC_AUX, the same node<<12 | cpu, in ~1 ns instead of ~18 */
		__asm__ volatile("rdpid %0" : "=r"(p));
	else if (unlikely(kprw_valgrind())) { /* neither instruction exists there */
		u32 c = 0;
		sys3(SYS_getcpu, (long)&c, 0, 0);
		p = c;
	} else
		__asm__ volatile("lsl %1, %0" : "+r"(p) : "r"(0x7bul) : "cc");
	return (u32)(p & 0xfff);
}

/* kprw_read_mode copies n bytes from src without ever faulting on a bad address:
 * bytes read (a partial count when a fault stops it part-way), or -EFAULT when nothing
 * could be read. fast: the fault-catching copy (src/nofault.S, a few nanoseconds; a
 * bad address costs a SIGSEGV/SIGBUS, ~2-3 us here, that kprw_copy_fixup turns into a
 * short count), which needs the runtime's fault handler installed and SIGSEGV/SIGBUS
 * unblocked in this thread (kprw_fast_ok); else process_vm_readv on our own pid
 * (~0.3-1 us: the kernel checks the same-process case without ptrace permission checks
 * beyond the trivially true ones). Addresses near NULL (below the default
 * vm.mmap_min_addr: NULL plus a field offset, the usual bad pointer, where the system
 * call costs less than a signal) and above the 47-bit user half (kernel addresses, the
 * vsyscall page, which the copy could read but copy_from_user refuses; 5-level paging's
 * high mappings) always take the system call. */
long kprw_read_mode(void *dst, uptr src, unsigned long n, int fast)
{
	if (n == 0)
		return 0;
	if (likely(fast) && src >= KPRW_FAST_LO && src + n >= src && src + n <= KPRW_FAST_HI) {
		unsigned long left = kprw_copy_nofault(dst, (const void *)src, n);
		return left == n ? -EFAULT : (long)(n - left);
	}
	struct k_iovec l = {dst, n}, r = {(void *)src, n};
	return sys6(SYS_process_vm_readv, kprw_getpid(), (long)&l, 1, (long)&r, 1, 0);
}

struct kprw_extable_entry {
	int insn, fixup; /* offsets from the fields themselves (src/nofault.S) */
};
extern const struct kprw_extable_entry kprw_extable[] __attribute__((visibility("hidden")));
extern const struct kprw_extable_entry kprw_extable_end[] __attribute__((visibility("hidden")));

/* kprw_copy_fixup resumes a fault of the fault-catching copy at its fixup (from the
 * fault handler, for a fault the CPU raised); 0 if mc->ip is not in the copy. */
int kprw_copy_fixup(struct k_sigcontext *mc)
{
	for (const struct kprw_extable_entry *e = kprw_extable; e < kprw_extable_end; e++) {
		if ((uptr)&e->insn + (uptr)(long)e->insn == mc->ip) {
			mc->ip = (uptr)&e->fixup + (uptr)(long)e->fixup;
			atomic_add(&kprewrite_rt_stats.read_faults, 1);
			return 1;
		}
	}
	return 0;
}

void *kprw_mmap_anon(unsigned long size)
{
	long r = sys6(SYS_mmap, 0, (long)size, 3 /* RW */, 0x22 /* PRIVATE|ANON */, -1, 0);
	if (r < 0 && r > -4096)
		return NULL;
	return (void *)r;
}

/* kprw_mmap_wipe_on_fork maps memory a fork child gets zeroed (MADV_WIPEONFORK: a
 * table of what this process's threads hold), or NULL (a kernel before 4.14) */
void *kprw_mmap_wipe_on_fork(unsigned long size)
{
	void *p = kprw_mmap_anon(size);
	if (p && sys3(SYS_madvise, (long)p, (long)((size + 4095) & ~4095ul), 18 /* MADV_WIPEONFORK */) == 0)
		return p;
	if (p)
		sys2(SYS_munmap, (long)p, (long)((size + 4095) & ~4095ul));
	return NULL;
}

/* kprw_mmap_dense maps memory the runtime fills densely (a table of every event or
 *  every point written at start-up, the kretprobe instances) on 2 MiB pages once it is
 * 512 KiB or more: on this kind of VM a 4 KiB page's first touch costs ~7 us even
 * zero-filled, a 2 MiB page's ~100 us, and python3.11's --calls '*' start-up took
 * ~1,300 such faults in these tables alone (issue 49). The mapping is 2 MiB-aligned
 * and its length a multiple of 2 MiB (kprw_dense_len): unmap with that length. */
void *kprw_mmap_dense(unsigned long size)
{
	unsigned long len = kprw_dense_len(size);
	if (len == size)
		return kprw_mmap_anon(size);
	long r = sys6(SYS_mmap, 0, (long)(len + KPRW_HUGE), 3 /* RW */, 0x4022 /* PRIVATE|ANON|NORESERVE */, -1, 0);
	if (r < 0 && r > -4096)
		return kprw_mmap_anon(size);
	uptr a = ((uptr)r + KPRW_HUGE - 1) & ~(uptr)(KPRW_HUGE - 1), end = (uptr)r + len + KPRW_HUGE;
	if (a > (uptr)r)
		sys2(SYS_munmap, r, (long)(a - (uptr)r));
	if (end > a + len)
		sys2(SYS_munmap, (long)(a + len), (long)(end - a - len));
	sys3(SYS_madvise, (long)a, (long)len, MADV_HUGEPAGE);
	return (void *)a;
}

/* kprw_dense_len is the length kprw_mmap_dense maps for size bytes */
unsigned long kprw_dense_len(unsigned long size)
{
	return size >= KPRW_HUGE / 4 ? (size + KPRW_HUGE - 1) & ~(KPRW_HUGE - 1) : size;
}

/* kprw_stat_comm_end is where the command of a /proc stat line ends (its last ')':
 * the command may hold spaces and parentheses), NULL: none */
const char *kprw_stat_comm_end(const char *buf)
{
	const char *q = NULL;
	for (const char *c = buf; *c; c++)
		if (*c == ')')
			q = c;
	return q;
}

/* kprw_stat_field sets *v to field f (3 on) of a /proc stat line as a number (0 when
 * it is not one): 1 when the line has that field */
int kprw_stat_field(const char *buf, int f, u64 *v)
{
	const char *q = kprw_stat_comm_end(buf);
	int at = 2, seen = 0;
	*v = 0;
	for (; q && *q && at <= f; q++) {
		if (*q == ' ') {
			at++;
			continue;
		}
		if (at == f) {
			seen = 1;
			if (*q >= '0' && *q <= '9')
				*v = *v * 10 + (u64)(*q - '0');
		}
	}
	return seen;
}
