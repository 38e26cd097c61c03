package kprt

import _ "embed" // for the handlers' header

// HandlerHeader is include/kprewrite.h, the header C handler files include: the kernel's
// kprobes vocabulary (struct pt_regs, struct kprobe, struct kretprobe, register_kprobe()
// and friends, printk, trace_printk, ...) on top of the runtime functions in HandlerAPI.
//
//go:embed include/kprewrite.h
var HandlerHeader []byte

// HandlerHeaderName is the name handler files include HandlerHeader by.
const HandlerHeaderName = "kprewrite.h"

// Names the rewriter looks for in linked C handlers.
const (
	// SymUserInit is int kprewrite_init(void) (module_init): when a handler file defines
	// it, the runtime runs it at the end of start-up instead of registering every
	// declared probe itself (RawHooks.Init).
	SymUserInit = "kprewrite_init"
	// SymUserExit is void kprewrite_exit(void) (module_exit), run by exit() (RawHooks.Exit).
	SymUserExit = "kprewrite_exit"
	// DeclSection is the non-loaded section where DEFINE_KPROBE, DEFINE_KRETPROBE and
	// KPREWRITE_PROGRAM_SYMBOL record "KIND\tNAME\tSITE\tFILE\tLINE\x00" lines.
	DeclSection = ".kprewrite.decl"
)

// HandlerAPI lists the runtime's functions that handlers call (kprewrite.h declares them).
// They are global symbols of Object; nothing else in it is meant for handlers.
var HandlerAPI = []string{
	"kprewrite_register_kprobe", "kprewrite_unregister_kprobe",
	"kprewrite_register_kretprobe", "kprewrite_unregister_kretprobe",
	"kprewrite_enable_kprobe", "kprewrite_disable_kprobe",
	"kprewrite_printk", "kprewrite_trace_printk", "kprewrite_vsnprintf", "kprewrite_snprintf",
	"kprewrite_write", "kprewrite_ktime_get_ns", "kprewrite_ktime_get_real_ns",
	"kprewrite_current", "kprewrite_smp_processor_id", "kprewrite_dump_stack",
	"kprewrite_copy_nofault", "kprewrite_strncpy_nofault",
}

// Layout of struct kprobe and struct kretprobe in kprewrite.h (abi_test.go checks it):
// the rewriter reads static initializers of declared probes at these offsets.
const (
	KprobeSize          = 80
	KprobeOffSymbolName = 0
	KprobeOffOffset     = 8 // u32
	KprobeOffFlags      = 12
	KprobeOffAddr       = 16
	KprobeOffPre        = 24
	KprobeOffPost       = 32
	KprobeOffFault      = 40
	KprobeOffBreak      = 48
	KprobeOffNMissed    = 56

	KretprobeSize         = 128
	KretprobeOffHandler   = 80
	KretprobeOffEntry     = 88
	KretprobeOffMaxActive = 96  // s32
	KretprobeOffNMissed   = 100 // s32
	KretprobeOffDataSize  = 104 // u64

	// struct kprobe.flags
	KprobeFlagDisabled  = 2
	KprobeFlagOptimized = 4
)
