/*
 * countprobe.S - the templates of count-only detours (KPRW_PF_COUNT; what each does is in
 * "Count-only detours", include/kprewrite_abi.h), as optprobe.S is the template of
 * jump-optimized ones.
 *
 * Never executed in place, never linked: the section is not allocated, so an output
 * carries none of it. The rewriter (trampolines/countdetour.go) reads each template
 * by its labels, the local symbols kprw_cd.<template>.<label>:
 *   start, end      the template's bytes, [start, end)
 *   entry           where the site's jmp lands
 *   repN, repN.end  a region copied once per probe on the point (N = 1, 2)
 *   rel8.N rel32.N  the displacement of a jump inside the template that crosses a
 *                   repeated region: moved by the rewriter when the regions grow
 *   ctr             rel32: the probe's hit counter in the counter window (lock incq)
 *   shard           imm32/disp32: the probe's byte offset in a CPU's shard
 *   call            rel32: kprewrite_rt_rseq_count
 *   off, off.2      rel32: kprewrite_rt_rseq_off
 *   cs              imm32: the point's struct rseq_cs (inline form)
 *   shardtab        disp32: kprewrite_rt_rseq_shardtab (inline form)
 *   csrel           rel32: the point's struct rseq_cs (inline PIC form)
 *   shardtabrel     rel32: kprewrite_rt_rseq_shardtab (inline PIC form)
 *   abort, rseq_start, rseq_post   what the inline form's struct rseq_cs holds
 * Fields are zero here and written as raw bytes where an instruction would otherwise
 * need a relocation. The relocated DCR and a jmp back follow each copy.
 *
 * Templates: locked (lock incq only, no per-CPU counting), short (per-CPU calls that a
 * jrcxz rel8 skips: at most KPRW_COUNT_SHORT_N probes), long (more probes), inline (one
 * probe, its own restartable sequence, in an image at fixed addresses), inlinepic (the
 * same anywhere); each with the flags live, and with _nf when the analysis proved them
 * dead at the site.
 */
#include "countprobe.h"
#include "kprewrite_abi.h"

	.section .note.GNU-stack,"",@progbits
	.section .kprw_templates,"",@progbits

/* below the red zone, then the arithmetic flags into %al/%ah where they are live */
.macro SAVE flags
	leaq -128(%rsp), %rsp
	.if \flags
	pushq %rax
	lahf
	seto %al
	.endif
.endm

.macro RESTORE flags
	.if \flags
	addb $0x7f, %al		/* OF again: 1 + 0x7f overflows, 0 + 0x7f does not */
	sahf
	popq %rax
	.endif
	leaq 128(%rsp), %rsp
.endm

/* jmp rel8, written out: the size of a jmp instruction is chosen after the CHECKs */
.macro JMP8 target
	.byte 0xeb, (\target) - . - 1
.endm

/* jmp rel32, even where a rel8 would reach: the repeated regions grow */
.macro JMP32 target
	.byte 0xe9
	.long (\target) - . - 4
.endm

/* the length of [from, to) must be len */
.macro CHECK from, to, len
	.if (\to) - (\from) != (\len)
	.error "countprobe.S: a layout the runtime reads moved (countprobe.h)"
	.endif
.endm

.macro LOCKED t, flags
kprw_cd.\t\().start:
kprw_cd.\t\().entry:
	.if \flags
	SAVE 1
	.endif
kprw_cd.\t\().rep1:
	lock incq 0(%rip)
kprw_cd.\t\().ctr = . - 4
kprw_cd.\t\().rep1.end:
	CHECK kprw_cd.\t\().rep1, kprw_cd.\t\().rep1.end, KPRW_CD_INC_LEN
	.if \flags
	RESTORE 1
	.endif
kprw_cd.\t\().end:
.endm

/* push %rcx; mov kprewrite_rt_rseq_off(%rip),%rcx: zero until start-up has armed the
 * per-CPU counting */
.macro HEAD t
	pushq %rcx
	movq 0(%rip), %rcx
kprw_cd.\t\().off = . - 4
.endm

/* mov $shard,%edx; call kprewrite_rt_rseq_count, once per probe */
.macro CALLS t, n
	pushq %rdx
kprw_cd.\t\().rep\n:
	.byte 0xba		/* movl $shard, %edx */
	.long 0
kprw_cd.\t\().shard = . - 4
	.byte 0xe8		/* call kprewrite_rt_rseq_count */
	.long 0
kprw_cd.\t\().call = . - 4
kprw_cd.\t\().rep\n\().end:
	CHECK kprw_cd.\t\().rep\n, kprw_cd.\t\().rep\n\().end, KPRW_CD_CALL_LEN
	popq %rdx
.endm

/* jrcxz over the calls to the locked increments */
.macro SHORT t, flags
kprw_cd.\t\().start:
kprw_cd.\t\().entry:
	SAVE \flags
	HEAD \t
	jrcxz 1f
kprw_cd.\t\().rel8.1 = . - 1
	CHECK kprw_cd.\t\().start, ., (KPRW_CD_REDZONE_LEN+\flags*KPRW_CD_FLAGS_LEN+KPRW_CD_HEAD_LEN)
	CALLS \t, 1
	JMP32 2f
kprw_cd.\t\().rel32.1 = . - 4
1:
kprw_cd.\t\().rep2:
	lock incq 0(%rip)
