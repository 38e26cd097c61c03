/*
 * kprewrite_abi.h - the contract between the Go rewriter and the kprewrite runtime.
 *
 * The rewriter emits the tables described here into the new segments of the rewritten
 * program; the runtime (runtime/src) reads them. runtime/abi.go mirrors every constant,
 * size and offset, and runtime/abi_test.go compiles this header and compares them.
 *
 * Addressing: every address in a table is a LINK-TIME virtual address ("vaddr", the value
 * the ELF file gives the byte in its program headers). The runtime finds the load bias
 * from its own RIP: the rewriter writes, into the 8-byte runtime symbol
 * kprewrite_rt_hdr_rel, the signed distance (header vaddr - vaddr of kprewrite_rt_hdr_rel).
 * At run time the header is at &kprewrite_rt_hdr_rel + kprewrite_rt_hdr_rel and
 * bias = header runtime address - header.self. Run-time address = bias + vaddr.
 * So nothing needs a dynamic relocation, in PIE and non-PIE programs alike.
 *
 * All integers are little-endian; structures have no implicit padding.
 *
 * Jump-optimized probes (KPRW_X_OPTIMIZED, "o" and "ro"). The site's DCR (the L >= 5
 * bytes of whole instructions the jmp replaces) becomes "jmp rel32 detour+ENTRY" followed
 * by L-5 filler bytes. The detour buffer, at point.slot, is:
 *     [template copy][relocated DCR][jmp rel32 site+L]
 * The template is kprewrite_rt_optprobe_template .. kprewrite_rt_optprobe_template_end in
 * the runtime object (src/optprobe.S), copied byte for byte with three 4-byte fields
 * patched (offsets from the local symbols kprw_optt_gate, kprw_optt_index, kprw_optt_call):
 *     gate   rel32 to the u32 gate of the point's first probe's kprw_probe_state;
 *     index  imm32 point index (position in the sorted points array);
 *     call   rel32 to kprewrite_rt_optprobe_body;
 * and the entry at kprw_optt_entry. trampolines/detour.go does all of it (Detour). The
 * detour steps over the red zone, tests the gate (no flags touched) and calls the
 * shared body with the index in %ecx, which writes a hot event's record itself when it
 * can (its fast path: the registers it uses saved, no C), else saves the flags and
 * every register as struct pt_regs, calls kprewrite_rt_optcall(regs, index) on a
 * 16-byte aligned stack, restores and returns; the detour falls into the relocated DCR. Fields of the
 * point: site, slot (detour vaddr), insn_len = L, slot_len = relocated DCR length,
 * orig = the first min(L, 16) original bytes, probes without post handlers.
 *
 * Count-only detours (KPRW_PF_COUNT). Every probe on the point is a plain event kprobe
 * (KPRW_T_KPROBE, no handler, no KPRW_F_USER, no KPRW_F_TRACE): a hit only adds 1 to
 * each probe's hit count. The detour at point.slot (copied from the templates of
 * src/countprobe.S), entered at its first byte, is
 *     [48 8d 64 24 80] lea -128(%rsp),%rsp
 *     (flags live: [50] push %rax   [9f] lahf   [0f 90 c0] seto %al)
 *     [51] push %rcx   [48 8b 0d rel32] mov kprewrite_rt_rseq_off(%rip),%rcx
 * then, with N <= KPRW_COUNT_SHORT_N probes,
 *     [e3 rel8] jrcxz locked
 *     [52] push %rdx   N x [ba imm32 e8 rel32] mov $8*probe_j,%edx; call kprewrite_rt_rseq_count
 *     [5a] pop %rdx    [e9 rel32] jmp done
 *   locked: N x [f0 48 ff 05 rel32]     lock incq hit_j(%rip), j = first_probe..
 * or, with more, [e3 05] jrcxz locked; [e9 rel32] jmp rseq; locked: the N lock incq;
 * [e9 rel32] jmp done; rseq: push %rdx, the N calls, pop %rdx; and at done
 *     [59] pop %rcx   (flags live: [04 7f] add $0x7f,%al   [9e] sahf   [58] pop %rax)
 *     [48 8d a4 24 80 00 00 00] lea 128(%rsp),%rsp
 * or, with one probe in an image at fixed addresses below 2 GiB (ET_EXEC), the inline
 * form: its own restartable sequence instead of the call, with its struct rseq_cs (32
 * bytes, absolute addresses) among those after the detours (kprewrite_rseq_cs), and a
 * cold part before the entry the site's jmp lands on (slot + 23):
 *     [53 30 05 53] RSEQ_SIG
 *   abort: [48 8b 0d rel32] mov kprewrite_rt_rseq_off(%rip),%rcx   [eb rel8] jmp restart
 *   locked: [f0 48 ff 05 rel32] lock incq hit(%rip)   [eb rel8] jmp post
 *   entry: [48 8d 64 24 80] lea -128(%rsp),%rsp   (flags live: push %rax; lahf; seto %al)
 *     [51] push %rcx   [48 8b 0d rel32] mov kprewrite_rt_rseq_off(%rip),%rcx
 *     [e3 rel8] jrcxz locked
 *   restart: [64 48 c7 41 08 imm32] movq $cs,%fs:8(%rcx)
 *   start: [64 0f b6 49 04] movzbl %fs:4(%rcx),%ecx
 *     [48 8b 0c cd disp32] mov kprewrite_rt_rseq_shardtab(,%rcx,8),%rcx
 *     [48 ff 81 imm32] incq 8*probe(%rcx)          (the commit)
 *   post: [59] pop %rcx   (flags live: add, sahf, pop %rax)   lea 128(%rsp),%rsp
 * then the relocated DCR (slot_len bytes) and jmp rel32 site+L. kprewrite_rt_rseq_off
 * is 0 until start-up has found the thread's rseq area and mapped the image's per-CPU
 * shards (src/rseq.S, rt_rseq.c): until then, and for good without them, the detour
 * increments the hit counters in the counter window (header.counters) with lock incq;
 * after, kprewrite_rt_rseq_count adds 1 to the probe's u64 in this CPU's shard in a
 * restartable sequence (no locked instruction). No gate: a disabled probe's increment
 * is overwritten with an 8-byte nop, its call with a 5-byte one and an inline commit with
 * a 7-byte one at start-up (the
 * runtime's only text write; the count-only hits are never missed, as the uprobe
 * tracer's nhit).
 *
 * Inline filters (KPRW_DF_PREFILTER). A jump-optimized point with one probe, an event
 * kprobe that writes records, has a filter and no trigger, and whose filter reads only
 * fields the detour can read itself (a general register's low bytes, or bytes of the word
 * at %sp) has its filter compiled into the detour (trampolines.Prefilter): the site's
 * jmp lands after the detour's jmp back, on
 *     [48 8d 64 24 80] lea -128(%rsp),%rsp   (flags live: push %rax; lahf; seto %al)
 *     [51] push %rcx   [48 8b 0d rel32] mov kprewrite_rt_pf_ctlgen(%rip),%rcx
 *     [48 85 c9] test %rcx,%rcx   [0f 84 rel32] jz full
 *     [8b 09] mov (%rcx),%ecx   [3b 0d rel32] cmp pfgen(%rip),%ecx   [0f 85 rel32] jne full
 *     [59] pop %rcx
 * then the filter's predicates as cmp or test of the live registers or the stack, and
 * jcc rel32 as the program branches. A refused hit restores what it saved and jumps to
 * a count-only detour of the probe that follows (its own copy of the DCR): it counts
 * the hit and writes nothing, without calling the runtime. Anything else (a match, no
 * trace file yet, controls changed since the runtime last checked) restores and jumps to
 * the full detour's entry, which runs the filter again on the fetched data. The runtime
 * publishes kprewrite_rt_pf_ctlgen (the trace file's ctl_gen) once every such probe's
 * pfgen is set: the current generation when the probe is enabled, its event's filter
 * is the rewrite's and it has no trigger, ~0 otherwise; again after every change of the
 * controls, and never in an image with C handlers (a hit inside a handler is a miss).
 *
 * Inline histograms (KPRW_DF_INLINEHIST). A jump-optimized point with one probe, an
 * event kprobe that writes records, starts soft-disabled, has no filter and one trigger:
 * a histogram with one key and at most four values, no condition, count, variable,
 * action or shared name, whose fields the detour can read itself (as an inline filter's),
 * the key plain (or .hex, .syscall) or .log2. Laid out as an inline filter's (the code
 * after the full detour, then a count-only detour of the probe), the code
 * (trampolines.InlineHist) checks kprewrite_rt_pf_ctlgen and the probe's pfgen as an
 * inline filter does, then reads kprewrite_rt_trig_base (the image's control area's
 * slot 0, 0 until start-up sets it), tests the event's switch word (at a constant offset
 * from it: switched on, records are written) and the table's paused bit, computes the
 * key's hash as rt_hist.c does and, when the key's own bucket holds the key, adds 1 to
 * its hitcount and each value to its sum with lock add, then jumps to the count-only
 * detour, which counts the hit. Anything else (a new key, a key not in its own bucket,
 * no table, a change of the controls, the event switched on, the table paused) goes to
 * the full detour. The runtime sets such a probe's pfgen to the current generation when
 * the probe is enabled, there is a trace file, and the event's filter and triggers are
 * the rewrite's; ~0 otherwise.
 *
 * Inline records (KPRW_DF_INLINEREC). A jump-optimized point with one probe, an event
 * kprobe that writes records, no filter or trigger, no return event recorded at the
 * function's exits, whose every argument is an 8-byte general register (at most three),
 * in an image without C handlers or live points and with at most KPRW_INLINEREC_MAX such
 * points (a detour of ~250 bytes each: thousands would crowd the instruction cache the
 * shared body keeps small): the kernel's optprobe template, its probe's work fixed in
 * it. Its detour starts with code (src/inlinerec.S, trampolines.InlineRec) that saves
 * six registers and the flags, reads the TSC, checks kprw_rt.fast_cfg and that the
 * probe's iropen equals the trace file's switch generation, finds the thread's context
 * and copy of the clock as optprobe.S's configured paths do, takes the record's place
 * and writes the record (the registers stored from where they are) as optprobe.S's
 * count-shaped path would, then runs a copy of the DCR of its own and jumps back;
 * anything else puts everything back and enters the point's ordinary detour, whose
 * stub and shared body decide again. The runtime sets iropen to the generation
 * under which it found the point's KPRW_HOT_EVENT line open and of the count-fixed
 * shape (KPRW_HOT_SEQ, no filter, trigger or spev word), ~0 at start-up.
 *
 * Verification mode (--verify-regions). A would-be-optimized site becomes an ordinary
 * KPRW_X_BOOST point whose slot holds the relocated WHOLE DCR then jmp site+L (the tail
 * of the detour it would have had), so sequential flow never touches the other DCR
 * bytes. Every other byte of the DCR gets an int3 and a point of its own: pflags
 * KPRW_PF_INNER, xmode KPRW_X_BOOST, target = the site (vaddr), exactly one probe of type
 * KPRW_T_VERIFY (no handlers, no event), and slot = the relocated original instructions
 * that start at that byte through the end of the DCR, then jmp site+L (for an
 * instruction boundary this is a suffix of the site's slot: slot = site slot + offset,
 * slot_len = the suffix length); slot 0 when the byte is inside an instruction and no
 * copy can be made (a hit then reports and kills the program with SIGTRAP).
 */
