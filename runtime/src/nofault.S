/*
 * nofault.S - the fault-catching copy of fetch arguments and C handlers' reads (the
 * kernel's copy_from_user with its exception table, see rt_fault.c).
 *
 * unsigned long kprw_copy_nofault(void *dst, const void *src, unsigned long n)
 * copies n bytes and returns how many were NOT copied: 0 when all were. A load that
 * faults (SIGSEGV or SIGBUS from the CPU) reaches the runtime's fault handler, which
 * finds the faulting instruction in kprw_extable and resumes at its fixup with the
 * registers as the fault left them:
 *   - the 8-byte load (the common u64 / pointer fetch) retries byte by byte with
 *     rep movsb, so a read that crosses into a bad page gives its exact partial count;
 *   - rep movsb stops at the first byte it cannot read, with %rcx the bytes left (the
 *     registers of a string instruction are exact at a fault: copy_from_user relies on
 *     the same), which the fixup returns.
 * dst is always the runtime's own memory; only loads from src can fault. DF is clear
 * (the C ABI, and every runtime entry clears it).
 */
	.section .note.GNU-stack,"",@progbits

	.text
	.globl kprw_copy_nofault
	.hidden kprw_copy_nofault
	.type kprw_copy_nofault,@function
	.balign 16
kprw_copy_nofault:
	movq %rdx, %rcx
	cmpq $8, %rdx
	jne .Lmovs
.Lload8:
	movq (%rsi), %rax
	movq %rax, (%rdi)
	xorl %eax, %eax
	ret
.Lmovs:
	rep movsb
.Lleft:
	movq %rcx, %rax
	ret
	.size kprw_copy_nofault, .-kprw_copy_nofault

/* the exception table: {faulting instruction, fixup}, each a 32-bit offset from itself */
	.section .rodata
	.balign 4
	.globl kprw_extable
	.hidden kprw_extable
	.globl kprw_extable_end
	.hidden kprw_extable_end
kprw_extable:
	.long .Lload8 - .
	.long .Lmovs - .
	.long .Lmovs - .
	.long .Lleft - .
kprw_extable_end:
