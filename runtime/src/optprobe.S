/*
 * optprobe.S - the detour of jump-optimized probes (the pattern of the kernel's
 * optprobe_template_entry/_val/_call/_end in arch/x86/kernel/kprobes/opt.c), in two
 * parts: a small per-point stub and one shared body.
 *
 * The stub, kprewrite_rt_optprobe_template .. kprewrite_rt_optprobe_template_end, is never
 * executed in place: the rewriter copies it into each probe's detour buffer, patches its
 * three 4-byte fields (kprw_optt_gate, kprw_optt_index, kprw_optt_call; written as raw
 * bytes so the object carries no relocation for them), appends the relocated DCR and a
 * jmp back to site + DCR length, and points the site's jmp rel32 at kprw_optt_entry.
 * The kernel copies its whole template into each probe; here the register save and
 * restore are shared (kprewrite_rt_optprobe_body): a program with thousands of hot
 * points keeps one copy of them in its caches instead of thousands (python3.11 with
 * every function probed: 13,400 detours of ~200 bytes each; 33 now).
 *
 * At the entry %rsp = S, the program's stack pointer at the probe address.
 *   1. lea -128(%rsp): every push goes below the 128-byte red zone.
 *   2. The gate (u32 in the first probe's kprw_probe_state, zero until start-up arms
 *      the point) is tested with jrcxz, which touches no flags: a disarmed point costs
 *      a push, a load, a pop and two jumps, and runs correctly before start-up (an
 *      IRELATIVE resolver or a library constructor calling in).
 *   3. %ecx = the point index, call the body: the stack holds the return address into
 *      the stub and the program's %rcx (S-144, S-136). The body first tries its fast
 *      path (below: a hot event's or exit's record in assembly, with 8 registers and
 *      the flags saved, no C). When that declines, it builds struct pt_regs
 *      below them in the kernel's layout (ip is filled in by C: site + 1, as after an
 *      int3; cs 0x33, ss 0x2b, sp = S, orig_ax -1), aligns the stack to 16, clears DF
 *      and calls kprewrite_rt_optcall(regs, point index). 184 bytes + up to 8 of
 *      alignment + the C frames, below the red zone.
 *   4. It returns 0: registers come back from pt_regs (handlers' writes take effect;
 *      %rcx through its stack word, which the stub pops), and the arithmetic flags too,
 *      with lahf/sahf arithmetic instead of popfq (5 ns here): OF via "add $0x7f" on 0
 *      or 8, SF ZF AF PF CF via sahf. The other flags are as they were at the entry:
 *      nothing here changes them except DF, and C returns 1 when DF was set. The body
 *      returns into the stub, which pops %rcx, sets %rsp = S and falls into the DCR
 *      copy. It returns 1: resume wherever pt_regs says, with every register, %rsp and
 *      the flags from it, through iretq (legal from ring 3 to ring 3 with the pt_regs
 *      ip/cs/flags/sp/ss tail, which is an iret frame; ~40 ns): a pre handler that
 *      returned non-zero (kprobes redirection: resume at regs->ip), a handler that
 *      changed regs->sp, or DF set at the probe (then ip = the DCR copy, right after
 *      the stub).
 */
#include "ptregs.h"
#include "optfast.h"
	.section .note.GNU-stack,"",@progbits

	.text
	.globl kprewrite_rt_optprobe_template
	.hidden kprewrite_rt_optprobe_template
	.type kprewrite_rt_optprobe_template,@function
	.globl kprewrite_rt_optprobe_template_end
	.hidden kprewrite_rt_optprobe_template_end
	.balign 16
kprewrite_rt_optprobe_template:
kprw_optt_entry:
	leaq -128(%rsp), %rsp
	pushq %rcx
	.byte 0x8b, 0x0d	/* movl gate(%rip), %ecx */
kprw_optt_gate:
	.long 0
	jrcxz 1f		/* disarmed: run the DCR copy */
	.byte 0xb9		/* movl $index, %ecx */
kprw_optt_index:
	.long 0
	.byte 0xe8		/* call kprewrite_rt_optprobe_body */
kprw_optt_call:
	.long 0
1:	popq %rcx
	leaq 128(%rsp), %rsp
kprewrite_rt_optprobe_template_end:
	/* the relocated DCR and the jmp back go here in each copy */
	.size kprewrite_rt_optprobe_template, .-kprewrite_rt_optprobe_template


/* FAST_SAVE saves what the fast paths use: %rax, the arithmetic flags (lahf's SF ZF AF
 * PF CF, seto's OF), %rdx %rsi %rdi %r8-%r11; 72 bytes (FAST_RESTORE's frame) */
	.macro FAST_SAVE
	pushq %rax
	lahf
	seto %al
	pushq %rdx
	pushq %rsi
	pushq %rdi
	pushq %r8
	pushq %r9
	pushq %r10
	pushq %r11
	pushq %rax
	.endm

/* FAST_RESTORE puts back what the fast path saved: the arithmetic flags (lahf's SF ZF
 * AF PF CF by sahf, seto's OF by "add $0x7f" on 0 or 1: no popfq, 5 ns here) and the
 * registers it uses */
	.macro FAST_RESTORE
	popq %rax
	addb $0x7f, %al
	sahf
	popq %r11
	popq %r10
	popq %r9
	popq %r8
	popq %rdi
	popq %rsi
	popq %rdx
	popq %rax
	.endm

/* TBLK puts the address of the thread's struct kprw_tblk (its context at %rsi) in reg */
	.macro TBLK reg
	movq %rsi, \reg
	subq kprw_tctx_tab(%rip), \reg	/* (the context's index * 64, a kprw_tblk's size too) */
	addq kprw_tblk_tab(%rip), \reg
	.endm

/* REC_SPLIT splits a thread's block word in place into its place, and the block's end
 * into end (rec_end) */
	.macro REC_SPLIT place, end
	movq \place, \end
	shrq $FC_REC_END_SHIFT, \end
	shlq $12, \end
	shlq $(64 - FC_REC_END_SHIFT), \place
	shrq $(64 - FC_REC_END_SHIFT), \place
	.endm

/* RSTACK puts the address of this image's return stack of the thread (its context at
 * %rsi) in reg: kprw_rs_tab[the context's index] (the context's offset, index << SH_TCTX,
 * shifted to the stack's: index << SH_RSTACK) */
	.macro RSTACK reg
	movq %rsi, \reg
	subq kprw_tctx_tab(%rip), \reg
	shlq $(SH_RSTACK - SH_TCTX), \reg
	addq kprw_rs_tab(%rip), \reg
	.endm

/* HOT_OPEN checks that the line's open word at open(%rdi) holds the trace header's
 * sw_gen: hot_line_open (rt_hot.h) found the line's probe and event open under it (the
 * probe on, records hit and need no ext part, no control change, tracing on, the event
 * not soft-disabled) and no switch changed since, for each writer bumps sw_gen after
 * it (kprw_sw_bump); else to fail, where the C path looks again. One compare instead of
 * the switches' loads: the probe's state and the event's soft-disable word were two
 * cache lines more a record with thousands of hot points (issue 49). The clock is its
 * users' to check: both read the TSC only with clk_tsc set, and CLOCK_NOW checks for
 * the counter. With cfg (kprw_rt.fast_cfg: sw_gen is there) no test of the pointer.
 * Uses %rax. */
	.macro HOT_OPEN open, fail, cfg=0
	movq kprw_rt+OF_RT_SW_GEN(%rip), %rax
	.if !\cfg
	testq %rax, %rax
	jz \fail		/* (no file of version 5: nothing is found open) */
	.endif
	movq (%rax), %rax
	cmpq %rax, \open(%rdi)
	jne \fail
	.endm