#ifndef KPREWRITE_ABI_H
#define KPREWRITE_ABI_H

#ifdef __ASSEMBLER__
#define KPRW_U(x) x
#else
#define KPRW_U(x) x##u
typedef unsigned char kprw_u8;
typedef unsigned short kprw_u16;
typedef unsigned int kprw_u32;
typedef unsigned long long kprw_u64;
#endif

#define KPRW_MAGIC KPRW_U(0x5752504b) /* "KPRW" */
#define KPRW_VERSION 1

/* kprw_header.flags */
#define KPRW_HF_DISABLE_ALL KPRW_U(0x1) /* rewrite-time: start with every probe disarmed */
#define KPRW_HF_DEBUG KPRW_U(0x2)       /* print what init did to stderr */
/* the image is a shared library: its runtime starts from its DT_INIT
 * (kprewrite_rt_lib_entry) and orig_entry is the library's own DT_INIT (0: none) */
#define KPRW_HF_LIBRARY KPRW_U(0x8)
/* Fetch arguments (or C handlers' kprewrite_copy_nofault) read memory, and the rewriter
 * arranged the signal guard for SIGSEGV and SIGBUS: the GOT words of the program's signal
 * functions are listed (dynamic), or every signal function of its C library, sigaction's
 * among them, has a redirected entry or is covered through its callees (static). The
 * runtime then reads with its fault-catching copy (src/nofault.S) instead of
 * process_vm_readv, if it could wrap every word and KPREWRITE_SAFE_READ is not
 * "syscall" (see "Fast reads" in runtime/doc.go). */
#define KPRW_HF_FAST_READ KPRW_U(0x4)
/* the record clock the rewrite chose (rewrite --clock; neither bit: tsc); KPREWRITE_CLOCK
 * overrides it at run time, and a trace file that has one keeps it */
#define KPRW_HF_CLOCK_MONO KPRW_U(0x10)
#define KPRW_HF_CLOCK_COUNTER KPRW_U(0x20)
/* KPRW_HF_IDLE: nothing of the image is armed at start-up and nothing reads its probe
 * tables before an event is added or switched on: every point a live point or a gated
 * live one, every probe of a soft-disabled live event without triggers, no C handler,
 * count-only, verify or exit point. Start-up takes them unchecked; the live-probe
 * thread checks them (as start-up checks any other image's) before its first pass. */
#define KPRW_HF_IDLE KPRW_U(0x40)

/* kprw_point.xmode: how the probed instruction is executed after the pre handlers. */
#define KPRW_X_SSTEP 1   /* "k": single-step the copy in the slot with TF, post handlers after */
#define KPRW_X_BOOST 2   /* "b": run the copy in the slot; the slot ends with jmp back */
#define KPRW_X_EMULATE 3 /* "b": emulate the instruction (emu_op) by editing the registers */
#define KPRW_X_OPTIMIZED 4 /* "o": no int3; site holds jmp rel32 to a detour buffer at slot (see
                            * "Jump-optimized probes" below); insn_len is the DCR length */

/* kprw_point.emu_op */
#define KPRW_EMU_NOP 1    /* skip: ip = site + insn_len (nop, endbr64) */
#define KPRW_EMU_JMP 2    /* ip = target */
#define KPRW_EMU_JCC 3    /* if cond(emu_cc, flags) ip = target */
#define KPRW_EMU_CALL 4   /* push site + insn_len; ip = target */
#define KPRW_EMU_RET 5    /* ip = pop; sp += ret_imm */
#define KPRW_EMU_JRCXZ 6  /* if rcx == 0 (ecx with KPRW_PF_ADDR32) ip = target */
#define KPRW_EMU_LOOP 7   /* rcx--; if rcx != 0 ip = target */
#define KPRW_EMU_LOOPE 8  /* rcx--; if rcx != 0 && ZF ip = target */
#define KPRW_EMU_LOOPNE 9 /* rcx--; if rcx != 0 && !ZF ip = target */

/* kprw_point.pflags */
#define KPRW_PF_CALL 0x01    /* copy is a call: after a single-step, fix the pushed return address */
#define KPRW_PF_BRANCH 0x02  /* copy may transfer control anywhere (ip after step is not slot end) */
#define KPRW_PF_ADDR32 0x04  /* jrcxz/loop with 0x67 prefix: use ecx */
#define KPRW_PF_PUSHF 0x08   /* copy is pushf: after a single-step, hide TF in the pushed flags */
#define KPRW_PF_NOBOOST 0x10 /* the slot copy must not run without single-step (no jmp back) */
#define KPRW_PF_INT3STEP 0x40 /* KPRW_X_SSTEP without the trap flag, as the kernel single-steps
                               * kprobes since 5.15: the slot is the copy (slot_len bytes) then
                               * an int3, whose trap (ip = slot + slot_len + 1) ends the step;
                               * no jmp back. Only for copies that fall through (no
                               * KPRW_PF_BRANCH, KPRW_PF_CALL, KPRW_PF_PUSHF). */
#define KPRW_PF_INNER 0x20   /* --verify-regions: this int3 is an inner byte of a would-be DCR;
                              * a hit is a violation (see "Verification mode" below) */
#define KPRW_PF_COUNT 0x80   /* KPRW_X_OPTIMIZED, count-only (rewrite --count-only): the detour
                              * never calls the runtime; see "Count-only detours" below */

/* kprw_point.dflags */
#define KPRW_DF_PREFILTER 0x1 /* KPRW_X_OPTIMIZED: the detour tests the event's filter
                               * inline first; see "Inline filters" above */
#define KPRW_DF_INLINEHIST 0x2 /* KPRW_X_OPTIMIZED: the detour adds the hit to its event's
                                * histogram inline first; see "Inline histograms" above */
#define KPRW_DF_EXIT 0x4 /* KPRW_X_OPTIMIZED at one of a function's exits (rewrite --exits),
                          * reached after the straight-line code before the exit instruction
                          * ran; its probes are traced return events: at a ret (kprobes)
                          * recorded there with the registers of the ret, fetched as after
                          * it (ip = *sp, sp + 8); at a tail call's jmp (kretprobes) they
                          * hook the return address at sp, as at the function's entry */
#define KPRW_DF_SPENTRY 0x8 /* the entry point of a function whose return events are
                             * KPRW_DF_EXIT's: its entry records carry sp, as those of a
                             * function with a hooked return event */
