/*
 * inlinerec.S - the templates of inline records (KPRW_DF_INLINEREC; "Inline records" in
 * include/kprewrite_abi.h): the kernel's optprobe template with its probe's work fixed in
 * it, for a point whose event's record is a count-fixed one (optprobe.S's .Lseq: 16
 * bytes and one 8-byte register a fetch). Where the shared body (optprobe.S) loads the
 * line, tests its shape, saves eight registers and copies the registers through the
 * line's ops, this code has the probe, the record's size and the registers written in:
 * ~30 instructions and four taken branches less a record (issue 49: on this host a
 * record is paid by its instructions).
 *
 * Never executed in place, never linked (the section is not allocated). The rewriter
 * (trampolines/inlinerec.go) reads each template by its labels, the local symbols
 * kprw_ir.<template>.<label>:
 *   start, end       the template's bytes, [start, end)
 *   entry            where the site's jmp lands
 *   data             where the rewriter puts the stores of the registers into the
 *                    record (%rdx: the record; 16, 24, 32 its data words), [data, end)
 *                    follows them
 *   rt.N, tctx.N, tblk.N, topen, stub   rel32 fields: kprw_rt, kprw_tctx_tab,
 *                    kprw_tblk_tab, the probe's iropen, the point's stub after its
 *                    first instruction; the field's bytes hold the addend (an offset
 *                    into kprw_rt); <field>.end, when there, is the instruction's end
 *   rlen, size, pi   imm32 fields: the record's first word's rlen, its size, the probe
 *   commit           imm16: the record's commit word
 * The frame after the saves: [0 the flags,] r11 r10 r9 rdx rax rcx (8 bytes each; the
 * rewriter reads a saved register from there: InlineRec). Fields are raw bytes where an
 * instruction would need a relocation. The relocated DCR and a jmp back follow each copy.
 *
 * Templates: f (the arithmetic flags saved: lahf, seto), nf (the analysis proved them
 * dead at the site).
 */
#include "optfast.h"

	.section .note.GNU-stack,"",@progbits
	.section .kprw_templates,"",@progbits

/* a rel32 field: \name, its addend \addend, the instruction's bytes before it in \pre */
.macro RIP t, name, addend, pre:vararg
	.byte \pre
kprw_ir.\t\().\name:
	.long \addend
.endm

.macro RESTORE flags
	.if \flags
	popq %rax
	addb $0x7f, %al		/* OF again: 1 + 0x7f overflows, 0 + 0x7f does not */
	sahf
	.endif
	popq %r11
	popq %r10
	popq %r9
	popq %rdx
	popq %rax
.endm

.macro INLINEREC t, flags
kprw_ir.\t\().start:
	/* a place taken past its block's end (never written): its count taken back */
kprw_ir.\t\().decline_placed:
	movq %rcx, %r10
	RIP \t, tctx.2, 0, 0x4c, 0x2b, 0x15	/* subq kprw_tctx_tab(%rip), %r10 */
	RIP \t, tblk.2, 0, 0x4c, 0x03, 0x15	/* addq kprw_tblk_tab(%rip), %r10 */
	decq OF_TBLK_NREC(%r10)
	/* anything the code does not decide: everything back, the point's stub after
	 * its lea (the red zone stepped over already), which decides again */
kprw_ir.\t\().decline:
	RESTORE \flags
kprw_ir.\t\().early:
	popq %rcx
	RIP \t, stub, 0, 0xe9			/* jmp stub + 5 */

