// Package rewriter puts the pieces of a rewrite together: it asks the analysis about
// every probe (package patch plans the probepoints and their int3 edits), compiles
// each event definition's fetch program (internal/eventdef), links the runtime object
// into the new segments (internal/objlink), builds the out-of-line slots
// (trampolines), encodes the probe tables the runtime reads (runtime.Tables), writes
// the image description, and has elfio write the new file with the entry point moved
// to the runtime's kprewrite_rt_entry.
//
// The new sections hold, in order:
//
//	.kprewrite.rodata  image description | probe tables (struct kprw_header first) | runtime rodata
//	.eh_frame_hdr      with return probes: the input's search table plus the trampoline's FDE
//	.kprewrite.text    runtime text | out-of-line slots (16-byte aligned, int3 between) |
//	                   detour buffers and --verify-regions DCR slots (16-byte aligned)
//	.kprewrite.data    runtime data
//	.kprewrite.bss     runtime bss | struct kprw_probe_state[nprobes]
//
// Every piece is named in .symtab (kprewrite_desc, kprewrite_tables,
// kprewrite_probe_state, kprewrite_slot.FUNC+0xOFF, kprewrite_detour.FUNC+0xOFF and the
// runtime's own symbols), so objdump, gdb and perf can name what they see.
//
// Jump-optimized probes (kinds o and ro, the default wherever the analysis allows
// and no post handler is needed) follow the runtime's recipe (dcr.go): the DCR is
// relocated with trampolines.RelocateRegion (calls as push-original-return + jmp)
// behind a copy of the runtime's detour template whose gate, index and call fields
// are patched once the tables are encoded (runtime.Detour), and the DCR becomes
// runtime.SiteJmp: jmp rel32 to the detour, int3 filler. With --verify-regions the
// same sites are boosted int3 points whose slot is the relocated DCR then jmp back,
// and every other DCR byte is an int3 point (PFInner, one TVerify pseudo-probe) whose
// hit the runtime counts and records as a violation and, at an instruction boundary,
// runs on from the matching suffix of the slot. Return probes and detours (which can
// resume through iretq) both clear the CET shadow-stack property.
//
// With --count-only (Options.CountOnly) a jump-optimized point whose probes are all
// events gets a count-only detour instead (runtime.CountDetour: per probe, a count in
// this CPU's shard in a restartable sequence once start-up allows it, else a lock incq
// on its counter; then the DCR), and a return event whose function's returns the analysis
// sees all of has no entry point: the plan gives it one count-only point per ret or tail
// call (patch.Point.Exit, DescProbe.Exit, [EXIT] in list), whose probe is a plain
// kprobe of the return event, so `profile` sums its returns. Options.ExitsOnly refuses
// the return events that would still hook their return address.
//
// The image description (Desc) is a framed JSON document at the start of
// .kprewrite.rodata: the event definitions, the kind of each probe (k, b, o, r, rb,
// ro, or verify for the inner-byte pseudo-probes, which the JSON lists compactly as
// ranges), and the runtime index of each probe. `kprewrite list` reads it with the tables
// (ReadImage); `kprewrite trace` and `profile` need it to name the events of trace
// records (WriteTrace, Profile). The tables' header points at the frame
// (runtime.RawHeader.Desc), and the runtime copies it into each trace file the image
// registers in, so trace files describe themselves; the binary is needed only for
// traces written by older runtimes.
//
// With return probes the rewrite also makes the trampoline unwindable (unwind.go): a new
// .eh_frame_hdr, in the read-only segment after .kprewrite.rodata, holds the input's
// search table (for a header without one, every FDE of .eh_frame) plus the runtime's
// trampoline FDE (runtime.SymEHFrame, in .kprewrite.data), sorted; PT_GNU_EH_FRAME and
// the .eh_frame_hdr section header point at it. An input without a header (static
// programs, which register their FDEs with crtbeginT) gets both, listing the
// trampoline's FDE alone. The old header's bytes stay where they were, unreferenced.
//
// For int3 probes in a dynamically linked program the tables also list the GOT words of
// the program's signal functions (SigGuardSlots), which the runtime wraps so that the
// program cannot block SIGTRAP or take it over (runtime package documentation, "Signal
// guard"); the same when some event's fetch program reads memory
// (eventdef.ReadsMemory) or a C handler calls kprewrite_copy_nofault: the runtime's
// fault-catching reads need SIGSEGV and SIGBUS the same way, and the header gets
// runtime.HFFastRead (static programs: when every signal function found is covered,
// sigaction's among them; else rewrite warns that reads use the system call). A static program (no PT_INTERP: -static, -static-pie) has no GOT to wrap
// (sigstatic.go): its C library's functions are found by symbol
// (runtime.SigGuardStaticFuncs), and the entries of those that make the system call
// themselves are redirected, which covers the public functions that only call them
// (decided from each function's direct calls and syscall instructions, so glibc's
// sigaction -> __sigaction -> __libc_sigaction and musl's sigprocmask ->
// pthread_sigmask need one redirection each). An entry is redirected like a
// jump-optimized probe's site, with the analysis' verdict and DCR: the DCR becomes jmp
// rel32 to a stub "jmp *word(%rip)" (the word in .kprewrite.bss, after the probe state),
// and the DCR is relocated (trampolines.RelocateRegion) into a copy followed by a jmp
// back, which is the original function the runtime's wrapper calls. A probe already on
// the entry keeps it: an int3 point becomes an emulated jmp to the stub, a
// jump-optimized point's detour jumps to the stub in place of its relocated DCR, and the
// copy runs those instructions. An entry that cannot be redirected (a verdict other than
// optimize, a probe inside its DCR, --exclude) is left alone and its callers among the
// known functions are redirected instead; what stays unguarded, and a stripped static
// program, are reported in Result.Warnings. The stubs and copies are named
// kprewrite_sigguard_stub.FUNC and kprewrite_sigguard_orig.FUNC in .symtab; the new
// .kprewrite.text area follows the detours:
//
//	.kprewrite.text    runtime text | slots | detours | signal-guard stubs and copies
//	.kprewrite.bss     runtime bss | probe state | signal-guard words
//
// A rewrite is deterministic: the same input, definitions and options give the same
// bytes (the image id that names the image in trace files is a hash of them).
package rewriter
