package kprt

// The Go mirror of include/kprewrite_abi.h. The Raw* structs have exactly the C layout
// when written with encoding/binary (little-endian, no padding); abi_test.go compiles
// the header and checks every field offset and struct size against them.

// Symbols of kprewrite_rt.o the rewriter uses.
const (
	// SymEntry is the new ELF entry point. It saves every register, runs start-up
	// (kprewrite_rt_init), restores them and jumps to the header's OrigEntry.
	SymEntry = "kprewrite_rt_entry"
	// SymLibEntry is a rewritten shared library's DT_INIT: it runs start-up
	// (kprewrite_rt_lib_init) and tail-calls the header's OrigEntry, the library's own
	// DT_INIT, when there is one.
	SymLibEntry = "kprewrite_rt_lib_entry"
	// SymRelocEntry is the resolver of the R_X86_64_IRELATIVE relocation that starts a
	// dynamically linked image's runtime while the loader relocates it
	// (elfio.EarlyStart); it returns 0, which the loader stores in a word of ours.
	SymRelocEntry = "kprewrite_rt_reloc_entry"
	// SymLibFini is the DT_FINI of a rewritten library whose C handlers have a
	// kprewrite_exit(): it runs it, then the library's own DT_FINI (RawHooks.Fini).
	SymLibFini = "kprewrite_rt_lib_fini"
	// SymInit is the C start-up, uintptr_t kprewrite_rt_init(uintptr_t *initial_sp),
	// returning the original entry's run-time address; for custom entry stubs.
	SymInit = "kprewrite_rt_init"
	// SymHdrRel is an 8-byte word in .rodata the rewriter sets to
	// header vaddr - SymHdrRel vaddr (see HdrRel).
	SymHdrRel = "kprewrite_rt_hdr_rel"
	// SymRetTramp is the return-probe trampoline.
	SymRetTramp = "kprewrite_rt_rettramp"
	// SymStats is struct kprw_stats (RawStats) in .bss.
	SymStats = "kprewrite_rt_stats"
	// SymRseqOff is the u64 a count-only detour reads to choose per-CPU counting (the
	// offset of the thread's rseq area from the thread pointer) or lock incq (0).
	SymRseqOff = "kprewrite_rt_rseq_off"
	// SymPFCtlGen is the u64 the inline filters of detours read (DFPrefilter): the
	// address of the trace file's control generation, 0 until start-up has set every
	// such probe's RawProbeState.PFGen.
	SymPFCtlGen = "kprewrite_rt_pf_ctlgen"
	// SymTrigBase is the u64 inline histogram updates read (DFInlineHist): the address
	// of the image's control area's slot 0 (its triggers' counts and tables), 0 before
	// start-up has set it.
	SymTrigBase = "kprewrite_rt_trig_base"
	// SymRseqFix is the runtime's u64 in its .data that the rewriter sets to the vaddr
	// (as linked) of an image's table of PIC count-only detours' rseq_cs descriptors:
	// u64 n, then n times {descriptor, start_ip, post_commit_offset, abort_ip}, as linked;
	// start-up writes each descriptor with the load bias added (0: none).
	SymRseqFix = "kprewrite_rt_rseq_fix"
	// SymRT, SymTctxTab and SymTblkTab are the runtime's struct kprw_rt and its
	// pointers to the threads' contexts and blocks, which inline records read
	// (DFInlineRec, src/inlinerec.S).
	SymRT      = "kprw_rt"
	SymTctxTab = "kprw_tctx_tab"
	SymTblkTab = "kprw_tblk_tab"
	// SymRseqCount is the per-CPU counting routine count-only detours call.
	SymRseqCount = "kprewrite_rt_rseq_count"
	// SymRseqShardtab is u64 *[256], each CPU's shard of hit counters by the low byte of
	// its number, which inline-form count-only detours read (CountRseq.Inline).
	SymRseqShardtab = "kprewrite_rt_rseq_shardtab"
	// SymOptCall is the C side of detours, long kprewrite_rt_optcall(struct pt_regs *,
	// u32 point), called by SymOptBody.
	SymOptCall = "kprewrite_rt_optcall"
	// SymOptBody is the detours' shared register save and restore around SymOptCall;
	// each detour's call field targets it (see Detour).
	SymOptBody = "kprewrite_rt_optprobe_body"
	// SymOptTemplate and SymOptTemplateEnd delimit the detour template, the per-point
	// stub that calls SymOptBody (src/optprobe.S).
	// It is never run in place: Detour copies it out of Object.
	SymOptTemplate    = "kprewrite_rt_optprobe_template"
	SymOptTemplateEnd = "kprewrite_rt_optprobe_template_end"
	// SymEHFrame is the return trampoline's unwind information in .data: a CIE and
	// its FDEs in .eh_frame format (pcrel pointers), then a zero terminator; the
	// rewriter lists its FDEs in the .eh_frame_hdr it writes (see src/entry.S).
	SymEHFrame = "kprewrite_rt_eh_frame"
	// EHFrameFDEs is how many FDEs SymEHFrame holds.
	EHFrameFDEs = 1
)

// SymWordBody[exit][flags] are SymOptBody specialized to the records of --calls
// (src/optprobe.S's word bodies): an entry's stack pointer (exit 0: an EVENT line with
// the spev word) or a ret's return address (exit 1: an EXIT line), no fetch; flags 0
// where the analysis proved the arithmetic flags dead at the site. A detour's call
// field targets one where the rewriter expects that line; a hit of another shape goes
// on to SymOptBody.
var SymWordBody = [2][2]string{{"kprw_word_body00", "kprw_word_body01"}, {"kprw_word_body10", "kprw_word_body11"}}

// Header.
const (
	Magic   = 0x5752504b // "KPRW"
	Version = 1
)

// HeaderFlags are struct kprw_header's flags (RawHeader.Flags, KPRW_HF_*).
type HeaderFlags uint32

const (
	HFDisableAll HeaderFlags = 0x1 // start with every probe disarmed
	HFDebug      HeaderFlags = 0x2 // start-up reports to stderr
	// HFLibrary: the image is a shared library; OrigEntry is its own DT_INIT (0: none).
	HFLibrary HeaderFlags = 0x8
	// HFFastRead: fetch arguments (or C handlers) read memory and the signal guard
	// covers SIGSEGV and SIGBUS, so the runtime may read with its fault-catching copy.
	HFFastRead HeaderFlags = 0x4
	// HFClockMono, HFClockCounter: the record clock rewrite --clock chose (neither: tsc).
	HFClockMono    HeaderFlags = 0x10
	HFClockCounter HeaderFlags = 0x20
	// HFIdle: nothing of the image is armed at start-up and nothing reads its probe
	// tables before an event is added or switched on (Tables.idle, set by Encode): the
	// runtime's start-up takes them unchecked and its live-probe thread checks them.
	HFIdle HeaderFlags = 0x40
)

