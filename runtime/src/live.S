/*
 * live.S - the agent thread's start (see rt_live.c).
 *
 * long kprw_spawn_agent(unsigned long flags, void *stack_top, void *tls, void (*fn)(void))
 * is clone(flags, stack_top, 0, 0, tls): the parent gets the new thread's id (or
 * -errno); the new thread starts on stack_top with fn pushed there, calls it, and
 * ends with the thread-only exit system call if fn ever returns.
 */
	.section .note.GNU-stack,"",@progbits

	.text
	.globl kprw_spawn_agent
	.hidden kprw_spawn_agent
	.type kprw_spawn_agent,@function
	.balign 16
kprw_spawn_agent:
	andq $-16, %rsi
	subq $16, %rsi
	movq %rcx, 8(%rsi)	/* fn, popped by the child */
	movq %rdx, %r8		/* tls */
	xorl %edx, %edx		/* parent_tid */
	xorl %r10d, %r10d	/* child_tid */
	movl $56, %eax		/* SYS_clone */
	syscall
	testq %rax, %rax
	jz 1f
	ret
1:	addq $8, %rsp		/* the child starts at the aligned top - 16: fn is at 8(%rsp) */
	popq %rax		/* fn; %rsp is 16-byte aligned before the call */
	xorl %ebp, %ebp
	call *%rax
	movl $60, %eax		/* SYS_exit: this thread only */
	xorl %edi, %edi
	syscall
	hlt
	.size kprw_spawn_agent, .-kprw_spawn_agent
