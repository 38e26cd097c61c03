// Package runtime holds kprewrite's run-time support: freestanding C and GNU assembler
// (src/, include/) linked into every rewritten program, built by build.sh at
// `go generate ./runtime` into one relocatable object, kprewrite_rt.o, embedded here as
// Object. Importers alias the package (kprt "kprewrite/runtime"); it also holds the Go
// mirror of the ABI (abi.go), the table encoder (encode.go) and the trace-file reader
// (trace.go).
//
// # The object
//
// gcc -O2 -ffreestanding -fno-builtin -nostdlib -fPIC -fno-plt -fvisibility=hidden
// -mgeneral-regs-only -mno-red-zone -fno-stack-protector -fcf-protection=none
// -fno-asynchronous-unwind-tables -fno-jump-tables -fno-ident (see build.sh), then
// ld -r and objcopy, which keeps five global symbols and drops .comment. No libc: raw
// system calls only, no TLS, no GOT, no absolute relocations (only R_X86_64_PC32 and
// PLT32), nothing undefined; object_test.go checks all of it and that a rebuild is
// byte-identical. The object has no .eh_frame: no runtime frame is ever on the stack
// while C++ unwinds (handlers must not throw), so none is needed.
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
// pushf's TF hidden, TF restored, post handlers run). A hit while the thread runs a
// handler or is stepping is not run and counts in nmissed. Not ours: a SIGTRAP the
// program raises, or an int3 of its own, gets the default action (death by SIGTRAP, core)
// unless it was ignored before we started; a thread born from a single-stepped clone or
// fork is finished by slot address.
//
// What the program can do to int3 probes: installing its own SIGTRAP handler replaces
// ours, so the next hit runs its handler (or kills it with SIGTRAP); blocking SIGTRAP in
// a thread (sigfillset + pthread_sigmask is common) makes the kernel kill the process
// at the next hit in that thread. Loud, never silent; jump-optimized probes have neither
// problem. Start-up unblocks SIGTRAP in case a blocked mask was inherited across exec.
//
// # Return probes
//
// The entry probe saves *sp and writes SymRetTramp there; instances (maxactive, default
// max(10, 2*ncpus) like the kernel's, data_size bytes each) are allocated at start-up,
// none free -> nmissed. The trampoline is code (no trap): it builds pt_regs below the
// return-address word K, calls the C hook on an aligned stack, which finds the instance
// by K alone (recursion, threads, sigaltstacks and coroutines need no per-thread list),
// runs the handler and writes the real return address back to K; the trampoline
// restores every register and the flags and returns through K. Frames left by longjmp or
// by a C++ exception are stale instances: reclaimed when a new entry reuses K, or when
// the pool is empty and K no longer holds the trampoline (read fault-safely) or the
// thread is dead. A C++ exception thrown THROUGH a return-probed frame finds the
// trampoline as that frame's return address; the trampoline has no unwind info, so the
// unwinder stops and std::terminate aborts the program: the rewriter must not put return
// probes on functions an exception can unwind through (or must add an FDE; not done).
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
// a file that is not a trace file is left alone. A record is reserved with one atomic
// fetch-add, filled, and committed with a release store; a full file counts lost
// records. Timestamps are CLOCK_MONOTONIC nanoseconds from the raw clock_gettime system
// call (~60-100 ns; the kernel tracer prints seconds.microseconds of its clock), the
// CPU comes from the per-CPU GDT limit (lsl 0x7b, as the vDSO's getcpu), comm from
// prctl(PR_GET_NAME) per record (so renamed threads and exec'd images are right).
// Fetch programs (internal/eventdef's format) run in src/rt_fetch.c, byte-identical to
// eventdef.Run (fetch_test.go); records are at most 4096 bytes of fetch output. Memory
// is read with process_vm_readv on our own pid (one system call, ~0.3 us, per read or
// per 64-byte string chunk; a bad pointer reads as a fault, never a SIGSEGV).
//
// # Stack use
//
// From gcc -fstack-usage over the call graph (TestStackUsage, stack_usage.txt):
// SIGTRAP handler 552 bytes, return trampoline 584 bytes including its pt_regs,
// start-up 680 bytes; user handlers come on top, and the kernel's signal frame
// (ucontext and xsave area, ~1-3.5 KiB depending on the CPU) on top of the handler.
package runtime
