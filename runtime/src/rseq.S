/*
 * rseq.S - the per-CPU hit counting of count-only detours (src/countprobe.S,
 * CountDetour): a restartable sequence (rseq(2)) on the thread's rseq area, which glibc
 * (>= 2.35) registers for every thread, so a hit is counted without a locked
 * instruction, exactly, the way the kernel counts per CPU with preemption disabled.
 *
 * kprewrite_rt_rseq_count: %rcx = kprewrite_rt_rseq_off (the area's offset from the
 * thread pointer, never 0 here), %rdx = the counter's byte offset in a CPU's shard.
 * Adds 1 to kprewrite_rt_rseq_shardtab[cpu_id & 255][%rdx] (start-up uses rseq only with at most 254
 * possible CPUs; the other entries, which a thread whose registration failed reads as
 * cpu_id -1 or -2, name a shard of their own): the critical section arms rseq_cs, reads
 * cpu_id, finds the CPU's shard and increments it with one instruction, the commit; a
 * preemption, migration or signal between the arming and the commit makes the kernel
 * resume at the abort handler, which starts over. Clobbers %rdx and the arithmetic
 * flags (the detour saves them where they are live), nothing else. Start-up
 * (rt_rseq.c) fills kprw_rseq_cs and kprewrite_rt_rseq_shardtab, then sets kprewrite_rt_rseq_off;
 * until then (and without rseq) detours increment the trace file's counters with lock
 * incq instead.
 */
	.section .note.GNU-stack,"",@progbits

	.bss
	.balign 8
	.globl kprewrite_rt_rseq_off
	.hidden kprewrite_rt_rseq_off
	.type kprewrite_rt_rseq_off,@object
kprewrite_rt_rseq_off:
	.quad 0
	.size kprewrite_rt_rseq_off, 8
	/* struct rseq_cs {u32 version, flags; u64 start_ip, post_commit_offset, abort_ip} */
	.balign 32
	.globl kprw_rseq_cs
	.hidden kprw_rseq_cs
	.type kprw_rseq_cs,@object
kprw_rseq_cs:
	.zero 32
	.size kprw_rseq_cs, 32

	.text
	.globl kprewrite_rt_rseq_count
	.hidden kprewrite_rt_rseq_count
	.type kprewrite_rt_rseq_count,@function
	.globl kprw_rseq_start
	.hidden kprw_rseq_start
	.globl kprw_rseq_post
	.hidden kprw_rseq_post
	.globl kprw_rseq_abort
	.hidden kprw_rseq_abort
	.balign 16
kprewrite_rt_rseq_count:
	pushq %rsi
	pushq %rdi
	leaq kprw_rseq_cs(%rip), %rsi
.Larm:
	movq %rsi, %fs:8(%rcx)		/* rseq->rseq_cs */
kprw_rseq_start:
	movzbl %fs:4(%rcx), %esi	/* rseq->cpu_id, its low byte: the table has 256 entries */
	leaq kprewrite_rt_rseq_shardtab(%rip), %rdi
	movq (%rdi,%rsi,8), %rdi
	incq (%rdi,%rdx)		/* the commit */
kprw_rseq_post:
	popq %rdi
	popq %rsi
	ret
	.long 0x53053053		/* RSEQ_SIG: the kernel checks it before the abort handler */
kprw_rseq_abort:
	leaq kprw_rseq_cs(%rip), %rsi
	jmp .Larm
	.size kprewrite_rt_rseq_count, .-kprewrite_rt_rseq_count
