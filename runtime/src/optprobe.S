/*
 * optprobe.S - the detour of jump-optimized probes (the pattern of the kernel's
 * optprobe_template_entry/_val/_call/_end in arch/x86/kernel/kprobes/opt.c), in two
 * parts: a small per-point stub and one shared body.
 *
 * The stub, kprewrite_rt_optprobe_template .. kprewrite_rt_optprobe_template_end, is never
 * executed in place: the rewriter copies it into each probe's detour buffer, patches its
 * three 4-byte fields (kprw_optt_gate, kprw_optt_index, kprw_optt_call; written as raw
 * bytes so the object carries no relocation for them), appends the relocated DCR and a
 * jmp back to site + DCR length, and points the site's jmp rel32 at kprw_optt_entry.
 * The kernel copies its whole template into each probe; here the register save and
 * restore are shared (kprewrite_rt_optprobe_body): a program with thousands of hot
 * points keeps one copy of them in its caches instead of thousands (python3.11 with
 * every function probed: 13,400 detours of ~200 bytes each; 33 now).
 *
 * At the entry %rsp = S, the program's stack pointer at the probe address.
 *   1. lea -128(%rsp): every push goes below the 128-byte red zone.
 *   2. The gate (u32 in the first probe's kprw_probe_state, zero until start-up arms
 *      the point) is tested with jrcxz, which touches no flags: a disarmed point costs
 *      a push, a load, a pop and two jumps, and runs correctly before start-up (an
 *      IRELATIVE resolver or a library constructor calling in).
 *   3. %ecx = the point index, call the body: the stack holds the return address into
 *      the stub and the program's %rcx (S-144, S-136). The body builds struct pt_regs
 *      below them in the kernel's layout (ip is filled in by C: site + 1, as after an
 *      int3; cs 0x33, ss 0x2b, sp = S, orig_ax -1), aligns the stack to 16, clears DF
 *      and calls kprewrite_rt_optcall(regs, point index). 184 bytes + up to 8 of
 *      alignment + the C frames, below the red zone.
 *   4. It returns 0: registers come back from pt_regs (handlers' writes take effect;
 *      %rcx through its stack word, which the stub pops), and the arithmetic flags too,
 *      with lahf/sahf arithmetic instead of popfq (5 ns here): OF via "add $0x7f" on 0
 *      or 8, SF ZF AF PF CF via sahf. The other flags are as they were at the entry:
 *      nothing here changes them except DF, and C returns 1 when DF was set. The body
 *      returns into the stub, which pops %rcx, sets %rsp = S and falls into the DCR
 *      copy. It returns 1: resume wherever pt_regs says, with every register, %rsp and
 *      the flags from it, through iretq (legal from ring 3 to ring 3 with the pt_regs
 *      ip/cs/flags/sp/ss tail, which is an iret frame; ~40 ns): a pre handler that
 *      returned non-zero (kprobes redirection: resume at regs->ip), a handler that
 *      changed regs->sp, or DF set at the probe (then ip = the DCR copy, right after
 *      the stub).
 */
#include "ptregs.h"
	.section .note.GNU-stack,"",@progbits

	.text
	.globl kprewrite_rt_optprobe_template
	.hidden kprewrite_rt_optprobe_template
	.type kprewrite_rt_optprobe_template,@function
	.globl kprewrite_rt_optprobe_template_end
	.hidden kprewrite_rt_optprobe_template_end
	.balign 16
kprewrite_rt_optprobe_template:
kprw_optt_entry:
	leaq -128(%rsp), %rsp
	pushq %rcx
	.byte 0x8b, 0x0d	/* movl gate(%rip), %ecx */
kprw_optt_gate:
	.long 0
	jrcxz 1f		/* disarmed: run the DCR copy */
	.byte 0xb9		/* movl $index, %ecx */
kprw_optt_index:
	.long 0
	.byte 0xe8		/* call kprewrite_rt_optprobe_body */
kprw_optt_call:
	.long 0
1:	popq %rcx
	leaq 128(%rsp), %rsp
kprewrite_rt_optprobe_template_end:
	/* the relocated DCR and the jmp back go here in each copy */
	.size kprewrite_rt_optprobe_template, .-kprewrite_rt_optprobe_template


/* the shared body: %ecx = point index; (%rsp) the return address into the stub,
 * 8(%rsp) the program's %rcx, 16(%rsp) = S - 128 */
	.globl kprewrite_rt_optprobe_body
	.hidden kprewrite_rt_optprobe_body
	.type kprewrite_rt_optprobe_body,@function
	.balign 16
kprewrite_rt_optprobe_body:
	pushq $0x2b		/* ss */
	leaq -8(%rsp), %rsp	/* sp: below */
	pushfq			/* flags: nothing above changed them */
	pushq $0x33		/* cs */
	leaq -16(%rsp), %rsp	/* ip (C), orig_ax (below) */
	pushq %rdi
	pushq %rsi
	pushq %rdx
	pushq 80(%rsp)		/* the program's %rcx (the address is taken before the push) */
	pushq %rax
	pushq %r8
	pushq %r9
	pushq %r10
	pushq %r11
	pushq %rbx
	pushq %rbp
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	leaq 312(%rsp), %rax	/* S: 168 bytes of pt_regs, the return address, %rcx, 128 of red zone */
	movq %rax, 152(%rsp)
	movq $-1, 120(%rsp)
	movq %rsp, %rdi
	movl %ecx, %esi
	movq %rsp, %rbx
	testl $0x400, 144(%rsp)	/* DF is almost always clear: cld costs ~1 ns */
	jz 1f
	cld
1:	andq $-16, %rsp
	call kprewrite_rt_optcall
	movq %rbx, %rsp
	testl %eax, %eax
	jnz .Liret
	movq 144(%rsp), %rax	/* one load of the whole word: it was stored whole */
	movzbl %ah, %edx	/* flags bits 8-15: OF is 8 */
	andl $8, %edx
	movb %al, %ah		/* SF ZF 0 AF 0 PF 1 CF */
	movb %dl, %al
	addb $0x7f, %al		/* OF = (al == 8) */
	sahf
	movq 88(%rsp), %rcx	/* pt_regs' %rcx into the word the stub pops */
	movq %rcx, 176(%rsp)
	POP_GPRS
	leaq 48(%rsp), %rsp	/* orig_ax ip cs flags sp ss */
	ret
/* slow exit: pt_regs at %rsp; pops the GPRs, skips orig_ax, iretq takes ip cs flags sp ss */
.Liret:
	POP_GPRS
	leaq 8(%rsp), %rsp
	iretq
	.size kprewrite_rt_optprobe_body, .-kprewrite_rt_optprobe_body
