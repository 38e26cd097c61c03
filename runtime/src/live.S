/*
 * live.S - the agent thread's start (see rt_live.c).
 *
 * long kprw_spawn_agent(unsigned long flags, void *stack_top, void *tls, void (*fn)(void),
 *                       u32 *tid)
 * is clone(flags, stack_top, tid, tid, tls): the parent gets the new thread's id (or
 * -errno); the new thread starts on stack_top with fn pushed there, calls it, and
 * ends with the thread-only exit system call if fn ever returns. With
 * CLONE_PARENT_SETTID and CLONE_CHILD_CLEARTID in flags the kernel writes the thread's
 * id at tid before it runs and clears it (and wakes a futex there) once it has ended:
 * off its stack, which another thread may then take.
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
	movq %r8, %r10		/* child_tid: tid */
	movq %rdx, %r8		/* tls */
	movq %r10, %rdx		/* parent_tid: tid */
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
