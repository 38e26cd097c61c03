/*
 * ptregs.h - assembler macros over struct pt_regs as the runtime's assembly builds it on
 * the stack (optprobe.S's shared body, entry.S's return trampoline): one definition of
 * the register order both pop.
 */
#ifndef KPREWRITE_PTREGS_H
#define KPREWRITE_PTREGS_H

/* POP_GPRS pops struct pt_regs' general registers, r15 first (orig_ax is next) */
	.macro POP_GPRS
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbp
	popq %rbx
	popq %r11
	popq %r10
	popq %r9
	popq %r8
	popq %rax
	popq %rcx
	popq %rdx
	popq %rsi
	popq %rdi
	.endm

#endif