// XMode is how a probepoint runs (RawPoint.XMode, KPRW_X_*).
type XMode uint8

const (
	XSStep   XMode = 1 // "k": single-step the slot copy with TF; post handlers run after it
	XBoost   XMode = 2 // "b": run the slot copy followed by its jmp back, one trap per hit
	XEmulate XMode = 3 // "b": emulate EmuOp by editing registers, one trap per hit
	// XOptimized is "o": the site's DCR is a jmp rel32 to a detour buffer at Slot (no
	// int3, no signal); InsnLen is the DCR length, SlotLen the relocated DCR's.
	XOptimized XMode = 4
)

// EmuOp is an instruction the runtime emulates (RawPoint.EmuOp, KPRW_EMU_*).
type EmuOp uint8

const (
	EmuNop    EmuOp = 1
	EmuJmp    EmuOp = 2
	EmuJcc    EmuOp = 3
	EmuCall   EmuOp = 4
	EmuRet    EmuOp = 5
	EmuJrcxz  EmuOp = 6
	EmuLoop   EmuOp = 7
	EmuLoope  EmuOp = 8
	EmuLoopne EmuOp = 9
)

// PointFlags are a probepoint's flags (RawPoint.PFlags, KPRW_PF_*).
type PointFlags uint8

const (
	PFCall    PointFlags = 0x01 // single-stepped call: the pushed return address is fixed afterwards
	PFBranch  PointFlags = 0x02 // single-stepped copy may jump anywhere
	PFAddr32  PointFlags = 0x04 // jrcxz/loop with the 0x67 prefix (ecx)
	PFPushf   PointFlags = 0x08 // single-stepped pushf: TF is hidden in the pushed flags
	PFNoBoost PointFlags = 0x10 // the slot has no jmp back: never run it without single-step
	// PFInner marks an int3 on an inner byte of a would-be DCR (--verify-regions): a hit
	// is a violation, counted, recorded, and run out of line from Slot (see VerifyInner).
	PFInner PointFlags = 0x20
	// PFInt3Step makes an XSStep point step without the trap flag, as the kernel does
	// since 5.15: the slot is the copy (SlotLen bytes) then an int3 (Int3StepEnd), whose
	// trap ends the step and runs the post handlers. Only for a copy that falls through
	// (no PFBranch, PFCall, PFPushf); the slot has no jmp back.
	PFInt3Step PointFlags = 0x40
	// PFCount marks a count-only detour (rewrite --count-only): an XOptimized point whose
	// probes are plain event kprobes; the detour only increments their hit counters in the
	// counter window (RawHeader.Counters) and never calls the runtime (CountDetour).
	PFCount PointFlags = 0x80
)

// DetourFlags are RawPoint.DFlags (KPRW_DF_*).
type DetourFlags uint16

// DFPrefilter marks an XOptimized point whose detour tests its event's filter inline
// before anything is saved (trampolines.Prefilter; "Inline filters" in kprewrite_abi.h).
const DFPrefilter DetourFlags = 0x1

// DFInlineHist marks an XOptimized point whose detour adds a hit of its switched-off
// event to the event's histogram inline (trampolines.InlineHist; "Inline histograms"
// in kprewrite_abi.h).
const DFInlineHist DetourFlags = 0x2

// DFInlineRec marks an XOptimized point whose detour writes its event's record itself
// first (trampolines.InlineRec; "Inline records" in kprewrite_abi.h).
const DFInlineRec DetourFlags = 0x40

// InlineRecMax is the most DFInlineRec points an image has: each detour holds its
// record's whole path (~250 bytes), which thousands would spread over the
// instruction cache that the shared body keeps small.
const InlineRecMax = 64

// DFExit marks an XOptimized point at one of a function's exits whose probes are
// traced return events (rewrite --exits); the detour runs the straight-line code
// between the site and the exit instruction first. At a ret (TKprobe probes) each hit
// is recorded as its event's return (the record a hooked return address would have
// written), with the registers as they are at the ret and the events' fetches seeing
// them as after it (ip = the return address, sp above it). At a tail call's jmp
// (TKretprobe probes) the return address is hooked, as at the function's entry.
const DFExit DetourFlags = 0x4

// DFSpEntry marks the entry point of a function whose return events are recorded at its
// exits (DFExit): its entry records carry the stack pointer (and whether the word there
// holds the return trampoline already), as the entry records of a function with a
// hooked return event do, so that readers end the calls a longjmp or an exception left.
const DFSpEntry DetourFlags = 0x8

// DFLive marks an int3 point whose site keeps its original byte in the file: the
// runtime writes the int3 while some probe on it is enabled and puts the byte back when
// none is (src/rt_live.c; its events were rewritten --disable'd and start soft-disabled).
const DFLive DetourFlags = 0x10

// DFReopt marks a jump-optimized point of an image with live points whose kind can
// change while the program runs (its DCR's copy keeps every instruction's offset and
// holds no system call): `kprewrite optimize FILE off` turns its jmp into an int3 into
// the detour, `on` puts the jmp back (src/rt_live.c).
const DFReopt DetourFlags = 0x20

// ProbeType is a probe's type (RawProbe.Type, KPRW_T_*).
type ProbeType uint8

const (
	TKprobe    ProbeType = 1
	TKretprobe ProbeType = 2
	TVerify    ProbeType = 3 // the one pseudo-probe of a PFInner point: its hit counter counts violations
)

// ProbeFlags are a probe's flags (RawProbe.Flags, KPRW_F_*).
type ProbeFlags uint8

const (
	FDisabled ProbeFlags = 0x01
	FTrace    ProbeFlags = 0x02 // append a trace record per hit using the event's fetch program
	// FUser marks a probe declared in a C handler file: User is its struct kprobe or
	// struct kretprobe (kprewrite.h), whose handler fields the runtime reads at each hit
	// (the table's handler fields are 0); registration is the runtime's (see doc.go).
	FUser ProbeFlags = 0x04
)

// EventFlags are an event's flags (RawEvent.Flags, KPRW_EF_*).
type EventFlags uint32