#define KPRW_DF_LIVE 0x10 /* an int3 point whose site holds its original byte in the file:
                           * the runtime writes the int3 while some probe on it is enabled
                           * and puts the byte back when none is (src/rt_live.c) */
#define KPRW_DF_REOPT 0x20 /* KPRW_X_OPTIMIZED in an image with KPRW_DF_LIVE points, its kind
                            * able to change live (the DCR's copy keeps offsets, no syscall):
                            * `kprewrite optimize FILE off` makes its jmp an int3 into the
                            * detour, `on` the jmp again (src/rt_live.c) */
#define KPRW_INLINEREC_MAX 64 /* the most KPRW_DF_INLINEREC points in an image */
#define KPRW_DF_INLINEREC 0x40 /* KPRW_X_OPTIMIZED: the detour writes its event's record
                                * itself first; see "Inline records" above */

/* kprw_probe.type */
#define KPRW_T_KPROBE 1
#define KPRW_T_KRETPROBE 2
#define KPRW_T_VERIFY 3 /* the one pseudo-probe of a KPRW_PF_INNER point: its hit counter
                         * counts violations; no handlers, no event */

/* kprw_probe.flags */
#define KPRW_F_DISABLED 0x01 /* registered disabled (like disable_kprobe()) */
#define KPRW_F_TRACE 0x02    /* append a trace record per hit, with the event's fetch program */
#define KPRW_F_USER 0x04     /* a probe declared in a C handler file: user is the vaddr of its
                              * struct kprobe / struct kretprobe (kprewrite.h), whose handler
                              * fields the runtime reads at each hit (the table's handler fields
                              * must be 0); it starts unregistered, is registered at start-up
                              * (or by the hooks' init), and its misses also count in the
                              * struct's nmissed. See "C handlers" in runtime/doc.go. */

/* kprw_event.flags */
#define KPRW_EF_DISABLED 0x01 /* event registered disabled */
#define KPRW_EF_RETPROBE 0x02 /* the event is a return event (r:) */
#define KPRW_EF_SOFT 0x04     /* armed and its triggers run, but it starts soft-disabled (records
                               * nothing until enable_event or `kprewrite enable`): the kernel's
                               * soft mode */
#define KPRW_EF_TRIGGERS 0x08 /* a trigger program (internal/evtrigger) follows the filter
                               * program (at fetch + fetch_len + filter_len); its first u32 is
                               * its size */
#define KPRW_EF_LIVE 0x10     /* with KPRW_EF_SOFT: every probe of the event is on a
                               * KPRW_DF_LIVE point, so its switch arms and disarms the sites:
                               * a hit decides once, as it starts, whether the event is on
                               * (src/rt_live.c) */
#define KPRW_EF_SPARE 0x20    /* with KPRW_EF_SOFT: a prepared site's placeholder (rewrite
                               * --prepare): it records nothing itself; the events `kprewrite
                               * probe` adds at run time ride its probe (struct kprw_liveent,
                               * src/rt_livedef.c), and its site is armed while it has any */

#define KPRW_NO_EVENT KPRW_U(0xffffffff)
#define KPRW_NO_PROBE KPRW_U(0xffffffff) /* kprw_rec.probe of a record that counts no hit */

/* Size limits the runtime enforces; larger tables are refused at start-up. */
#define KPRW_MAX_POINTS 1000000
#define KPRW_MAX_PROBES_PER_POINT 64
#define KPRW_MAX_DATA_SIZE 4096     /* kretprobe per-instance data */
#define KPRW_MAX_MAXACTIVE 4096
#define KPRW_DEFAULT_TRACE_SIZE (64ull << 20)
#define KPRW_MAX_REC_DATA 4096      /* fetch-program output per record */

#ifndef __ASSEMBLER__

/* The table header. One per rewritten image. */
struct kprw_header {
	kprw_u32 magic;       /* KPRW_MAGIC */
	kprw_u16 version;     /* KPRW_VERSION */
	kprw_u16 header_size; /* sizeof(struct kprw_header) */
	kprw_u32 flags;       /* KPRW_HF_* */
	kprw_u32 npoints;     /* entries at points */
	kprw_u32 nprobes;     /* entries at probes (and at state) */
	kprw_u32 nevents;     /* entries at events */
	kprw_u32 nabs;        /* entries at abs_slots */
	kprw_u32 reserved0;
	kprw_u64 self;        /* vaddr of this header */
	kprw_u64 orig_entry;  /* vaddr of the original ELF entry point */
	kprw_u64 points;      /* vaddr of struct kprw_point[npoints], sorted by site, unique sites */
	kprw_u64 probes;      /* vaddr of struct kprw_probe[nprobes], grouped by point */
	kprw_u64 events;      /* vaddr of struct kprw_event[nevents] */
	kprw_u64 abs_slots;   /* vaddr of u64[nabs]: vaddrs of 8-byte words in writable data
	                         that hold link-time absolute addresses; the runtime adds the
	                         load bias to each at start-up (objlink AbsSlots) */
	kprw_u64 state;       /* vaddr of struct kprw_probe_state[nprobes] in WRITABLE data,
	                         zero-filled (bss is fine) */
	kprw_u64 trace_path;  /* vaddr of the default trace file path, NUL-terminated;
	                         0 or "" = no trace unless KPREWRITE_TRACE says one */
	kprw_u64 trace_size;  /* record-area bytes when creating a trace file; 0 = 64 MiB */
	kprw_u64 image_id;    /* identifies this rewritten image in trace files */
	kprw_u64 image_name;  /* vaddr of a NUL-terminated name for the image (may be 0) */
	kprw_u64 hooks;       /* vaddr of struct kprw_hooks, 0 = none (was reserved1) */
	/* appended (header_size was 128): */
	kprw_u64 desc;        /* vaddr of the image description frame ("KPRWDESC", see
	                         internal/rewriter/desc.go), 0 = none; the runtime copies it
	                         into the trace file when it registers the image there */
	kprw_u32 desc_size;   /* bytes of that frame */
	kprw_u32 reserved2;
	kprw_u64 sigguard;    /* vaddr of struct kprw_sigguard, 0 = none (see "Signal guard") */
	/* appended (header_size was 152): */
	kprw_u64 counters;    /* vaddr of the counter window: {hit, nmissed} u64 pairs of every
	                         probe (by runtime index), page-aligned, in WRITABLE zero-filled
	                         data; 0 = none (counters then live in struct kprw_probe_state).
	                         The runtime maps the image's counters in the trace file over it
	                         (MAP_FIXED | MAP_SHARED), so code may count at a link-time
	                         address: count-only detours do (KPRW_PF_COUNT) */
	kprw_u64 counters_size; /* bytes of the window, a multiple of 4096 >= nprobes * 16 */
	/* appended (header_size was 168): */
	kprw_u64 unwind;      /* vaddr of struct kprw_unwind[nunwind], sorted by pc; 0 = none
	                         (only images with stacktrace triggers have one) */
	kprw_u64 unwind_base; /* link-time vaddr the rows' pc fields are relative to */
	kprw_u32 nunwind;
	kprw_u32 nfree;       /* free live points after the npoints sorted ones (was reserved3):
	                         struct kprw_point entries whose site is 0 until `kprewrite
	                         probe` places an int3 event there (an unprepared site), each
	                         with one KPRW_EF_SPARE kprobe or kretprobe (a free return
	                         point, for r: events; the last nfree probes) and a
	                         slot of KPRW_FREE_SLOT bytes of int3s in the image's text;
	                         the runtime writes the entry and the slot through
	                         /proc/self/mem (src/rt_live.c, "Free live points") */
};
#define KPRW_FREE_SLOT 32 /* bytes of a free live point's slot */
#define KPRW_MAX_FREE 2048 /* the most free live points (rewrite --live-points and their
                            * return points) */

/*
 * The unwind table: the kernel's ORC, made by the rewriter from .eh_frame
 * (internal/ehframe UnwindRows). Row k holds from unwind_base + pc up to the next row's
 * pc: the CFA is rsp or rbp plus cfa_off, the return address is at CFA-8, and the
 * caller's rbp is unchanged (bp_off 0) or saved at CFA + 8*bp_off. A row whose cfa_reg
 * is KPRW_UW_UNDEF ends a walk (no FDE there, or a rule the walk cannot follow).
 * The rows are followed by a lookup index (the kernel's orc_lookup): u32 per block of
 * KPRW_UW_BLOCK bytes of pc, up to the last row's block plus one, the last row whose
 * pc is at most the block's start; a pc in block b is in rows [idx[b], idx[b+1]].
 */
