/*
 * throwstub.S - the signal guard's wrappers of the functions that throw C++ exceptions
 * (KPRW_SG_THROW). Each distinct function gets stub i (the runtime points its GOT words
 * at kprw_throw_stubs + 16*i): it flushes this thread's return-probe instances
 * (kprw_kretprobe_flush) and jumps to kprw_throw_real[i] with every argument register
 * (integer, %al of a variadic call, vector: the C code uses none) as it was. No frame of
 * ours stays on the stack, so the unwinder, which has no unwind information for the
 * runtime, never sees one.
 */
#define NSTUBS 32

	.text
	.p2align 4
	.globl kprw_throw_stubs
	.hidden kprw_throw_stubs
	.type kprw_throw_stubs,@function
kprw_throw_stubs:
	.set i, 0
	.rept NSTUBS
	.p2align 4
	movl $i, %r11d
	jmp kprw_throw_common
	.set i, i + 1
	.endr
	.size kprw_throw_stubs, .-kprw_throw_stubs

	.p2align 4
	.type kprw_throw_common,@function
kprw_throw_common:
	pushq %rdi
	pushq %rsi
	pushq %rdx
	pushq %rcx
	pushq %r8
	pushq %r9
	pushq %rax
	pushq %r11
	leaq 64(%rsp), %rdi /* the thrower's stack pointer at the call */
	subq $8, %rsp       /* 16-byte alignment for the call */
	call kprw_kretprobe_flush
	addq $8, %rsp
	popq %r11
	popq %rax
	popq %r9
	popq %r8
	popq %rcx
	popq %rdx
	popq %rsi
	popq %rdi
	leaq kprw_throw_real(%rip), %r10
	jmp *(%r10,%r11,8)
	.size kprw_throw_common, .-kprw_throw_common

	.section .note.GNU-stack,"",@progbits