const (
	EFDisabled EventFlags = 0x01
	EFRetprobe EventFlags = 0x02
	// EFSoftDisabled: armed, its triggers run, but it records nothing until an
	// enable_event trigger (or `kprewrite enable`) switches it on: the kernel's soft
	// mode for an event that is not enabled but has triggers or is a trigger's target.
	EFSoftDisabled EventFlags = 0x04
	// EFTriggers: the event's trigger program (internal/evtrigger) follows its filter
	// program; its first word is its size.
	EFTriggers EventFlags = 0x08
	// EFLive: with EFSoftDisabled, every probe of the event is on a DFLive point: its
	// switch arms and disarms the sites, and a hit decides once, as it starts, whether
	// the event is on.
	EFLive EventFlags = 0x10
	// EFSpare: with EFSoftDisabled, a prepared site's placeholder (rewrite --prepare):
	// it records nothing itself; events added at run time (kprewrite probe) ride its
	// probe, and its site is armed while it has any.
	EFSpare EventFlags = 0x20
)

const (
	NoEvent = 0xffffffff
	NoProbe = 0xffffffff // RawRecord.Probe of a record that counts no hit
)

// Limits the runtime enforces at start-up.
const (
	// RseqMaxCPU: per-CPU counting (count-only detours) with at most this many
	// possible CPUs; more, and the detours count with lock incq.
	RseqMaxCPU = 254
	// CountShortN: count-only detours of at most this many probes skip their per-CPU
	// calls with a jrcxz rel8 (the short form); the runtime's start-up relies on it.
	CountShortN = 12

	MaxPoints          = 1000000
	MaxProbesPerPoint  = 64
	MaxDataSize        = 4096
	MaxMaxActive       = 4096
	DefaultTraceSize   = 64 << 20
	MinTraceSize       = 4 << 10  // the least record area (rt_init.c's TRACE_SIZE_MIN)
	MaxTraceSize       = 64 << 30 // the largest (rt_init.c's TRACE_SIZE_MAX)
	MaxRecordData      = 4096
	SlotJmpBackLen     = 5  // jmp rel32 after the copy in a slot
	DefaultMaxActiveLo = 10 // maxactive 0 means max(10, 2*ncpus), decided at start-up
)

// Trace file.
const (
	TraceMagic         = "KPRWTRC1"
	TraceVersion       = 5 // as 4; every writer of a switch bumps RawTraceHeader.SwGen after it
	TraceVersion4      = 4 // as 3; a ring's writers zero the blocks they take again, not the recorder
	TraceVersionDirect = 5 // what a rewritten program makes a file it writes alone (laid out as 3)
	// TraceSwGenImage is the header's Images entry whose ImageID is sw_gen in a file of
	// version 5 on (no image takes it): bumped after every change that closes a switch
	// deciding whether hits write records (tracing off, an event soft-disabled, controls
	// changed), which the programs cache per point
	TraceSwGenImage   = TraceMaxImages - 1
	TraceVersionSwGen = 5 // the least version with sw_gen
	TraceVersion3     = 3 // compact records after a block header (RawBlock, RawCRec)
	TraceVersion2     = 2 // RawRecord in per-thread blocks, each counting its probe's hit
	TraceHeaderSize   = 4096
	TraceMaxImages    = 160
	TraceCountersSize = 1 << 20    // the least counters_size of a new file (the header has the real one)
	RecCommit         = 0x43525043 // "CPRC"
	RecDiscard        = 0x52435344 // "DSCR": a record its event's filter refused after it was written
	RecKprobe         = 1
	RecKretprobe      = 2
	// RecViolation is a --verify-regions violation: IP is the inner byte reached,
	// EventID NoEvent, Data the u64 vaddr of the would-be-optimized probe.
	RecViolation = 3
	// ViolationRecords is how many records each inner byte gets at most (its counter
	// counts all hits).
	ViolationRecords   = 16
	ProbeStateDisabled = 0x1
	ProbeStateUnreg    = 0x2 // an FUser probe that is not registered
	ProbeStateForced   = 0x4 // disabled by the table or KPREWRITE_DISABLE (enable_kprobe cannot undo it)
	// RecPrintk is a trace_printk() line from a C handler: IP is the site of the probe
	// whose handler printed (0 in kprewrite_init/exit), RetIP the caller's run-time
	// address, Data the calling function's name, a NUL, then the text.
	RecPrintk = 4
	// PrintkMax is the most text a printk line or a RecPrintk record holds.
	PrintkMax = 512
	// RecStack is a stacktrace trigger's user stack: EventID and IP are the event's
	// and the hit's site, Data the run-time pcs of the frames, innermost first, u64
	// each (at most StackMax).
	RecStack = 5
	StackMax = 64
	// RecSynth is a synthetic event an onmatch() or onmax() trace action generated:
	// EventID is the synthetic event's (tracefile.DescSynthetic.ID), IP the site of
	// the hit whose trigger generated it, Data its fields, u64 each.
	RecSynth = 6
)

// RawHeader is struct kprw_header.
type RawHeader struct {
	Magic      uint32      `c:"magic"`
	Version    uint16      `c:"version"`
	HeaderSize uint16      `c:"header_size"`
	Flags      HeaderFlags `c:"flags"`
	NPoints    uint32      `c:"npoints"`
	NProbes    uint32      `c:"nprobes"`
	NEvents    uint32      `c:"nevents"`
	NAbs       uint32      `c:"nabs"`
	Reserved0  uint32      `c:"reserved0"`
	Self       uint64      `c:"self"`
	OrigEntry  uint64      `c:"orig_entry"`
	Points     uint64      `c:"points"`
	Probes     uint64      `c:"probes"`
	Events     uint64      `c:"events"`
	AbsSlots   uint64      `c:"abs_slots"`
	State      uint64      `c:"state"`
	TracePath  uint64      `c:"trace_path"`
	TraceSize  uint64      `c:"trace_size"`
	ImageID    uint64      `c:"image_id"`
	ImageName  uint64      `c:"image_name"`
	Hooks      uint64      `c:"hooks"` // vaddr of RawHooks, 0 = none (was Reserved1)
	// appended (HeaderSize was 128)
	Desc      uint64 `c:"desc"`      // vaddr of the KPRWDESC frame, 0 = none
	DescSize  uint32 `c:"desc_size"` // its bytes
	Reserved2 uint32 `c:"reserved2"`
	SigGuard  uint64 `c:"sigguard"` // vaddr of RawSigGuard, 0 = none
	// appended (HeaderSize was 152)
	Counters     uint64 `c:"counters"`      // vaddr of the page-aligned counter window, 0 = none
	CountersSize uint64 `c:"counters_size"` // its bytes, a multiple of 4096
	// appended (HeaderSize was 168)
	Unwind     uint64 `c:"unwind"`      // vaddr of RawUnwind[NUnwind], 0 = none
	UnwindBase uint64 `c:"unwind_base"` // the vaddr its rows' PC are relative to
	NUnwind    uint32 `c:"nunwind"`
	NFree      uint32 `c:"nfree"` // free live points after the NPoints sorted ones (was Reserved3)
}