struct kprw_unwind {
	kprw_u32 pc;
	short cfa_off;
	kprw_u8 cfa_reg; /* KPRW_UW_*, | KPRW_UW_BPLOST */
	signed char bp_off;
};
#define KPRW_UW_UNDEF 0
#define KPRW_UW_SP 1
#define KPRW_UW_BP 2
#define KPRW_UW_BPLOST 0x80 /* the caller's rbp cannot be recovered here */
#define KPRW_UW_BLOCK 256

/*
 * Signal guard. A program that blocks SIGTRAP (sigfillset + pthread_sigmask), or that
 * installs its own SIGTRAP disposition, would otherwise die at its next int3 probe hit
 * or run its handler instead of ours. For a dynamically linked program the rewriter
 * lists the main executable's GOT words (JUMP_SLOT and GLOB_DAT relocations) of the
 * libc functions that change signal masks or dispositions; at start-up (after ld.so
 * relocated everything) the runtime points each at a wrapper of its own (src/rt_sigguard.c).
 * For a static program (static-pie too) the rewriter finds those functions by symbol and
 * redirects their entries instead (KPRW_GS_ENTRY): the entry jumps through a word of the
 * rewriter's (jmp *word), which the runtime points at the wrapper, and the original
 * function runs from a relocated copy of its entry instructions.
 */
#define KPRW_SG_SIGACTION 1
#define KPRW_SG_SIGNAL 2       /* signal, bsd_signal: BSD semantics */
#define KPRW_SG_SYSV_SIGNAL 3  /* sysv_signal, __sysv_signal (signal() under strict ISO C) */
#define KPRW_SG_SIGSET 4
#define KPRW_SG_SIGHOLD 5
#define KPRW_SG_SIGIGNORE 6
#define KPRW_SG_SIGPROCMASK 7
#define KPRW_SG_PTHREAD_SIGMASK 8
#define KPRW_SG_SIGSUSPEND 9
#define KPRW_SG_PPOLL 10
#define KPRW_SG_PSELECT 11
#define KPRW_SG_EPOLL_PWAIT 12
#define KPRW_SG_SYSCALL 13     /* syscall(SYS_rt_sigaction / rt_sigprocmask / rt_sigsuspend, ...) */
#define KPRW_SG_PPOLL_CHK 14   /* __ppoll_chk (ppoll under _FORTIFY_SOURCE) */
/* 15 was KPRW_SG_THROW (C++ throw wrappers), replaced by the return trampoline's FDE */
#define KPRW_SG_EPOLL_PWAIT2 16 /* appended: epoll_pwait2 */
/* musl's internal __block_all_sigs / __block_app_sigs (static programs: raise, fork,
 * pthread_create, sigaction(SIGABRT) and others call them and then run code that may be
 * probed before they restore the mask) */
#define KPRW_SG_BLOCK_ALL_SIGS 17
#define KPRW_SG_BLOCK_APP_SIGS 18
#define KPRW_SG_FORK 19 /* fork: a child of an image with live probes starts a live-probe
                         * thread of its own (src/rt_live.c); listed only for such images */
/* Go's runtime.rt_sigaction and runtime.rtsigprocmask (ABI0, arguments on the stack,
 * the kernel's layouts): a static Go program's raw signal system calls (src/gosig.S) */
#define KPRW_SG_GO_SIGACTION 20
#define KPRW_SG_GO_SIGPROCMASK 21
#define KPRW_SG_MAX 21

/* kprw_got_slot.flags */
#define KPRW_GS_ENTRY 1 /* the entry of a function defined in the image (static programs) */

struct kprw_got_slot {
	kprw_u64 slot;      /* vaddr of the GOT word; KPRW_GS_ENTRY: of the writable word the
	                       function's patched entry jumps through (zero in the file: the
	                       runtime stores the wrapper, or the copy below when unguarded) */
	kprw_u64 lazy;      /* JUMP_SLOT: the word's value in the file (its PLT stub), which
	                       ld.so leaves there (+ bias) until the first call under lazy
	                       binding; 0 for GLOB_DAT (always bound at load);
	                       KPRW_GS_ENTRY: vaddr of the relocated copy of the function's
	                       entry, then a jmp back into it: the original function */
	kprw_u64 name;      /* vaddr of the NUL-terminated symbol name (lazy look-up) */
	kprw_u32 func;      /* KPRW_SG_* */
	kprw_u32 flags;     /* KPRW_GS_* (was reserved0) */
};

struct kprw_sigguard {
	kprw_u64 slots;      /* vaddr of struct kprw_got_slot[nslots] */
	kprw_u32 nslots;
	kprw_u32 reserved0;
	kprw_u64 relro;      /* PT_GNU_RELRO vaddr and size (0, 0: none): ld.so makes the */
	kprw_u64 relro_size; /* whole pages inside it read-only after relocation */
	kprw_u64 pltgot;     /* DT_PLTGOT vaddr (0: none): under lazy binding word 1 there is
	                        the image's struct link_map (glibc) */
	kprw_u64 reserved1;
};

/* User start-up and exit functions of C handler files (vaddrs, 0 = none). */
struct kprw_hooks {
	kprw_u64 init;        /* int kprewrite_init(void): run at the end of start-up; when
	                         present, KPRW_F_USER probes are not registered automatically */
	kprw_u64 exit;        /* void kprewrite_exit(void): run by exit() (glibc), in the
	                         process that started */
	kprw_u64 stack;       /* the most stack any handler entry can use, in bytes, measured
	                         at rewrite time over its call chain (internal/handlers); the
	                         SIGTRAP path skips C handlers, as missed, on a signal stack
	                         with less room (0 = unknown: never skipped) */
	kprw_u64 fini;        /* a library with a kprewrite_exit(): its own DT_FINI (vaddr, 0 =
	                         none), which kprewrite_rt_lib_fini, its DT_FINI now, calls
	                         after kprewrite_exit() (was reserved) */
	kprw_u64 sites;       /* vaddr of struct kprw_sites, 0 = none: the embedded analysis
	                         register_kprobe() places unprepared sites with (appended) */
};

/*
 * The embedded analysis (kprw_hooks.sites): made when the handler files call
 * register_kprobe(), for the functions they name (src/rt_usersite.c, docs/runtime.md
 * "register_kprobe at unprepared sites"). struct kprw_sites, then nfuncs struct
 * kprw_site_func sorted by name, then nsites struct kprw_site, then the
 * NUL-terminated names and refusals the offsets point at (from the kprw_sites).
 */
struct kprw_sites {
	kprw_u32 nfuncs;
	kprw_u32 nsites;
	kprw_u32 size;        /* bytes of the whole table, strings included */
	kprw_u32 reserved;
};

struct kprw_site_func {
	kprw_u64 addr;        /* link-time vaddr of the function */
	kprw_u32 name;        /* offset of its name */
	kprw_u32 first;       /* index of its first site */
	kprw_u32 nsites;      /* its instruction boundaries, in address order */
	kprw_u32 size;        /* its bytes */
	kprw_u32 ret_why;     /* 0: a return probe may hook its entry (register_kretprobe); else
	                         the offset of the refusal ("rule: sentence") */
	kprw_u32 reserved;
};

/* One instruction boundary and what `kprewrite probe`'s analysis decides for an int3
 * there (the fields of the struct kprw_point it would make) */
struct kprw_site {
	kprw_u32 off;         /* from the function's start */
	kprw_u32 why;         /* 0: an int3 may go here; else the offset of the refusal ("rule:
	                         sentence", as check says it) */
	kprw_u32 target;      /* (signed) an emulated branch's target - the site (KPRW_SITE_TARGET) */
	kprw_u16 ret_imm;
	kprw_u8 xmode;
	kprw_u8 insn_len;
	kprw_u8 emu_op;
	kprw_u8 emu_cc;
	kprw_u8 pflags;
	kprw_u8 disp;         /* offset of a RIP-relative disp32 in the instruction, 0 = none */
	kprw_u8 flags;        /* KPRW_SITE_* */
	kprw_u8 reserved;
	kprw_u16 sum;         /* the instruction bytes' sum (SiteSum in runtime/abi.go): they are
	                         the original's, not a patched site's */
};
#define KPRW_SITE_SLOT 1   /* the copy runs in a slot: the instruction, then a jmp back */
#define KPRW_SITE_TARGET 2 /* target is set */

