// Package runtime holds kprewrite's run-time support: freestanding C and GNU assembler
// (src/, include/) linked into every rewritten program, built by build.sh at
// `go generate ./runtime` into one relocatable object, kprewrite_rt.o, embedded here as
// Object. Importers alias the package (kprt "github.com/kprewrite/kprewrite/runtime"); it also holds the Go
// mirror of the ABI (abi.go), the table encoder (encode.go) and the trace-file reader
// (trace.go).
//
// # The object
//
// gcc -O2 -ffreestanding -fno-builtin -nostdlib -fPIC -fno-plt -fvisibility=hidden
// -mgeneral-regs-only -mno-red-zone -fno-stack-protector -fcf-protection=none
// -fno-asynchronous-unwind-tables -fno-jump-tables -fno-ident (see build.sh), then
// ld -r and objcopy, which keeps the eight Sym* symbols global and drops .comment. No libc: raw
// system calls only, no TLS, no GOT, no absolute relocations (only R_X86_64_PC32 and
// PLT32), nothing undefined; object_test.go checks all of it and that a rebuild is
// byte-identical. The object has no .eh_frame section: no runtime C frame is ever on
// the stack while C++ unwinds (handlers must not throw). The one frame an unwinder does
// meet, the return trampoline's, has hand-written CFI in .data (SymEHFrame, see Return
// probes).
//
// # ABI (include/kprewrite_abi.h)
//
// All table addresses are link-time vaddrs. The rewriter:
//   - links the object and sets the ELF entry to SymEntry (kprewrite_rt_entry). It
//     saves every register and the flags, calls kprewrite_rt_init(initial_sp) on an
//     aligned stack, restores everything and jumps to the original entry, so %rdx (the
//     dynamic linker's fini), %rsp and all other registers reach it intact;
//   - writes HdrRel(vaddr of SymHdrRel, header vaddr) into the 8-byte SymHdrRel word.
//     The runtime finds the header PC-relatively and bias = header address - RawHeader.Self;
//   - emits Tables.Encode's RO blob (header, points sorted by site, probes grouped by
//     point, events, abs slots, strings, fetch programs) and reserves StateSize bytes of
//     zeroed writable data at the state address;
//   - writes int3 at each Point.Site; for XSStep/XBoost a slot holding the (relocated)
//     copy followed by SlotJmpBack (unless PFNoBoost); XEmulate needs no slot;
//   - lists objlink's AbsSlots in Tables.AbsSlots: the runtime adds the bias to each.
//
// Handlers are called as the kernel calls them, with struct pt_regs in the kernel's
// layout: pre(kp, regs) sees ip = site+1 and a non-zero return resumes at regs->ip with
// no single-step and no post handler; post(kp, regs, 0) sees ip after the instruction;
// entry_handler(ri, regs) non-zero skips the return handler; handler(ri, regs) sees
// regs->ip = ri->ret_addr and ax the return value. Register changes are written back.
//
// # int3 probes
//
// SIGTRAP handler with SA_SIGINFO|SA_RESTORER|SA_NODEFER|SA_ONSTACK (NODEFER: a hit
// inside a handler must be delivered, else force_sig kills; ONSTACK: the thread's
// sigaltstack if any, as Go and other small-stack runtimes need). Async signals are
// blocked while it runs. Per hit: binary search of the points, per-thread entry keyed by
// (getpid cached in a MADV_WIPEONFORK page, gettid), pre handlers, trace record, then
// emulate (jmp/jcc/call/ret/jrcxz/loop, then post handlers: 1 signal), boost (jump to
// the slot: 1 signal), or single-step the slot copy with TF (2 signals; at TRAP_TRACE
// ip and a pushed return address are moved from the slot back to the original code,
// pushf's TF hidden, TF restored, post handlers run), as kprobes.rst describes "k". With
// `rewrite --single-step int3` a copy that falls through (PFInt3Step, which the
// rewriter then sets for every boostable single-stepped instruction) is stepped as
// the kernel has stepped kprobes since 5.15: its slot is [copy][int3],
// the thread resumes there without TF, and the int3's trap, found by its address alone
// (src/rt_istep.c: nothing is kept per thread across the step), moves ip back and runs
// the post handlers (not for a missed hit: the thread is then still in a handler of
// ours). Two signals either way, but a trap-flag step costs a debug exception: a k hit
// with pre and post handlers and a trace record is ~6 us with the int3, ~16 us with TF
// on this VM (TestInt3StepCost). A hit while the thread runs a handler or is stepping
// is not run and counts in nmissed. Not ours: a SIGTRAP the
// program raises, or an int3 of its own, goes where the program's SIGTRAP disposition
// says (see Signal guard); a thread born from a single-stepped clone or fork is finished
// by slot address.
//
// # Signal guard
//
// What follows is said of SIGTRAP, which int3 probes need; with fast reads the guard
// does the same for SIGSEGV and SIGBUS (see Fast reads), and the functions are wrapped
// when either needs them.
//
// Programs block SIGTRAP (sigfillset + pthread_sigmask in python's faulthandler thread,
// around fork in git's run_command), give handlers a full sa_mask, reset SIGTRAP in a
// fork child, or install their own handler; the kernel then kills the process at the
// next hit (or runs their handler instead of ours). For dynamically linked programs the
// rewriter lists the main executable's GOT words (JUMP_SLOT, GLOB_DAT) of sigaction,
// signal, bsd_signal, sysv_signal, sigset, sighold, sigignore, sigprocmask,
// pthread_sigmask, sigsuspend, ppoll, __ppoll_chk, pselect, epoll_pwait, epoll_pwait2 and
// syscall (SigGuard, SigGuardFuncs); start-up, which runs after ld.so relocated the
// program, points them at wrappers (src/rt_sigguard.c). A static program (static-pie
// too) has no GOT: the rewriter finds the same functions by symbol
// (SigGuardStaticFuncs, glibc's and musl's internal names included) and redirects the
// entries of those that make the system call: each entry jumps through a word of its own
// in .kprewrite.bss (GotSlot.Entry, GSEntry), which start-up points at the wrapper, and
// the wrapper's real function is a relocated copy of the entry's first instructions
// followed by a jmp back (the word gets the copy itself under KPREWRITE_SIGGUARD=off, or
// when neither int3 probes nor fast reads need the guard, so it is never empty). musl's internal __block_all_sigs and __block_app_sigs (raise,
// fork, pthread_create, sigaction(SIGABRT)) are redirected too: their wrapper gives
// SIGTRAP back right after blocking, so a raise()d SIGTRAP reaches the program's handler
// inside raise, with musl's other signals still blocked, rather than when raise
// unblocks them. A word still lazily bound (pointing at
// its PLT stub, which would let ld.so overwrite the wrapper) gets the function ld.so
// would bind, looked up from GOT[1]'s link_map through each object's GNU hash table
// (default symbol version); a word under full RELRO is written with its page made
// writable for the store. The wrappers pass every mask on without SIGTRAP; the program
// reads back the kernel's mask, which never holds it (a SIGTRAP sent with kill() while
// the program thinks it blocked is acted on at once, not left pending). SIGTRAP's
// disposition is the program's only on paper: ours stays installed, sigaction and
// signal read back what the program set, and a SIGTRAP that is not ours goes to the
// program's handler with the kernel's siginfo and ucontext (changes to the registers
// take effect; SA_RESETHAND honoured; run on the mask the kernel would give it, minus
// SIGTRAP, so probes in it fire), or gets the default action (death by SIGTRAP, as
// without us; for a CPU trap also when ignored, as the kernel forces it), or is dropped
// (SIG_IGN, sent). KPREWRITE_SIGGUARD=off leaves the functions alone (diagnostics).
// Not covered, loud (death by SIGTRAP) rather than silent: stripped static programs
// (no symbols to find the functions by; rewrite warns) and functions whose entry cannot
// be redirected safely nor covered through their callers (rewrite lists them); the
// program's own raw rt_sigprocmask/rt_sigaction system calls (inline syscall
// instructions; the syscall() function is wrapped); calls from shared libraries through
// their own GOTs (a library that blocks signals and then calls back into probed code);
// in static glibc programs, int3 probes in the library's own code that runs while glibc
// blocks every signal with an inline system call (pthread_create until the new thread
// starts, raise, abort, posix_spawn). Jump-optimized probes need no
// signal at all. Start-up unblocks SIGTRAP in case a blocked mask was inherited across
// exec.
//
// # Jump-optimized probes ("o", "ro")
//
// The DCR at the site (L >= 5 bytes of whole instructions) becomes SiteJmp: jmp rel32
// to the detour's entry, then int3 filler. The detour buffer (Detour) is the template
// of src/optprobe.S (the kernel's optprobe_template_* pattern) with three fields
// patched, then the relocated DCR (trampolines.Relocate with CallPushJmp), then jmp
// rel32 site+L. The point is XOptimized with Slot = the detour, InsnLen = L, SlotLen =
// the relocated length, no post handlers. Recipe for the rewriter:
//
//	dl, _ := DetourLen(len(reloc))                   // reserve dl bytes at at (in .text)
//	enc, _ := tables.Encode(roBase, stateBase)       // Point{XMode: XOptimized, Slot: at, ...}
//	det, _ := Detour(at, enc.PointIndex[i], enc.GateAddr(i), optcallVaddr, reloc, site+L)
//	jmp, _ := SiteJmp(site, L, at)                   // the L bytes written at site
//
// where optcallVaddr is SymOptCall's address after linking and reloc is the DCR
// relocated to run at at+len(template). The detour steps over the red zone, tests the
// point's gate (a u32 in its first probe's RawProbeState, 0 in the file: the runtime
// arms enabled points at start-up, so before start-up, e.g. in an IRELATIVE resolver
// ld.so runs, and for disarmed points the detour only runs the DCR copy: ~2 ns), saves
// every register and the flags as struct pt_regs, clears DF, aligns the stack and calls
// kprewrite_rt_optcall(regs, point). Handlers see what the int3 path shows: ip = site+1
// (the trace's fetch programs see ip = site, as the kernel's uprobe tracer), sp = the
// stack pointer at the site, cs 0x33, ss 0x2b, orig_ax -1; a hit while the thread runs a
// handler of ours (on any path) counts in nmissed; kretprobe entries hijack the return
// address with the same code as on the int3 path. Handler writes to general registers
// and to the arithmetic flags take effect. The common exit pops the registers and
// restores OF SF ZF AF PF CF with lahf/sahf arithmetic (popfq costs ~5 ns here), then
// runs the DCR copy; a pre handler returning non-zero resumes at regs->ip (kprobes
// redirection, which the kernel's optprobes ignore), a changed regs->sp is honoured, and
// DF set at the site is restored, all through iretq from the pt_regs iret frame (legal
// ring 3 to ring 3, ~40 ns, counted in RawStats.OptSlow). Stack: 128 (red zone) + 168
// (pt_regs) + 16 + the C frames, 784 bytes in all before user handlers. Known limits:
// the detour has no unwind info (backtraces taken inside a handler stop there); iretq
// with a user shadow stack (CET) enabled would fault, and so would the return
// trampoline's jmp *, under user IBT (not enabled by Linux today): the rewriter must
// clear the SHSTK (and IBT) property bits when it adds such probes.
//
// # Count-only detours (rewrite --count-only)
//
// With --count-only, events write no records and only count their hits. A
// jump-optimized point whose probes are all plain events (no C handler, no return
// probe) gets a count-only detour instead of the template (PFCount, CountDetour),
// which counts each probe's hit and runs the relocated DCR. Where the analysis proves
// the arithmetic flags dead at the site nothing saves them; otherwise lahf/seto save
// them below the red zone. How it counts: once start-up has found the thread's rseq
// area and the trace file holds the image's per-CPU shards (rt_rseq.c,
// RawTraceImageExt.Shards*), a call of kprewrite_rt_rseq_count (src/rseq.S) per probe
// adds 1 to the probe's u64 in the running CPU's shard inside a restartable sequence:
// exact without a locked instruction, the way the kernel counts kprobe hits per CPU
// with preemption disabled (a preemption, migration or signal in the few instructions
// makes the kernel restart them), across threads and fork children; ParseTrace adds
// the shards to the counters. A point of one probe in an image at fixed addresses
// (ET_EXEC) has the sequence inline instead of the call (CountRseq.Inline): its own
// rseq_cs descriptor after the detours, no call, ret or register saves in the
// routine, ~2 ns less a hit in a real program (python3.11's start-up, where the hits
// are spread over 1,360 functions, went from 1.22x to 1.13x); a PIE's descriptors
// would need relocating at start-up, so PIEs keep the call. When the image holds
// nothing but count-only detours and int3 probes of count-only events (no records, C
// handlers, kretprobes or full detours), its int3 hits count per CPU too (the trap
// path calls the same sequence), so only misses write the counters, and start-up
// neither writes nor populates them (~90 us for python3.11's 40 pages). Otherwise (before start-up, no trace file, no rseq area:
// musl, Go, static programs, glibc < 2.35, KPREWRITE_NO_RSEQ=1) one `lock incq` per
// probe on its hit counter at a link-time address in the image's counter window
// (RawHeader.Counters, page-aligned bss), which start-up maps over the image's
// counters in the trace file (MAP_FIXED | MAP_SHARED), so the counts survive a crash;
// without a trace file the window is plain memory. On the AMD Zen 5 of 2026-11-24 the
// per-CPU count costs ~1.1 ns a hit and lock incq ~3.9 (4.7 for a bare lock incq in a
// loop; ~0.6 on a Zen 4). No gate: a disabled probe's increment and call (or inline
// commit) are overwritten with nops at start-up (one mprotect pair, before the program runs). A
// count-only hit never calls into C, so it is never missed (as the uprobe tracer's
// nhit, which has no nmissed): a hit while the thread runs a handler of ours counts as
// a hit.
//
// # Verification mode (--verify-regions)
//
// For each would-be-optimized site: an XBoost point at the site whose slot is the
// relocated whole DCR then jmp site+L (so sequential flow runs the DCR out of line and
// never meets the other bytes), and, on every other byte of the DCR, an int3 and a
// point with PFlags PFInner, XMode XBoost, Target = the site, InsnLen 1 (or the
// instruction's length), exactly one probe {Type: TVerify, Event: -1} and Slot = the
// relocated instructions from that byte to the end of the DCR then jmp site+L: for an
// instruction boundary that is the site's slot + the relocated offset of that
// instruction (a suffix, since relocation lengths do not depend on the address), with
// SlotLen the rest; Slot 0 for a byte inside an instruction. A hit on an inner byte is
// a violation: RawStats.Violations and the TVerify probe's hit counter (kprobe_profile's
// "hits") count it, the first ViolationRecords per byte are written to the trace as
// RecViolation records (IP = the byte, Data = the site as u64), and it continues in its
// slot, so the program computes what it would have; with Slot 0 it says so on stderr
// and dies by SIGTRAP (there is no correct way on). The runtime opens the trace file
// when there are TVerify probes even without events.
//
// # Per-thread state
//
// Every path finds the thread's context (reentrancy guard, tid, comm) in a table keyed
// by the FS base (rdfsbase when FSGSBASE is on, else %fs:0 once TLS exists, else the
// tid from gettid), in a few nanoseconds without a system call. A new thread that
// reuses a dead one's TCB is detected by the tid libc keeps in the TCB, whose offset
// the runtime learns (see src/rt_thread.c for the argument and the limits).
//
// # Return probes
//
// The entry probe saves *sp and writes SymRetTramp there; instances (maxactive, default
// max(10, 2*ncpus) like the kernel's, data_size bytes each) are allocated at start-up,
// none free -> nmissed. The trampoline is code (no trap): it builds pt_regs below the
// return-address word K, calls the C hook on an aligned stack, which finds the instance
// by K alone (recursion, threads, sigaltstacks and coroutines need no per-thread list),
// runs the handler and writes the real return address back to K; the trampoline
// restores every register and the arithmetic flags (and DF) and jumps through K (a jmp,
// not a ret, which would mispredict every return above). Frames left by longjmp are
// stale instances: reclaimed when a new entry reuses K, or when
// the pool is empty and K no longer holds the trampoline (read fault-safely) or the
// thread is dead.
//
// Unwinding: a C++ exception or a forced unwind (pthread_cancel, pthread_exit) that
// leaves a return-probed frame finds the trampoline as its return address. The
// trampoline has an FDE (SymEHFrame in src/entry.S: CIE "zPR", pcrel pointers, the
// pad byte before the trampoline and its first byte, since unwinders look up return
// address - 1): CFA = %rsp, return address = the word at CFA-8 unless it still holds
// the trampoline, then 0 (a DW_CFA_val_expression whose DW_OP_addr operand start-up
// fills in), so _Unwind_Backtrace and backtrace() stop cleanly there. The rewriter lists
// the FDE in a new .eh_frame_hdr (every entry of the original table plus this one,
// sorted) that PT_GNU_EH_FRAME names (both added to a static program). Its personality routine,
// kprw_unwind_personality (src/rt_kretprobe.c), runs in the search, cleanup and
// forced-unwind phases before the unwinder reads the return address (libgcc's
// unwind.inc; nongnu libunwind too): it finds the frame's instances (libgcc's context
// gives the CFA, K+8, then the hint table; otherwise this thread's lowest K above the
// routine's stack that still holds the trampoline), writes the real return address back
// to K and releases them, so the unwind goes on into the real caller and the cleanup
// phase no longer meets the trampoline. Only frames the unwind really leaves are
// touched (the search phase stops at the catching frame): their return events are lost,
// counted as misses of the probe in the trace counters (what `kprewrite profile` shows;
// a C handler's kp/rp nmissed are left alone) and in RawStats.RPFlushed. Works for throws from the program, from shared libraries
// (std::bad_alloc from operator new, std::vector::at, std::stoi), static programs
// (libgcc_eh finds the FDE through _dl_find_object or dl_iterate_phdr, the program's
// own FDEs through crtbeginT's __register_frame_info), rethrow,
// std::rethrow_exception, _Unwind_Resume after cleanups, and any thread. Not counted: a frame glibc's setjmp-based
// cancellation cleanups (C without -fexceptions) longjmp over before its personality
// runs (the instance is reclaimed as stale).
//
// Shadow stacks (CET SHSTK) must be off when return probes are present.
//
// # Trace file and switches
//
// Path: the rewrite-time default (Tables.TracePath), overridden by KPREWRITE_TRACE
// ("" = off); KPREWRITE_TRACE_SIZE sizes a new file (default 64 MiB, sparse);
// KPREWRITE_DISABLE=all or ev,grp/ev,grp/* disarms probes (handlers and records) like
// the debugfs knobs; KPREWRITE_DEBUG=1 reports start-up on stderr. With AT_SECURE the
// environment is ignored and the file is opened O_NOFOLLOW. The file (RawTraceHeader,
// records, per-image {hit, nmissed} counters) is MAP_SHARED and only ever appended to:
// fork children share the mapping, exec'd rewritten programs reopen it, a crash, abort
// or _exit loses nothing; an existing file is appended to (delete it for a fresh run);
// a file that is not a trace file is left alone. The file describes itself: when an
// image registers, its description frame (RawHeader.Desc, the rewriter's KPRWDESC
// document) is appended at the end of the file, under the file lock, and a
// RawTraceImageExt after the image's counters says where (TraceImage.Desc), so
// `kprewrite trace` and `profile` need no binary. Each image's counters start on a page
// of the file, in the counters area sized when the file is made (four times the
// creating image's need), or, when a later image (a bigger rewritten program exec'd
// by the first) finds the area full, appended page-aligned at the end of the file.
// Records (format version 2) are written in per-thread blocks, as the kernel's tracer
// writes per-CPU buffers: a thread takes a block of the record area with one atomic
// fetch-add on the header's head (its first block 4 KiB, RawTraceHeader.BlockSize, so a
// short-lived process or thread wastes little; later ones 64 KiB, less in a small file)
// and writes its records there back to back with no atomic operation (its place taken
// with an xadd without lock, which no signal handler of the thread can split), each
// committed by a last store; ParseTrace walks the blocks, skips their unused zero tails
// a block-size granule at a time, and merges the records by timestamp. A record names
// its probe and its image's entry in the header (RawRecord.Probe, Image): it is the
// probe's hit, whose counter is not incremented (an atomic operation less per hit), and
// ParseTrace adds the committed records to the counters (records a dying writer left
// torn are not counted). A full file counts lost records, and their hits in the
// counters; the writer whose block starts or enters a 128 KiB chunk populates the next one
// (MADV_POPULATE_WRITE: a first-touch fault on a shared file page costs 1-10 us here,
// up to ~270 ns per record; KPREWRITE_TRACE_PREFAULT=1 populates the whole record area
// at start-up instead). Timestamps are CLOCK_MONOTONIC nanoseconds extrapolated from
// the TSC when it is invariant (src/rt_clock.c: re-anchored on the clock_gettime
// system call after 1, 2, 4 ... 64 ms; within ~0.5 us of the kernel clock, checked by
// TestTraceClock), else from the system call; the CPU comes from rdpid (TSC_AUX, as the
// vDSO's getcpu; lsl 0x7b without rdpid), comm from prctl(PR_GET_NAME) cached per thread
// for at most 1 ms (a renamed thread's records show the new name after at most 1 ms).
// Fetch programs (internal/eventdef's format) run in src/rt_fetch.c, byte-identical to
// eventdef.Run (fetch_test.go); records are at most 4096 bytes of fetch output. A
// program whose record size is fixed runs once, straight into its record; one with
// strings runs once into a 4 KiB scratch buffer of the thread's context (KPRW_NTCTX of
// them in one lazily populated mapping, made when some event has strings), whose bytes
// are then copied into a record of the right size, so every memory read is made once
// (measured, then fetched again, when the thread has no context). Memory is read as
// "Fast reads" says: a bad pointer reads as a fault, never a crash.
//
// # Fast reads
//
// A fetch argument that reads memory (+OFF(...), $stackN, @SYM, strings, arrays,
// bitfields of memory) must never crash the program on a bad pointer, as the kernel's
// uprobe tracer reads with copy_from_user. The runtime reads with a fault-catching copy
// in the kernel's copy_from_user style (src/nofault.S: an 8-byte load, else rep movsb,
// each with an exception-table entry; ~1-6 ns for an argument here, against ~0.3-1.4 us
// for a process_vm_readv system call): a fault in it (SIGSEGV or SIGBUS raised by the
// CPU at an instruction of the table) reaches the runtime's one fault handler
// (src/rt_fault.c), which resumes at the fixup, and the read returns the bytes it could
// copy (a partial count when the fault is part-way; rep movsb's registers are exact at a
// fault) or -EFAULT. A memory argument is stored as copy_from_user stores it: the
// readable bytes, zero padded (a u64 that crosses into an unmapped page keeps its first
// bytes); a faulted dereference inside a chain stores 0 (the kernel leaves its buffer's
// previous bytes there). Reading a bad address costs a signal (~2-3 us here), so
// addresses below 64 KiB (NULL plus a field offset, the usual bad pointer) and above
// the 47-bit user half (kernel and non-canonical addresses, the vsyscall page, which
// copy_from_user refuses) are read with process_vm_readv.
//
// The copy is only safe while every SIGSEGV/SIGBUS it raises reaches the runtime: the
// rewriter sets HFFastRead when some event's fetch program reads memory
// (eventdef.ReadsMemory) or a C handler calls kprewrite_copy_nofault /
// kprewrite_strncpy_nofault, and has the signal guard (below) cover the program's
// signal functions: its GOT words (dynamic; a program without any is covered), or the
// redirected entries of its C library's functions, sigaction's among them (static; a
// static program without a known sigaction function, a stripped one, or one whose
// functions cannot all be covered reads by system call and rewrite says why). At
// start-up the runtime then installs its handler on SIGSEGV and SIGBUS (the previous
// dispositions become the program's), unblocks them, and, if it could wrap every word
// and entry it was given, reads fast; KPREWRITE_SAFE_READ=syscall or
// KPREWRITE_SIGGUARD=off keep process_vm_readv (diagnostics), and so does a run
// without a trace file and without C handlers. Not ours: a fault elsewhere, or a
// SIGSEGV sent with kill() (si_code <= 0) even while the copy runs, gets what the
// program would have got: its own handler, called with the kernel's siginfo and
// ucontext on the mask the kernel would give it (its sa_mask and, without SA_NODEFER,
// the signal: a fault inside the program's own fault handler kills it as the kernel
// would), SA_RESETHAND honoured, on the stack the runtime's handler got (the thread's
// sigaltstack if it has one, with or without the program's SA_ONSTACK); or the default
// action (death by the signal at the
// faulting instruction, core included; a CPU fault on an ignored SIGSEGV too; a sent
// one is dropped). While a thread runs the program's fault handler with SIGSEGV or
// SIGBUS blocked (and until its next fault or int3 hit shows that a handler it left by
// siglongjmp blocks nothing any more), its fetches read by system call
// (kprw_tctx.slow_read), and so do the fetches of an int3 hit whose signal handler runs
// on a sigaltstack with less than AT_MINSIGSTKSZ + 2 KiB left (a fault's frame that
// overflows it would kill the thread). RawStats.ReadFaults counts the faults the copy
// caught.
//
// Holes, as with the SIGTRAP guard (see Signal guard): the program's own raw
// rt_sigaction / rt_sigprocmask system calls (a handler installed or SIGSEGV blocked
// that way: a bad fetch then reaches the program's handler, or kills it); shared
// libraries calling sigaction or sigprocmask through their own GOT (a library that
// installs a SIGSEGV handler, such as a JVM or a sanitizer runtime, replaces ours);
// in static glibc programs, probes in the C library's own code while it blocks every
// signal with an inline system call; a detour that fires in a signal handler running
// on an almost full sigaltstack (the fault's frame needs AT_MINSIGSTKSZ bytes there).
// A blocked SIGSEGV/SIGBUS is hidden as SIGTRAP is: the program reads back the
// kernel's mask, which never holds them, and a SIGSEGV sent with kill() while it
// thinks it blocked it is acted on at once.
//
// # C handlers (kprewrite rewrite --handlers FILE.c)
//
// include/kprewrite.h (HandlerHeader) is what handler files include: the kernel's kprobes
// vocabulary on top of the runtime functions in HandlerAPI (src/rt_user.c, rt_printf.c).
// A probe a handler file declares (DEFINE_KPROBE, DEFINE_KRETPROBE) has the table flag
// FUser and User = its struct kprobe / struct kretprobe; the runtime reads the handlers
// from that struct at each hit (so a kprewrite_init may set them), bumps its nmissed
// (kp->nmissed for a hit while a handler runs, rp->nmissed for a kretprobe entry without
// a free instance), and keeps registration as a state bit: every site was patched at
// rewrite time, so register_kprobe() arms an already-patched probe (setting kp->addr,
// and KPROBE_FLAG_OPTIMIZED on a jump-optimized one) and unregister/disable disarm it
// (a jump-optimized point's gate closes when none of its probes is armed). A struct that
// was not declared gives -ENOENT, a second registration -EINVAL, a post_handler set at
// run time on a jump-optimized site -EINVAL (the rewriter single-steps sites whose
// declaration has a post_handler), enable of a probe disabled by --disable or
// KPREWRITE_DISABLE -EPERM. Without a kprewrite_init (RawHooks.Init), start-up registers
// every FUser probe; with one, it runs it last in start-up (before libc, single-threaded)
// and a non-zero result unregisters them all. RawHooks.Exit (kprewrite_exit) runs at
// exit(): the process entry passes the program, as the atexit function in %rdx, one of
// ours that runs it (in the process that started) and then the dynamic linker's fini;
// glibc registers it, musl ignores %rdx, _exit skips it.
//
// Every user call goes through src/user.S's kprw_ucall_asm, which records the
// callee-saved registers, the stack pointer and the return address in a struct the
// thread context points to. With FUser probes the runtime takes SIGSEGV, SIGBUS, SIGFPE
// and SIGILL (src/rt_fault.c, the handler of fast reads too: a fault of the
// fault-catching copy, which kprewrite_copy_nofault uses, is the copy's first): a fault
// while a user function runs calls the probe's fault_handler (non-zero:
// handled, resume with the registers it left), else it is reported on stderr (the first
// 20) and counted (RawStats.HandlerFaults), and the signal frame is edited so that
// sigreturn returns from kprw_ucall_asm as if the handler had returned 0, with the
// faulting context's signal mask (a fault inside the fault_handler does the same). Any
// other fault gets what it would have got without the runtime: the previous disposition
// (default: death by the signal, at the faulting instruction). A program that installs
// its own handler for one of these signals replaces ours, and a handler fault then reaches
// the program's handler, unless fast reads are on: the guard then keeps SIGSEGV and
// SIGBUS for the runtime and passes the program's faults to its handler. A hit inside a
// handler (a handler calling a probed function) is missed: its int3 single-steps or
// boosts without post handlers.
//
// trace_printk writes RecPrintk records (the caller's function name and the text);
// printk writes one line to stderr (KERN_* levels dropped, 512 bytes at most).
// Handlers run on the stack of the path that called them: the SIGTRAP handler's, the
// detour's or the return trampoline's, plus ~100 bytes for the guarded call and ~620 for
// printk or trace_printk.
//
// # Stack use
//
// From gcc -fstack-usage over the call graph (TestStackUsage, stack_usage.txt):
// SIGTRAP handler 680 bytes, detour 800 bytes including the red zone and pt_regs,
// return trampoline 680 bytes including its pt_regs, start-up 936 bytes (the guarded
// call of a C handler included; measured 2026-11-24); user handlers come on top, and the
// kernel's signal frame (ucontext and xsave area, ~1-3.5 KiB depending on the CPU) on
// top of the SIGTRAP handler. A fast read that faults puts one more signal frame and the
// fault handler (~100 bytes) below the fetch, on the thread's sigaltstack if it has one
// (see Fast reads).
//
// # Costs
//
// BenchmarkProbes (go test -run '^$' -bench Probes -benchtime 1x ./runtime), ns per call
// on a 2-vCPU AMD EPYC (Zen 4) VM shared with other jobs, best runs, a bare call of an
// unprobed twin being 1.35: o with a counting pre handler 12.8; o disarmed 3.0; ro
// (kretprobe on a jump-optimized entry, counting return handler) 35.7. Saving and
// restoring a full struct pt_regs is 21 stores and 15 loads, ~5.5 ns here, ~9 ns with
// pushfq, the call and the flags (measured apart); the dispatcher, thread context and
// atomic hit counter ~3 ns. A return probe adds the mispredicted return into the
// trampoline and a second pt_regs save.
//
// A traced event (scripts/bench-probes.sh, `p:... target x=%di:s64 s=+0(%sp):u64` on a
// jump-optimized entry, record written to a prefaulted file): 54 ns when every record
// was reserved with an atomic fetch-add and every hit counted with another (a locked
// instruction waits for the stores of the previous record, to lines not in any cache,
// to drain), then 39.5 with compiled fetch plans, now ~21 (2026-11-24, ablations of the
// runtime built with parts cut out, same binary and run): the detour and its pt_regs
// ~3 ns, kprewrite_rt_optcall's dispatch to kprw_trace_event ~3, the timestamp ~4
// (rdtsc), the thread's tid and comm ~1.5, the two arguments ~2.5 (the +0(%sp) read is
// the fault-catching copy), the record ~6.5 (no atomic operation: the thread's block;
// ~3.5 of it the stores to lines not in any cache). kprw_trace_event is the path of a
// point whose one probe is such an event (kprw_rt.fastev, set at start-up): everything
// inlined, no clearing (the record area is zero until written). Memory fetches:
// `s=+0(%sp):string` 72 ns before this (1,504 ns by system call, 2,749 ns before fast
// reads, which also read a string twice).
//
// Start-up reads the tables once (validate: every point and its probes, which also sums
// up what they hold in kprw_rt.has) and skips every pass that has nothing to do: no
// reads of the probes' state (bss) unless something is disabled, no gate writes without
// gated detours, no kretprobe, C handler or int3-step set-up without such probes.
// python3.11 with a count-only probe on each of its 10,220 functions starts in 1.07x
// the original's time (1.12x when start-up made eight passes over the 1.4 MB of tables
// and read-faulted 80 pages of probe state; scripts/bench-whole.sh).
package kprt
