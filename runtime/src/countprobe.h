/*
 * countprobe.h - offsets in the count-only detours that the runtime itself reads
 * (rt_init.c, count_layout: where to write nops over a disabled probe's counting).
 * countprobe.S, which the rewriter copies the detours from, fails to assemble when
 * one of them is not where these say.
 */
#ifndef KPREWRITE_COUNTPROBE_H
#define KPREWRITE_COUNTPROBE_H

#define KPRW_CD_REDZONE_LEN 5 /* lea -128(%rsp),%rsp */
#define KPRW_CD_FLAGS_LEN 5   /* push %rax; lahf; seto %al: the flags live */
#define KPRW_CD_HEAD_LEN 10   /* push %rcx; mov kprewrite_rt_rseq_off(%rip),%rcx; jrcxz */
#define KPRW_CD_JMP_LEN 5     /* jmp rel32 */
#define KPRW_CD_INC_LEN 8     /* lock incq hit(%rip): one a probe */
#define KPRW_CD_CALL_LEN 10   /* mov $off,%edx; call kprewrite_rt_rseq_count: one a probe */
#define KPRW_CD_COMMIT_LEN 7  /* the inline form's incq off(%rcx) */

/* the inline form (one probe, its own restartable sequence) */
#define KPRW_CDI_LOCKED 13 /* its lock incq, in the cold part */
#define KPRW_CDI_ENTRY 23  /* where the site's jmp lands */
#define KPRW_CDI_COMMIT 32 /* its commit, after the entry's red zone and flags */
#define KPRW_CDI_PIC_COMMIT 39 /* the PIC inline form's (push %rdx after the head: 0x52) */

#endif