/* TCTX_HASH puts the address of the context slot of key %r9's hash in %rsi */
	.macro TCTX_HASH
	movabsq $FC_TCTX_HASH, %rsi
	imulq %r9, %rsi
	shrq $FC_TCTX_HASH_SHIFT, %rsi
	shlq $SH_TCTX, %rsi
	addq kprw_tctx_tab(%rip), %rsi
	.endm

/* TCTX_FIND finds the thread's context, no handler of ours running, its tid still the
 * TCB's (hot_fast_tctx): %rsi, its key in %r9; else to fail. With glibc's TCB
 * (kprw_rt.tcb_slot, rt_thread.c) the TCB's word names it: one load, checked to point
 * into the table before anything is read through it, then its key and glibc's tid
 * (%fs:0 the key, as tcb_slot_check saw); a miss finds it at its hash's slot and names
 * it there for the thread's next hits. The hash chain (the thread pointer, a multiply,
 * the slot's key) and the learned tid offsets' loop cost ~5 ns a hit on a Zen 3 (issue 49).
 * With cfg (kprw_rt.fast_cfg: the TCB's word is in use) the word's place is a constant. */
	.macro TCTX_FIND fail, cfg=0
	.if \cfg
	movq %fs:0, %r9
	movq %fs:FC_TCB_SLOT, %rsi
	.else
	movl kprw_rt+OF_RT_TCB_SLOT(%rip), %eax
	testl %eax, %eax
	jz 13f
	movq %fs:0, %r9
	movq %fs:(%rax), %rsi
	.endif
	movq %rsi, %rdx
	subq kprw_tctx_tab(%rip), %rdx
	cmpq $FC_TCTX_BYTES, %rdx
	jae 26f			/* (0, or not ours: never read through) */
	testl $((1 << SH_TCTX) - 1), %edx
	jnz 26f			/* (not a context's start: not ours either) */
	cmpq %r9, (%rsi)
	jne 26f
	/* no handler running and glibc's tid: busy follows tid (optfast.h), so one compare
	 * of the two words with the tid zero-extended */
27:	movl %fs:FC_TCB_TID, %eax
	cmpq OF_TCTX_TID(%rsi), %rax
	jne \fail
28:
	/* the rest out of the hot path's line (.subsection 1: after the body) */
	.subsection 1
	/* not named yet: by its hash, and named in a TCB of glibc's shape (self at 0x10:
	 * a TLS block a raw clone set up is not written); a dead thread's context named
	 * there fails the tid check, and the slow path renews it for this thread */
26:	testq %r9, %r9
	jle \fail
	TCTX_HASH
	cmpq %r9, (%rsi)
	jne \fail
	cmpq %r9, %fs:FC_TCB_SELF
	jne 27b
	.if \cfg
	movq %rsi, %fs:FC_TCB_SLOT
	jmp 27b
	.else
	movl kprw_rt+OF_RT_TCB_SLOT(%rip), %eax
	movq %rsi, %fs:(%rax)
	jmp 27b
13:	movl kprw_rt+OF_RT_KEYMODE(%rip), %eax
	cmpl $FC_KEY_FS0, %eax
	jne 14f
	movq %fs:0, %r9		/* (TLS is set up: the mode says so) */
	jmp 29f
14:	cmpl $FC_KEY_FSBASE, %eax
	jne \fail
	rdfsbase %r9
29:	testq %r9, %r9
	jle \fail		/* none, or a tid key */
	TCTX_HASH
	cmpq %r9, (%rsi)
	jne \fail
	cmpl $0, OF_TCTX_BUSY(%rsi)
	jne \fail
	movq kprw_tsh(%rip), %r10
	movl OF_TSH_LIVE(%r10), %edx
	testl %edx, %edx
	jz \fail
3:	bsfl %edx, %eax
	movslq OF_TSH_OFF(%r10,%rax,4), %rax
	movl (%r9,%rax), %eax
	cmpl OF_TCTX_TID(%rsi), %eax
	jne \fail
	leal -1(%rdx), %eax
	andl %eax, %edx
	jnz 3b
	jmp 28b
	.endif
	.subsection 0
	.endm

/* CPU_WORD puts the CPU (kprw_cpu_fast) in %r9's bits 32-47, the record's first word;
 * with cfg (kprw_rt.fast_cfg: the rseq area's offset is in kprw_rt.cpu_rseq) the area's
 * cpu_id, no rdpid (CPU_RSEQ) */
	.macro CPU_WORD fail, cfg=0
	.if \cfg
	CPU_RSEQ %r9, \fail
	.else
	cmpl $0, kprw_rt+OF_RT_HAS_RDPID(%rip)
	je 4f
	rdpid %rax
5:	andl $0xfff, %eax
	shlq $32, %rax
	movq %rax, %r9
	.subsection 1
4:	movq kprewrite_rt_rseq_off(%rip), %rax
	testq %rax, %rax
	jz \fail
	movl %fs:4(%rax), %eax	/* struct rseq's cpu_id */
	testl %eax, %eax
	js \fail
	jmp 5b
	.subsection 0
	.endif
	.endm

/* CPU_RSEQ puts the CPU in reg's bits 32-47 from the cpu_id of the thread's rseq area
 * at kprw_rt.cpu_rseq (kprw_cpu_fast's second way: one load on every CPU, where rdpid
 * is missing on some and on some VMs' CPU models); a thread whose area is not
 * registered (cpu_id -1 or -2) to fail. The configured paths' (fast_cfg), where the
 * thread's glibc TCB was checked already (TCTX_FIND): the area is in it. */
	.macro CPU_RSEQ reg, fail
	movq kprw_rt+OF_RT_CPU_RSEQ(%rip), \reg
	movl %fs:4(\reg), \reg\()d
	testl \reg\()d, \reg\()d
	js \fail
	andl $0xfff, \reg\()d
	shlq $32, \reg
	.endm

/* NOW_CHECK (the counter's and mono's: CLOCK_NOW): the comm younger than its refresh (the
 * time %rax at most the context's comm_dl, which is 0 before the first read), and the
 * time less ts_base, the record's,
 * in %rax, between 1 and 1 << FC_TS_FAST_BITS: no ext part (hot_record; the C path
 * writes the rare records past it, 39 hours after ts_base). Uses %rdx. */
	.macro NOW_CHECK fail
	cmpq OF_TCTX_COMM_DL(%rsi), %rax
	ja \fail
	subq kprw_rt+OF_RT_TS_BASE(%rip), %rax
	leaq -1(%rax), %rdx
	shrq $FC_TS_FAST_BITS, %rdx
	jnz \fail
	.endm

/* RAW_TSC reads the TSC into %r11 (TCLK_NOW converts it), first, so that rdtsc's
 * latency overlaps the checks that do not depend on it. Uses %rax %rdx. */
	.macro RAW_TSC
	rdtsc
	shlq $32, %rdx
	orq %rdx, %rax
	movq %rax, %r11
	.endm

/* MAYBE_TSC is RAW_TSC with the TSC clock, else %r11 = 0 (CLOCK_NOW then takes the
 * counter); the choice holds for the record, whatever clk_tsc says later. Uses %rax
 * %rdx. */
	.macro MAYBE_TSC
	xorl %r11d, %r11d
	cmpl $0, kprw_rt+OF_RT_CLK_TSC(%rip)
	je .Lmaybe\@
	RAW_TSC