// RawUnwind is struct kprw_unwind, a row of the unwind table (stacktrace triggers).
type RawUnwind struct {
	PC     uint32 `c:"pc"` // relative to RawHeader.UnwindBase
	CFAOff int16  `c:"cfa_off"`
	CFAReg uint8  `c:"cfa_reg"` // UW*, | UWBPLost
	BPOff  int8   `c:"bp_off"`  // the caller's rbp at CFA + 8*BPOff; 0: unchanged
}

// Unwind table registers (RawUnwind.CFAReg).
const (
	UWUndef  = 0
	UWSP     = 1
	UWBP     = 2
	UWBPLost = 0x80
)

// Signal guard functions (RawGotSlot.Func): the libc functions whose GOT words the
// runtime points at its wrappers, so that the program cannot block SIGTRAP or take it
// over (see docs/runtime.md).
const (
	SGSigaction      = 1
	SGSignal         = 2 // BSD semantics
	SGSysvSignal     = 3
	SGSigset         = 4
	SGSighold        = 5
	SGSigignore      = 6
	SGSigprocmask    = 7
	SGPthreadSigmask = 8
	SGSigsuspend     = 9
	SGPpoll          = 10
	SGPselect        = 11
	SGEpollPwait     = 12
	SGSyscall        = 13
	SGPpollChk       = 14
	// 15 was SGThrow (the C++ throw wrappers, replaced by the return trampoline's
	// unwind information).
	// SGEpollPwait2 is epoll_pwait2 (appended).
	SGEpollPwait2 = 16
	// SGBlockAllSigs and SGBlockAppSigs are musl's internal __block_all_sigs and
	// __block_app_sigs, which raise, fork, pthread_create and sigaction(SIGABRT) call
	// before running more of the library's (probeable) code (static programs).
	SGBlockAllSigs = 17
	SGBlockAppSigs = 18
	// SGFork: fork, so that a child of an image with live probes starts a live-probe
	// thread of its own; the rewriter lists it only for such images.
	SGFork = 19
	// SGGoSigaction and SGGoSigprocmask are Go's runtime.rt_sigaction and
	// runtime.rtsigprocmask (ABI0 assembly making the raw system calls), so that a
	// static Go program's fast reads keep SIGSEGV and SIGBUS (src/gosig.S).
	SGGoSigaction   = 20
	SGGoSigprocmask = 21
	SGMax           = 21
)

// SigGuardFuncs maps the dynamic symbol names the rewriter looks for (the relocation's
// symbol, without its version) to their SG* function.
var SigGuardFuncs = map[string]uint32{
	"sigaction": SGSigaction, "signal": SGSignal, "bsd_signal": SGSignal, "sysv_signal": SGSysvSignal,
	"__sysv_signal": SGSysvSignal, "sigset": SGSigset, "sighold": SGSighold, "sigignore": SGSigignore,
	"sigprocmask": SGSigprocmask, "pthread_sigmask": SGPthreadSigmask, "sigsuspend": SGSigsuspend,
	"ppoll": SGPpoll, "__ppoll_chk": SGPpollChk, "pselect": SGPselect, "epoll_pwait": SGEpollPwait,
	"epoll_pwait2": SGEpollPwait2, "syscall": SGSyscall, "fork": SGFork,
}

// SigGuardStaticFuncs maps the names static C libraries give the same functions (their
// public names and the internal ones they call, glibc's and musl's) to their SG*
// function, for programs that define them instead of importing them: the rewriter
// redirects the entries of those that make the system call (GSEntry), which covers the
// public ones that only call them (glibc 2.36: sigaction -> __libc_sigaction,
// signal/sigset/sigignore/siginterrupt -> __sigaction, sigprocmask/sighold/sigrelse ->
// __sigprocmask -> __pthread_sigmask; musl 1.2: the same through __libc_sigaction and
// pthread_sigmask).
var SigGuardStaticFuncs = map[string]uint32{
	"sigaction": SGSigaction, "__sigaction": SGSigaction, "__libc_sigaction": SGSigaction,
	"signal": SGSignal, "bsd_signal": SGSignal, "__bsd_signal": SGSignal, "ssignal": SGSignal,
	"sysv_signal": SGSysvSignal, "__sysv_signal": SGSysvSignal,
	"sigset": SGSigset, "sighold": SGSighold, "sigignore": SGSigignore,
	"sigprocmask": SGSigprocmask, "__sigprocmask": SGSigprocmask,
	"pthread_sigmask": SGPthreadSigmask, "__pthread_sigmask": SGPthreadSigmask,
	"sigsuspend": SGSigsuspend, "__sigsuspend": SGSigsuspend, "__libc_sigsuspend": SGSigsuspend,
	"ppoll": SGPpoll, "__ppoll": SGPpoll, "__ppoll_chk": SGPpollChk,
	"pselect": SGPselect, "__pselect": SGPselect,
	"epoll_pwait": SGEpollPwait, "epoll_pwait2": SGEpollPwait2,
	"syscall":          SGSyscall,
	"__block_all_sigs": SGBlockAllSigs, "__block_app_sigs": SGBlockAppSigs,
	"runtime.rt_sigaction.abi0": SGGoSigaction, "runtime.rtsigprocmask.abi0": SGGoSigprocmask,
}

// RawGotSlot is struct kprw_got_slot.
type RawGotSlot struct {
	Slot  uint64 `c:"slot"`  // vaddr of the GOT word
	Lazy  uint64 `c:"lazy"`  // JUMP_SLOT: the word's value in the file (its PLT stub); 0 for GLOB_DAT
	Name  uint64 `c:"name"`  // vaddr of the symbol name
	Func  uint32 `c:"func"`  // SG*
	Flags uint32 `c:"flags"` // GS* (was reserved0)
}

// RawGotSlot.Flags.
const (
	// GSEntry: the entry of a function defined in the image (static programs). Slot is
	// the writable word its patched entry jumps through, Lazy the vaddr of the relocated
	// copy of its entry (the original function).
	GSEntry = 1
)