/* One probepoint: an instruction whose first byte is int3, with every probe on it. */
struct kprw_point {
	kprw_u64 site;        /* vaddr of the probed instruction */
	kprw_u64 slot;        /* vaddr of the out-of-line slot: the (relocated) copy of the
	                         instruction, slot_len bytes, then jmp rel32 back to
	                         site + insn_len unless KPRW_PF_NOBOOST; 0 for KPRW_X_EMULATE */
	kprw_u64 target;      /* vaddr of the branch target for KPRW_EMU_JMP/JCC/CALL/LOOP* */
	kprw_u32 first_probe; /* index of its first probe */
	kprw_u16 nprobes;     /* number of probes (aggregated), >= 1 */
	kprw_u8 xmode;        /* KPRW_X_* */
	kprw_u8 insn_len;     /* length of the original instruction */
	kprw_u8 slot_len;     /* length of the copy in the slot (where a single-step ends) */
	kprw_u8 emu_op;       /* KPRW_EMU_* for KPRW_X_EMULATE */
	kprw_u8 emu_cc;       /* condition code 0..15 (low nibble of the jcc opcode) */
	kprw_u8 pflags;       /* KPRW_PF_* */
	kprw_u16 ret_imm;     /* ret imm16 */
	kprw_u16 dflags;      /* KPRW_DF_* (was reserved0) */
	kprw_u8 orig[16];     /* original instruction bytes (insn_len used) */
	kprw_u64 aux;         /* a free live point's (kprw_header.nfree) as kprewrite probe
	                         placed it: the address asked for, for the readers; a live
	                         jump point's DCR map (was reserved1): where the offsets of
	                         its DCR's copy step, up to four (start, delta) byte pairs
	                         from the low bytes, a start 0 ending them (an instruction at
	                         DCR offset o >= start is at o + delta in the copy); 0: none */
};

/* One registered probe (struct kprobe or struct kretprobe). */
struct kprw_probe {
	kprw_u32 point;         /* index of its point */
	kprw_u32 event;         /* index of its event (name, trace format) or KPRW_NO_EVENT */
	kprw_u8 type;           /* KPRW_T_* */
	kprw_u8 flags;          /* KPRW_F_* */
	kprw_u16 reserved0;
	kprw_u32 maxactive;     /* kretprobe: instances; 0 = kernel default max(10, 2*ncpus) */
	kprw_u32 data_size;     /* kretprobe: bytes of per-instance data */
	kprw_u32 reserved1;
	/* User C handlers, vaddrs, 0 = none. Called with the user object below:
	 *   int  pre_handler(void *kp, struct pt_regs *regs);          non-zero: resume at regs->ip
	 *   void post_handler(void *kp, struct pt_regs *regs, unsigned long flags);
	 *   int  fault_handler(void *kp, struct pt_regs *regs, int trapnr);  (called for KPRW_F_USER
	 *        probes only, from their struct; see rt_user.c)
	 *   int  entry_handler(struct kretprobe_instance *ri, struct pt_regs *regs); non-zero: skip
	 *   int  handler(struct kretprobe_instance *ri, struct pt_regs *regs);
	 */
	kprw_u64 pre_handler;
	kprw_u64 post_handler;
	kprw_u64 fault_handler;
	kprw_u64 entry_handler;
	kprw_u64 ret_handler;
	kprw_u64 user;          /* vaddr of the user's struct kprobe/kretprobe (0: pass the
	                           runtime's struct kprw_probe) */
	kprw_u64 reserved2;
};

/* One trace event (kprobe-event definition): its name and its fetch program. */
struct kprw_event {
	kprw_u64 group;     /* vaddr of NUL-terminated group name ("kprobes" by default) */
	kprw_u64 name;      /* vaddr of NUL-terminated event name */
	kprw_u64 fetch;     /* vaddr of the fetch program (internal/eventdef encoding) */
	kprw_u32 fetch_len; /* bytes */
	kprw_u32 id;        /* event id written in trace records */
	kprw_u32 flags;     /* KPRW_EF_* */
	kprw_u32 filter_len; /* bytes of the event's filter program (internal/evfilter), stored
	                        right after the fetch program (at fetch + fetch_len); 0 = none
	                        (was reserved0) */
};

/* Per-probe writable state, zero at start (the rewriter reserves nprobes of them). */
struct kprw_probe_state {
	kprw_u64 hit;     /* used when there is no trace file to hold the counters */
	kprw_u64 nmissed;
	kprw_u32 flags;   /* runtime: KPRW_SF_* */
	kprw_u32 gate;    /* first probe of a KPRW_X_OPTIMIZED point: the runtime writes 1 at
	                     start-up when the point is armed; the detour reads it (0 = run the
	                     relocated DCR only, which is also what happens before start-up) */
	union {
		struct {
			kprw_u32 pfgen; /* the probe of a KPRW_DF_PREFILTER point: the trace file's
			                   ctl_gen under which its detour's inline filter is its
			                   filter (~0: never; see "Inline filters") */
			kprw_u32 reserved1;
		};
		kprw_u64 iropen; /* the probe of a KPRW_DF_INLINEREC point: the trace file's
		                    switch generation (sw_gen) under which its detour may write
		                    the record itself (~0: never; see "Inline records") */
	};
};
#define KPRW_SF_DISABLED 0x1 /* disabled (flags, KPREWRITE_DISABLE, disable_kprobe()) */
#define KPRW_SF_UNREG 0x2    /* a KPRW_F_USER probe that is not registered */
#define KPRW_SF_FORCED 0x4   /* disabled by the table or KPREWRITE_DISABLE: enable_kprobe()
                              * cannot enable it */

/* struct pt_regs, the kernel's x86-64 layout (arch/x86/include/asm/ptrace.h). kprewrite.h,
 * the handlers' header, has the same definition under the same guard. */
#ifndef KPRW_PT_REGS_DEFINED
#define KPRW_PT_REGS_DEFINED
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax;
	unsigned long ip, cs, flags, sp, ss;
};
#endif

/* What a return handler gets (the kernel's kretprobe_instance, flattened). kprewrite.h has
 * the same layout with the kernel's field types (struct kretprobe *rp, kprobe_opcode_t
 * *ret_addr, char data[]) under the same guard. */
#ifndef KPRW_RI_DEFINED
#define KPRW_RI_DEFINED
struct kretprobe_instance {
	void *rp;                /* the user's struct kretprobe (kprw_probe.user) */
	unsigned long ret_addr;  /* the real return address */
	unsigned long entry_sp;  /* where the return address is (sp at function entry) */
	unsigned int tid;        /* thread that entered */
	unsigned int reserved0;
	void *task;              /* struct task_struct of the thread running the handler (set
	                            before each handler; valid until it returns) */
	unsigned long reserved1;
	unsigned long long data[]; /* data_size bytes, 16-byte aligned */
};
#endif

/* Counters the runtime keeps for tests and `kprewrite profile` (kprewrite_rt_stats). */
struct kprw_stats {
	kprw_u64 traps;       /* SIGTRAPs handled at probepoints (int3) */
	kprw_u64 steps;       /* single-step traps (TRAP_TRACE) handled */
	kprw_u64 boosts;      /* hits resumed in a slot without a second trap */
	kprw_u64 emulated;    /* hits resumed by emulation */
	kprw_u64 rettramps;   /* return trampolines run (a plain add: threads returning at the
	                         same instant may count one; a thread's runs through the fast
	                         path are added when it takes its next block, as records) */
	kprw_u64 foreign;     /* SIGTRAPs that were not ours */
	kprw_u64 records;     /* trace records written (a thread's records through the jump-optimized
	                         fast paths are added when it takes its next block: those in a
	                         block it still writes are not in it yet; the trace file's counts
	                         are exact) */
	kprw_u64 lost;        /* trace records lost (file full or unavailable) */
	/* added for jump-optimized probes and --verify-regions (appended: older readers
	 * that know the first 64 bytes still work) */
	kprw_u64 optslow;     /* detour hits that resumed through iretq (redirect, sp change, DF) */
	kprw_u64 violations;  /* --verify-regions: int3 hits on inner DCR bytes */
	/* added for C handlers (appended) */
	kprw_u64 handler_faults; /* faults in user handlers (reported on stderr, recovered) */
	/* added for C++ exceptions (appended) */
	kprw_u64 rp_flushed;  /* return-probe instances released because a C++ exception or a
	                         forced unwind (pthread_cancel, pthread_exit) left their frame
	                         through the trampoline: no return event (each also counts in
	                         its probe's miss counter) */
	/* added for fast reads (appended) */
	kprw_u64 read_faults; /* fault-catching reads stopped by a fault (bad pointers read) */
};

/*
 * The trace file (MAP_SHARED, shared by every thread and process of the run; each process
 * appends, nothing is truncated). Layout:
 *   [0, 4096)                          struct kprw_trace_hdr
 *   [data_off, data_off+data_size)     records, 8-byte aligned, in blocks of block_size
 *   [counters_off, +counters_size)     per-image counters: {hit, nmissed} u64 pairs
 * counters_size is chosen by the runtime that creates the file (at least
 * KPRW_TRACE_COUNTERS_SIZE, more for an image with many probes); readers use the
 * header's offsets and sizes, never the constant.
 */