.Lmaybe\@:
	.endm

/* COUNTER_NOW takes the counter clock's time (kprw_clock_slow's) for the record of the
 * line at %rdi, less ts_base, in %rax: one count of the trace file's, by lock xadd, for a
 * thread (its context at %rsi, its kprw_tblk at %r10) whose comm was read already (its
 * age is then counted in counts, as the C path counts it) and whose block has room for
 * the largest record the line writes (16 + dlen and a word, 32 + dlen bounds it): a
 * count taken and then declined would leave a gap in the counts; else to fail. The
 * counter clock's (CLOCK_NOW tests kprw_clk_counter). Uses %rax %rdx %r11. */
	.macro COUNTER_NOW fail
	cmpq $0, OF_TCTX_COMM_NS(%rsi)
	je \fail
	movq (%r10), %rdx
	REC_SPLIT %rdx, %rax
	movl OF_HOT_DLEN(%rdi), %r11d
	leaq 32(%rdx,%r11), %rdx	/* the place and the largest size this record takes */
	cmpq %rax, %rdx
	ja \fail
	movq kprw_clk_counter(%rip), %r11
	movl $1, %eax
	lock xaddq %rax, (%r11)
	incq %rax		/* (a time's form: NOW_CHECK takes ts_base off) */
	/* the comm younger than its refresh, a time that needs no ext part (hot_record) */
	NOW_CHECK \fail
	.endm

/* MONO_NOW takes the mono clock's time (kprw_clock_slow's: the vDSO's
 * clock_gettime(CLOCK_MONOTONIC), kprw_vdso_gettime) for the record, less ts_base, in
 * %rax, for a thread whose comm was read already; else (no vDSO function, as under
 * valgrind; DF set, which the vDSO's C may not meet; the call failed: the C path's
 * syscall) to fail. The call keeps %rcx (the stub's index, or a returning function's
 * register), %rdi, %rsi, %r8, %r9 and %r10 on the stack, aligned to 16 with the
 * timespec below the frame; the vDSO leaves the vector registers alone (rt_clock.c).
 * ~30 ns of the call against ~50 more through C. Uses %rax %rdx %r11. */
	.macro MONO_NOW fail
	cmpq $0, kprw_vdso_gettime(%rip)
	je \fail
	cmpq $0, OF_TCTX_COMM_NS(%rsi)
	je \fail
	pushfq
	testl $0x400, (%rsp)
	leaq 8(%rsp), %rsp
	jnz \fail
	pushq %rcx
	pushq %rdi
	pushq %rsi
	pushq %r8
	pushq %r9
	pushq %r10
	movq %rsp, %r11
	andq $-16, %rsp
	subq $32, %rsp		/* 16(%rsp) the timespec, 8(%rsp) the frame's %rsp */
	movq %r11, 8(%rsp)
	movl $1, %edi		/* CLOCK_MONOTONIC */
	leaq 16(%rsp), %rsi
	call *kprw_vdso_gettime(%rip)
	imulq $1000000000, 16(%rsp), %rdx
	addq 24(%rsp), %rdx
	movq 8(%rsp), %rsp
	popq %r10
	popq %r9
	popq %r8
	popq %rsi
	popq %rdi
	popq %rcx
	testq %rax, %rax
	jnz \fail
	movq %rdx, %rax
	NOW_CHECK \fail
	.endm

/* CLOCK_NOW is the record's time after MAYBE_TSC: TCLK_NOW of the TSC it read, or the
 * counter's (COUNTER_NOW), or mono's (MONO_NOW) */
	.macro CLOCK_NOW fail
	testq %r11, %r11
	jz .Lcnt\@
	TCLK_NOW \fail
	jmp .Lnow\@
.Lcnt\@:
	cmpq $0, kprw_clk_counter(%rip)
	je .Lmono\@
	COUNTER_NOW \fail
	jmp .Lnow\@
.Lmono\@:
	MONO_NOW \fail
.Lnow\@:
	.endm

/* TCLK_NOW makes the TSC read by RAW_TSC (%r11) the record's time, less ts_base, in
 * %rax with the thread's copy of the clock in its kprw_tblk at %r10 (kprw_tclk_refresh,
 * rt_clock.c): within the copy's span (which ends within kprw_clk's, before the
 * thread's comm_dl and below 1 << FC_TS_FAST_BITS) the time kprw_tsc_ns gives, less
 * ts_base, from the same anchor, with eight fewer instructions than kprw_clk's seqlock
 * and NOW_CHECK's tests and no line shared with other threads; else to fail, where the
 * C path refreshes the copy. A span of 0 (none, or a refresh under
 * way: it is zeroed first) fails the compare; tc_seq moved (a signal handler's refresh
 * between the loads) fails the last. Uses %rdx. */
	.macro TCLK_NOW fail
	movl OF_TBLK_TSEQ(%r10), %edx
	movq %r11, %rax
	subq OF_TBLK_TSC(%r10), %rax
	cmpq OF_TBLK_TSPAN(%r10), %rax
	jae \fail		/* (a TSC behind the copy's too: the difference wraps) */
	/* below the span, delta * mult < the interval << 32 <= 2^58 (rt_clock.c): the
	 * product's low word is all of it, and imul's chain is shorter than mul's and shrd's,
	 * which waited for rdtsc's result (each cycle after it counts in full) */
	imulq OF_TBLK_TMULT(%r10), %rax
	shrq $32, %rax
	addq OF_TBLK_TREL(%r10), %rax
	cmpl OF_TBLK_TSEQ(%r10), %edx
	jne \fail
	.endm

/* TS_STORE writes the record's fixed part at %rdx: the first word (%r9: rlen, commit 0,
 * the CPU), the time (%rax) as ts_hi and ts_lo apart, and the probe at pi(%rdi). Two
 * stores of the time as it came, not one word packed with the probe: what waits for
 * rdtsc's result (the shifts and ors of the packing did) is what a record pays in full.
 * Uses %rax, flags. */
	.macro TS_STORE pi
	movq %r9, (%rdx)
	movl %eax, 8(%rdx)
	shrq $32, %rax
	movw %ax, 6(%rdx)
	movl \pi(%rdi), %eax
	movl %eax, 12(%rdx)
	.endm

/* PLACE takes the record's place (%r11 bytes): one xadd on the thread's block word,
 * which says the block's end too (reserve): its address in %rdx; past the block's end
 * (never written) to fail, which takes the count back (PLACE_FAIL). The record is
 * counted in the thread's kprw_tblk, on the line the xadd writes (kprw_new_block adds
 * the count to kprewrite_rt_stats.records), and with ret a return trampoline's run
 * too (rettramps): one add a record on a line every thread of the process wrote cost
 * two threads recording at once 7-9 ns a record (issue 49). With cfg
 * (kprw_rt.fast_cfg: prefetchw is there) the prefetch without a test; with tblk 0 the
 * kprw_tblk is at %r10 already (TCLK_NOW's). */
	.macro PLACE fail, ret=0, cfg=0, tblk=1
	.if \tblk
	TBLK %r10
	.endif
	movq %r11, %rdx
	xaddq %rdx, (%r10)
	incq OF_TBLK_NREC(%r10)
	.if \ret
	incq OF_TBLK_NRET(%r10)	/* (kprewrite_rt_stats.rettramps the same way) */
	.endif
	REC_SPLIT %rdx, %r10
	addq %rdx, %r11
	cmpq %r10, %r11
	ja \fail		/* past the block's end: never written */
	addq kprw_rt+OF_RT_TRACE_DATA(%rip), %rdx
	.if !\cfg
	cmpl $0, kprw_rt+OF_RT_HAS_PREFETCHW(%rip)
	je 9f
	.endif
	prefetchw FC_REC_AHEAD(%rdx)	/* (rec_at) */
