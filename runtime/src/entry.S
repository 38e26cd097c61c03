/*
 * entry.S - the runtime's assembly: process entry, signal restorer, return trampoline.
 * Position-independent: only RIP-relative references.
 */
#include "ptregs.h"
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
 * The entry mark, the 16 bytes right before kprewrite_rt_entry: a rewritten library's
 * runtime, which starts before the program's entry point, reads them at AT_ENTRY - 16
 * to learn whether the executable is a rewritten program too and where its tables are,
 * so that one trace file takes every image's records (rt_init.c, exe_tables).
 */
	.balign 16
	.type kprw_entry_mark,@object
	.size kprw_entry_mark,16
kprw_entry_mark:
	.ascii "KPRWENTR"
	.long kprewrite_rt_hdr_rel - .	/* from this word */
	.long 0

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

/*
 * kprewrite_rt_lib_entry: the DT_INIT of a rewritten shared library, called by the
 * dynamic loader (at start-up, before the program's entry point, or in dlopen) as
 * init(argc, argv, envp) after the library is relocated and before its constructors.
 * Calls kprewrite_rt_lib_init(argc, argv, envp), which returns the library's original
 * DT_INIT (run-time address) or 0, and tail-calls it with the same arguments.
 */
	.globl kprewrite_rt_lib_entry
	.hidden kprewrite_rt_lib_entry
	.type kprewrite_rt_lib_entry,@function
	.balign 16
kprewrite_rt_lib_entry:
	pushq %rdi
	pushq %rsi
	pushq %rdx		/* %rsp is now 16-byte aligned */
	cld
	call kprewrite_rt_lib_init
	popq %rdx
	popq %rsi
	popq %rdi
	testq %rax, %rax
	jz 1f
	jmp *%rax
1:	ret
	.size kprewrite_rt_lib_entry, .-kprewrite_rt_lib_entry

/*
 * kprewrite_rt_lib_fini: the DT_FINI of a rewritten library whose C handlers have a
 * kprewrite_exit(), called by the dynamic loader at exit (the library is never
 * unloaded: DF_1_NODELETE). Calls kprewrite_rt_lib_exit(), which runs kprewrite_exit()
 * and returns the library's own DT_FINI (run-time address) or 0, and tail-calls it.
 */
	.globl kprewrite_rt_lib_fini
	.hidden kprewrite_rt_lib_fini
	.type kprewrite_rt_lib_fini,@function
	.balign 16
kprewrite_rt_lib_fini:
	subq $8, %rsp		/* %rsp 16-byte aligned for the call */
	cld
	call kprewrite_rt_lib_exit
	addq $8, %rsp
	testq %rax, %rax
	jz 1f
	jmp *%rax
1:	ret
	.size kprewrite_rt_lib_fini, .-kprewrite_rt_lib_fini

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
	.skip 15, 0xcc
	/* The pad byte: an unwinder looks up the FDE of a return address at (return address
	 * - 1), so the trampoline's FDE (kprewrite_rt_eh_frame) starts here. */
	int3
kprewrite_rt_rettramp:
	leaq -8(%rsp), %rsp	/* %rsp = K: pushes go below K */
	/* a frame on the thread's return stack whose return event is plain: written in
	 * assembly (optprobe.S), which comes back here otherwise, %rsp = K, all as it was */
	jmp kprw_rethook_fast
	.globl kprw_rethook_slow
	.hidden kprw_rethook_slow
kprw_rethook_slow:
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
	POP_GPRS
	leaq 56(%rsp), %rsp	/* orig_ax ip cs flags sp ss: %rsp = K + 8 */
	/* an indirect jmp, not ret: a ret here would pop a return-stack-buffer entry the
	 * function's own ret already used, and mispredict every return up the stack. The
	 * word at K is 8 bytes below %rsp, inside the red zone signal frames skip. */
	jmp *-8(%rsp)
	.size kprewrite_rt_rettramp, .-kprewrite_rt_rettramp

/*
 * kprewrite_rt_eh_frame: unwind information for the return trampoline, one CIE and one
 * FDE in .eh_frame format (the rewriter lists the FDE in the new .eh_frame_hdr it writes
 * for the whole executable). It is in .data because kprewrite_rt_init writes the
 * trampoline's run-time address into the DW_OP_addr operand (kprw_eh_tramp_addr).
 *
 * The FDE covers the pad byte and the trampoline's first byte. Its frame is a
 * return-probed function's caller, entered at the trampoline with %rsp = K+8, where K
 * is the stack word that held the return address (and still holds the trampoline
 * address): CFA = %rsp + 0, and the return address is the value of the word at CFA-8
 * unless that word is still the trampoline's address, in which case it is 0 (a clean
 * end of the stack for _Unwind_Backtrace and debuggers, which never call personality
 * routines). An exception or a forced unwind calls the personality routine
 * (kprw_unwind_personality, rt_kretprobe.c) before it reads the return address: the
 * personality writes the real return address back into K and releases the frame's
 * instances, so the unwinder continues into the real caller.
 */
	.data
	.balign 8
	.globl kprewrite_rt_eh_frame
	.hidden kprewrite_rt_eh_frame
	.type kprewrite_rt_eh_frame,@object
kprewrite_rt_eh_frame:
	.long .Lcie_end - .Lcie_id	/* CIE length */
.Lcie_id:
	.long 0				/* CIE id */
	.byte 1				/* version */
	.asciz "zPR"			/* augmentation: personality, FDE pointer encoding */
	.uleb128 1			/* code alignment factor */
	.sleb128 -8			/* data alignment factor */
	.byte 16			/* return address column (%rip) */
	.uleb128 6			/* augmentation data length */
	.byte 0x1b			/* P: DW_EH_PE_pcrel | DW_EH_PE_sdata4 */
	.long kprw_unwind_personality - .
	.byte 0x1b			/* R: FDE pointers are pcrel sdata4 */
	.byte 0x0c, 7, 0		/* DW_CFA_def_cfa %rsp, 0 */
	.byte 0x16, 16			/* DW_CFA_val_expression %rip: the CFA is pushed first */
	.uleb128 .Lra_end - .Lra_expr
.Lra_expr:
	.byte 0x38			/* DW_OP_lit8 */
	.byte 0x1c			/* DW_OP_minus: K */
	.byte 0x06			/* DW_OP_deref: w = *K */
	.byte 0x12			/* DW_OP_dup */
	.byte 0x03			/* DW_OP_addr */
	.globl kprw_eh_tramp_addr
	.hidden kprw_eh_tramp_addr
kprw_eh_tramp_addr:
	.quad 0				/* the trampoline's run-time address, written at start-up */
	.byte 0x2e			/* DW_OP_ne: w != trampoline */
	.byte 0x1e			/* DW_OP_mul: w, or 0 */
.Lra_end:
	.balign 8, 0			/* DW_CFA_nop */
.Lcie_end:
	.long .Lfde_end - .Lfde_cie	/* FDE length */
.Lfde_cie:
	.long .Lfde_cie - kprewrite_rt_eh_frame	/* CIE pointer */
	.long kprewrite_rt_rettramp - 1 - .	/* pc_begin: the pad byte */
	.long 2				/* pc_range: the pad byte and the trampoline's first byte */
	.uleb128 0			/* augmentation data length */
	.balign 8, 0			/* DW_CFA_nop */
.Lfde_end:
	.long 0				/* terminator */
	.size kprewrite_rt_eh_frame, .-kprewrite_rt_eh_frame