// RawSigGuard is struct kprw_sigguard.
type RawSigGuard struct {
	Slots     uint64 `c:"slots"`
	NSlots    uint32 `c:"nslots"`
	Reserved0 uint32 `c:"reserved0"`
	Relro     uint64 `c:"relro"`
	RelroSize uint64 `c:"relro_size"`
	PLTGOT    uint64 `c:"pltgot"`
	Reserved1 uint64 `c:"reserved1"`
}

// RawHooks is struct kprw_hooks: the C handlers' start-up and exit functions.
type RawHooks struct {
	Init  uint64 `c:"init"`  // int kprewrite_init(void), 0 = none
	Exit  uint64 `c:"exit"`  // void kprewrite_exit(void), 0 = none
	Stack uint64 `c:"stack"` // the most stack a handler entry can use (0 = unknown)
	// Fini is a library's own DT_FINI (0 = none) when its DT_FINI is
	// kprewrite_rt_lib_fini, which runs kprewrite_exit() and then calls it.
	Fini uint64 `c:"fini"`
	// Sites is the vaddr of the embedded analysis (RawSites), 0 = none: the handler
	// files call register_kprobe() and the runtime places their unprepared sites.
	Sites uint64 `c:"sites"`
}

// RawSites is struct kprw_sites: the header of the embedded analysis, followed by
// NFuncs RawSiteFunc, NSites RawSite and the NUL-terminated names and reasons.
type RawSites struct {
	NFuncs   uint32 `c:"nfuncs"`
	NSites   uint32 `c:"nsites"`
	Size     uint32 `c:"size"` // bytes of the whole table, strings included
	Reserved uint32 `c:"reserved"`
}

// RawSiteFunc is struct kprw_site_func: one function of the embedded analysis.
type RawSiteFunc struct {
	Addr   uint64 `c:"addr"`    // link-time vaddr
	Name   uint32 `c:"name"`    // offset of its NUL-terminated name from the RawSites
	First  uint32 `c:"first"`   // index of its first RawSite
	NSites uint32 `c:"nsites"`  // its instruction boundaries, by offset
	Size   uint32 `c:"size"`    // its bytes
	RetWhy uint32 `c:"ret_why"` // 0: a return probe may hook its entry; else the offset of the refusal's text
	Pad    uint32 `c:"reserved"`
}

// RawSite is struct kprw_site: one instruction boundary and what the analysis decided
// for an int3 there (kprewrite probe's rules, --no-optimize).
type RawSite struct {
	Off      uint32     `c:"off"`    // from the function's start
	Why      uint32     `c:"why"`    // 0: an int3 may go here; else the offset of the refusal's text
	Target   int32      `c:"target"` // an emulated branch's target - the site (SiteTarget)
	RetImm   uint16     `c:"ret_imm"`
	XMode    XMode      `c:"xmode"`
	InsnLen  uint8      `c:"insn_len"`
	EmuOp    EmuOp      `c:"emu_op"`
	EmuCC    uint8      `c:"emu_cc"`
	PFlags   PointFlags `c:"pflags"`
	Disp     uint8      `c:"disp"`  // offset of a RIP-relative disp32 in the instruction, 0 = none
	Flags    uint8      `c:"flags"` // Site*
	Reserved uint8      `c:"reserved"`
	Sum      uint16     `c:"sum"` // SiteSum of the instruction's bytes: the runtime's check that they are the original
}

// RawSite flags.
const (
	SiteSlot   = 1 // the copy runs in a slot: the instruction, then a jmp back
	SiteTarget = 2 // Target is set (an emulated relative branch)
)

// SiteSum is the check sum of an instruction's bytes in RawSite.Sum (the runtime's
// site_sum computes the same).
func SiteSum(b []byte) uint16 {
	h := uint32(0x811c)
	for _, c := range b {
		h = (h*31 + uint32(c)) & 0xffff
	}
	return uint16(h)
}

// RawPoint is struct kprw_point.
type RawPoint struct {
	Site       uint64      `c:"site"`
	Slot       uint64      `c:"slot"`
	Target     uint64      `c:"target"`
	FirstProbe uint32      `c:"first_probe"`
	NProbes    uint16      `c:"nprobes"`
	XMode      XMode       `c:"xmode"`
	InsnLen    uint8       `c:"insn_len"`
	SlotLen    uint8       `c:"slot_len"`
	EmuOp      EmuOp       `c:"emu_op"`
	EmuCC      uint8       `c:"emu_cc"`
	PFlags     PointFlags  `c:"pflags"`
	RetImm     uint16      `c:"ret_imm"`
	DFlags     DetourFlags `c:"dflags"` // was reserved0
	Orig       [16]byte    `c:"orig"`
	// Aux (was reserved1): a free live point's address asked for (the readers'); a live
	// jump point's DCR map (Point.DCRMap)
	Aux uint64 `c:"aux"`
}

// RawProbe is struct kprw_probe.
type RawProbe struct {
	Point        uint32     `c:"point"`
	Event        uint32     `c:"event"`
	Type         ProbeType  `c:"type"`
	Flags        ProbeFlags `c:"flags"`
	Reserved0    uint16     `c:"reserved0"`
	MaxActive    uint32     `c:"maxactive"`
	DataSize     uint32     `c:"data_size"`
	Reserved1    uint32     `c:"reserved1"`
	PreHandler   uint64     `c:"pre_handler"`
	PostHandler  uint64     `c:"post_handler"`
	FaultHandler uint64     `c:"fault_handler"`
	EntryHandler uint64     `c:"entry_handler"`
	RetHandler   uint64     `c:"ret_handler"`
	User         uint64     `c:"user"`
	Reserved2    uint64     `c:"reserved2"`
}

// RawEvent is struct kprw_event.
type RawEvent struct {
	Group     uint64     `c:"group"`
	Name      uint64     `c:"name"`
	Fetch     uint64     `c:"fetch"`
	FetchLen  uint32     `c:"fetch_len"`
	ID        uint32     `c:"id"`
	Flags     EventFlags `c:"flags"`
	FilterLen uint32     `c:"filter_len"` // the filter program follows the fetch program (was reserved0)
}

// RawProbeState is struct kprw_probe_state (writable, zero at start).
type RawProbeState struct {
	Hit     uint64 `c:"hit"`
	NMissed uint64 `c:"nmissed"`
	Flags   uint32 `c:"flags"`
	// Gate, in the first probe of an XOptimized point, is 1 while the point is armed
	// (written at start-up; the detour tests it).
	Gate uint32 `c:"gate"`
	// PFGen, in the probe of a DFPrefilter point, is the trace file's control
	// generation under which the detour's inline filter is the event's (^0: never).
	// In the probe of a DFInlineRec point PFGen and Reserved1 are one u64 instead,
	// iropen: the trace file's switch generation under which the detour may write the
	// record itself (^0: never).
	PFGen     uint32 `c:"pfgen"`
	Reserved1 uint32 `c:"reserved1"`
}