9:
	.endm

/* PLACE_FAIL is a PLACE's fail: its count taken back (the context at %rsi), then to
 * fail, where the C path writes and counts the record */
	.macro PLACE_FAIL fail, ret=0
	TBLK %r10
	decq OF_TBLK_NREC(%r10)
	.if \ret
	decq OF_TBLK_NRET(%r10)
	.endif
	jmp \fail
	.endm

/* LOST_COUNT, while the file's record area is used up for good (kprw_rt.rec_full, a
 * file without a ring; else to fail), counts a record lost at its place's fail (PLACE's,
 * the context at %rsi, the line at %rdi) as kprw_new_block counts one: its count taken back from the thread's
 * records, the thread's block word emptied (no place grows past its end), the hit of
 * the line's probe at pi(%rdi) in its counter (a written record is the hit; a lost one
 * is not: kprw_count_hit's count, in the file's counter rather than this CPU's shard,
 * which readers add the same), the file's and the runtime's lost counts. Uses %rax
 * %r10. */
	.macro LOST_COUNT pi, fail
	cmpl $0, kprw_rt+OF_RT_REC_FULL(%rip)
	je \fail
	TBLK %r10
	decq OF_TBLK_NREC(%r10)
	movq $0, (%r10)
	movl \pi(%rdi), %eax
	imulq kprw_rt+OF_RT_CTR_STRIDE(%rip), %rax
	addq kprw_rt+OF_RT_CTR_BASE(%rip), %rax
	lock incq (%rax)
	movq kprw_rt+OF_RT_TRACE(%rip), %rax
	lock incq OF_TRACE_LOST(%rax)
	lock incq kprewrite_rt_stats+OF_STATS_LOST(%rip)
	.endm

/* RS_OK checks that a CALL or TAIL line (%rdi) may push on the return stack: the line
 * says its return probe may (kprw_hot.rs), no live lists, the table there, and the
 * return event found open (HOT_OPEN of its ropen: every probe armed and the return
 * probe on, as kprw_probe_enabled in hot_call_fast, and its record would be written);
 * else to fail */
	.macro RS_OK fail, cfg=0
	cmpb $0, OF_HOT_RS(%rdi)
	je \fail
	cmpq $0, kprw_rt+OF_RT_LIVE_LISTS(%rip)
	jne \fail
	cmpq $0, kprw_rs_tab(%rip)
	je \fail
	HOT_OPEN OF_HOT_ROPEN, \fail, \cfg
	.endm

/* RS_TOP puts in ent the thread's newest return-stack entry (its context at %rsi, the
 * stack's address in rs) when the stack is key's and that entry is the frame's whose
 * return-address word is at off(%rsp), with no flags; else to fail. Uses tmp (written
 * after key is read: they may be one register). */
	.macro RS_TOP rs, key, ent, tmp, off, fail
	RSTACK \rs
	cmpq \key, (\rs)
	jne \fail
	movl OF_RS_N(\rs), \ent\()d
	testl \ent\()d, \ent\()d
	jz \fail
	decl \ent\()d
	shlq $SH_RENT, \ent
	leaq OF_RS_E(\rs,\ent), \ent
	leaq \off(%rsp), \tmp
	cmpq \tmp, (\ent)
	jne \fail
	cmpl $0, 28(\ent)
	jne \fail
	.endm

/* RS_ROOM checks that the thread's return stack (its context at %rsi, its key in %r9)
 * is its key's and has room, and, when the word at S holds the trampoline already (a
 * tail call from a frame whose return event hooked it), that the stack's newest entry
 * is frame S's: the push is then a chain on it (kprw_rstack_push's rule; else an
 * instance's, kprw_kretprobe_entry's); else to fail. Uses %rax %rdx %r10. */
	.macro RS_ROOM fail
	RSTACK %rax
	cmpq %r9, (%rax)
	jne \fail
	cmpl $FC_RSTACK_N, OF_RS_N(%rax)
	jae \fail
	leaq kprewrite_rt_rettramp(%rip), %rdx
	cmpq %rdx, 216(%rsp)
	jne 21f
	movl OF_RS_N(%rax), %edx
	testl %edx, %edx
	jz \fail
	decl %edx
	shlq $SH_RENT, %rdx
	leaq 216(%rsp), %r10
	cmpq %r10, OF_RS_E(%rax,%rdx)
	jne \fail
21:
	.endm

/* SHAPES loads the kind word of the line at %rdi (kind deleg spev nops, one load: into
 * %r8d, masked into %eax) and goes to seq, word or callw for the lines whose record a
 * count fixes: an EVENT, EXIT or CALL line with no deleg and KPRW_HOT_FAST and
 * KPRW_HOT_SEQ in nops but not KPRW_HOT_PLAN (the one nops with 0x80) is one compare
 * of the word's kind, deleg and those bits */
	.macro SHAPES seq, word, callw
	movl OF_HOT_KIND(%rdi), %r8d
	movl %r8d, %eax
	andl $(0xffffff | (0x80 | FC_HOT_FAST | FC_HOT_SEQ) << 24), %eax
	cmpl $((FC_HOT_FAST | FC_HOT_SEQ) << 24 | FC_HOT_EVENT), %eax
	je \seq
	cmpl $((FC_HOT_FAST | FC_HOT_SEQ) << 24 | 1 << 16 | FC_HOT_EVENT), %eax
	je \word
	cmpl $((FC_HOT_FAST | FC_HOT_SEQ) << 24 | FC_HOT_EXIT), %eax
	je \word
	cmpl $((FC_HOT_FAST | FC_HOT_SEQ) << 24 | 1 << 16 | FC_HOT_CALL), %eax
	je \callw
	.endm

/* GPR is one 16-byte entry of the fast path's register table: a general register's
 * value at the probe into %r11 (pt_regs' order: r15 first; those the fast path saved
 * from its frame) */
	.macro GPR src
	movq \src, %r11
	jmp .Lgpr_back
	.balign 16
	.endm

/* RETHOOK_PATH is kprw_rethook_fast's record; with cfg, the configured one
 * (kprw_rt.fast_cfg: the TSC clock, the hot table, sw_gen's word, the TCB's word, the
 * rseq area's CPU and prefetchw there, no test of each) */
	.macro RETHOOK_PATH cfg
	cmpq $0, kprw_rs_tab(%rip)
	je .Lrslow
	/* the TSC first: rdtsc's latency overlaps the checks (%r11 = the TSC; without
	 * cfg, 0 with the counter clock: CLOCK_NOW takes a count below) */
	.if \cfg
	RAW_TSC
	.else
	MAYBE_TSC
	.endif
	TCTX_FIND .Lrslow, \cfg
	/* this thread's newest entry (%r8): frame K's, no flags */
	RS_TOP %r10, %r9, %r8, %rax, 72, .Lrslow
	/* what the word held: the real return address, or the trampoline (a chain: the
	 * frame's next entry returns through it after this one) */
	movq 8(%r8), %rax
	cmpq 16(%r8), %rax
	je 2f
	leaq kprewrite_rt_rettramp(%rip), %rdx
	cmpq %rdx, %rax
	jne .Lrslow
