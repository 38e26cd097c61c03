/*
 * user.S - the guarded call of C handlers (see rt_user.c).
 *
 * long kprw_ucall_asm(struct kprw_ucall *u, void *fn, long a, long b, long c)
 * records in u->jb the callee-saved registers, the stack pointer and the instruction
 * pointer this function returns with, then calls fn(a, b, c) on a 16-byte aligned stack.
 * If fn faults, the fault handler edits the signal frame to those recorded values, so
 * rt_sigreturn lands exactly where a normal return would: it "returns" from here.
 */
	.section .note.GNU-stack,"",@progbits

	.text
	.globl kprw_ucall_asm
	.hidden kprw_ucall_asm
	.type kprw_ucall_asm,@function
	.balign 16
kprw_ucall_asm:
	movq %rbx, 0(%rdi)
	movq %rbp, 8(%rdi)
	movq %r12, 16(%rdi)
	movq %r13, 24(%rdi)
	movq %r14, 32(%rdi)
	movq %r15, 40(%rdi)
	leaq 8(%rsp), %rax	/* %rsp after our ret */
	movq %rax, 48(%rdi)
	movq (%rsp), %rax	/* where our ret goes */
	movq %rax, 56(%rdi)
	movq %rsi, %rax
	movq %rdx, %rdi
	movq %rcx, %rsi
	movq %r8, %rdx
	subq $8, %rsp		/* entered with %rsp = 8 mod 16: align for the call */
	call *%rax
	addq $8, %rsp
	ret
	.size kprw_ucall_asm, .-kprw_ucall_asm

/*
 * void kprw_jprobe_enter(const struct pt_regs *regs, void *entry) - a jprobe's entry
 * (struct jprobe.entry, the probed function's signature) called with the hit's six
 * integer argument registers; called by kprw_ucall_asm as a C handler, so a fault in the
 * entry is caught as in any handler. A tail jump: the entry returns to kprw_ucall_asm.
 */
	.globl kprw_jprobe_enter
	.hidden kprw_jprobe_enter
	.type kprw_jprobe_enter,@function
	.balign 16
kprw_jprobe_enter:
	movq %rsi, %rax
	movq 64(%rdi), %r9
	movq 72(%rdi), %r8
	movq 88(%rdi), %rcx
	movq 96(%rdi), %rdx
	movq 104(%rdi), %rsi
	movq 112(%rdi), %rdi
	jmp *%rax
	.size kprw_jprobe_enter, .-kprw_jprobe_enter