#define KPRW_TRACE_MAGIC "KPRWTRC1"
#define KPRW_TRACE_VERSION 5 /* 5: as 4, and every writer of a switch (tracing_off, an
                               * event's soft-disable word, a control frame, a process's
                               * probe switches) bumps sw_gen after it: a runtime of version
                               * 4 or older, which does not, must not join (this one joins
                               * 3 and 4 files too, without trusting sw_gen there);
                               * 4: as 3, and a ring's writer zeroes a block it takes again
                               * (the recorder gives blocks back unzeroed: a runtime of
                               * version 3 must not join; a ring of 3, whose recorder
                               * zeroes, is taken as well); 3: compact records (struct
                               * kprw_crec) after a block header (struct kprw_blk); 2: struct
                               * kprw_rec in per-thread blocks */
#define KPRW_TRACE_VERSION_DIRECT 5 /* what a rewritten program makes a file it writes alone
                                      * (no ring: laid out as 3; 5 keeps older runtimes out) */
#define KPRW_TRACE_VERSION_SWGEN 5 /* the least version whose writers all bump sw_gen */
/* sw_gen (version 5 on; the header has no room left, so it is the first word of its last
 * images[] entry, which no image takes then): atomic, bumped after every change that
 * closes what decides whether a hit of any process of the run writes its record:
 * tracing_off set, an event's soft-disable word set, a control frame linked (after
 * ctl_gen), a process's own switches (a probe disabled, every probe disarmed). A
 * process's kprw_hot line keeps the value under which it found its event open, and its
 * hits compare this one word instead of reading each switch (src/optprobe.S) */
#define KPRW_TRACE_SWGEN_IMAGE (KPRW_TRACE_MAX_IMAGES - 1)
#define KPRW_TRACE_HDR_SIZE 4096
#define KPRW_TRACE_MAX_IMAGES 160
#define KPRW_TRACE_COUNTERS_SIZE (1u << 20) /* the least counters_size of a new file */

struct kprw_trace_image {
	kprw_u64 image_id;     /* kprw_header.image_id */
	kprw_u32 nprobes;
	kprw_u32 flags;        /* KPRW_TIF_* (was reserved0, always 0 before) */
	kprw_u64 counters_off; /* file offset of its {hit, nmissed}[nprobes] */
};
/* kprw_trace_image.flags */
#define KPRW_TIF_EXT 0x1 /* a struct kprw_trace_image_ext follows the image's counters */
#define KPRW_TIF_SPARE 0x2 /* its control area ends with KPRW_CTL_SPARE count slots for
                            * triggers added at run time (struct kprw_ctlframe) */
#define KPRW_TIF_USER 0x4  /* an image with C handlers: after those slots, two u64 per
                            * probe (runtime index) saying how a C handler registered it,
                            * for `kprewrite list TARGET`: KPRW_UR_* | pid << 32 of the
                            * process that registered it last (0: none), then the site's
                            * link-time address for one at a free live point */
#define KPRW_UR_KPROBE 1    /* register_kprobe() */
#define KPRW_UR_KRETPROBE 2 /* register_kretprobe() */
#define KPRW_UR_JPROBE 3    /* register_jprobe() */
#define KPRW_UR_TYPE 3
#define KPRW_UR_DISABLED 0x4 /* registered disabled, or disable_kprobe() since */
#define KPRW_UR_FREE 0x8     /* at a free live point (an unprepared site): the second word
                              * is its site, bits 8..15 its point's KPRW_X_* */

/* Per-image data that does not fit the header page: right after the counters. The
 * description frame itself is appended at the end of the file (which grows, under the
 * file lock, when the image registers), so the file describes its images. */
struct kprw_trace_image_ext {
	kprw_u64 desc_off;  /* file offset of the image's KPRWDESC frame (0 = none) */
	kprw_u64 desc_size; /* bytes */
	/* per-CPU hit counters of count-only detours (src/rseq.S; 0 = none): shards_n
	 * shards of shards_stride bytes from shards_off, each a u64 hit count per probe;
	 * a probe's hits are its counter's plus its count in every shard */
	kprw_u64 shards_off;
	kprw_u64 shards_stride;
	kprw_u32 shards_n;
	/* bytes of the image's control area, right after this record (was reserved0, 0): a
	 * u32 of KPRW_CTL_* flags per event (runtime index), padded to 8, then a u64 count
	 * per trigger slot (src/rt_trigger.c); shared by every process of the file */
	kprw_u32 ctl_size;
};
#define KPRW_CTL_SOFT_DISABLED 0x1 /* the event records nothing (enable_event/disable_event) */
#define KPRW_CTL_SPARE 64 /* count slots at the end of a control area for run-time triggers */

/* A run-time control frame: an image's filters and triggers as changed after the rewrite
 * (kprewrite filter|trigger, KPREWRITE_CONTROL), in the trace file's counters area
 * (always inside every runtime's mapping of the file), linked newest first from the
 * header's ctl_last. Only an image's latest frame counts: it holds every event whose
 * filter or triggers differ from the rewrite's. Written whole, then linked under the file
 * lock, then ctl_gen bumped; never changed after. A KPREWRITE_CONTROL file is
 * KPRW_CTLFILE_MAGIC followed by frames (prev 0). Little-endian. */
#define KPRW_CTLFRAME_MAGIC "KPRWCTL1"
#define KPRW_CTLFILE_MAGIC "KPRWCTLF"
#define KPRW_CTLFRAME_MAX (1u << 20) /* bytes */
struct kprw_ctlframe {
	char magic[8];
	kprw_u64 prev;       /* file offset of the frame linked before this one (any image) */
	kprw_u64 image_id;
	kprw_u32 size;       /* bytes, this header included, a multiple of 8 */
	kprw_u32 nentries;   /* struct kprw_ctlent, each followed by its bytes */
	kprw_u32 nevents;    /* the image's runtime events (a frame for another build is ignored) */
	kprw_u32 nswitches;  /* struct kprw_ctlswitch after the entries (KPREWRITE_CONTROL) */
	kprw_u64 source;     /* a KPREWRITE_CONTROL file's frame: a hash of it (0: made by a
				kprewrite command), so that the processes started with the same
				file install it once */
};
/* A switch of a KPREWRITE_CONTROL frame, applied when it is installed: bit 0 of the
 * control area's word at slot (a synthetic event's switch) is set to bit. */
struct kprw_ctlswitch {
	kprw_u32 slot;
	kprw_u32 bit;
};
/* One event's run-time control, followed by its filter program (internal/evfilter), its
 * trigger program (internal/evtrigger; a hist trigger with no program keeps the event's
 * rewritten hist trigger of that slot) and its text (the filter, NUL, the triggers as
 * the trigger file lists them, one a line), each padded to 8. */
struct kprw_ctlent {
	kprw_u32 event;      /* runtime event index */
	kprw_u32 flags;      /* KPRW_CE_* */
	kprw_u32 filter_len; /* bytes (0: no filter, with KPRW_CE_FILTER) */
	kprw_u32 trig_len;   /* bytes (0: no triggers, with KPRW_CE_TRIG) */
	kprw_u32 text_len;
	kprw_u32 reserved;
};
#define KPRW_CE_FILTER 0x1  /* the filter is this entry's, not the rewrite's */
#define KPRW_CE_TRIG 0x2    /* the triggers are this entry's */
#define KPRW_CE_ENABLE 0x4  /* KPREWRITE_CONTROL: switch the event on at start-up */
/* kprw_ctlent.event of a synthetic event's entry: this bit and the event's index among
 * the image description's synthetic events (below KPRW_CTL_MAX_SYNTH; its record id is
 * nevents + 1 + the index). Its triggers are histograms added at run time, fed after the
 * rewrite's (which the generating histograms' actions hold) with the same data. */
#define KPRW_CTL_SYNTH 0x80000000u
#define KPRW_CTL_MAX_SYNTH 256
#define KPRW_CE_DISABLE 0x8 /* KPREWRITE_CONTROL: switch the event off at start-up */

/* A live-event frame: the events `kprewrite probe` added to an image at run time, on
 * its prepared sites (KPRW_EF_SPARE events' probes) or its free live points
 * (KPRW_LE_POINT). Its header is a struct
 * kprw_ctlframe with this magic (nswitches 0), in the same chain as the control frames
 * (walkers of either kind step over the other); nentries struct kprw_liveent follow,
 * each followed by its fetch program, its text, its filter program and its trigger
 * program, each padded to 8. Only
 * an image's newest live frame counts (an event removed is one left out); readers take
 * every frame's definitions, so the records of an event removed still have a name.
 * Record ids are never reused within a file. */
