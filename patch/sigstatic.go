package patch

import (
	"bytes"
	"debug/elf"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// The signal guard of a static program (static-pie too): its C library makes the system
// calls itself, so there is no GOT word to point at the runtime's wrappers. Instead the
// functions are found by symbol (kprt.SigGuardStaticFuncs) and the entries of the
// ones that make the system call are redirected, the way a jump-optimized probe's site
// is: the instructions a jmp rel32 replaces (the analysis' DCR, with its verdict) are
// relocated into a copy followed by a jmp back, which is the original function the
// wrapper calls, and the entry becomes a jmp to a stub "jmp *word(%rip)". The runtime
// stores the wrapper in the word at start-up (the copy, under KPREWRITE_SIGGUARD=off).
// An entry that already holds a probe keeps it, and what would run the function's first
// instructions jumps to the stub instead: an int3 point emulates a jmp to it, a
// jump-optimized point's detour ends with a jmp to it in place of its relocated DCR
// (also what runs while its gate is closed); the copy runs those instructions.
//
// A public function that only calls guarded ones (glibc's sigprocmask calls
// __pthread_sigmask, signal calls __sigaction, which jumps to __libc_sigaction) needs no
// redirection of its own; one whose callee cannot be redirected is redirected itself.

// SigHook is one redirected function entry of a static program's signal guard.
type SigHook struct {
	Name   string // its symbol (the strong one when it has several)
	Class  uint32 // kprt.SG*
	Entry  uint64
	Site   uint64 // where the jmp goes: the entry, after an endbr64
	Endbr  []byte // the entry's endbr64, repeated at the copy's start
	Point  int    // plan point at Site whose int3 or detour jumps to the stub, or -1
	Detour bool   // that point is jump-optimized
	Code   []byte // the original instructions the copy runs
	Back   uint64 // where the copy jumps back to
	DCR    int    // bytes the jmp and its filler replace (0 for a point hook)
	Reloc  int    // relocated length of Code
}

// StaticGuard is the plan of a static program's signal guard.
type StaticGuard struct {
	Hooks    []SigHook // sorted by entry
	Warnings []string
	// FastRead: fetches read memory and the guard covers every signal function found,
	// sigaction's among them, so the runtime may use its fault-catching reads
	// (kprt.HFFastRead).
	FastRead bool
	// GoDynamic: the plan is of a dynamic Go program's runtime functions only (its C
	// library's are its GOT words'); without FastRead its reads are by system call.
	GoDynamic bool
}

// sgFunc is a function of the program that a static-libc signal name names.
type sgFunc struct {
	fn     *elfio.Func
	names  []string
	class  uint32
	strong bool // the class came from a GLOBAL symbol
	named  bool // by a global name, or a local one reserved to the library (__*)
	sys    bool // it has a syscall instruction
	calls  []uint64
	state  uint8 // 0 new, 1 deciding, 2 decided
	ok     bool  // covered: redirected, or calls only covered functions
	why    string
}

// IsStatic reports whether f is loaded without ld.so: a static executable or a
// static-pie, whose C library is in the image. A shared library (most have no
// PT_INTERP) is loaded by ld.so, and calls the signal functions through its GOT.
func IsStatic(f *elfio.File) bool {
	if f.IsSharedLibrary() {
		return false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// hasSymtab reports whether f still has its static symbol table (a shared library's
// dynamic one names what other objects call).
func hasSymtab(f *elfio.File) bool {
	for _, s := range f.Symbols {
		if !s.Dynamic || f.IsSharedLibrary() {
			return true
		}
	}
	return false
}

// definesSignalFuncs reports whether f exports a function of kprt.SigGuardStaticFuncs.
func definesSignalFuncs(f *elfio.File) bool {
	for _, s := range f.Symbols {
		if _, ok := kprt.SigGuardStaticFuncs[s.Name]; ok && s.Dynamic && s.Type == elf.STT_FUNC &&
			s.Shndx != uint16(elf.SHN_UNDEF) && s.Value != 0 {
			return true
		}
	}
	return false
}

// anyInt3 reports whether some point of the plan traps (int3, not jump-optimized), or
// an int3 may be placed live.
func (pl *Plan) anyInt3() bool {
	for i := range pl.Points {
		if !pl.Points[i].Optimized() || pl.Points[i].Withheld {
			return true
		}
	}
	return len(pl.Inner) > 0 || pl.LiveInt3
}

// slowReadWarning says why fetches read memory by system call in a static program.
const slowReadWarning = "fetch arguments that read memory use the system-call read (process_vm_readv, ~0.3 us a read) " +
	"instead of the fault-catching copy (a few ns), because "

// PlanStaticGuard chooses the entries to redirect in a static program of b with int3
// probes or (fastRead) fetches that read memory, records their edits (a placeholder
// over each redirected entry's DCR, replaced by SetEntryJmp), and turns int3 points on
// them into jumps to the stubs (SetTarget). With fetches that read memory the result
// says FastRead when the guard covers every signal function found, sigaction's among
// them (a program without one may well make the system call itself, as Go's runtime
// does). excl is the code --exclude keeps probes out of. A program that needs no
// guard gives an empty plan.
//
// A shared library that defines signal functions itself (libc.so.6) gets the same
// redirections when it has int3 probes: every object of the process calls them
// there, so the guard covers the whole process, not only the library's own calls
// through its GOT (a program that blocks SIGTRAP in its threads, as xz does, would
// otherwise die at the library's first int3 hit in them). Its fetches' fast reads
// stay the GOT guard's business (addSigGuard). A dynamic Go program whose fetches read
// memory gets its runtime's functions redirected (GoDynamic: Go's runtime makes its
// signal system calls itself, not through its GOT).
func (pl *Plan) PlanStaticGuard(b *analysis.Binary, fastRead bool, excl []Range) (*StaticGuard, error) {
	f := b.File
	sg := &StaticGuard{}
	int3 := pl.anyInt3()
	switch {
	case f.IsSharedLibrary() && definesSignalFuncs(f):
		fastRead = false
	case !IsStatic(f) && fastRead && b.IsGo() && !f.IsSharedLibrary():
		// a dynamic Go program (PIE, cgo): its runtime's raw calls still need their
		// redirection; SIGTRAP is its runtime.sigtable's and its GOT words'
		sg.GoDynamic, int3 = true, false
	case !IsStatic(f):
		return sg, nil
	}
	if !int3 && !fastRead {
		return sg, nil
	}
	stripped := !hasSymtab(f)
	if stripped && fastRead && b.IsGo() {
		// its runtime's functions are named by .gopclntab (sgFuncs)
	} else if stripped {
		if int3 {
			sg.Warnings = append(sg.Warnings, "static program without a symbol table (stripped): the signal guard cannot find its C library's "+
				"signal functions, so if it blocks SIGTRAP (sigprocmask, pthread_sigmask, a handler's sa_mask) or installs its own SIGTRAP "+
				"disposition, its next int3 probe hit kills it; rewrite the unstripped binary, or use jump-optimized probes")
		}
		if fastRead {
			sg.Warnings = append(sg.Warnings, slowReadWarning+"the static program has no symbol table (stripped) to find its signal functions by")
		}
		return sg, nil
	}
	funcs := sgFuncs(b, fastRead, sg.GoDynamic)
	hasSigaction := false
	for _, sf := range funcs {
		hasSigaction = hasSigaction || isSigaction(sf.class)
	}
	if len(funcs) == 0 || (!int3 && !hasSigaction) {
		if fastRead {
			sg.Warnings = append(sg.Warnings, slowReadWarning+noSigaction(sg))
		}
		return sg, nil
	}
	var sites []uint64 // every plan site and inner byte, sorted
	pointAt := map[uint64]int{}
	for i := range pl.Points {
		sites = append(sites, pl.Points[i].Site)
		pointAt[pl.Points[i].Site] = i
	}
	for _, in := range pl.Inner {
		sites = append(sites, in.Addr)
	}
	slices.Sort(sites)
	taken := map[uint32]string{} // class -> the redirected function of that class
	addrs := make([]uint64, 0, len(funcs))
	for a := range funcs {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	var decide func(a uint64) bool
	decide = func(a uint64) bool {
		sf := funcs[a]
		switch sf.state {
		case 1:
			return false // a cycle: not covered through it
		case 2:
			return sf.ok
		}
		sf.state = 1
		delegated := !sf.sys && len(sf.calls) > 0
		for _, c := range sf.calls {
			if !decide(c) {
				delegated = false
			}
		}
		switch {
		case delegated:
			sf.ok = true
		case taken[sf.class] != "":
			sf.why = fmt.Sprintf("%s of the same kind is already redirected and the runtime holds one original function per kind", taken[sf.class])
		case goStubMismatch(b.File, sf) != "":
			sf.why = goStubMismatch(b.File, sf)
		default:
			h, why := pl.hookable(b, sf, sites, pointAt, excl)
			if h != nil {
				sg.Hooks = append(sg.Hooks, *h)
				taken[sf.class] = h.Name
				sf.ok = true
			} else {
				sf.why = why
			}
		}
		sf.state = 2
		return sf.ok
	}
	var missed []string
	sigaction := false
	for _, a := range addrs {
		sf := funcs[a]
		if !decide(a) {
			missed = append(missed, fmt.Sprintf("%s (%s)", strings.Join(sf.names, "/"), sf.why))
		} else if isSigaction(sf.class) {
			sigaction = true
		}
	}
	if len(missed) > 0 && int3 {
		what := "the static program"
		if f.IsSharedLibrary() {
			what = "the library's signal functions"
		}
		sg.Warnings = append(sg.Warnings, "signal guard of "+what+": not guarded: "+strings.Join(missed, "; ")+
			": if the program blocks SIGTRAP or installs a SIGTRAP disposition through these, its next int3 probe hit kills it")
	}
	if fastRead {
		switch {
		case len(missed) > 0:
			sg.Warnings = append(sg.Warnings, slowReadWarning+"the signal guard cannot cover "+strings.Join(missed, "; "))
		case !sigaction:
			sg.Warnings = append(sg.Warnings, slowReadWarning+noSigaction(sg))
		default:
			sg.FastRead = true
		}
	}
	sort.Slice(sg.Hooks, func(i, j int) bool { return sg.Hooks[i].Entry < sg.Hooks[j].Entry })
	return sg, nil
}

// sgFuncs finds the functions named in kprt.SigGuardStaticFuncs, by address, with
// the system calls they make and the other such functions they call or jump to. Go's
// runtime functions only for fast reads (goStubs): a Go program's SIGTRAP is kept by
// its runtime.sigtable (internal/rewriter, gosig.go). goOnly: Go's functions only (a
// dynamic program, whose C library's are wrapped through its GOT).
func sgFuncs(b *analysis.Binary, fastRead, goOnly bool) map[uint64]*sgFunc {
	if !hasSymtab(b.File) {
		return goTableFuncs(b)
	}
	funcs := map[uint64]*sgFunc{}
	for _, s := range b.File.Symbols {
		class, ok := kprt.SigGuardStaticFuncs[s.Name]
		if _, isGo := goStubs[class]; (isGo && !fastRead) || (goOnly && !isGo) {
			continue
		}
		if !ok || s.Type != elf.STT_FUNC || s.Shndx == uint16(elf.SHN_UNDEF) || s.Value == 0 ||
			(s.Bind != elf.STB_GLOBAL && s.Bind != elf.STB_WEAK && s.Bind != elf.STB_LOCAL) {
			continue
		}
		fn, ok := b.Funcs.Containing(s.Value)
		if !ok || fn.Addr != s.Value {
			continue
		}
		sf := funcs[s.Value]
		if sf == nil {
			sf = &sgFunc{fn: fn}
			funcs[s.Value] = sf
		}
		if !slices.Contains(sf.names, s.Name) {
			sf.names = append(sf.names, s.Name)
		}
		// glibc's static-pie makes some public names local (epoll_pwait, ppoll); a
		// program's own static function could share one, and is not taken for the
		// library's unless it makes a system call itself (below)
		if s.Bind != elf.STB_LOCAL || strings.HasPrefix(s.Name, "__") {
			sf.named = true
		}
		// names of one address agree but for aliases such as musl's __sysv_signal of
		// its (BSD) signal: the strong symbol says what the function is
		strong := s.Bind == elf.STB_GLOBAL
		if sf.class == 0 || (strong && !sf.strong) || (strong == sf.strong && class < sf.class) {
			sf.class, sf.strong = class, strong
		}
	}
	targets := map[uint64][]uint64{}
	for a, sf := range funcs {
		sort.Strings(sf.names)
		code, err := b.File.Bytes(sf.fn.Addr, sf.fn.Size)
		if err != nil {
			sf.sys = true // unreadable: it can only be redirected itself (and the analysis decides)
			continue
		}
		for off := 0; off < len(code); {
			n, kind, target, err := x86dec.Flow(code[off:], sf.fn.Addr+uint64(off))
			if err != nil || n <= 0 {
				// undecodable: assume the worst, that it makes system calls itself
				sf.sys = true
				break
			}
			switch {
			case kind == x86dec.KindSyscall:
				sf.sys = true
			case kind == x86dec.KindCall || kind == x86dec.KindJmp || kind == x86dec.KindJcc:
				if target != a && !slices.Contains(targets[a], target) {
					targets[a] = append(targets[a], target)
				}
			}
			off += n
		}
	}
	for a, sf := range funcs {
		if !sf.named && !sf.sys {
			delete(funcs, a)
		}
	}
	for a, sf := range funcs {
		for _, t := range targets[a] {
			if _, ok := funcs[t]; ok {
				sf.calls = append(sf.calls, t)
			}
		}
	}
	return funcs
}

// goTableFuncs finds Go's runtime functions of goStubs in a stripped Go program, by the
// names .gopclntab gives them (no ".abi0": elfio).
func goTableFuncs(b *analysis.Binary) map[uint64]*sgFunc {
	funcs := map[uint64]*sgFunc{}
	for name, class := range map[string]uint32{"runtime.rt_sigaction": kprt.SGGoSigaction, "runtime.rtsigprocmask": kprt.SGGoSigprocmask} {
		if fn, ok := b.Funcs.ByName(name); ok {
			funcs[fn.Addr] = &sgFunc{fn: fn, names: []string{name}, class: class, strong: true, named: true, sys: true}
		}
	}
	return funcs
}

// isSigaction says whether functions of class set signal dispositions as sigaction does.
func isSigaction(class uint32) bool {
	return class == kprt.SGSigaction || class == kprt.SGGoSigaction
}

// goStubs are the code of Go's runtime.rt_sigaction and runtime.rtsigprocmask (go1.26's,
// ABI0: arguments on the stack; another release's may differ) that the runtime's stubs
// (gosig.S) replace, doing the same system calls with the guarded signals kept: the
// stubs are written for exactly this code, so other code is not redirected.
var goStubs = map[uint32][]byte{
	kprt.SGGoSigaction: { // runtime.rt_sigaction(sig uintptr, new, old *sigactiont, size uintptr) int32
		0x48, 0x8b, 0x7c, 0x24, 0x08, 0x48, 0x8b, 0x74, 0x24, 0x10, 0x48, 0x8b, 0x54, 0x24, 0x18, // mov 8,16,24(%rsp)
		0x4c, 0x8b, 0x54, 0x24, 0x20, 0xb8, 0x0d, 0x00, 0x00, 0x00, 0x0f, 0x05, // mov 32(%rsp),%r10; mov $13,%eax; syscall
		0x89, 0x44, 0x24, 0x28, 0xc3, // mov %eax,40(%rsp); ret
	},
	kprt.SGGoSigprocmask: { // runtime.rtsigprocmask(how int32, new, old *sigset, size int32)
		0x8b, 0x7c, 0x24, 0x08, 0x48, 0x8b, 0x74, 0x24, 0x10, 0x48, 0x8b, 0x54, 0x24, 0x18, // mov 8,16,24(%rsp)
		0x44, 0x8b, 0x54, 0x24, 0x20, 0xb8, 0x0e, 0x00, 0x00, 0x00, 0x0f, 0x05, // mov 32(%rsp),%r10d; mov $14,%eax; syscall
		0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0x76, 0x0b, // cmp $-4095,%rax; jbe ret
		0xc7, 0x04, 0x25, 0xf1, 0x00, 0x00, 0x00, 0xf1, 0x00, 0x00, 0x00, 0xc3, // movl $0xf1,0xf1; ret
	},
}

// goStubMismatch says why sf, a Go runtime function of goStubs, cannot be redirected
// to its stub: its code is not the one the stub replaces ("" when it is, or sf is not
// Go's).
func goStubMismatch(f *elfio.File, sf *sgFunc) string {
	want, ok := goStubs[sf.class]
	if !ok {
		return ""
	}
	code, err := f.Bytes(sf.fn.Addr, uint64(len(want)))
	if err != nil || !bytes.Equal(code, want) {
		return "its code is not the Go runtime's that the runtime's stub replaces (go1.26's)"
	}
	return ""
}

// noSigaction says why a program's reads are slow when no sigaction function is found.
func noSigaction(sg *StaticGuard) string {
	if sg.GoDynamic {
		return "the Go program's runtime.rt_sigaction is not found: its runtime installs signal handlers by raw system calls"
	}
	return "the static program has no known sigaction function: it may install signal handlers by raw system calls"
}

// hookable plans the redirection of sf's entry, or says why it cannot be done safely.
func (pl *Plan) hookable(b *analysis.Binary, sf *sgFunc, sites []uint64, pointAt map[uint64]int, excl []Range) (*SigHook, string) {
	fn := sf.fn
	s := b.Check(analysis.SiteRequest{Addr: fn.Addr, OtherProbes: neighbours(sites, fn.Addr), NoRedirect: true})
	h := &SigHook{Name: strongName(sf, b.File), Class: sf.class, Entry: fn.Addr, Site: s.Addr, Point: -1}
	if s.Addr != fn.Addr {
		eb, err := b.File.Bytes(fn.Addr, s.Addr-fn.Addr)
		if err != nil || s.Addr-fn.Addr != 4 {
			return nil, "its entry is not an endbr64 followed by code"
		}
		h.Endbr = bytes.Clone(eb)
	}
	opt := DCROptions(b.File)
	if pi, ok := pointAt[s.Addr]; ok {
		pt := &pl.Points[pi]
		if pt.Optimized() || pt.Verify {
			// a --verify-regions point's slot is a detour's relocated DCR and jmp back
			n, err := trampolines.RegionLen(pt.DCRCode, pt.Site, opt)
			if err != nil || n < 5 {
				return nil, fmt.Sprintf("the jump-optimized probe on its entry leaves no room for a jmp in its detour (%d bytes, %v)", n, err)
			}
			h.Point, h.Detour, h.Code, h.Back, h.Reloc = pi, true, bytes.Clone(pt.DCRCode), pt.Site+uint64(pt.DCRLen), n
			return h, ""
		}
		n, err := trampolines.RegionLen(pt.Orig, pt.Site, opt)
		if err != nil {
			return nil, fmt.Errorf("the probed entry instruction cannot be relocated: %w", err).Error()
		}
		h.Point, h.Code, h.Back, h.Reloc = pi, bytes.Clone(pt.Orig), pt.Site+uint64(len(pt.Orig)), n
		// the int3 stays; the point jumps to the stub (emulated) instead of running its
		// instruction, which the copy runs first; it keeps its kind in the list
		pt.Boosted = pt.Mode() == ModeB
		pt.XMode, pt.EmuOp, pt.EmuCC, pt.Target, pt.RetImm, pt.PFlags = kprt.XEmulate, kprt.EmuJmp, 0, 1, 0, 0
		pt.NeedsSlot, pt.SlotOpt = false, trampolines.SlotOptions{}
		return h, ""
	}
	if s.Verdict != analysis.Optimize || s.DCRLen < 5 || len(s.DCR) == 0 || s.DCR[0].Addr != s.Addr {
		why := "the analysis' verdict for its entry is " + s.Verdict.String()
		for _, r := range s.Blocking() {
			why = fmt.Sprintf("%s at %#x: %s", r.Rule, r.Addr, r.Detail)
			break
		}
		return nil, why
	}
	for _, r := range excl {
		if r.Overlaps(fn.Addr, s.Addr+uint64(s.DCRLen)) {
			return nil, "its entry is in code excluded by --exclude " + r.Pattern
		}
	}
	if i, _ := slices.BinarySearch(sites, s.Addr); i < len(sites) && sites[i] < s.Addr+uint64(s.DCRLen) {
		return nil, fmt.Errorf("the probe at %#x lies in the %d bytes a jmp at its entry would replace", sites[i], s.DCRLen).Error()
	}
	last := s.DCR[len(s.DCR)-1]
	code, err := b.File.Bytes(s.Addr, last.Addr+uint64(last.Len)-s.Addr)
	if err != nil {
		return nil, err.Error()
	}
	n, err := trampolines.RegionLen(code, s.Addr, opt)
	if err != nil {
		return nil, "its entry instructions cannot be relocated: " + err.Error()
	}
	// a placeholder until the stub's address is known
	if err := pl.patcher.Write(s.Addr, trampolines.SitePlaceholder(s.DCRLen)); err != nil {
		return nil, err.Error()
	}
	h.Code, h.Back, h.DCR, h.Reloc = bytes.Clone(code), s.Addr+uint64(s.DCRLen), s.DCRLen, n
	return h, ""
}

// strongName is the name the function goes by: its GLOBAL symbol if it has one.
func strongName(sf *sgFunc, f *elfio.File) string {
	for _, s := range f.Symbols {
		if s.Value == sf.fn.Addr && s.Bind == elf.STB_GLOBAL && slices.Contains(sf.names, s.Name) {
			return s.Name
		}
	}
	return sf.names[0]
}

// SetEntryJmp replaces the placeholder over the DCR of a redirected entry at site
// (a SigHook with DCR > 0) with b: the jmp to its stub and filler.
func (pl *Plan) SetEntryJmp(site uint64, b []byte) error {
	return pl.patcher.Replace(site, b)
}

// SetTarget sets the branch target of int3 point pi, which the plan made an emulated
// jmp (a SigHook's Point), once the target's address is known.
func (pl *Plan) SetTarget(pi int, target uint64) {
	pl.Points[pi].Target = target
}