// PtRegs is struct pt_regs, the kernel's x86-64 layout.
type PtRegs struct {
	R15, R14, R13, R12, BP, BX, R11, R10, R9, R8 uint64
	AX, CX, DX, SI, DI, OrigAX                   uint64
	IP, CS, Flags, SP, SS                        uint64
}

// RawStats is struct kprw_stats (the runtime's kprewrite_rt_stats).
type RawStats struct {
	Traps    uint64 `c:"traps"`
	Steps    uint64 `c:"steps"`
	Boosts   uint64 `c:"boosts"`
	Emulated uint64 `c:"emulated"`
	// RetTramps counts return trampolines run; a thread's runs through the fast path
	// are added when it takes its next block, as Records.
	RetTramps uint64 `c:"rettramps"`
	Foreign   uint64 `c:"foreign"`
	// Records counts trace records written; a thread's records through the
	// jump-optimized fast paths are added when it takes its next block (those in a
	// block it still writes are not in it yet; the trace file's counts are exact).
	Records    uint64 `c:"records"`
	Lost       uint64 `c:"lost"`
	OptSlow    uint64 `c:"optslow"`    // detour hits resumed through iretq (redirect, sp change, DF)
	Violations uint64 `c:"violations"` // --verify-regions: hits on inner DCR bytes
	// HandlerFaults counts faults in C handlers (reported on stderr and recovered).
	HandlerFaults uint64 `c:"handler_faults"`
	// RPFlushed counts return-probe instances released because a C++ exception or a
	// forced unwind left their frame through the trampoline (no return event; each also
	// counts as its probe's miss in the trace counters).
	RPFlushed uint64 `c:"rp_flushed"`
	// ReadFaults counts fault-catching reads stopped by a fault (bad pointers read).
	ReadFaults uint64 `c:"read_faults"`
}

// RawTraceImage is struct kprw_trace_image.
type RawTraceImage struct {
	ImageID     uint64 `c:"image_id"`
	NProbes     uint32 `c:"nprobes"`
	Flags       uint32 `c:"flags"` // TIF*
	CountersOff uint64 `c:"counters_off"`
}

// TIFExt in RawTraceImage.Flags: a RawTraceImageExt follows the image's counters.
const TIFExt = 0x1

// TIFSpare in RawTraceImage.Flags: the image's control area ends with CtlSpare count
// slots for triggers added at run time.
const TIFSpare = 0x2

// TIFUser in RawTraceImage.Flags: an image with C handlers, whose control area ends,
// after those slots, with two u64 a probe (runtime index) saying how a C handler
// registered it now: UR* | pid << 32 of the process that registered it last (0: not
// registered), then, for one at a free live point (URFree), its site's link-time
// address.
const TIFUser = 0x4

// C handlers' registrations (TIFUser words).
const (
	URKprobe    = 1 // register_kprobe()
	URKretprobe = 2 // register_kretprobe()
	URJprobe    = 3 // register_jprobe()
	URType      = 3
	URDisabled  = 0x4 // registered disabled, or disable_kprobe() since
	URFree      = 0x8 // at a free live point: the second word is its site, bits 8..15 its XMode
)

// RawTraceImageExt is struct kprw_trace_image_ext.
type RawTraceImageExt struct {
	DescOff  uint64 `c:"desc_off"` // file offset of the image's KPRWDESC frame, 0 = none
	DescSize uint64 `c:"desc_size"`
	// per-CPU hit counters of count-only detours: ShardsN shards of ShardsStride bytes
	// from ShardsOff (0: none), a u64 per probe in each
	ShardsOff    uint64 `c:"shards_off"`
	ShardsStride uint64 `c:"shards_stride"`
	ShardsN      uint32 `c:"shards_n"`
	// CtlSize is the bytes of the image's control area right after this record: a u32
	// of CtlEv* flags per event (by runtime index), padded to 8, then a u64 count per
	// trigger slot (was reserved0, always 0 before)
	CtlSize uint32 `c:"ctl_size"`
}

// Per-event control flags in the trace file's control area (RawTraceImageExt.CtlSize).
const (
	CtlEvSoftDisabled = 0x1 // records nothing (enable_event/disable_event, kprewrite enable/disable)
	CtlSpare          = 64  // count slots at the end of a control area for run-time triggers
)

// Run-time control frames (struct kprw_ctlframe, struct kprw_ctlent): an image's filters
// and triggers as changed after the rewrite.
const (
	CtlFrameMagic = "KPRWCTL1"
	// LiveFrameMagic heads a live-event frame (struct kprw_ctlframe's header, then
	// RawLiveEnt entries): the events kprewrite probe added to an image.
	LiveFrameMagic = "KPRWLIV1"
	LiveMax        = 256 // live events of one image
	LEReturn       = 0x1 // RawLiveEnt.Flags: a return event
	LEPoint        = 0x2 // RawLiveEnt.Flags: at a free live point; the point and its slot follow
	LEState        = 0x4 // RawLiveEnt.Flags: the word after its hit count is its site's state (LS*)
	LECtl          = 0x8 // RawLiveEnt.Flags: the word after its state is its switch (CtlEvSoftDisabled)
	// TrigLiveTarget marks an enable_event/disable_event target that is the slot of a
	// live event's LECtl word, not a runtime event index
	TrigLiveTarget = 0x80000000
	LSNone         = 0    // a live event's state: no program has applied it yet
	LSInt3         = 1    // armed, an int3
	LSJump         = 2    // armed, jump-optimized
	LSPending      = 3    // its free point waits for no thread to be at its old place
	LSRefused      = 4    // its free point does not check against the program
	LSOff          = 5    // not armed: every probe disarmed, or no records can be written
	FreeSlot       = 32   // bytes of a free live point's slot
	MaxFree        = 2048 // the most free live points of an image (return points included)
	CtlFileMagic   = "KPRWCTLF"
	CtlFrameMax    = 1 << 20
	CEFilter       = 0x1
	CETrig         = 0x2
	CEEnable       = 0x4
	CEDisable      = 0x8
	// CtlSynth marks a frame entry of a synthetic event (RawCtlEnt.Event: this bit and
	// the event's index among the description's synthetic events, below CtlMaxSynth):
	// histograms added at run time, fed after the rewrite's.
	CtlSynth    = 0x80000000
	CtlMaxSynth = 256
)

