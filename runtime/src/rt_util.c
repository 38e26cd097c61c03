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

void kprw_puts(const char *s)
{
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

void kprw_put_dec(unsigned long v)
{
	char b[24];
	int i = 23;
	b[i] = 0;
	do {
		b[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	kprw_puts(b + i);
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
u32 kprw_cpu(void)
{
	unsigned long p = 0;
	if (likely(kprw_rt.has_rdpid)) /* TSC_AUX, the same node<<12 | cpu, in ~1 ns instead of ~18 */
		__asm__ volatile("rdpid %0" : "=r"(p));
	else
		__asm__ volatile("lsl %1, %0" : "+r"(p) : "r"(0x7bul) : "cc");
	return (u32)(p & 0xfff);
}

/* kprw_read_user copies n bytes from src without faulting on a bad address:
 * process_vm_readv on our own pid returns -EFAULT (or a short count) instead of a
 * SIGSEGV. One system call (~0.3 us) per read; the kernel checks the same-process
 * case without ptrace permission checks beyond the trivially true ones. */
long kprw_read_user(void *dst, uptr src, unsigned long n)
{
	struct k_iovec l = {dst, n}, r = {(void *)src, n};
	if (n == 0)
		return 0;
	return sys6(SYS_process_vm_readv, kprw_getpid(), (long)&l, 1, (long)&r, 1, 0);
}

void *kprw_mmap_anon(unsigned long size)
{
	long r = sys6(SYS_mmap, 0, (long)size, 3 /* RW */, 0x22 /* PRIVATE|ANON */, -1, 0);
	if (r < 0 && r > -4096)
		return NULL;
	return (void *)r;
}