2:
	/* the line of its probe's point (%rdi): a CALL line whose return event it is */
	movl 24(%r8), %edx
	movq kprw_rt+OF_RT_PROBES(%rip), %rdi
	imulq $SZ_PROBE, %rdx, %rax
	movl (%rdi,%rax), %eax
	cmpl kprw_rt+OF_RT_NPOINTS(%rip), %eax
	jae .Lrslow
	movq kprw_rt+OF_RT_HOT(%rip), %rdi
	.if !\cfg
	testq %rdi, %rdi
	jz .Lrslow
	.endif
	shlq $SH_HOT, %rax
	addq %rax, %rdi
	movzbl OF_HOT_KIND(%rdi), %eax
	cmpl $FC_HOT_CALL, %eax
	je 1f
	cmpl $FC_HOT_TAIL, %eax
	jne .Lrslow
1:	cmpl %edx, OF_HOT_RPI(%rdi)
	jne .Lrslow
	cmpb $0, OF_HOT_RPLAIN(%rdi)
	je .Lrslow
	cmpb $0, OF_HOT_RDELEG(%rdi)
	jne .Lrslow
	HOT_OPEN OF_HOT_ROPEN, .Lrslow, \cfg
	CPU_WORD .Lrslow, \cfg
	TBLK %r10
	.if \cfg
	TCLK_NOW .Lrslow
	.else
	CLOCK_NOW .Lrslow
	.endif
	orq $(FC_CREC_HIT | FC_CREC_RET), %r9	/* rlen: no data, the word */
	movl $24, %r11d		/* the record's size: the fixed part and the word */
	PLACE .Lrlost_placed, 1, \cfg, 0
	TS_STORE OF_HOT_RPI
	movq 16(%r8), %r11	/* the real return address: the word */
	movq %r11, 16(%rdx)
	movw $FC_CREC_COMMITTED, 2(%rdx)
	RS_POP_RET
	.endm

/* RS_POP_RET pops the thread's newest return-stack entry (at %r8, the context at %rsi:
 * one store, a signal handler's pushes go above it and its pops come back to it) and
 * returns through what the word held at K (kprw_rethook's regs->ip: in a chain the
 * trampoline, entered again for the next entry), everything put back */
	.macro RS_POP_RET
	movq 8(%r8), %r11
	RSTACK %r10
	decl OF_RS_N(%r10)
	movq %r11, 72(%rsp)
	FAST_RESTORE
	leaq 8(%rsp), %rsp
	jmp *-8(%rsp)
	.endm

/* kprw_rethook_fast is the return trampoline's fast path (entry.S jumps here with %rsp = K,
 * the word that held the return address, and the trampoline's address still there):
 * the return of a frame on this thread's return stack (rt_rstack.c) whose newest entry
 * it is, no instance over it, whose probe is a CALL line's return event without
 * fetches, filter or trigger (hot_ret_fast), switched on, tracing on, any clock (CLOCK_NOW):
 * the record as kprw_rethook's hot_ret_fast writes it (the real return address as its
 * word), the entry popped, what the word held at K (the real return address; in a
 * chain of entries on one word, a tail call's, the trampoline, which the jmp enters
 * again for the next entry), every register and the arithmetic flags as they were,
 * and a jmp through K as the trampoline's. Anything
 * else goes back to kprw_rethook_slow (entry.S) with everything as it came, before a
 * place is taken. Its frame: 0 flags (lahf, seto), 8 r11, 16 r10, 24 r9, 32 r8, 40
 * rdi, 48 rsi, 56 rdx, 64 rax; K = 72(%rsp). */
	.globl kprw_rethook_fast
	.hidden kprw_rethook_fast
	.type kprw_rethook_fast,@function
	.balign 16
kprw_rethook_fast:
	FAST_SAVE
	cmpl $0, kprw_rt+OF_RT_FAST_CFG(%rip)
	je .Lrethook_general
	RETHOOK_PATH 1
.Lrethook_general:
	RETHOOK_PATH 0
/* .Lrlost_placed: a return's record lost while the file is full (.Llost_placed's
 * rule), the entry popped as after a record; the trampoline's run stays counted */
.Lrlost_placed:
	LOST_COUNT OF_HOT_RPI, .Lrslow_placed
	RS_POP_RET
.Lrslow_placed:
	PLACE_FAIL .Lrslow, 1
.Lrslow:
	FAST_RESTORE
	jmp kprw_rethook_slow
	.size kprw_rethook_fast, .-kprw_rethook_fast

/* the shared body: %ecx = point index; (%rsp) the return address into the stub,
 * 8(%rsp) the program's %rcx, 16(%rsp) = S - 128.
 *
 * First the fast path (issue 49): the record of a KPRW_HOT_EVENT or KPRW_HOT_EXIT line
 * whose fetches read general registers only (KPRW_HOT_FAST), written as rt_hot.h's
 * hot_fast writes it, with what it uses saved and nothing else: the C path's register
 * traffic and checks were half of a hot event's cost. It runs the same checks (the
 * line, the clock as kprw_tsc_ns, first, so that rdtsc's ~11 ns overlap the checks that
 * do not depend on it, the process's state as hot_open, the thread's context as
 * hot_fast_tctx, the CPU as kprw_cpu_fast, the counter and mono clocks as
 * kprw_clock_slow takes them (which hot_fast leaves to the C path), the comm's age and
 * the ext test as hot_record; with the TSC the time comes from the thread's copy of the
 * clock, whose span stands for the clock's, the comm's and the ext tests: TCLK_NOW;
 * CLOCK_NOW chooses) and declines to the full path (.Lslow: everything
 * put back, %ecx still the index) on the first that fails, before it takes a place;
 * after the xadd it declines only for a place past its block's end, which is never
 * written (reserve's rule). optfast.h holds the layout it reads, checked against C.
 * Its frame: 0 flags (lahf, seto), 8 r11, 16 r10, 24 r9, 32 r8, 40 rdi, 48 rsi, 56 rdx,
 * 64 rax, 72 the return address into the stub, 80 the program's rcx; S = 216(%rsp).
 * It uses no string instruction (DF as it is), calls nothing but the vDSO's
 * clock_gettime with the mono clock (MONO_NOW: not with DF set), and writes below the
 * red zone only. */
	.globl kprewrite_rt_optprobe_body
	.hidden kprewrite_rt_optprobe_body
	.type kprewrite_rt_optprobe_body,@function
	.balign 16
kprewrite_rt_optprobe_body:
	FAST_SAVE
	/* the configured paths (kprw_rt.fast_cfg: the hot table, sw_gen's word, the TCB's
	 * word, the rseq area's CPU, prefetchw and the TSC clock there) for the lines of a
	 * count's shape: one test instead of one a thing; the index is the rewriter's
	 * stub's, below npoints (kprewrite_rt_optcall's check) */
	cmpl $0, kprw_rt+OF_RT_FAST_CFG(%rip)
	je 17f
	movl %ecx, %edi
	shlq $SH_HOT, %rdi
	addq kprw_rt+OF_RT_HOT(%rip), %rdi
	SHAPES .Lseq_cfg, .Lword_cfg, .Lcallw_cfg
	jmp .Lkinds
	/* the point's line: an event alone or an exit, no filter or trigger, fast fetches */
17:	movq kprw_rt+OF_RT_HOT(%rip), %rdi
	testq %rdi, %rdi
	jz .Lslow
	cmpl kprw_rt+OF_RT_NPOINTS(%rip), %ecx
	jae .Lslow
	movl %ecx, %eax
	shlq $SH_HOT, %rax
	addq %rax, %rdi
	SHAPES .Lseq, .Lword, .Lcallw