#define KPRW_LIVEFRAME_MAGIC "KPRWLIV1"
#define KPRW_LIVE_MAX 256 /* live events of one image */
struct kprw_liveent {
	kprw_u32 probe;     /* runtime index of the KPRW_EF_SPARE probe it rides */
	kprw_u32 id;        /* the id its records carry */
	kprw_u32 fetch_len; /* bytes of its fetch program (internal/eventdef) */
	kprw_u32 text_len;  /* bytes of its definition (no NUL) */
	kprw_u64 hits_off;  /* file offset of its u64 hit count, in the counters area */
	kprw_u32 flags;     /* KPRW_LE_* */
	kprw_u32 filter_len; /* bytes of its filter program (internal/evfilter; 0: none), after
	                        the definition; the definition's text is followed by a newline
	                        and the filter's expression when it has one (was reserved, 0) */
	kprw_u32 trig_len;   /* bytes of its trigger program (internal/evtrigger; 0: none), after
	                        the filter program; its triggers' texts follow the text's
	                        other lines, one a line (kprewrite trigger) */
	kprw_u32 reserved;
};
#define KPRW_LE_RETURN 0x1 /* a return event (r:): its probe is a kretprobe */
#define KPRW_LE_POINT 0x2  /* an event at an unprepared site: its probe is a free live
                            * point's (kprw_header.nfree), and after its filter program
                            * come the point as the tool placed it (struct kprw_point: its
                            * site, kind, original bytes and slot, the table entry's
                            * first_probe and nprobes) and its slot's KPRW_FREE_SLOT bytes */
#define KPRW_LE_STATE 0x4  /* the u64 word after its hit count (hits_off + 8) is its state:
                            * the live-probe thread of the program that applied the frame
                            * last writes there what its site is now (KPRW_LS_*), for
                            * `kprewrite list TARGET` */
#define KPRW_LE_CTL 0x8    /* the u64 word after its state (hits_off + 16) is its switch:
                            * KPRW_CTL_SOFT_DISABLED set, its hits run its triggers and
                            * write no record (kprewrite disable, and enable_event and
                            * disable_event triggers naming it: KPRW_TRIG_LIVE_TARGET) */
#define KPRW_TRIG_LIVE_TARGET 0x80000000u /* an enable_event/disable_event target: the low
                            * bits are the slot (of the control area's trig_count words) of
                            * a live event's KPRW_LE_CTL word, not a runtime event index */
#define KPRW_LS_NONE 0     /* no program has applied it yet */
#define KPRW_LS_INT3 1     /* armed, an int3 (a jump site waiting for a safepoint too) */
#define KPRW_LS_JUMP 2     /* armed, jump-optimized */
#define KPRW_LS_PENDING 3  /* its free point waits for no thread to be at its old place */
#define KPRW_LS_REFUSED 4  /* its free point does not check against the program: not armed */
#define KPRW_LS_OFF 5      /* not armed: every probe disarmed, or no records can be written */
#define KPRW_RSEQ_MAXCPU 254 /* per-CPU counting with at most this many possible CPUs */
/* count-only detours of at most this many probes skip their per-CPU calls with a jrcxz
 * rel8 (the short form); src/countprobe.S, kprt.CountShortN */
#define KPRW_COUNT_SHORT_N 12

struct kprw_trace_hdr {
	char magic[8];           /* KPRW_TRACE_MAGIC */
	kprw_u32 version;        /* KPRW_TRACE_VERSION */
	kprw_u32 data_off;       /* KPRW_TRACE_HDR_SIZE */
	kprw_u64 data_size;      /* bytes of the record area */
	kprw_u64 head;           /* atomic: bytes given out in blocks (may run past data_size) */
	kprw_u64 lost;           /* atomic: records that did not fit */
	kprw_u64 counters_off;
	kprw_u64 counters_size;
	kprw_u64 counters_used;  /* bytes given to images (under the file lock) */
	kprw_u32 nimages;        /* entries used in images (under the file lock) */
	kprw_u32 clock_id;       /* 1 = CLOCK_MONOTONIC (timestamps are its nanoseconds) */
	kprw_u64 created_real_ns;/* CLOCK_REALTIME when the file was created */
	kprw_u64 created_mono_ns;/* CLOCK_MONOTONIC at the same moment */
	kprw_u64 block_size;     /* the record area is given out in blocks that are multiples of
	                            this many bytes (a power of two), aligned to it */
	kprw_u32 tracing_off;    /* non-zero: records are not written (traceoff triggers,
	                            kprewrite traceoff); hits are still counted */
	kprw_u32 ctl_gen;        /* atomic: bumped after each run-time control frame is linked
	                            (kprewrite filter|trigger, KPREWRITE_CONTROL); a runtime
	                            that sees it change reads its image's latest frame (was
	                            reserved0) */
	kprw_u64 ctl_last;       /* file offset of the latest struct kprw_ctlframe (0: none),
	                            written under the file lock (was reserved[0]) */
	kprw_u64 snap_ts;        /* the latest snapshot (a snapshot trigger, onmax().snapshot()):
	                            the trace as it was then is every record whose time is at
	                            most this (0: none; was reserved[0]) */
	kprw_u64 snap_count;     /* atomic: snapshots taken (was reserved[1]) */
	struct kprw_trace_image images[KPRW_TRACE_MAX_IMAGES];
	/* version 3 */
	kprw_u64 ts_base;        /* a compact record's time is ts_base + its 48-bit offset */
	kprw_u32 ring_nblocks;   /* 0: blocks are given out by head (a file that grows in use);
	                            else the record area is a ring of ring_nblocks blocks of
	                            ring_bs bytes handed out through the queue (kprewrite
	                            record) */
	kprw_u32 ring_flags;     /* KPRW_RING_* */
	kprw_u64 ring_bs;
	kprw_u64 ring_take;      /* atomic: queue entries writers took */
	kprw_u64 ring_give;      /* queue entries the recorder filled (stored with release) */
	kprw_u64 ring_queue_off; /* file offset of kprw_u64 queue[ring_nblocks]: entry g (at
	                            g % ring_nblocks) is a block number | g / ring_nblocks << 32,
	                            so a taker knows a stale entry from the one it is due */
	kprw_u64 chunk_last;     /* file offset of the last chunk the recorder appended (0: none) */
	kprw_u32 recorder_pid;   /* the recorder's pid (0: none) */
	kprw_u32 flags;          /* KPRW_TRACE_* (was reserved1, 0) */
	/* the run the file holds (0: none, a file of an older runtime): the process that
	 * started it, by pid and start time (/proc/PID/stat's starttime, clock ticks since
	 * boot; 0 where /proc is not mounted). A process that opens the file joins the run
	 * when it or an ancestor is that process (or the recorder); else it starts a new
	 * run: the file is renamed FILE.old first (src/rt_tracefile.c) */
	kprw_u32 run_pid;
	kprw_u32 run_pad;
	kprw_u64 run_start;
	kprw_u64 overwritten;    /* atomic: records of an overwrite ring's blocks that writers
	                            took again before anything copied them (they were written:
	                            entries-written counts them; 0 in older files) */
	kprw_u32 live_done;      /* atomic: 1 + the ctl_gen a program's live-probe thread last
	                            applied every change up to (the latest of the programs); 0:
	                            none ever did. `kprewrite probe` waits for it */
	kprw_u32 live_pad;
	kprw_u32 clock;          /* KPRW_CLOCK_*: what record times are (0 in older files:
	                            tsc); set by the file's first image while no record is
	                            written, adopted by every later one (src/rt_tracefile.c) */
	kprw_u32 ring_ext_blocks; /* non-zero: the blocks the ring grows by are not in the
	                            file's ring (data_size holds its first data_size /
	                            ring_bs) but appended to the file in extents of
	                            ring_ext_blocks blocks by the writer that first needs
	                            one (src/rt_ring.c), extent k at the file offset
	                            ext[k] (0: not yet) of the u64 ext[] after the queue.
	                            0: every block is in the file's ring */
	kprw_u64 counter;        /* atomic: KPRW_CLOCK_COUNTER's last value (records' times are
	                            1, 2, ...: one increasing count over every writer) */
	kprw_u64 spilled;        /* the recorder's: records of ring blocks it gave back once
	                            copied, before their chunk was written; a chunk carries
	                            the low 32 bits as its mark (readers: lost += spilled -
	                            the last chunk's mark) */
	kprw_u64 ring_grown;     /* atomic: the ring's blocks in use. The queue starts with
	                            blocks 0 .. ring_grown - 1; a writer that finds it empty
	                            claims block ring_grown (an add) rather than lose its
	                            record, while ring_grown < ring_nblocks. 0: the ring does
	                            not grow (an older recorder; overwrite mode) */
};
/* kprw_trace_hdr.clock: the kernel's trace_clock names */
#define KPRW_CLOCK_UNSET 0   /* older files (their times are tsc's); a file without records */
#define KPRW_CLOCK_TSC 1     /* CLOCK_MONOTONIC ns extrapolated from rdtsc (src/rt_clock.c) */
#define KPRW_CLOCK_MONO 2    /* CLOCK_MONOTONIC ns from clock_gettime (vDSO, else the system call) */
#define KPRW_CLOCK_COUNTER 3 /* no time: a count shared by every writer of the file, order only */
#define KPRW_TRACE_UNRESERVED 0x1 /* the record area's blocks are not reserved yet: a
                                     count-only image made the file, and the first image
                                     that records reserves them (under the file lock).
                                     Older runtimes' only: the record area now takes
                                     blocks chunk by chunk as it is written (src/rt_tracefile.c) */
#define KPRW_TRACE_NOOPT 0x4 /* `kprewrite optimize FILE off`: live-capable jump points (KPRW_DF_LIVE,
                                KPRW_DF_REOPT) are int3s into their detours (the kernel's
                                debug.kprobes-optimization = 0) */