// CtlFlagBytes is the bytes of an image's control area before its slot 0: a u32
// switch word per runtime event, to 8 bytes (rt_trigger.c's flags_bytes).
func CtlFlagBytes(nevents int) uint64 { return (uint64(nevents)*4 + 7) &^ 7 }

// RawCtlFrame is struct kprw_ctlframe.
type RawCtlFrame struct {
	Magic     [8]byte `c:"magic"`
	Prev      uint64  `c:"prev"`
	ImageID   uint64  `c:"image_id"`
	Size      uint32  `c:"size"`
	NEntries  uint32  `c:"nentries"`
	NEvents   uint32  `c:"nevents"`
	NSwitches uint32  `c:"nswitches"` // RawCtlSwitch after the entries
	Source    uint64  `c:"source"`    // a KPREWRITE_CONTROL file's frame: its hash (0: a command's)
}

// RawCtlSwitch is struct kprw_ctlswitch: bit 0 of the control area's word at Slot (a
// synthetic event's switch) set to Bit when a KPREWRITE_CONTROL frame is installed.
type RawCtlSwitch struct {
	Slot uint32 `c:"slot"`
	Bit  uint32 `c:"bit"`
}

// RawCtlEnt is struct kprw_ctlent.
type RawCtlEnt struct {
	Event     uint32 `c:"event"`
	Flags     uint32 `c:"flags"`
	FilterLen uint32 `c:"filter_len"`
	TrigLen   uint32 `c:"trig_len"`
	TextLen   uint32 `c:"text_len"`
	Reserved  uint32 `c:"reserved"`
}

// RawLiveEnt is struct kprw_liveent: one event of a live-event frame, followed by its
// fetch program, its definition's text (then a newline and its filter's expression
// when it has one, then its triggers' texts, one a line), its filter program and its
// trigger program, each padded to 8.
type RawLiveEnt struct {
	Probe     uint32 `c:"probe"`
	ID        uint32 `c:"id"`
	FetchLen  uint32 `c:"fetch_len"`
	TextLen   uint32 `c:"text_len"`
	HitsOff   uint64 `c:"hits_off"`
	Flags     uint32 `c:"flags"`
	FilterLen uint32 `c:"filter_len"` // its filter program's bytes (0: none)
	TrigLen   uint32 `c:"trig_len"`   // its trigger program's bytes (0: none), after the filter's
	Reserved  uint32 `c:"reserved"`
}

// RawTraceHeader is struct kprw_trace_hdr, the first 4096 bytes of a trace file.
type RawTraceHeader struct {
	Magic         [8]byte                       `c:"magic"`
	Version       uint32                        `c:"version"`
	DataOff       uint32                        `c:"data_off"`
	DataSize      uint64                        `c:"data_size"`
	Head          uint64                        `c:"head"`
	Lost          uint64                        `c:"lost"`
	CountersOff   uint64                        `c:"counters_off"`
	CountersSize  uint64                        `c:"counters_size"`
	CountersUsed  uint64                        `c:"counters_used"`
	NImages       uint32                        `c:"nimages"`
	ClockID       uint32                        `c:"clock_id"`
	CreatedRealNs uint64                        `c:"created_real_ns"`
	CreatedMonoNs uint64                        `c:"created_mono_ns"`
	BlockSize     uint64                        `c:"block_size"`
	TracingOff    uint32                        `c:"tracing_off"` // non-zero: no records are written (traceoff)
	CtlGen        uint32                        `c:"ctl_gen"`     // bumped after each run-time control frame is linked
	CtlLast       uint64                        `c:"ctl_last"`    // file offset of the latest RawCtlFrame (0: none)
	SnapTs        uint64                        `c:"snap_ts"`     // the latest snapshot: records up to this time (0: none)
	SnapCount     uint64                        `c:"snap_count"`  // snapshots taken
	Images        [TraceMaxImages]RawTraceImage `c:"images"`
	// version 3
	TsBase       uint64 `c:"ts_base"`        // a compact record's time is TsBase + its offset
	RingBlocks   uint32 `c:"ring_nblocks"`   // 0: blocks given out by Head; else a ring (record)
	RingFlags    uint32 `c:"ring_flags"`     // RingOverwrite, RingDone
	RingBS       uint64 `c:"ring_bs"`        // bytes per ring block
	RingTake     uint64 `c:"ring_take"`      // queue entries writers took
	RingGive     uint64 `c:"ring_give"`      // queue entries the recorder filled
	RingQueueOff uint64 `c:"ring_queue_off"` // file offset of u32 queue[RingBlocks]
	ChunkLast    uint64 `c:"chunk_last"`     // file offset of the recorder's last chunk
	RecorderPID  uint32 `c:"recorder_pid"`
	Flags        uint32 `c:"flags"`       // TraceUnreserved, TraceNoOpt, TraceDisarmed
	RunPID       uint32 `c:"run_pid"`     // the process that started the file's run (0: none)
	RunPad       uint32 `c:"run_pad"`     // (run_pid, run_pad, run_start follow flags: rt_tracefile.c reads them as one)
	RunStart     uint64 `c:"run_start"`   // its start time, /proc/PID/stat's starttime
	Overwritten  uint64 `c:"overwritten"` // records of an overwrite ring writers took again uncopied
	LiveDone     uint32 `c:"live_done"`   // 1 + the ctl_gen a live-probe thread last applied (0: none)
	LivePad      uint32 `c:"live_pad"`
	Clock        uint32 `c:"clock"` // ClockTSC, ClockMono, ClockCounter (ClockUnset: older files, tsc)
	// RingExtBlocks, non-zero, says the blocks a ring grows by (from DataSize/RingBS on)
	// are not in the file's ring but appended to the file in extents of RingExtBlocks
	// blocks by the writer that first needs one, extent k at the file offset ext[k] (0:
	// not yet) of the u64 ext[] after the queue (RingExtOff). 0: every block is in the
	// file's ring (older files).
	RingExtBlocks uint32 `c:"ring_ext_blocks"`
	Counter       uint64 `c:"counter"` // ClockCounter's last value
	// Spilled counts the records of ring blocks the recorder gave back once they were
	// copied into a chunk buffer, before the chunk was written; each chunk written
	// carries the count's low 32 bits with its own as its mark (RawChunk.Mark), so
	// readers count Spilled - the last chunk's mark as lost (a recorder killed, a write
	// that failed)
	Spilled uint64 `c:"spilled"`
	// RingGrown is how many of the ring's blocks are in use: the queue starts with the
	// first RingGrown of RingBlocks, and a writer that finds the queue empty claims the
	// next block (an atomic add) instead of losing its record, up to RingBlocks. 0: the
	// ring does not grow (an older recorder, overwrite mode).
	RingGrown uint64 `c:"ring_grown"`
}