.Lkinds:
	andl $(0x8000ffff | FC_HOT_FAST << 24), %eax
	cmpl $(FC_HOT_FAST << 24 | FC_HOT_EVENT), %eax
	je 1f
	cmpl $(FC_HOT_FAST << 24 | FC_HOT_EXIT), %eax
	je 1f
	cmpb $FC_HOT_TAIL, %r8b
	je .Ltail
	/* a CALL line: its return event's frame goes on the thread's return stack too
	 * (.Lcall_push), when the line says it may and that probe is on (hot_call_fast) */
	cmpl $(FC_HOT_FAST << 24 | FC_HOT_CALL), %eax
	jne .Lslow
	RS_OK .Lslow
	/* the TSC first (TCLK_NOW converts it below; the counter and mono: CLOCK_NOW, later):
	 * rdtsc's latency overlaps the checks below, which do not depend on it; %r11 = the
	 * TSC, never 0, or 0 (MAYBE_TSC) */
1:
.Lgeneral:
	MAYBE_TSC
	/* the process's state (hot_open) */
	HOT_OPEN OF_HOT_OPEN, .Lslow
	/* the thread's context at its hash's slot, no handler of ours running, its tid
	 * still the TCB's (hot_fast_tctx): %rsi */
2:	TCTX_FIND .Lslow
	/* a CALL line: the thread's return stack is its key's, with room, and the word at
	 * S not hooked yet (a chain: kprw_kretprobe_entry's) */
	cmpb $FC_HOT_CALL, %r8b
	jne 16f
	RS_ROOM .Lslow
16:
	/* the CPU (kprw_cpu_fast) into %r9's bits 32-47: the record's first word */
	CPU_WORD .Lslow
	/* the TSC read above, turned into the record's time by the thread's copy of the
	 * clock (TCLK_NOW: its span stands for the comm's age and the ext test too), or the
	 * counter's or mono's (CLOCK_NOW): %rax = the time less ts_base (ts_hi and ts_lo,
	 * stored apart below); the choice made above holds, whatever clk_tsc says now */
	TBLK %r10
	CLOCK_NOW .Lslow

	/* the word after the fixed part (%r8): an exit's return address (one hooked already
	 * goes the full way), or an entry's stack pointer with spev (entry_sp_word) */
	movl OF_HOT_DLEN(%rdi), %edx
	orl $FC_CREC_HIT, %edx
	leaq kprewrite_rt_rettramp(%rip), %r10
	cmpb $FC_HOT_EXIT, %r8b
	jne 6f
	movq 216(%rsp), %r8
	cmpq %r10, %r8
	jne 7f
	/* the word holds the trampoline: this function was tail-called from a frame
	 * whose return event hooked it (a TAIL line). The real return address is this
	 * thread's newest return-stack entry's when that entry is frame S's, with no
	 * flags (exit_hit's kprw_kretprobe_real_ret finds it there); else the full
	 * path. (%r10, %r11 and %r8 are free here; %rax holds the time.) */
	cmpq $0, kprw_rs_tab(%rip)
	je .Lslow
	movq (%rsi), %r8	/* (the context's key) */
	RS_TOP %r10, %r8, %r11, %r8, 216, .Lslow
	movq 16(%r11), %r8	/* (rent.real) */
	jmp 7f
6:	testl $0xff0000, %r8d
	jz 8f
	xorl %r11d, %r11d
	cmpq %r10, 216(%rsp)
	sete %r11b
	leaq 216(%rsp), %r8
	orq %r11, %r8
7:	orl $FC_CREC_RET, %edx
8:	orq %rdx, %r9		/* rlen */
	andl $FC_CREC_RET, %edx
	shrl $10, %edx		/* 8 with the word */
	movl OF_HOT_DLEN(%rdi), %r11d
	leal 23(%r11,%rdx), %r11d
	andl $-8, %r11d		/* the record's size (rec_size) */
	/* the place: one xadd on the thread's block word, which says the block's end too
	 * (reserve) */
	PLACE .Lgen_lost_placed
	TS_STORE OF_HOT_PI
	testl $FC_CREC_RET, %r9d
	leaq 16(%rdx), %r9
	jz 10f
	movq %r8, 16(%rdx)
	addq $8, %r9
	/* the data: each op's register at its place (copy_regs8), from this frame where
	 * it holds the register (the op's slot), else through the register table */
10:	movzbl OF_HOT_KIND+3(%rdi), %ecx
	andl $FC_HOT_NOPS, %ecx
	jz 12f
	leaq OF_HOT_OP(%rdi), %r10
11:	movzbl OF_OP_SLOT(%r10), %eax
	testl %eax, %eax
	jz 19f
	movq (%rsp,%rax), %r11
.Lgpr_back:
	movl OF_OP_DEST(%r10), %eax
	movq %r11, (%r9,%rax)
	addq $SZ_OP, %r10
	decl %ecx
	jnz 11b
	/* the commit word last (commit) */
12:	movl OF_HOT_DLEN(%rdi), %eax
	orl $FC_CREC_COMMITTED, %eax
	movw %ax, 2(%rdx)
	cmpb $FC_HOT_CALL, OF_HOT_KIND(%rdi)
	je .Lcall_push
.Lfast_done:
	FAST_RESTORE
	ret
19:	movzbl OF_OP_REG(%r10), %eax
	shll $4, %eax
	leaq .Lgpr(%rip), %r11
	addq %r11, %rax
	jmp *%rax

/* .Lcall_push hooks a CALL line's return address as kprw_rstack_push does, the entry's
 * record written: with the thread's handlers raised (a signal handler's probes are
 * missed meanwhile, so its frames cannot interleave with the push), the entry {K = S,
 * the return address, the same as the real one, the return probe, no flags}, one more
 * entry, the trampoline at S. A signal handler that changed the stack since the checks
 * (left frames there, longjmp) leaves the call unhooked: a miss of the return probe,
 * as the kernel's nmissed when no instance is free. */
.Lcall_push:
	incl OF_TCTX_BUSY(%rsi)
	RSTACK %r10
	movq (%rsi), %rax
	cmpq %rax, (%r10)
	jne .Lcall_miss
	movl OF_RS_N(%r10), %r11d
	cmpl $FC_RSTACK_N, %r11d
	jae .Lcall_miss
	movq 216(%rsp), %rcx
	movl %r11d, %edx
	shlq $SH_RENT, %rdx
	leaq OF_RS_E(%r10,%rdx), %rdx
	leaq 216(%rsp), %r8
	movq %rcx, %r9		/* the frame's real return address */
	leaq kprewrite_rt_rettramp(%rip), %rax
	cmpq %rax, %rcx
	jne 22f
	/* a chain (RS_ROOM allowed it): on the newest entry, frame S's, whose real
	 * return address this one keeps (kprw_rstack_push); a signal handler that
	 * changed the stack since leaves the call unhooked */
	testl %r11d, %r11d
	jz .Lcall_miss
	cmpq %r8, -(1 << SH_RENT)(%rdx)
	jne .Lcall_miss
	movq 16 - (1 << SH_RENT)(%rdx), %r9
22:	movq %r8, (%rdx)
	movq %rcx, 8(%rdx)
	movq %r9, 16(%rdx)
	movl OF_HOT_RPI(%rdi), %r9d
	movl %r9d, 24(%rdx)
	movl $0, 28(%rdx)
	incl %r11d
	movl %r11d, OF_RS_N(%r10)
	movq %rax, (%r8)
	decl OF_TCTX_BUSY(%rsi)
	jmp .Lfast_done