#define KPRW_TRACE_DISARMED 0x8 /* `kprewrite disable FILE all`: every probe of the programs
                                   writing into the file is disarmed, C handlers included
                                   (the kernel's kprobes/enabled = 0); each keeps its own
                                   state for `enable FILE all` */
#define KPRW_RING_OVERWRITE 0x1 /* a writer puts the block it leaves back in the queue and
                                   zeroes the one it takes: the ring keeps the most recent
                                   records (a flight recorder) */
#define KPRW_RING_DONE 0x2      /* the recorder has finished: the ring is final */

/* A block of the record area (version 3): one thread's records, after this header.
 * magic is stored last; a block without it was taken by a writer that died at once (it
 * is zero, readers skip it a block_size granule at a time). */
struct kprw_blk {
	kprw_u32 magic; /* KPRW_BLK_MAGIC */
	kprw_u32 size;  /* bytes of the block, header included */
	kprw_u32 pid;
	kprw_u32 tid;
	kprw_u8 image;  /* the writer's entry in the header's images */
	kprw_u8 pad[3];
	kprw_u32 seq;   /* ring: the queue entry it was taken from (ring_take's value) */
	kprw_u64 image_id;
	kprw_u64 bias;  /* the image's load bias in the writing process */
	kprw_u32 done;    /* ring: its writer left it (took another block) */
	kprw_u32 drained; /* ring: the records before this offset are in the recorder's
	                     chunks; in a chunk: where in the ring block its records were */
	char comm[16];  /* the thread's name when the block was taken: a renamed thread
	                   takes a new block */
};
#define KPRW_BLK_MAGIC KPRW_U(0x3342504b) /* "KPB3" */
#define KPRW_BLK_ZEROED KPRW_U(0x3042504b) /* "KPB0": a ring block the recorder gave back
					     zeroed (every byte after this word): a writer
					     that takes it need not zero it (issue 49) */

/* A compact record (version 3), 16 bytes, then the ext part (KPRW_CREC_EXT), the return
 * address or stack pointer (KPRW_CREC_RET), rlen bytes of data, padding to 8. The pid, tid, comm, image
 * and load bias are the block's; the probe names the event and the site (the image's
 * description in the file); rlen (with its flags) is written first, commit last. A
 * record whose ts_lo and ts_hi are 0 is not there: the block's records end. */
struct kprw_crec {
	kprw_u16 rlen;   /* data bytes reserved | KPRW_CREC_* flags */
	kprw_u16 commit; /* data bytes written | KPRW_CREC_COMMITTED, last */
	kprw_u16 cpu;
	kprw_u16 ts_hi;  /* ts - ts_base: bits 32..47 */
	kprw_u32 ts_lo;  /* bits 0..31 */
	kprw_u32 probe;  /* runtime probe index */
};
struct kprw_crec_ext {
	kprw_u8 type;      /* KPRW_REC_* */
	kprw_u8 pad[3];
	kprw_u32 event_id;
	kprw_u64 ip;
	kprw_u64 ts_ns;    /* the whole timestamp (ts_lo, ts_hi are all ones) */
};
#define KPRW_CREC_LEN 0x1fff       /* rlen, commit: the data bytes */
#define KPRW_CREC_RET 0x2000       /* rlen: a u64 follows: a kretprobe record's return address;
                                      in a kprobe record (at the entry of a function with a
                                      return event), the stack pointer, bit 0 set when the
                                      return-address word held the return trampoline */
#define KPRW_CREC_EXT 0x4000       /* rlen: a struct kprw_crec_ext follows (records of no
                                      probe, times beyond 48 bits, images not described) */
#define KPRW_CREC_HIT 0x8000       /* rlen: the record is its probe's hit */
#define KPRW_CREC_COMMITTED 0x8000 /* commit: complete */
#define KPRW_CREC_DISCARDED 0x4000 /* commit (with COMMITTED): its event's filter refused it */

/* Chunks the recorder appends to a ring file (kprewrite record), after everything the
 * runtime put there: pieces, each a copy of a ring block's header (size: the piece's
 * bytes; drained: where its records were in the block) and a stretch of its records.
 * A chunk names the one before it, so readers walk them from chunk_last back. */
struct kprw_chunk {
	char magic[8];     /* KPRW_CHUNK_MAGIC */
	kprw_u64 prev;     /* file offset of the previous chunk, 0 = none */
	kprw_u64 size;     /* bytes of the chunk, header included */
	kprw_u32 npieces;
	kprw_u32 mark;     /* kprw_trace_hdr.spilled's low 32 bits with this chunk's records
	                      (0 in older files: none spilled) */
};
#define KPRW_CHUNK_MAGIC "KPRWCHNK"

/* A trace record. A thread takes a block of the record area with one atomic add on
 * head and writes its records there back to back with no atomic operation (the kernel's
 * per-CPU ring buffers, per thread); readers merge the blocks by timestamp. size is
 * written first, commit last: a record whose commit is not KPRW_REC_COMMIT was cut short
 * (the writer died) and is skipped. Where a size is 0 the block's data ends (its thread or
 * process ended, or needed a fresh block for a larger record): the rest of the block is
 * zero, and readers go on at the next multiple of block_size. A record whose probe is not
 * KPRW_NO_PROBE is that probe's hit: the hit counter of a probe that writes a record is
 * not incremented (one atomic operation less per hit); readers add the committed records
 * to the counters of the record's image. */
#define KPRW_REC_COMMIT KPRW_U(0x43525043) /* "CPRC" */
#define KPRW_REC_DISCARD KPRW_U(0x52435344) /* "DSCR": complete, but its event's filter
                                               refused it; readers skip it */
#define KPRW_REC_KPROBE 1
#define KPRW_REC_KRETPROBE 2
#define KPRW_REC_VIOLATION 3 /* --verify-regions: control reached an inner DCR byte. ip is that
                              * byte's vaddr, event_id KPRW_NO_EVENT, data 8 bytes: the vaddr of
                              * the would-be-optimized probe (its point's target). Written for the
                              * first KPRW_VIOLATION_RECORDS hits of each byte; the KPRW_T_VERIFY
                              * probe's hit counter counts all of them. */
#define KPRW_VIOLATION_RECORDS 16
#define KPRW_REC_PRINTK 4    /* trace_printk() from a C handler: event_id KPRW_NO_EVENT, ip the
                              * site of the probe whose handler printed (0 in kprewrite_init or
                              * kprewrite_exit), ret_ip the caller's run-time address, data the
                              * calling function's name, a NUL, then the text (no NUL) */
#define KPRW_PRINTK_MAX 512  /* bytes of text per record and per printk line (more is cut) */
#define KPRW_REC_STACK 5     /* a stacktrace trigger's user stack (always with the ext part):
                              * event_id and ip are the event's and the hit's site, data the
                              * run-time pcs of the frames, innermost first, u64 each */
#define KPRW_STACK_MAX 64    /* frames a stack record holds at most */
#define KPRW_REC_SYNTH 6     /* a synthetic event an onmatch() or onmax() trace action generated
                              * (always with the ext part): event_id the synthetic event's id
                              * (after the image's events'), ip the site of the hit whose
                              * trigger generated it, data its fields, u64 each */

struct kprw_rec {
	kprw_u32 size;     /* total bytes, multiple of 8 */
	kprw_u32 commit;   /* KPRW_REC_COMMIT once complete */
	kprw_u8 type;      /* KPRW_REC_* */
	kprw_u8 image;     /* the writer's entry in the header's images (its counters) */
	kprw_u16 cpu;
	kprw_u32 event_id; /* kprw_event.id */
	kprw_u64 image_id;
	kprw_u32 pid;
	kprw_u32 tid;
	kprw_u64 ts_ns;    /* CLOCK_MONOTONIC */
	kprw_u64 ip;       /* probe site vaddr */
	kprw_u64 ret_ip;   /* kretprobe: return address (run-time, absolute) */
	kprw_u64 bias;     /* load bias of the image when recorded */
	char comm[16];     /* PR_GET_NAME of the thread */
	kprw_u32 data_len; /* bytes of fetch output that follow */
	kprw_u32 probe;    /* the probe (runtime index, in image's counters) whose hit this
	                      record is, or KPRW_NO_PROBE */
	/* kprw_u8 data[data_len], then padding to 8 */
};

#endif /* !__ASSEMBLER__ */
#endif /* KPREWRITE_ABI_H */
