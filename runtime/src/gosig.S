/*
 * gosig.S - a static Go program's raw signal system calls, redirected (rt_sigguard.c):
 * Go's runtime installs its handlers and blocks signals with runtime.rt_sigaction and
 * runtime.rtsigprocmask, ABI0 assembly that makes the system call itself, so no C
 * library function is there to wrap. The rewriter redirects their entries (KPRW_GS_ENTRY,
 * only when their code is the one these stubs replace: patch/sigstatic.go) to:
 *
 * kprw_go_rt_sigaction: runtime.rt_sigaction(sig, new, old *sigactiont, size) int32.
 *   A guarded signal's disposition (SIGSEGV and SIGBUS with fast reads, SIGTRAP with int3
 *   probes) is kept by kprw_go_sigaction (C) as the program's, ours stays installed, and
 *   our handler forwards what is not ours to Go's; other signals' actions reach the kernel
 *   with the guarded signals taken out of sa_mask (Go gives every handler a full mask),
 *   so that a fetch in code a Go handler runs can still fault into our handler.
 * kprw_go_rtsigprocmask: runtime.rtsigprocmask(how, new, old *sigset, size): the mask
 *   without the guarded signals (Go blocks every signal around clone, fork and exec).
 *
 * Both run on whatever stack Go called them on, a goroutine's too (signal.Notify): they
 * use only the 128 bytes below it, the red zone a signal frame skips; the C call is for
 * a guarded signal only, which Go's runtime sets from initsig (the thread's system
 * stack) or as it dies (the signal stack). ABI0: the arguments at 8(%rsp) on, every
 * register but %rsp and %rbp free (the caller restores R14 and X15).
 */
	.section .note.GNU-stack,"",@progbits

	.text
	.globl kprw_go_rt_sigaction
	.hidden kprw_go_rt_sigaction
	.type kprw_go_rt_sigaction,@function
	.balign 16
kprw_go_rt_sigaction:
	/* 8(%rsp) sig, 16 new, 24 old, 32 size; the int32 result at 40 */
	movq 8(%rsp), %rdi
	leaq -1(%rdi), %rcx
	cmpq $63, %rcx
	ja .Lsa_kernel			/* not a signal: the kernel says EINVAL */
	movq kprw_go_sg_sigs(%rip), %rax
	btq %rcx, %rax
	jc .Lsa_kept
.Lsa_kernel:
	movq 16(%rsp), %rsi
	testq %rsi, %rsi
	jz .Lsa_call
	movq (%rsi), %rax		/* a copy of the new action, its mask stripped */
	movq %rax, -32(%rsp)
	movq 8(%rsi), %rax
	movq %rax, -24(%rsp)
	movq 16(%rsi), %rax
	movq %rax, -16(%rsp)
	movq kprw_go_sg_sigs(%rip), %rax
	notq %rax
	andq 24(%rsi), %rax
	movq %rax, -8(%rsp)
	leaq -32(%rsp), %rsi
.Lsa_call:
	movq 24(%rsp), %rdx
	movq 32(%rsp), %r10
	movl $13, %eax			/* SYS_rt_sigaction */
	syscall
	movl %eax, 40(%rsp)
	ret
.Lsa_kept:
	movq 16(%rsp), %rsi
	movq 24(%rsp), %rdx
	movq 32(%rsp), %rcx
	pushq %rbp
	movq %rsp, %rbp
	andq $-16, %rsp
	call kprw_go_sigaction
	movq %rbp, %rsp
	popq %rbp
	movl %eax, 40(%rsp)
	ret
	.size kprw_go_rt_sigaction, .-kprw_go_rt_sigaction

	.globl kprw_go_rtsigprocmask
	.hidden kprw_go_rtsigprocmask
	.type kprw_go_rtsigprocmask,@function
	.balign 16
kprw_go_rtsigprocmask:
	/* 8(%rsp) how (int32), 16 new, 24 old, 32 size (int32); no result: a failure
	 * crashes as Go's own does */
	movl 8(%rsp), %edi
	movq 16(%rsp), %rsi
	testq %rsi, %rsi
	jz .Lpm_call
	movq kprw_go_sg_sigs(%rip), %rax
	notq %rax
	andq (%rsi), %rax
	movq %rax, -8(%rsp)
	leaq -8(%rsp), %rsi
.Lpm_call:
	movq 24(%rsp), %rdx
	movl 32(%rsp), %r10d
	movl $14, %eax			/* SYS_rt_sigprocmask */
	syscall
	cmpq $-4095, %rax		/* Go's own test */
	jbe 1f
	movl $0xf1, 0xf1
1:	ret
	.size kprw_go_rtsigprocmask, .-kprw_go_rtsigprocmask