// RingExtOff is the file offset of a ring's table of extents (RingExtBlocks): after its
// queue.
func (h *RawTraceHeader) RingExtOff() uint64 {
	return h.RingQueueOff + uint64(h.RingBlocks)*8
}

// Trace clocks (RawTraceHeader.Clock, KPRW_CLOCK_*): what record times are.
const (
	ClockUnset   = 0 // a file of an older runtime (its times are tsc's), or one no image has opened
	ClockTSC     = 1 // CLOCK_MONOTONIC nanoseconds extrapolated from rdtsc
	ClockMono    = 2 // CLOCK_MONOTONIC nanoseconds from clock_gettime
	ClockCounter = 3 // no time: a count over every writer of the file, for order only
)

// TraceUnreserved in RawTraceHeader.Flags: the record area's blocks are not reserved
// yet (a count-only image made the file; the first image that records reserves them).
// Set by older runtimes only: the record area now takes blocks chunk by chunk as it is
// written, in every file.
const TraceUnreserved = 0x1

// TraceNoOpt in RawTraceHeader.Flags: `kprewrite optimize FILE off` is in effect: the
// programs' live-capable jump points (DFLive, DFReopt) are int3s into their detours.
const TraceNoOpt = 0x4

// TraceDisarmed in RawTraceHeader.Flags: `kprewrite disable FILE all` is in effect:
// every probe of the programs writing into the file is disarmed, C handlers included
// (the kernel's kprobes/enabled = 0).
const TraceDisarmed = 0x8

// RawBlock is struct kprw_blk, the header of a block of compact records.
type RawBlock struct {
	Magic   uint32   `c:"magic"`
	Size    uint32   `c:"size"`
	PID     uint32   `c:"pid"`
	TID     uint32   `c:"tid"`
	Image   uint8    `c:"image"`
	Pad     [3]uint8 `c:"pad"`
	Seq     uint32   `c:"seq"`
	ImageID uint64   `c:"image_id"`
	Bias    uint64   `c:"bias"`
	Done    uint32   `c:"done"`
	Drained uint32   `c:"drained"`
	Comm    [16]byte `c:"comm"`
}

// RawCRec is struct kprw_crec, a compact record's fixed part.
type RawCRec struct {
	RLen   uint16 `c:"rlen"`
	Commit uint16 `c:"commit"`
	CPU    uint16 `c:"cpu"`
	TsHi   uint16 `c:"ts_hi"`
	TsLo   uint32 `c:"ts_lo"`
	Probe  uint32 `c:"probe"`
}

// RawCRecExt is struct kprw_crec_ext.
type RawCRecExt struct {
	Type    uint8    `c:"type"`
	Pad     [3]uint8 `c:"pad"`
	EventID uint32   `c:"event_id"`
	IP      uint64   `c:"ip"`
	TsNs    uint64   `c:"ts_ns"`
}

// RawChunk is struct kprw_chunk, the header of a chunk the recorder appended.
type RawChunk struct {
	Magic   [8]byte `c:"magic"`
	Prev    uint64  `c:"prev"`
	Size    uint64  `c:"size"`
	NPieces uint32  `c:"npieces"`
	Mark    uint32  `c:"mark"` // the header's Spilled, low 32 bits, with this chunk's records
}

// CRecBytes is the size of a compact record whose rlen word (reserved data length and
// flags) is rlen: the fixed part, the ext part and return address its flags say, the
// data, padding to 8.
func CRecBytes(rlen uint16) uint64 {
	n := uint64(CRecSize) + uint64(rlen&CRecLen)
	if rlen&CRecExt != 0 {
		n += CRecExtSize
	}
	if rlen&CRecRet != 0 {
		n += 8
	}
	return (n + 7) &^ 7
}

// Version 3 trace files.
const (
	BlockMagic    = 0x3342504b // "KPB3"
	BlockZeroed   = 0x3042504b // "KPB0": given back zeroed by the recorder
	ChunkMagic    = "KPRWCHNK"
	CRecLen       = 0x1fff
	CRecRet       = 0x2000
	CRecExt       = 0x4000
	CRecHit       = 0x8000
	CRecCommitted = 0x8000
	CRecDiscarded = 0x4000
	RingOverwrite = 0x1
	RingDone      = 0x2
	BlockSize     = 64
	CRecSize      = 16
	CRecExtSize   = 24
	ChunkSize     = 32
)

// RawRecord is struct kprw_rec, the fixed part of a trace record.
type RawRecord struct {
	Size    uint32   `c:"size"`
	Commit  uint32   `c:"commit"`
	Type    uint8    `c:"type"`
	Image   uint8    `c:"image"` // the writer's entry in the header's images (version 2)
	CPU     uint16   `c:"cpu"`
	EventID uint32   `c:"event_id"`
	ImageID uint64   `c:"image_id"`
	PID     uint32   `c:"pid"`
	TID     uint32   `c:"tid"`
	TsNs    uint64   `c:"ts_ns"`
	IP      uint64   `c:"ip"`
	RetIP   uint64   `c:"ret_ip"`
	Bias    uint64   `c:"bias"`
	Comm    [16]byte `c:"comm"`
	DataLen uint32   `c:"data_len"`
	Probe   uint32   `c:"probe"` // the runtime probe index whose hit the record is, or NoProbe
}

// Sizes of the ABI structures in bytes.
const (
	HeaderSize      = 192 // 128 before Desc, DescSize and SigGuard, 152 before Counters and CountersSize, 168 before Unwind
	UnwindSize      = 8
	GotSlotSize     = 32
	SigGuardSize    = 48
	TraceImageExtSz = 40
	PointSize       = 64
	ProbeSize       = 80
	EventSize       = 40
	ProbeStateSize  = 32
	PtRegsSize      = 168
	StatsSize       = 104 // was 64 before OptSlow and Violations, 80 before HandlerFaults, 88 before RPFlushed, 96 before ReadFaults
	HooksSize       = 40
	SitesSize       = 16
	SiteFuncSize    = 32
	SiteSize        = 24
	RecordSize      = 88
	TraceImageSize  = 24
	KretprobeInstHd = 48 // struct kretprobe_instance before data[]
)
