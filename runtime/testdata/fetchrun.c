/* fetchrun.c - runs the runtime's fetch-program interpreter on one test vector
 * (fetch_test.go compares its output with eventdef.Run). No libc headers: rt.h's
 * raw system calls do the I/O. Input file (argv[1]):
 *   u64 base, u64 size, size bytes of memory (mapped at base; the page after is not)
 *   u64 regs[21], u64 xmm[16] (low halves), char comm[16], u64 bias, u32 plen, prog[plen]
 * argv[2] "fast": memory is read with the fault-catching copy (a SIGSEGV/SIGBUS
 * handler here resumes it at its fixup, as rt_fault.c does); else process_vm_readv.
 * Output: u32 elen, entry data, i64 record length (-1: malformed), record, then the
 * results (i64) of the raw reads in probes[] below; "plan" on stderr when the program
 * compiled to a fetch plan, whose record must be the interpreter's (else exit 5, 6). */
#include "rt.h"

struct kprw_rt kprw_rt;
struct kprw_stats kprewrite_rt_stats;

void kprw_restorer(void);
__asm__(".text\nkprw_restorer:\n  mov $15, %eax\n  syscall\n  hlt\n");

static void fault(int sig, struct k_siginfo *si, struct k_ucontext *uc)
{
	if (si->si_code > 0 && kprw_copy_fixup(&uc->mc))
		return;
	struct k_sigaction sa = {0};
	sys4(SYS_rt_sigaction, sig, (long)&sa, 0, 8); /* not the copy's: die by it */
}

static void install(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS};
	for (int i = 0; i < 2; i++) {
		struct k_sigaction sa = {0};
		sa.handler = (unsigned long)fault;
		sa.flags = SA_SIGINFO | SA_RESTORER | SA_NODEFER;
		sa.restorer = (unsigned long)kprw_restorer;
		sys4(SYS_rt_sigaction, sigs[i], (long)&sa, 0, 8);
	}
}

static u64 xmm[16];

/* set_xmm loads the vector's SSE registers before each fetch (built with
 * -mgeneral-regs-only, nothing here changes them) */
static void set_xmm(void)
{
	__asm__ volatile("movq 0(%0), %%xmm0\n\tmovq 8(%0), %%xmm1\n\tmovq 16(%0), %%xmm2\n\t"
			 "movq 24(%0), %%xmm3\n\tmovq 32(%0), %%xmm4\n\tmovq 40(%0), %%xmm5\n\t"
			 "movq 48(%0), %%xmm6\n\tmovq 56(%0), %%xmm7\n\tmovq 64(%0), %%xmm8\n\t"
			 "movq 72(%0), %%xmm9\n\tmovq 80(%0), %%xmm10\n\tmovq 88(%0), %%xmm11\n\t"
			 "movq 96(%0), %%xmm12\n\tmovq 104(%0), %%xmm13\n\tmovq 112(%0), %%xmm14\n\t"
			 "movq 120(%0), %%xmm15"
			 :
			 : "r"(xmm)
			 : "memory");
}

static u8 in[1 << 20], out[1 << 16], rec[KPRW_MAX_REC_DATA], ed[1 << 16];
static long plans; /* the program compiled to a plan: "plan" on stderr */

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	int fast = argc > 2 && kprw_strcmp(argv[2], "fast") == 0;
	if (fast)
		install();
	long fd = sys3(SYS_open, (long)argv[1], 0, 0);
	long n = 0, r;
	while ((r = sys3(SYS_read, fd, (long)(in + n), (long)(sizeof in - (unsigned long)n))) > 0)
		n += r;
	u8 *p = in;
	u64 base = *(u64 *)p, size = *(u64 *)(p + 8);
	p += 16;
	long m = sys6(SYS_mmap, (long)base, (long)size, 3, 0x22 | 0x100000 /* FIXED_NOREPLACE */, -1, 0);
	if (m != (long)base)
		return 3;
	kprw_memcpy((void *)base, p, size);
	p += size;
	struct pt_regs regs;
	kprw_memcpy(&regs, p, sizeof regs);
	p += sizeof regs;
	kprw_memcpy(xmm, p, sizeof xmm);
	p += sizeof xmm;
	const char *comm = (const char *)p;
	p += 16;
	kprw_rt.bias = *(u64 *)p;
	p += 8;
	u32 plen = *(u32 *)p;
	p += 4;
	u32 elen = kprw_fetch_edata_size(p, plen), o = 0;
	set_xmm();
	if (elen && kprw_fetch_entry(p, plen, &regs, ed, elen, fast) < 0)
		elen = 0xffffffff;
	kprw_memcpy(out + o, &elen, 4);
	o += 4;
	if (elen != 0xffffffff) {
		kprw_memcpy(out + o, ed, elen);
		o += elen;
	}
	set_xmm();
	long len = kprw_fetch_run(p, plen, &regs, ed, elen == 0xffffffff ? 0 : elen, comm, NULL, KPRW_MAX_REC_DATA, fast);
	if (len >= 0) {
		set_xmm();
		long len2 = kprw_fetch_run(p, plen, &regs, ed, elen == 0xffffffff ? 0 : elen, comm, rec, (u32)len, fast);
		if (len2 != len)
			return 4;
		/* the compiled plan, where the program has one, writes the same record */
		static struct kprw_fplan plan;
		static u8 rec2[KPRW_MAX_REC_DATA];
		if (kprw_fetch_plan(p, plen, &plan)) {
			if (plan.fixed != (u32)len)
				return 5;
			kprw_memset(rec2, 0xa5, sizeof rec2);
			set_xmm();
			kprw_fetch_plan_run(&plan, &regs, rec2, fast);
			for (long i = 0; i < len; i++)
				if (rec2[i] != rec[i])
					return 6;
			plans++;
		}
	}
	kprw_memcpy(out + o, &len, 8);
	o += 8;
	if (len > 0) {
		kprw_memcpy(out + o, rec, (unsigned long)len);
		o += (u32)len;
	}
	/* raw reads: partial counts at the end of the mapping, bad addresses */
	static const struct {
		long off; /* from base + size (the first unmapped byte) */
		u32 n;
	} probes[] = {{-16, 16}, {-9, 8}, {-8, 8}, {-7, 8}, {-1, 8}, {-3, 16}, {-1, 1}, {0, 8}, {0, 1}, {-4, 4}, {-2, 4}, {-100, 100}, {-100, 99}};
	for (u32 i = 0; i < ARRAY_SIZE(probes); i++) {
		u8 buf[128];
		long r = kprw_read_mode(buf, (uptr)((long)(base + size) + probes[i].off), probes[i].n, fast);
		kprw_memcpy(out + o, &r, 8);
		o += 8;
	}
	static const uptr bad[] = {0, 8, 4096, 0x800000000000ul, 0x7ffffffff000ul, 0xffff800000000000ul, 0xffffffffff600000ul, ~0ul - 3};
	for (u32 i = 0; i < ARRAY_SIZE(bad); i++) {
		u8 buf[16];
		long r = kprw_read_mode(buf, bad[i], 8, fast);
		kprw_memcpy(out + o, &r, 8);
		o += 8;
	}
	sys3(SYS_write, 1, (long)out, o);
	if (plans)
		sys3(SYS_write, 2, (long)"plan\n", 5);
	return 0;
}