/* .Ltail is a TAIL line's hit: the tail call's return address (the caller's, at S) is
 * hooked on the thread's return stack as .Lcall_push does, no record (the C path:
 * exit_hit, kprw_run_return_events), when the line says it may and its probe is on */
.Ltail:
	RS_OK .Lslow
	TCTX_FIND .Lslow
	RS_ROOM .Lslow
	jmp .Lcall_push
.Lcall_miss:
	decl OF_TCTX_BUSY(%rsi)
	movl OF_HOT_RPI(%rdi), %eax
	imulq kprw_rt+OF_RT_CTR_STRIDE(%rip), %rax
	addq kprw_rt+OF_RT_CTR_BASE(%rip), %rax
	lock incq 8(%rax)
	jmp .Lfast_done
/* .Lseq is an EVENT line's record whose shape the line's count says (KPRW_HOT_SEQ): the
 * general path's checks in its order, then a record of 16 + 8n bytes, rlen 8n, the n
 * registers from this frame at 16, 24, 32: its size dlen + 16 (dlen 8n: seq_line), no word, no loop
 * over the ops, no kind tested after the place (the kernel's optprobe template has its
 * probe's work fixed in it; here a line's count fixes it). The counter and mono clocks
 * take it too (CLOCK_NOW). */
/* SEQ_CHECKS is the general path's checks in its order for .Lseq and WORD_PATH, the
 * TSC first: the time in %rax (the thread's copy of the clock: TCLK_NOW; or a count of
 * the counter clock's, taken last: CLOCK_NOW), the thread's
 * context in %rsi, its kprw_tblk in %r10 (PLACE's, tblk 0), the CPU word in %r9; with
 * call, RS_ROOM after the context (a CALL line's push) */
	.macro SEQ_CHECKS call=0, cfg=0
	.if \cfg
	RAW_TSC
	.else
	MAYBE_TSC
	.endif
	HOT_OPEN OF_HOT_OPEN, .Lslow, \cfg
	TCTX_FIND .Lslow, \cfg
	.if \call
	RS_ROOM .Lslow
	.endif
	CPU_WORD .Lslow, \cfg
	TBLK %r10
	.if \cfg
	TCLK_NOW .Lslow
	.else
	CLOCK_NOW .Lslow
	.endif
	.endm
/* SEQ_PATH is .Lseq's record; with cfg, the configured one (kprw_rt.fast_cfg: the TSC
 * clock, no test of clk_tsc) */
	.macro SEQ_PATH cfg
	SEQ_CHECKS 0, \cfg
	movl OF_HOT_DLEN(%rdi), %r8d	/* 8n (seq_line) */
	leal FC_CREC_HIT(%r8), %edx
	orq %rdx, %r9			/* rlen */
	leal 16(%r8), %r11d		/* the record's size */
	PLACE .Llost_placed, 0, \cfg, 0
	TS_STORE OF_HOT_PI
	testl %r8d, %r8d
	jz 12f
	movzbl OF_HOT_OP + OF_OP_SLOT(%rdi), %eax
	movq (%rsp,%rax), %r11
	movq %r11, 16(%rdx)
	cmpl $16, %r8d
	jb 12f
	movzbl OF_HOT_OP + SZ_OP + OF_OP_SLOT(%rdi), %eax
	movq (%rsp,%rax), %r11
	movq %r11, 24(%rdx)
	cmpl $24, %r8d
	jb 12f
	movzbl OF_HOT_OP + 2 * SZ_OP + OF_OP_SLOT(%rdi), %eax
	movq (%rsp,%rax), %r11
	movq %r11, 32(%rdx)
	/* the commit word last (commit) */
12:	leal FC_CREC_COMMITTED(%r8), %eax
	movw %ax, 2(%rdx)
	FAST_RESTORE
	ret
	.endm
.Lseq:
	SEQ_PATH 0
.Lseq_cfg:
	SEQ_PATH 1
/* WORD_PATH writes the record of a line whose data is the word alone (KPRW_HOT_SEQ
 * without fetches: --calls' records): an EXIT line's, the return address at S; an
 * EVENT line's with spev, S itself (entry_sp_word); with call, a CALL line's, whose
 * entry record carries S too and whose frame then goes on the thread's return stack
 * (RS_ROOM before the place, .Lcall_push after the record, as the general path). A
 * word at S that holds the trampoline already (a tail call from a hooked frame: the
 * exit's real return address is on the return stack, the entry's word takes bit 0, a
 * CALL line's push is a chain) takes the general path, the kind word still in %r8. A
 * 24-byte record, the word at 16, as .Lseq writes its registers. With cfg, the
 * configured one (kprw_rt.fast_cfg). */
	.macro WORD_PATH call, cfg=0
	leaq kprewrite_rt_rettramp(%rip), %rax
	cmpq %rax, 216(%rsp)
	je .Lgeneral
	.if \call
	leaq 216(%rsp), %r8	/* (an entry's: S, bit 0 clear) */
	.else
	cmpb $FC_HOT_EXIT, %r8b
	movq 216(%rsp), %r8	/* (an exit's: the return address) */
	je 1f
	leaq 216(%rsp), %r8	/* (an entry's: S, bit 0 clear) */
1:
	.endif
	SEQ_CHECKS \call, \cfg
	orq $(FC_CREC_HIT | FC_CREC_RET), %r9	/* rlen: no data, the word */
	movl $24, %r11d
	.if \call
	PLACE .Lcall_lost_placed, 0, \cfg, 0
	.else
	PLACE .Llost_placed, 0, \cfg, 0
	.endif
	TS_STORE OF_HOT_PI
	movq %r8, 16(%rdx)
	movw $FC_CREC_COMMITTED, 2(%rdx)
	.if \call
	jmp .Lcall_push
	.else
	FAST_RESTORE
	ret
	.endif
	.endm
.Lword:
	WORD_PATH 0
.Lcallw:
	RS_OK .Lslow
	WORD_PATH 1
.Lword_cfg:
	WORD_PATH 0, 1
.Lcallw_cfg:
	RS_OK .Lslow, 1
	WORD_PATH 1, 1
	.balign 16
.Lgpr:
	GPR %r15
	GPR %r14
	GPR %r13
	GPR %r12
	GPR %rbp
	GPR %rbx
	GPR 8(%rsp)
	GPR 16(%rsp)
	GPR 24(%rsp)
	GPR 32(%rsp)
	GPR 64(%rsp)
	GPR 80(%rsp)
	GPR 56(%rsp)
	GPR 48(%rsp)
	GPR 40(%rsp)
/* .Llost_placed is the place's fail of a record with nothing after it (.Lseq, an EXIT's
 * or EVENT's word, the general path's): while the file's record area is used up for
 * good (kprw_rt.rec_full, a file without a ring), the record is lost and counted here
 * (LOST_COUNT); else the C path's take of the next block. .Lcall_lost_placed is a CALL
 * line's, whose frame still goes on the return stack (.Lcall_push: its return event is
 * then a hit too, as through C). A lost record cost ~70-100 ns through C, four to five
 * times a written one. */
.Lgen_lost_placed:		/* the general path's */
	cmpb $FC_HOT_CALL, OF_HOT_KIND(%rdi)
	je .Lcall_lost_placed
.Llost_placed:
	LOST_COUNT OF_HOT_PI, .Lslow_placed
	FAST_RESTORE
	ret
