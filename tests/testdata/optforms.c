/*
 * optforms.c - the program opt_test.go rewrites with jump-optimized probes: each o_*
 * function is assembly whose first instructions (the DCR a jmp replaces) hold one
 * relocation form: RIP-relative operands in legacy, VEX and EVEX encodings (with and
 * without an immediate after the displacement), jcc rel8, jrcxz, loop, a DCR ending in
 * a jmp, in a direct call, an indirect call through a register and through memory, and
 * one completed by alignment padding. main calls each with known arguments and prints
 * the results; the callees of the calls return their return address, so a relocated
 * call that pushed the detour's address instead of the original one shows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int counter2 = 40;
int scratch;
long (*fptr)(long);
__attribute__((aligned(64))) int vdata[16] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

long o_leaf(long), o_retaddr(void);
int o_riprel(int), o_riprel_imm(int), o_vex(int), o_vex_imm(int), o_evex(int), o_evex_imm(int),
	o_jcc8(int), o_jrcxz(int), o_loop(int), o_jmp_end(int), o_pad(int);
long o_call_end(long), o_callind_end(long, long (*)(void)), o_callrip_end(long), o_victim(long),
	o_jumpin(long, long);
extern char o_call_ret[], o_callind_ret[];

__asm__(
	".text\n"
	".globl o_leaf\n.type o_leaf,@function\no_leaf:\n"
	"  lea 1000(%rdi),%rax\n  ret\n.size o_leaf,.-o_leaf\n"
	/* returns the return address it was called with */
	".globl o_retaddr\n.type o_retaddr,@function\no_retaddr:\n"
	"  mov (%rsp),%rax\n  ret\n.size o_retaddr,.-o_retaddr\n"
	/* RIP-relative, legacy encoding: mov counter2(%rip),%eax (6) */
	".globl o_riprel\n.type o_riprel,@function\no_riprel:\n"
	"  mov counter2(%rip),%eax\n  add %edi,%eax\n  mov %eax,counter2(%rip)\n  ret\n.size o_riprel,.-o_riprel\n"
	/* RIP-relative with an immediate after the displacement (10) */
	".globl o_riprel_imm\n.type o_riprel_imm,@function\no_riprel_imm:\n"
	"  movl $0x1234,scratch(%rip)\n  mov scratch(%rip),%eax\n  add %edi,%eax\n  ret\n.size o_riprel_imm,.-o_riprel_imm\n"
	/* VEX (2-byte) RIP-relative (8) */
	".globl o_vex\n.type o_vex,@function\no_vex:\n"
	"  vmovdqu vdata(%rip),%ymm0\n  vmovd %xmm0,%eax\n  add %edi,%eax\n  vzeroupper\n  ret\n.size o_vex,.-o_vex\n"
	/* VEX RIP-relative with an immediate (9) */
	".globl o_vex_imm\n.type o_vex_imm,@function\no_vex_imm:\n"
	"  vpshufd $0x1b,vdata(%rip),%ymm0\n  vmovd %xmm0,%eax\n  add %edi,%eax\n  vzeroupper\n  ret\n.size o_vex_imm,.-o_vex_imm\n"
	/* EVEX RIP-relative (10) */
	".globl o_evex\n.type o_evex,@function\no_evex:\n"
	"  vmovdqu64 vdata(%rip),%zmm0\n  vmovd %xmm0,%eax\n  add %edi,%eax\n  vzeroupper\n  ret\n.size o_evex,.-o_evex\n"
	/* EVEX RIP-relative with an immediate (11) */
	".globl o_evex_imm\n.type o_evex_imm,@function\no_evex_imm:\n"
	"  vpshufd $0x1b,vdata(%rip),%zmm0\n  vmovd %xmm0,%eax\n  add %edi,%eax\n  vzeroupper\n  ret\n.size o_evex_imm,.-o_evex_imm\n"
	/* jcc rel8 widened: test (2) je (2) mov (5) */
	".globl o_jcc8\n.type o_jcc8,@function\no_jcc8:\n"
	"  test %edi,%edi\n  je 1f\n  mov $11,%eax\n  ret\n1:\n  mov $22,%eax\n  ret\n.size o_jcc8,.-o_jcc8\n"
	/* jrcxz sandwich: mov (2) jrcxz (2) mov (5) */
	".globl o_jrcxz\n.type o_jrcxz,@function\no_jrcxz:\n"
	"  mov %edi,%ecx\n  jrcxz 3f\n  mov $5,%eax\n  ret\n3:\n  mov $7,%eax\n  ret\n.size o_jrcxz,.-o_jrcxz\n"
	/* loop sandwich, probe at +4: add (3) loop (2), the loop jumps back to the probe */
	".globl o_loop\n.type o_loop,@function\no_loop:\n"
	"  mov %edi,%ecx\n  xor %eax,%eax\n2:\n  add $3,%eax\n  loop 2b\n  ret\n.size o_loop,.-o_loop\n"
	/* a DCR that ends in a jmp rel8: lea (3) jmp (2) */
	".globl o_jmp_end\n.type o_jmp_end,@function\no_jmp_end:\n"
	"  lea 1(%rdi),%eax\n  jmp 4f\n  ud2\n4:\n  add $100,%eax\n  ret\n.size o_jmp_end,.-o_jmp_end\n"
	/* a DCR that ends in a call: push (1) call (5); returns (callee's result, ret addr ok) */
	".globl o_call_end\n.type o_call_end,@function\no_call_end:\n"
	"  push %rbx\n  call o_retaddr\n"
	".globl o_call_ret\no_call_ret:\n"
	"  pop %rbx\n  ret\n.size o_call_end,.-o_call_end\n"
	/* ends in an indirect call through a register: push (1) mov (3) call *%rax (2) */
	".globl o_callind_end\n.type o_callind_end,@function\no_callind_end:\n"
	"  push %rbx\n  mov %rsi,%rax\n  call *%rax\n"
	".globl o_callind_ret\no_callind_ret:\n"
	"  pop %rbx\n  ret\n.size o_callind_end,.-o_callind_end\n"
	/* ends in a RIP-relative indirect call: push (1) call *fptr(%rip) (6) */
	".globl o_callrip_end\n.type o_callrip_end,@function\no_callrip_end:\n"
	"  push %rbx\n  call *fptr(%rip)\n  pop %rbx\n  ret\n.size o_callrip_end,.-o_callrip_end\n"
	/* lea (3) ret (1), then alignment padding completes the DCR */
	".globl o_pad\n.type o_pad,@function\no_pad:\n"
	"  lea 2(%rdi),%eax\n  ret\n.size o_pad,.-o_pad\n"
	"  .p2align 4\n"
	/* o_victim+0: mov %rdi,%rax (3) add $5,%rax (4): a 7-byte DCR; o_jumpin calls
	 * o_victim+N through a computed pointer the analysis cannot see: +3 is the add (a
	 * violation --verify-regions runs on), +1 is inside the mov (one it can only
	 * report): 48 89 f8 from +1 is mov %edi,%eax, so both give 15 */
	".globl o_victim\n.type o_victim,@function\no_victim:\n"
	"  mov %rdi,%rax\n  add $5,%rax\n  ret\n.size o_victim,.-o_victim\n"
	".globl o_jumpin\n.type o_jumpin,@function\no_jumpin:\n"
	"  mov %rdi,%rax\n  lea o_victim(%rip),%rcx\n  add %rsi,%rcx\n  call *%rcx\n  ret\n.size o_jumpin,.-o_jumpin\n");

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "forms";
	if (!strcmp(mode, "jumpin")) {
		printf("jumpin=%ld\n", o_jumpin(10, argc > 2 ? atol(argv[2]) : 3));
		return 0;
	}
	int n = argc > 2 ? atoi(argv[2]) : 1;
	long s = 0;
	fptr = o_leaf;
	for (int i = 0; i < n; i++) {
		int a = o_riprel(i);
		int b = o_riprel_imm(i);
		int c = o_vex(i);
		int d = o_vex_imm(i);
		int e = 0, f = 0;
		if (__builtin_cpu_supports("avx512f")) {
			e = o_evex(i);
			f = o_evex_imm(i);
		} else {
			e = 7 + i;
			f = 4 + i;
		}
		int g = o_jcc8(i & 1);
		int h = o_jrcxz(i & 1);
		int l = o_loop(3);
		int j = o_jmp_end(i);
		long k = o_call_end(i);
		long m = o_callind_end(i, o_retaddr);
		long p = o_callrip_end(i);
		int q = o_pad(i);
		long v = o_victim(i);
		if (i == 0)
			printf("riprel=%d imm=%d vex=%d veximm=%d evex=%d eveximm=%d jcc=%d jrcxz=%d loop=%d jmp=%d call=%s callind=%s callrip=%ld pad=%d victim=%ld\n",
			       a, b, c, d, e, f, g, h, l, j, k == (long)o_call_ret ? "ok" : "BAD",
			       m == (long)o_callind_ret ? "ok" : "BAD", p, q, v);
		s += a + b + c + d + e + f + g + h + l + j + p + q + v;
	}
	printf("sum=%ld counter2=%d\n", s, counter2);
	return 0;
}