kprw_cd.\t\().ctr = . - 4
kprw_cd.\t\().rep2.end:
2:	popq %rcx
	RESTORE \flags
kprw_cd.\t\().end:
.endm

/* more probes than a jrcxz reaches over: jrcxz over one jmp to the calls */
.macro LONG t, flags
kprw_cd.\t\().start:
kprw_cd.\t\().entry:
	SAVE \flags
	HEAD \t
	jrcxz 1f
	JMP32 3f
kprw_cd.\t\().rel32.1 = . - 4
1:
	CHECK kprw_cd.\t\().start, ., (KPRW_CD_REDZONE_LEN+\flags*KPRW_CD_FLAGS_LEN+KPRW_CD_HEAD_LEN+KPRW_CD_JMP_LEN)
kprw_cd.\t\().rep1:
	lock incq 0(%rip)
kprw_cd.\t\().ctr = . - 4
kprw_cd.\t\().rep1.end:
	JMP32 2f
kprw_cd.\t\().rel32.2 = . - 4
3:	CALLS \t, 2
2:	popq %rcx
	RESTORE \flags
kprw_cd.\t\().end:
.endm

/* one probe counted in its own restartable sequence; the cold part (the signature the
 * kernel checks before the abort handler, the abort handler, the locked increment)
 * before the entry, so the hot path runs straight through. INLINE_HEAD is the part both
 * inline forms share: through the jrcxz to the locked increment; the restart is the
 * caller's label 1, the pop of %rcx its label 2. */
.macro INLINE_HEAD t, flags
kprw_cd.\t\().start:
	.long 0x53053053	/* RSEQ_SIG */
kprw_cd.\t\().abort:
	movq 0(%rip), %rcx
kprw_cd.\t\().off = . - 4
	JMP8 1f
	CHECK kprw_cd.\t\().start, ., KPRW_CDI_LOCKED
	lock incq 0(%rip)
kprw_cd.\t\().ctr = . - 4
	JMP8 2f
kprw_cd.\t\().entry:
	CHECK kprw_cd.\t\().start, kprw_cd.\t\().entry, KPRW_CDI_ENTRY
	SAVE \flags
	pushq %rcx
	movq 0(%rip), %rcx
kprw_cd.\t\().off.2 = . - 4
	jrcxz kprw_cd.\t\().start+KPRW_CDI_LOCKED
.endm

.macro INLINE t, flags
	INLINE_HEAD \t, \flags
1:	/* restart: rseq->rseq_cs = cs */
	movq $0, %fs:8(%rcx)
kprw_cd.\t\().cs = . - 4
kprw_cd.\t\().rseq_start:
	movzbl %fs:4(%rcx), %ecx	/* rseq->cpu_id, low byte */
	movq 0(,%rcx,8), %rcx		/* this CPU's shard */
kprw_cd.\t\().shardtab = . - 4
	CHECK kprw_cd.\t\().entry, ., (KPRW_CD_REDZONE_LEN+\flags*KPRW_CD_FLAGS_LEN+KPRW_CDI_COMMIT)
	{disp32} incq 0(%rcx)		/* the commit */
kprw_cd.\t\().shard = . - 4
	CHECK (kprw_cd.\t\().shard+4-KPRW_CD_COMMIT_LEN), (kprw_cd.\t\().shard+4), KPRW_CD_COMMIT_LEN
kprw_cd.\t\().rseq_post:
2:	popq %rcx
	RESTORE \flags
kprw_cd.\t\().end:
.endm

/* the inline form for an image loaded anywhere (PIE, shared library): the descriptor
 * (in writable memory: the runtime writes its absolute addresses at start-up, see
 * kprewrite_rt_rseq_fix) and the shard table are reached PC-relatively, through %rdx */
.macro INLINEPIC t, flags
	INLINE_HEAD \t, \flags
	pushq %rdx
1:	/* restart: rseq->rseq_cs = cs */
	leaq 0(%rip), %rdx
kprw_cd.\t\().csrel = . - 4
	movq %rdx, %fs:8(%rcx)
kprw_cd.\t\().rseq_start:
	movzbl %fs:4(%rcx), %ecx	/* rseq->cpu_id, low byte */
	leaq 0(%rip), %rdx
kprw_cd.\t\().shardtabrel = . - 4
	movq (%rdx,%rcx,8), %rcx	/* this CPU's shard */
	CHECK kprw_cd.\t\().entry, ., (KPRW_CD_REDZONE_LEN+\flags*KPRW_CD_FLAGS_LEN+KPRW_CDI_PIC_COMMIT)
	{disp32} incq 0(%rcx)		/* the commit */
kprw_cd.\t\().shard = . - 4
	CHECK (kprw_cd.\t\().shard+4-KPRW_CD_COMMIT_LEN), (kprw_cd.\t\().shard+4), KPRW_CD_COMMIT_LEN
kprw_cd.\t\().rseq_post:
	popq %rdx
2:	popq %rcx
	RESTORE \flags
kprw_cd.\t\().end:
.endm

	LOCKED locked, 1
	LOCKED locked_nf, 0
	SHORT short, 1
	SHORT short_nf, 0
	LONG long, 1
	LONG long_nf, 0
	INLINE inline, 1
	INLINE inline_nf, 0
	INLINEPIC inlinepic, 1
	INLINEPIC inlinepic_nf, 0