.Lcall_lost_placed:
	LOST_COUNT OF_HOT_PI, .Lslow_placed
	jmp .Lcall_push
.Lslow_placed:
	PLACE_FAIL .Lslow
.Lslow:
	FAST_RESTORE
	/* the full path: struct pt_regs and kprewrite_rt_optcall */
	pushq $0x2b		/* ss */
	leaq -8(%rsp), %rsp	/* sp: below */
	pushfq			/* flags: as at the probe (FAST_RESTORE put them back) */
	pushq $0x33		/* cs */
	leaq -16(%rsp), %rsp	/* ip (C), orig_ax (below) */
	pushq %rdi
	pushq %rsi
	pushq %rdx
	pushq 80(%rsp)		/* the program's %rcx (the address is taken before the push) */
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
	leaq 312(%rsp), %rax	/* S: 168 bytes of pt_regs, the return address, %rcx, 128 of red zone */
	movq %rax, 152(%rsp)
	movq $-1, 120(%rsp)
	movq %rsp, %rdi
	movl %ecx, %esi
	movq %rsp, %rbx
	testl $0x400, 144(%rsp)	/* DF is almost always clear: cld costs ~1 ns */
	jz 1f
	cld
1:	andq $-16, %rsp
	call kprewrite_rt_optcall
	movq %rbx, %rsp
	testl %eax, %eax
	jnz .Liret
	movq 144(%rsp), %rax	/* one load of the whole word: it was stored whole */
	movzbl %ah, %edx	/* flags bits 8-15: OF is 8 */
	andl $8, %edx
	movb %al, %ah		/* SF ZF 0 AF 0 PF 1 CF */
	movb %dl, %al
	addb $0x7f, %al		/* OF = (al == 8) */
	sahf
	movq 88(%rsp), %rcx	/* pt_regs' %rcx into the word the stub pops */
	movq %rcx, 176(%rsp)
	POP_GPRS
	leaq 48(%rsp), %rsp	/* orig_ax ip cs flags sp ss */
	ret
/* slow exit: pt_regs at %rsp; pops the GPRs, skips orig_ax, iretq takes ip cs flags sp ss */
.Liret:
	POP_GPRS
	leaq 8(%rsp), %rsp
	iretq
	.size kprewrite_rt_optprobe_body, .-kprewrite_rt_optprobe_body

/* The word bodies: the shared body specialized to one line shape, which the rewriter's
 * stub calls instead of kprewrite_rt_optprobe_body at the points of --calls whose lines
 * are .Lword's (runtime.SymWordEntry: an EVENT line with spev, the entry of a function
 * whose return events are at its exits; runtime.SymWordExit: an EXIT line, a ret's
 * return event; neither with fetches). The general body chooses a line's path at each
 * hit (the fast_cfg test, the shape's compares, an exit's or entry's word) and saves
 * the eight registers any path uses; here the shape is one compare of the kind word
 * and the work is fixed: six registers saved (the thread's context in %rcx, whose
 * value the stub saved), the word written by one instruction (issue 49: python3.11's
 * records are paid instruction by instruction, ~115 a record through the general
 * body). Anything else (another shape: the rewriter guessed from the definitions and
 * a live change or the runtime's choice made the line another; a configuration
 * without fast_cfg; any check of .Lword's that fails) goes to the general body with
 * everything as the stub left it (%ecx the point's index again), before a place is
 * taken or with its count taken back, which decides again. With flags 0 the
 * analysis proved the arithmetic flags dead at the site (the rewriter's choice): not
 * saved. The frame: [0 flags,] r11 r10 r9 rdi rdx rax (8 bytes each), the return
 * address into the stub, the program's rcx; S above the red zone. */
	.macro WORD_BODY exit, flags
	pushq %rax
	.if \flags
	lahf
	seto %al
	.endif
	pushq %rdx
	pushq %rdi
	pushq %r9
	pushq %r10
	pushq %r11
	.if \flags
	pushq %rax
	.endif
	.set WB_S, 192 + 8 * \flags
	cmpl $0, kprw_rt+OF_RT_FAST_CFG(%rip)
	je 3f
	movl %ecx, %edi
	shlq $SH_HOT, %rdi
	addq kprw_rt+OF_RT_HOT(%rip), %rdi
	.if \exit
	cmpl $((FC_HOT_FAST | FC_HOT_SEQ) << 24 | FC_HOT_EXIT), OF_HOT_KIND(%rdi)
	.else
	cmpl $((FC_HOT_FAST | FC_HOT_SEQ) << 24 | 1 << 16 | FC_HOT_EVENT), OF_HOT_KIND(%rdi)
	.endif
	jne 3f
	/* a word at S that holds the trampoline: .Lgeneral's */
	leaq kprewrite_rt_rettramp(%rip), %rax
	cmpq %rax, WB_S(%rsp)
	je 3f
	RAW_TSC
	HOT_OPEN OF_HOT_OPEN, 2f, 1
	/* the thread's context (TCTX_FIND's named case, in %rcx; a miss: the general
	 * body's, which names it) */
	movq %fs:FC_TCB_SLOT, %rcx
	movq %rcx, %rdx
	subq kprw_tctx_tab(%rip), %rdx
	cmpq $FC_TCTX_BYTES, %rdx
	jae 2f
	testb $((1 << SH_TCTX) - 1), %dl
	jnz 2f
	movq %fs:0, %rax
	cmpq %rax, (%rcx)
	jne 2f
	movl %fs:FC_TCB_TID, %eax
	cmpq OF_TCTX_TID(%rcx), %rax
	jne 2f
	CPU_RSEQ %r9, 2f
	movq %rdx, %r10
	addq kprw_tblk_tab(%rip), %r10
	TCLK_NOW 2f
	orq $(FC_CREC_HIT | FC_CREC_RET), %r9	/* rlen: no data, the word */
	movl $24, %r11d
	PLACE 1f, 0, 1, 0
	TS_STORE OF_HOT_PI
	.if \exit
	movq WB_S(%rsp), %rax	/* the return address */
	.else
	leaq WB_S(%rsp), %rax	/* S, bit 0 clear */
	.endif
	movq %rax, 16(%rdx)
	movw $FC_CREC_COMMITTED, 2(%rdx)
	WORD_RESTORE \flags
	ret
	/* past the block's end: the count taken back (PLACE_FAIL's) */
1:	movq %rcx, %r10
	subq kprw_tctx_tab(%rip), %r10
	addq kprw_tblk_tab(%rip), %r10
	decq OF_TBLK_NREC(%r10)
	/* the point's index back from its line */
2:	subq kprw_rt+OF_RT_HOT(%rip), %rdi
	shrq $SH_HOT, %rdi
	movl %edi, %ecx
3:	WORD_RESTORE \flags
	jmp kprewrite_rt_optprobe_body
	.endm

	.macro WORD_RESTORE flags
	.if \flags
	popq %rax
	addb $0x7f, %al
	sahf
	.endif
	popq %r11
	popq %r10
	popq %r9
	popq %rdi
	popq %rdx
	popq %rax
	.endm

	.irp exit, 0, 1
	.irp flags, 0, 1
	.globl kprw_word_body\exit\flags
	.hidden kprw_word_body\exit\flags
	.type kprw_word_body\exit\flags,@function
	.balign 16
kprw_word_body\exit\flags:
	WORD_BODY \exit, \flags
	.size kprw_word_body\exit\flags, .-kprw_word_body\exit\flags
	.endr
	.endr
