/*
 * entry.S - the runtime's assembly: process entry, signal restorer, return trampoline.
 * Position-independent: only RIP-relative references.
 */
	.section .note.GNU-stack,"",@progbits

	.section .rodata
	.balign 8
	.globl kprewrite_rt_hdr_rel
	.hidden kprewrite_rt_hdr_rel
	.type kprewrite_rt_hdr_rel,@object
	.size kprewrite_rt_hdr_rel,8
/* Written by the rewriter: header vaddr - vaddr of this word (see kprewrite_abi.h). */
kprewrite_rt_hdr_rel:
	.quad 0

	.bss
	.balign 8
	.type kprw_orig_entry,@object
	.size kprw_orig_entry,8
kprw_orig_entry:
	.zero 8

	.text
/*
 * kprewrite_rt_entry: the ELF entry point of a rewritten program.
 * At process entry %rsp points at argc and %rdx holds the dynamic linker's fini
 * function (or 0); every register and the flags are kept for the original entry.
 * Calls kprewrite_rt_init(initial_sp), which returns the original entry's run-time
 * address, then jumps there with all registers and %rsp as the kernel/ld.so left them.
 */
	.globl kprewrite_rt_entry
	.hidden kprewrite_rt_entry
	.type kprewrite_rt_entry,@function
	.balign 16
kprewrite_rt_entry:
	pushfq
	pushq %rax
	pushq %rcx
	pushq %rdx
	pushq %rbx
	pushq %rbp
	pushq %rsi
	pushq %rdi
	pushq %r8
	pushq %r9
	pushq %r10
	pushq %r11
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	leaq 128(%rsp), %rdi
	movq %rsp, %rbx
	andq $-16, %rsp
	cld
	call kprewrite_rt_init
	movq %rax, kprw_orig_entry(%rip)
	/* %rdx is the function the program registers with atexit (the dynamic linker's
	 * fini, or 0): kprw_fini_rdx may hand it a function of ours that runs the C
	 * handlers' kprewrite_exit() first (src/rt_user.c) */
	movq 96(%rbx), %rdi
	call kprw_fini_rdx
	movq %rax, 96(%rbx)
	movq %rbx, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %r11
	popq %r10
	popq %r9
	popq %r8
	popq %rdi
	popq %rsi
	popq %rbp
	popq %rbx
	popq %rdx
	popq %rcx
	popq %rax
	popfq
	jmp *kprw_orig_entry(%rip)
	.size kprewrite_rt_entry, .-kprewrite_rt_entry

/* kprw_restorer: SA_RESTORER for our signal handler. */
	.globl kprw_restorer
	.hidden kprw_restorer
	.type kprw_restorer,@function
	.balign 16
kprw_restorer:
	movl $15, %eax		/* rt_sigreturn */
	syscall
	hlt
	.size kprw_restorer, .-kprw_restorer

/*
 * kprewrite_rt_rettramp: where a return-probed function returns to.
 * On arrival %rsp = K+8, where K is the stack word that held the return address
 * (it still holds this trampoline's address; the first thing we do is step below K so
 * our pushes cannot touch it: another thread may be checking that word, see rt_kretprobe.c).
 * Builds a struct pt_regs, calls kprw_rethook(regs) on a 16-byte aligned stack.
 * kprw_rethook stores the real return address at K (and in regs->ip); we restore every
 * register and the flags from pt_regs and jump through K, leaving %rsp = K+8.
 */
	.globl kprewrite_rt_rettramp
	.hidden kprewrite_rt_rettramp
	.type kprewrite_rt_rettramp,@function
	.balign 16
kprewrite_rt_rettramp:
	leaq -8(%rsp), %rsp	/* %rsp = K: pushes go below K */
	leaq -16(%rsp), %rsp	/* room for ss, sp (filled below, after flags are saved) */
	pushfq			/* flags, before anything changes them */
	pushq $0x33		/* cs */
	pushq $0		/* ip: filled by kprw_rethook */
	pushq $-1		/* orig_ax */
	pushq %rdi
	pushq %rsi
	pushq %rdx
	pushq %rcx
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
	movq $0x2b, 160(%rsp)	/* ss */
	leaq 176(%rsp), %rax	/* K+8: %rsp after the return */
	movq %rax, 152(%rsp)	/* sp */
	movq %rsp, %rdi
	movq %rsp, %rbx
	andq $-16, %rsp
	cld
	call kprw_rethook
	movq %rbx, %rsp
	/* flags without popfq (~5 ns): DF, then OF and SF ZF AF PF CF as in optprobe.S */
	testl $0x400, 144(%rsp)
	jz 1f
	std
1:	movzbl 145(%rsp), %eax
	andl $8, %eax
	movb 144(%rsp), %ah
	addb $0x7f, %al
	sahf
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
	leaq 56(%rsp), %rsp	/* orig_ax ip cs flags sp ss: %rsp = K + 8 */
	/* an indirect jmp, not ret: a ret here would pop a return-stack-buffer entry the
	 * function's own ret already used, and mispredict every return up the stack. The
	 * word at K is 8 bytes below %rsp, inside the red zone signal frames skip. */
	jmp *-8(%rsp)
	.size kprewrite_rt_rettramp, .-kprewrite_rt_rettramp