kprw_ir.\t\().entry:
	leaq -128(%rsp), %rsp
	/* the configured paths' conditions (kprw_rt.fast_cfg: the TSC clock, the TCB's
	 * word, the rseq area's CPU, prefetchw, sw_gen's word; 0 before start-up), tested
	 * with jrcxz before anything else is saved: another clock, chosen at run time,
	 * costs a declining hit six instructions */
	pushq %rcx
	RIP \t, rt.1, OF_RT_FAST_CFG, 0x8b, 0x0d	/* movl fast_cfg(%rip), %ecx */
	jrcxz kprw_ir.\t\().early
	pushq %rax
	.if \flags
	lahf
	seto %al
	.endif
	pushq %rdx
	pushq %r9
	pushq %r10
	pushq %r11
	.if \flags
	pushq %rax
	.endif
	/* the probe's line found open under the switches' generation and of its shape
	 * (before the TSC: a switched-off event declines without reading it) */
	RIP \t, rt.2, OF_RT_SW_GEN, 0x48, 0x8b, 0x05	/* movq sw_gen(%rip), %rax */
	movq (%rax), %rax
	RIP \t, topen, 0, 0x48, 0x39, 0x05	/* cmpq %rax, iropen(%rip) */
	jne kprw_ir.\t\().decline
	/* the TSC: its latency overlaps the checks below (optprobe.S's RAW_TSC) */
	rdtsc
	shlq $32, %rdx
	orq %rdx, %rax
	movq %rax, %r11
	/* the thread's context named in glibc's TCB, checked to be a context of the
	 * table, the thread's, no handler of ours running (optprobe.S's TCTX_FIND) */
	movq %fs:0, %r9
	movq %fs:FC_TCB_SLOT, %rcx
	movq %rcx, %rdx
	RIP \t, tctx.1, 0, 0x48, 0x2b, 0x15	/* subq kprw_tctx_tab(%rip), %rdx */
	cmpq $FC_TCTX_BYTES, %rdx
	jae kprw_ir.\t\().decline
	testb $((1 << SH_TCTX) - 1), %dl
	jnz kprw_ir.\t\().decline
	cmpq %r9, (%rcx)
	jne kprw_ir.\t\().decline
	movl %fs:FC_TCB_TID, %eax
	cmpq OF_TCTX_TID(%rcx), %rax
	jne kprw_ir.\t\().decline
	/* the CPU: the record's first word's bits 32-47 */
	RIP \t, rt.4, OF_RT_CPU_RSEQ, 0x4c, 0x8b, 0x0d	/* movq cpu_rseq(%rip), %r9 */
	movl %fs:4(%r9), %r9d
	testl %r9d, %r9d
	js kprw_ir.\t\().decline
	andl $0xfff, %r9d
	shlq $32, %r9
	/* the thread's kprw_tblk (the context's index, times 64, into the block table) */
	movq %rdx, %r10
	RIP \t, tblk.1, 0, 0x4c, 0x03, 0x15	/* addq kprw_tblk_tab(%rip), %r10 */
	/* the time from the thread's copy of the clock (optprobe.S's TCLK_NOW) */
	movl OF_TBLK_TSEQ(%r10), %edx
	movq %r11, %rax
	subq OF_TBLK_TSC(%r10), %rax
	cmpq OF_TBLK_TSPAN(%r10), %rax
	jae kprw_ir.\t\().decline
	imulq OF_TBLK_TMULT(%r10), %rax
	shrq $32, %rax
	addq OF_TBLK_TREL(%r10), %rax
	cmpl OF_TBLK_TSEQ(%r10), %edx
	jne kprw_ir.\t\().decline
	/* rlen (8n | KPRW_CREC_HIT) and the record's size (16 + 8n) */
	.byte 0x49, 0x81, 0xc9			/* orq $rlen, %r9 */
kprw_ir.\t\().rlen:
	.long 0
	.byte 0x41, 0xbb			/* movl $size, %r11d */
kprw_ir.\t\().size:
	.long 0
	/* the place: one xadd on the thread's block word (optprobe.S's PLACE) */
	movq %r11, %rdx
	xaddq %rdx, (%r10)
	incq OF_TBLK_NREC(%r10)
	movq %rdx, %r10
	shrq $FC_REC_END_SHIFT, %r10
	shlq $12, %r10
	shlq $(64 - FC_REC_END_SHIFT), %rdx
	shrq $(64 - FC_REC_END_SHIFT), %rdx
	addq %rdx, %r11
	cmpq %r10, %r11
	ja kprw_ir.\t\().decline_placed
	RIP \t, rt.3, OF_RT_TRACE_DATA, 0x48, 0x03, 0x15	/* addq trace_data(%rip), %rdx */
	prefetchw FC_REC_AHEAD(%rdx)
	/* the fixed part (optprobe.S's TS_STORE) */
	movq %r9, (%rdx)
	movl %eax, 8(%rdx)
	shrq $32, %rax
	movw %ax, 6(%rdx)
	.byte 0xc7, 0x42, 0x0c			/* movl $pi, 12(%rdx) */
kprw_ir.\t\().pi:
	.long 0
kprw_ir.\t\().data:
	/* the commit word last */
	.byte 0x66, 0xc7, 0x42, 0x02		/* movw $commit, 2(%rdx) */
kprw_ir.\t\().commit:
	.short 0
	RESTORE \flags
	popq %rcx
	leaq 128(%rsp), %rsp
kprw_ir.\t\().end:
.endm

	INLINEREC f, 1
	INLINEREC nf, 0
