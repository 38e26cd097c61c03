package rewriter

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	"github.com/kprewrite/kprewrite/internal/tracefile"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/handlers"
	"github.com/kprewrite/kprewrite/internal/objlink"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// Options tune Rewrite.
type Options struct {
	NoBoost bool // single-step every probe (k and r only)
	// NoOptimize keeps every probe an int3 (--no-optimize); by default a probe whose
	// site the analysis says optimize, and that needs no post handler, is
	// jump-optimized (kinds o and ro).
	NoOptimize bool
	// VerifyRegions (--verify-regions): every would-be-optimized probe becomes a
	// boosted int3 running its whole relocated DCR, and every other byte of the DCR
	// an int3 whose hit is recorded as a violation (and run correctly).
	VerifyRegions bool
	// Exclude lists code where no probe goes (--exclude): function-name globs and
	// address ranges, see patch.ParseExcludes.
	Exclude []string
	// OptimizedOnly refuses probes that cannot be jump-optimized (--optimized-only).
	OptimizedOnly bool
	// CountOnly (--count-only): events write no trace records; their hits are counted
	// in the trace file's counters (kprewrite profile). A jump-optimized point whose
	// probes are all such events gets a count-only detour: a lock incq per probe.
	CountOnly bool
	// ExitsOnly (--exits-only, with CountOnly or TraceExits): a return probe that cannot
	// be counted or recorded at its function's exits is refused instead of hooking the
	// return address.
	ExitsOnly bool
	// TraceExits (--exits): a return event (no C handler, no fetch at the entry: NoExit)
	// of a function whose exits the analysis sees is recorded at its rets, and hooks
	// the return address only at its tail calls, instead of at its entry
	// (patch.Options.TraceExits).
	TraceExits bool
	// CallsHook (--calls-hook): the return events --calls makes hook the return address
	// of every function, as explicit return events without TraceExits do; without it
	// they are recorded at the exits where the analysis sees them all
	// (patch.Request.Exits).
	CallsHook bool
	// Int3Step (--single-step int3): single-stepped copies of boostable instructions
	// end with an int3 instead of running under the trap flag (see patch.Options).
	Int3Step    bool
	SkipRefused bool   // leave out probes the analysis refuses (Result.Refused) instead of failing
	TracePath   string // default trace file written into the image ("" = none unless KPREWRITE_TRACE)
	// Needed: libraries the program loads from other files (the rewritten copies of
	// the libraries its LIB:SITE definitions name), through a new dynamic string table.
	Needed    []elfio.Needed
	TraceSize uint64 // record area of a new trace file (0 = the runtime's default)
	// Disable registers events disabled, with KPREWRITE_DISABLE's syntax: "all", "ev",
	// "grp/ev", "grp/*".
	Disable   []string
	ImageName string // names the image in trace files (default: the input's base name)
	// LivePoints is how many free live points a live-capable image reserves for events
	// at sites no rewrite prepared (--live-points): 0 the default (NFree), negative none;
	// FreeRet(n) more take return events.
	LivePoints int
	Debug      bool // the runtime reports its start-up on stderr
	// Clock is the record clock of the trace files the image creates (--clock): "" or
	// "tsc", "mono", "counter" (docs/tracing.md, "Clocks").
	Clock string
	// Analysis is the input's analysis when the caller already has it.
	Analysis *analysis.Binary
	// Synthetic are the synthetic events of the definitions and their histograms.
	Synthetic *probedefs.Synthetics
	// Handlers are the compiled C handler files (--handlers); their probes are in the
	// probe list with Probe.Handler set.
	Handlers *handlers.Set
}

// Result is a rewritten image.
type Result struct {
	Image   *elfio.Output
	Layout  elfio.Layout
	Plan    *patch.Plan     // nil for a rewrite without probes
	Desc    *tracefile.Desc // nil for a rewrite without probes
	Refused []patch.Refusal // with Options.SkipRefused
	// Edits are every change of the input's own bytes, with the bytes each replaces:
	// the probes' and the file structures' (dynamic section, property note). The
	// output holds the input's bytes everywhere else in its loaded segments.
	Edits []patch.Edit
	// Warnings are things the user should know about the rewritten program.
	Warnings []string
}

// Symbol names the rewriter gives its own pieces in .symtab.
const (
	SymEntryStub  = "kprewrite_entry_stub" // the entry of a rewrite without probes
	SymTables     = "kprewrite_tables"     // struct kprw_header and the tables
	SymDesc       = "kprewrite_desc"       // the image description
	SymProbeState = "kprewrite_probe_state"
	SymCounters   = "kprewrite_counters" // the counter window (kprt.RawHeader.Counters)
	SymDynstr     = "kprewrite_dynstr"   // the dynamic string table with the library copies' paths
	SymEarlyRela  = "kprewrite_rela"     // the DT_RELA table with the early start's relocation
	SymSlotPrefix = "kprewrite_slot."
	// SymFreeSlots names the free live points' slots (kprewrite probe at unprepared sites).
	SymFreeSlots = "kprewrite_free_slots"
	// SymDetourPrefix names the detour buffer of a jump-optimized probe.
	SymDetourPrefix = "kprewrite_detour."
	// SymFilterPrefix names the inline filter of a jump-optimized probe's detour (where
	// its site's jmp lands) and the count-only detour its refused hits take.
	SymFilterPrefix = "kprewrite_filter."
	// SymHistPrefix names the inline histogram update of a jump-optimized probe's detour
	// (where its site's jmp lands) and the count-only detour that counts its hits.
	SymHistPrefix = "kprewrite_hist."
	// SymInlineRecPrefix names the inline record of a jump-optimized probe's detour
	// (kprt.DFInlineRec: the site's jmp lands in it; it declines into the detour).
	SymInlineRecPrefix = "kprewrite_inlinerec."
	// SymRedirectPrefix names the copy of a DCR's rest that a redirected jump into the
	// DCR goes to (analysis.Redirect), by the jump's original target.
	SymRedirectPrefix = "kprewrite_redirect."
	// SymRseqCS names the rseq_cs descriptors of inline-form count-only detours.
	SymRseqCS = "kprewrite_rseq_cs"
	// SymRseqFix names the table from which the runtime writes them in a PIC image.
	SymRseqFix = "kprewrite_rseq_fix"
	// SymSigStubPrefix names the stub a static program's redirected signal function
	// jumps to (jmp *word: the runtime's wrapper), SymSigCopyPrefix the relocated copy
	// of its entry (the original function).
	SymSigStubPrefix = "kprewrite_sigguard_stub."
	SymSigCopyPrefix = "kprewrite_sigguard_orig."
)

const areaAlign = 64

// Rewrite installs the probes into f and returns the new image. The same input,
// probes and options always give the same bytes. The caller has checked that f can
// be rewritten (internal/pipeline) and resolved the probes (probedefs.Resolve).
func Rewrite(f *elfio.File, probes []probedefs.Probe, opt Options) (*Result, error) {
	if len(probes) == 0 && !registersOnly(opt) {
		if f.IsSharedLibrary() {
			return &Result{Image: f.Copy()}, nil // no entry point to take over
		}
		return rewriteNoProbes(f, opt)
	}
	b := opt.Analysis
	if b == nil {
		var err error
		if b, err = analysis.Analyze(f, analysis.Options{}); err != nil {
			return nil, err
		}
	}
	reqs := make([]patch.Request, len(probes))
	named := namedDisables(opt.Disable)
	for i, p := range probes {
		if p.Def == nil || p.Def.Delete {
			return nil, fmt.Errorf("%s: not a probe definition", p.Origin)
		}
		// a C handler's post_handler needs the probed instruction single-stepped
		reqs[i] = patch.Request{Name: p.Origin, Addr: p.Addr, Return: p.Def.Return, NeedPost: p.Handler != nil && p.Handler.Post,
			Optional: p.Optional, NoExit: probedefs.NoExit(p), Go: p.Def.Return && b.IsGoCode(p.Addr),
			Exits: p.Def.Return && p.Optional && !opt.CallsHook && !mayBeLive(&p, named)} // (Optional: --calls' events)
	}
	excl, err := patch.ParseExcludes(opt.Exclude, b.Funcs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	plan, err := patch.MakePlan(b, reqs, patch.Options{NoBoost: opt.NoBoost, SkipRefused: opt.SkipRefused,
		NoOptimize: opt.NoOptimize, VerifyRegions: opt.VerifyRegions, Exclude: excl, OptimizedOnly: opt.OptimizedOnly, Int3Step: opt.Int3Step,
		CountExits: opt.CountOnly, ExitsOnly: opt.ExitsOnly, TraceExits: opt.TraceExits && !opt.CountOnly})
	if err != nil {
		return nil, err
	}
	if len(plan.Points) == 0 && len(plan.Refused) > 0 {
		return nil, fmt.Errorf("%s: every probe was refused (first: %w)", f.Path, plan.Refused[0].Err)
	}
	// the analysis read the whole input; what is read from here on is a few pages
	// (and the hash and the output, which release as they go)
	f.ReleasePages(f.Data)
	plan.Sites = nil // each request's analysis: not read past planning (12 MB for node)
	g := &gen{f: f, b: b, opt: opt, probes: probes, plan: plan, excl: excl, library: f.IsSharedLibrary()}
	return g.run()
}

// rewriteNoProbes adds the new segments with an entry stub that only jumps to the
// original entry: the rewritten program behaves exactly like the original.
func rewriteNoProbes(f *elfio.File, opt Options) (*Result, error) {
	var needed *elfio.NeededPlan
	var rodata []byte
	if len(opt.Needed) > 0 {
		var err error
		if needed, err = f.PlanNeeded(opt.Needed); err != nil {
			return nil, err
		}
		rodata = needed.Bytes
	}
	layout, err := f.PlanLayout(trampolines.EntryStubLen, uint64(len(rodata)), 0, 0)
	if err != nil {
		return nil, err
	}
	stub, err := trampolines.EntryStub(layout.TextAddr, f.Entry)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	entry := layout.TextAddr
	syms := []elfio.NewSymbol{{Name: SymEntryStub, Section: elfio.SecText, Size: uint64(len(stub)), Func: true, Global: true}}
	var patches []elfio.Patch
	var edits []patch.Edit
	if needed != nil {
		d, err := f.EditDynamic()
		if err != nil {
			return nil, err
		}
		needed.Edit(d, layout.RodataAddr)
		ps, err := d.Patches()
		if err != nil {
			return nil, err
		}
		if patches, edits, err = patch.FileEdits(f.Bytes, "dynamic section", ps); err != nil {
			return nil, err
		}
		syms = append(syms, elfio.NewSymbol{Name: SymDynstr, Section: elfio.SecRodata, Size: uint64(len(rodata))})
	}
	img, err := f.Rewrite(&elfio.Addition{
		Layout:  layout,
		Text:    stub,
		Rodata:  rodata,
		Symbols: syms,
		Patches: patches,
		Entry:   &entry,
	})
	if err != nil {
		return nil, err
	}
	return &Result{Image: img, Layout: layout, Edits: edits}, nil
}

// gen holds one rewrite with probes.
type gen struct {
	f       *elfio.File
	library bool // f is a shared library: the runtime starts from its DT_INIT
	b       *analysis.Binary
	opt     Options
	probes  []probedefs.Probe
	plan    *patch.Plan
	excl    []patch.Range // --exclude

	events  []kprt.Event
	evOf    []int // per probe (request): index in events, -1 when refused
	slots   trampolines.SlotArea
	slotOf  []int // per point: slot index or -1
	dcrs    dcrArea
	tables  kprt.Tables
	desc    *tracefile.Desc
	anyRet  bool
	symbols map[string]uint64
	hrefs   []handlerRef  // C handler probes in the tables (handlers.go)
	hooks   sigHooks      // a static program's redirected signal functions (sigstatic.go)
	goSig   []elfio.Patch // a Go program's SIGTRAP entry in runtime.sigtable, with int3 points (gosig.go)
	// fastRead: fetch arguments or C handlers read memory, so the signal guard should
	// cover SIGSEGV and SIGBUS for the runtime's fault-catching reads (sigguard.go)
	fastRead bool
	// slowGo: a dynamic Go program whose runtime's signal calls are not redirected: its
	// reads stay system calls (planStaticSigGuard)
	slowGo bool
	// live: the events whose sites keep their original bytes until enabled (liveEvents)
	live map[string]bool
	// reopt: points whose kind `kprewrite optimize` switches live (markReopt)
	reopt map[int]bool
	// inlineRec: the plan points whose detours write their records inline
	// (pickInlineRecs), with the x86 numbers of the registers each record holds
	inlineRec map[int][]int
	// freeRet: free return points may hook return addresses (the trampoline's FDE)
	freeRet bool
	// warnings for Result.Warnings
	warnings []string
}

// makeEvents compiles one event per definition that got a probepoint.
func (g *gen) makeEvents() error {
	g.evOf = make([]int, len(g.probes))
	for i := range g.plan.Points {
		// --exits hooks the return address at tail calls: the trampoline's FDE is needed
		if pt := &g.plan.Points[i]; pt.Exit && pt.ExitTail && !g.opt.CountOnly {
			g.anyRet = true
		}
	}
	if err := checkDisables(g.opt.Disable, g.probes, g.opt.Synthetic); err != nil {
		return err
	}
	disableAll := false
	for _, d := range g.opt.Disable {
		if d == "all" {
			disableAll = true
		}
	}
	targets := probedefs.TriggerTargets(g.probes)
	anyTriggers := len(targets) > 0
	for _, p := range g.probes {
		anyTriggers = anyTriggers || len(p.Triggers) > 0
	}
	if disableAll && !anyTriggers {
		g.tables.Flags |= kprt.HFDisableAll
	}
	switch g.opt.Clock {
	case "mono":
		g.tables.Flags |= kprt.HFClockMono
	case "counter":
		g.tables.Flags |= kprt.HFClockCounter
	}
	g.desc = &tracefile.Desc{Input: filepath.Base(g.f.Path), PIE: g.f.IsPIE(), TracePath: g.opt.TracePath, Go: g.b.IsGo()}
	live := g.liveEvents(targets)
	g.live = live
	needSyms := false
	gost := g.goidState()
	for i, p := range g.probes {
		g.evOf[i] = -1
		if g.plan.PointOf[i] < 0 {
			continue
		}
		prog, err := eventdef.Compile(p.Def, func(sym string) (uint64, bool) {
			a, ok := g.symbols[sym]
			return a, ok
		})
		if err != nil {
			return fmt.Errorf("%s: %w", p.Origin, err)
		}
		prog, goid := gost.withGoID(prog, &g.probes[i], g.opt.CountOnly)
		filter, err := probedefs.CompileFilter(&g.probes[i], g.b.Funcs, goid > 0)
		if err != nil {
			return err
		}
		if filter != nil && g.opt.CountOnly {
			return fmt.Errorf("%s: %s/%s has a filter, which decides which hits are recorded; with --count-only none is", p.FilterOrigin, p.Def.Group, p.Def.Event)
		}
		if len(p.Triggers) > 0 && g.opt.CountOnly {
			return fmt.Errorf("%s: %s/%s has triggers, which run when a hit is recorded; with --count-only none is", p.Triggers[0].Origin, p.Def.Group, p.Def.Event)
		}
		id := uint32(len(g.events) + 1)
		ev := kprt.Event{Group: p.Def.Group, Name: p.Def.Event, Fetch: prog, Filter: filter, ID: id}
		if p.Def.Return {
			ev.Flags |= kprt.EFRetprobe
			// a return probe counted at its exits hooks no return address
			g.anyRet = g.anyRet || !g.plan.Points[g.plan.PointOf[i]].Exit
		}
		if !g.opt.CountOnly && p.Handler == nil && eventdef.ReadsMemory(prog) {
			g.fastRead = true // (a C handler's probe writes no record: its program never runs)
		}
		disabled := disableAll || matchesAny(g.opt.Disable, p.Def.Group, p.Def.Event)
		switch key := p.Def.Group + "/" + p.Def.Event; {
		case p.Spare:
			// a prepared site's placeholder: armed (soft) while events ride it, its
			// sites held original while none does, if they can change live
			ev.Flags |= kprt.EFSoftDisabled | kprt.EFSpare
			if live[key] {
				ev.Flags |= kprt.EFLive
			}
			disabled, needSyms = true, true // (events added name symbols: @SYM, :symbol)
		case disabled && live[key]:
			// its sites keep their original bytes until it is enabled (rt_live.c)
			ev.Flags |= kprt.EFSoftDisabled | kprt.EFLive
		case disabled && (len(p.Triggers) > 0 || targets[key]):
			// the kernel's soft mode: armed, its triggers run, no records until enabled
			ev.Flags |= kprt.EFSoftDisabled
		case disabled && !(disableAll && !anyTriggers):
			ev.Flags |= kprt.EFDisabled
		}
		for _, a := range p.Def.Args {
			if a.Kind == eventdef.KindSymbol || a.Kind == eventdef.KindSymstr {
				needSyms = true
			}
		}
		for _, td := range p.Triggers { // .sym hist keys and stacks are named by the readers
			if (td.Hist != nil && td.Hist.NeedsSymbols()) || td.Cmd == evtrigger.StackTrace {
				needSyms = true
			}
		}
		g.evOf[i] = len(g.events)
		g.events = append(g.events, ev)
		g.desc.Events = append(g.desc.Events, tracefile.DescEvent{ID: id, Group: p.Def.Group, Name: p.Def.Event, Def: p.Def.Def,
			Origin: p.Origin, Return: p.Def.Return, Filter: p.Filter, Disabled: disabled || (p.Handler != nil && p.Handler.Disabled),
			Soft: ev.Flags&kprt.EFSoftDisabled != 0, Live: ev.Flags&kprt.EFLive != 0, Spare: p.Spare, GoID: goid,
			Jprobe: p.Handler != nil && p.Handler.Kind == handlers.KindJprobe})
	}
	g.addFreePoints()
	if err := g.makeLiveSites(); err != nil {
		return err
	}
	if err := g.makeTriggers(); err != nil {
		return err
	}
	if g.handlersRead() {
		g.fastRead = true
	}
	if g.handlersCall("kprewrite_dump_stack") { // dump_stack() walks the user stack
		if err := g.needUnwind("dump_stack()"); err != nil {
			return err
		}
		needSyms = true // (its frames are named by the readers)
	}
	if needSyms {
		fns := g.b.Funcs
		for _, fn := range fns.List {
			g.desc.Symbols = append(g.desc.Symbols, tracefile.DescSymbol{Addr: fn.Addr, Size: fn.Size, Name: fn.Name})
		}
	}
	return nil
}

// Free live points: kprewrite probe places events at sites no rewrite prepared on them
// (runtime src/rt_live.c, "Free live points").
const (
	NFree         = 64          // free live points of a live-capable image (Options.LivePoints 0)
	MaxFree       = 1024        // the most Options.LivePoints may ask for
	FreeGroup     = "kprewrite" // their placeholder events' group and names
	FreeEvent     = "free"
	FreeRetEvent  = "free_return"
	freeRetPerOne = 4 // one free return point per this many free entry points
)

// FreeRet is how many free return points (r: events) an image with n free live points
// has: a quarter of them, at least one: a return event needs an entry int3 of its own.
func FreeRet(n int) int {
	if n <= 0 {
		return 0
	}
	return max(1, n/freeRetPerOne)
}

// livePoints is the number of free live points the options ask for.
func (o *Options) livePoints() int {
	switch {
	case o.LivePoints == 0:
		return NFree
	case o.LivePoints < 0:
		return 0
	}
	return o.LivePoints
}

// addFreePoints reserves, in an image whose runtime runs the live-probe thread (it has
// prepared sites or live events), the free live points: Options.LivePoints unplaced
// points, each with a placeholder kprobe of one event (FreeGroup/FreeEvent, Spare and
// Free) and a slot the assembly places in the text, then FreeRet of them for return
// events, each with a placeholder kretprobe (FreeGroup/FreeRetEvent): placed at a
// function's entry it hooks the return address as any kretprobe. Before makeTriggers:
// the synthetic events' ids follow the events'.
func (g *gen) addFreePoints() {
	// (a handler file that calls register_kprobe() places its unprepared sites there)
	liveCapable := len(g.live) > 0 || len(g.namedFuncs()) > 0
	for i, p := range g.probes {
		liveCapable = liveCapable || (p.Spare && g.evOf[i] >= 0)
	}
	n := g.opt.livePoints()
	if !liveCapable || g.opt.CountOnly || g.opt.VerifyRegions || n == 0 {
		return
	}
	if _, ok := g.f.GoSigtable(); g.b.IsGo() && !ok {
		return // (its runtime would take the int3s: goSigtrapEdit)
	}
	g.addFreeKind(FreeEvent, kprt.TKprobe, n)
	if !g.b.IsGo() { // (a Go function's return address is never hooked)
		g.addFreeKind(FreeRetEvent, kprt.TKretprobe, FreeRet(n))
		g.freeRet = true
	}
}

// addFreeKind adds n free live points whose placeholder probes are of type typ, of a
// new event name.
func (g *gen) addFreeKind(name string, typ kprt.ProbeType, n int) {
	ret := typ == kprt.TKretprobe
	ev := len(g.events)
	id := uint32(ev + 1)
	flags, def := kprt.EFSoftDisabled|kprt.EFSpare|kprt.EFLive, "p:"+FreeGroup+"/"+name+" 0"
	if ret {
		flags, def = flags|kprt.EFRetprobe, "r:"+FreeGroup+"/"+name+" 0"
	}
	g.events = append(g.events, kprt.Event{Group: FreeGroup, Name: name, ID: id, Flags: flags})
	g.desc.Events = append(g.desc.Events, tracefile.DescEvent{ID: id, Group: FreeGroup, Name: name, Def: def,
		Origin: "free live points", Return: ret, Disabled: true, Soft: true, Live: true, Spare: true, Free: true})
	q := kprt.Probe{Type: typ, Flags: kprt.FTrace, Event: ev}
	if ret && g.opt.Handlers != nil && g.handlersCall(registerFuncs...) {
		q.DataSize = spareDataSize // a C handler's struct kretprobe (register_kretprobe, rt_usersite.c)
	}
	for range n {
		g.tables.Free = append(g.tables.Free, kprt.Point{XMode: kprt.XBoost, Slot: 1, // (placed with the text)
			Probes: []kprt.Probe{q}})
	}
}

// makeTriggers compiles each event's triggers once every event has its runtime index
// (enable_event names events defined after it): their programs, and in the image's
// control area a count slot per trigger of a logical event, shared by its probes.
func (g *gen) makeTriggers() error {
	evIdx := map[string][]uint32{}
	for k, ev := range g.events {
		key := ev.Group + "/" + ev.Name
		evIdx[key] = append(evIdx[key], uint32(k))
	}
	slots := map[string]uint32{}
	next := uint32(0)
	slotOf := func(key string, words uint32) uint32 {
		s, ok := slots[key]
		if !ok {
			s = next
			next += words
			slots[key] = s
		}
		return s
	}
	if sy := g.opt.Synthetic; sy != nil { // their histograms' tables, whether fed or not
		disableAll := slices.Contains(g.opt.Disable, "all")
		for k, name := range sy.Order {
			// its records: an id after the events', a switch in the control area
			ev := sy.Events[name]
			ev.ID = uint32(len(g.events) + 1 + k)
			ev.Disabled = disableAll || matchesAny(g.opt.Disable, "synthetic", name)
			de := tracefile.DescSynthetic{Name: name, Def: ev.String(), ID: ev.ID, Disabled: ev.Disabled,
				SwitchSlot: slotOf(evhist.SwitchKey(name), 1), Filter: ev.FilterText}
			for _, td := range sy.Triggers[name] {
				de.Triggers = append(de.Triggers, td.String())
				de.CtlSlots = append(de.CtlSlots, slotOf(probedefs.HistKey("synthetic", name, td.Trigger), uint32(td.Hist.TableWords())))
			}
			g.desc.Synthetic = append(g.desc.Synthetic, de)
		}
	}
	// histSlots are the tables of an event's histograms (enable_hist's targets)
	histSlots := func(group, event string) []uint32 {
		var out []uint32
		seen := map[string]bool{}
		add := func(td probedefs.TriggerDef) {
			if k := probedefs.HistKey(group, event, td.Trigger); td.Hist != nil && !seen[k] {
				seen[k] = true
				out = append(out, slotOf(k, uint32(td.Hist.TableWords())))
			}
		}
		if sy := g.opt.Synthetic; group == "synthetic" && sy != nil {
			for _, td := range sy.Triggers[event] {
				add(td)
			}
		}
		for i := range g.probes {
			if d := g.probes[i].Def; d.Group == group && d.Event == event {
				for _, td := range g.probes[i].Triggers {
					add(td)
				}
			}
		}
		return out
	}
	symLimit := g.f.ImageEnd() // a .sym hist key below it, less the load bias, is a link-time address
	for i := range g.probes {
		if g.evOf[i] < 0 {
			continue
		}
		p := &g.probes[i]
		prog, cslots, err := probedefs.CompileTriggers(p, g.desc.Events[g.evOf[i]].GoID > 0, probedefs.SymbolsOf(g.b.Funcs), symLimit, evIdx, slotOf, histSlots)
		if err != nil {
			return err
		}
		if prog == nil {
			continue
		}
		g.events[g.evOf[i]].Triggers = prog
		de := &g.desc.Events[g.evOf[i]]
		de.CtlSlots = cslots
		for _, td := range p.Triggers {
			de.Triggers = append(de.Triggers, td.String())
			if td.Cmd == evtrigger.StackTrace || (td.Hist != nil && td.Hist.HasStack()) {
				if err := g.needUnwind(fmt.Sprintf("%s/%s: trigger %q", p.Def.Group, p.Def.Event, td.Text)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// needUnwind gives the runtime the program's unwind table (stack walks: a stacktrace
// trigger, a stack key, dump_stack()); who is what needs it, for the error.
func (g *gen) needUnwind(who string) error {
	if g.tables.Unwind != nil {
		return nil
	}
	rows, base, err := unwindTable(g.f)
	if rows == nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	if err != nil {
		g.warnings = append(g.warnings, fmt.Sprintf("stacktrace: %v: stacks stop at the functions of the bad entries", err))
	}
	g.tables.Unwind, g.tables.UnwindBase = rows, base
	return nil
}

// matchesAny applies KPREWRITE_DISABLE's token syntax to one event.
func matchesAny(tokens []string, group, event string) bool {
	for _, t := range tokens {
		if eventdef.MatchesName(t, group, event) {
			return true
		}
	}
	return false
}

// planEarlyStart plans the relocation that starts the runtime while the dynamic loader
// relocates the image (elfio.EarlyStart), when the image is one it is made for and its
// dynamic section has room for it beside the program's libraries (needed) and a
// library's DT_INIT; nil otherwise: the runtime then starts at the entry point or
// DT_INIT only, and a probe hit before that is lost (jump-optimized, count-only) or
// kills (int3), which a warning says.
func (g *gen) planEarlyStart(needed *elfio.NeededPlan) (*elfio.EarlyStart, error) {
	f := g.f
	if !slices.ContainsFunc(f.Progs, func(p elfio.Prog) bool { return p.Type == elf.PT_DYNAMIC }) {
		return nil, nil // a static program: its entry point is the first code to run
	}
	early := f.PlanEarlyStart()
	if early == nil {
		return nil, nil
	}
	d, err := f.EditDynamic()
	if err != nil {
		return nil, err
	}
	if g.library {
		d.Library(0)
		if g.libraryExitHook() {
			d.Fini(0)
		}
	}
	if needed != nil {
		needed.Edit(d, 0)
	}
	if !early.Fits(d) {
		at := "the entry point"
		if g.library {
			at = "DT_INIT"
		}
		g.warnings = append(g.warnings, fmt.Sprintf("%s: the dynamic section has no room for the early start's DT_RELA: the runtime starts at %s, and a probe hit before that is not recorded, or kills with int3", f.Path, at))
		return nil, nil
	}
	return early, nil
}

// liveEvents names the events that are switched live ("GROUP/EVENT"): disabled by name
// with --disable (not "all", which the runtime's switch serves), no filter, no triggers
// and named by none, no C handler, on points that hold only such probes. Their points
// that can change live (liveKindOK) keep their original bytes until the event is
// enabled at run time; their other jump-optimized points keep the jmp, whose detour's
// gate the runtime opens and closes instead (rt_live.c).
func (g *gen) liveEvents(targets map[string]bool) map[string]bool {
	key := func(ri int) string { return g.probes[ri].Def.Group + "/" + g.probes[ri].Def.Event }
	named := namedDisables(g.opt.Disable)
	eligible := func(ri int) bool { return mayBeLive(&g.probes[ri], named) && !targets[key(ri)] }
	live := map[string]bool{}
	for ri := range g.probes {
		if g.plan.PointOf[ri] >= 0 && eligible(ri) {
			live[key(ri)] = true
		}
	}
	for ri := range g.probes {
		pi := g.plan.PointOf[ri]
		if pi < 0 || !live[key(ri)] {
			continue
		}
		pt := &g.plan.Points[pi]
		ok := g.liveKindOK(pt) || pt.Optimized() && !pt.Verify && !g.opt.CountOnly // else: its gate follows
		for _, rj := range pt.Requests {
			ok = ok && eligible(rj)
		}
		if !ok { // a probe of the event that must stay armed: the event is not live
			delete(live, key(ri))
		}
	}
	return live
}

// mayBeLive says whether probe p's event is one --disable makes live (liveEvents'
// eligibility but for the trigger targets, unknown before the plan): its return event
// then hooks the return address at the entry, a point that can change live, and not
// the exits, whose jmps would stay (item 2 of live probes: `--calls GLOB --disable
// 'calls/*'` leaves the original bytes everywhere).
func mayBeLive(p *probedefs.Probe, named []string) bool {
	return (p.Spare || matchesAny(named, p.Def.Group, p.Def.Event)) && len(p.Triggers) == 0 && p.Handler == nil && p.Filter == ""
}

// namedDisables is the --disable patterns that name events (not "all").
func namedDisables(disable []string) []string {
	return slices.DeleteFunc(slices.Clone(disable), func(t string) bool { return t == "all" })
}

// liveKindOK says whether point pt's kind can be armed and disarmed live: an int3
// point, or a jump-optimized one whose DCR's copy has a DCR map (a thread the runtime
// finds paused inside the DCR goes on at the same instruction of the copy) and holds
// no system call (a thread blocked in one would resume inside); not a count-only,
// --verify-regions or exit point. A DCR longer than the point's 16 original bytes
// keeps its tail while armed (the runtime writes the jmp and int3s to the 16th byte).
func (g *gen) liveKindOK(pt *patch.Point) bool {
	if pt.Verify || pt.Exit || g.opt.CountOnly {
		return false
	}
	if !pt.Optimized() {
		return true
	}
	if pt.DCRLen < 5 || pt.DCRLen > 255 { // (the DCR map's offsets are bytes)
		return false
	}
	_, ok := g.dcrMap(pt)
	return ok
}

// dcrMap is the DCR map of jump point pt (kprt.Point.DCRMap): where the offsets of its
// DCR's copy step, a jcc rel8 before an instruction copied as a rel32 (the runtime
// moves a thread paused at an instruction of the DCR to the same instruction of the
// copy). Not ok when the DCR holds a system call (a thread blocked in one would resume
// inside) or its offsets step more than four times.
func (g *gen) dcrMap(pt *patch.Point) (uint64, bool) {
	reg, err := trampolines.RelocateRegion(pt.DCRCode, pt.Site, pt.Site, patch.DCROptions(g.f))
	if err != nil {
		return 0, false
	}
	var m uint64
	steps, delta := 0, 0
	for i, o := range reg.OrigOffsets {
		b := pt.DCRCode[o:]
		if len(b) >= 2 && b[0] == 0x0f && (b[1] == 0x05 || b[1] == 0x34) {
			return 0, false
		}
		if d := reg.Offsets[i] - o; d != delta {
			if d < 0 || d > 255 || o == 0 || steps == 4 {
				return 0, false
			}
			m |= (uint64(o) | uint64(d)<<8) << (16 * steps)
			steps, delta = steps+1, d
		}
	}
	return m, true
}

// markLive marks the live points (every probe on them of a live event) Withheld, so
// that the static signal guard's plan knows they need the SIGTRAP handler.
func (g *gen) markLive() {
	for pi := range g.plan.Points {
		pt := &g.plan.Points[pi]
		live := len(pt.Requests) > 0
		for _, ri := range pt.Requests {
			live = live && g.evOf[ri] >= 0 && g.live[g.probes[ri].Def.Group+"/"+g.probes[ri].Def.Event]
		}
		pt.Withheld = live && g.liveKindOK(pt)
	}
}

// withholdLive drops the site edits of the live points, but for a point the static
// signal guard redirects (its DCR's copy is the guard's): that one keeps its jmp, and
// its events' switches act on its records only.
func (g *gen) withholdLive() error {
	hooked := map[int]bool{}
	for _, h := range g.hooks.list {
		hooked[h.Point] = true
	}
	any := false
	for pi := range g.plan.Points {
		pt := &g.plan.Points[pi]
		if !pt.Withheld {
			continue
		}
		pt.Withheld = false
		if hooked[pi] {
			continue
		}
		if err := g.plan.Withhold(pi); err != nil {
			return err
		}
		any = true
	}
	g.markReopt(any, hooked)
	return nil
}

// markReopt notes, in an image with live points (whose runtime runs the live-probe
// thread), the other jump-optimized points whose kind can change while it runs:
// `kprewrite optimize FILE off|on` switches them between their jmp and an int3.
func (g *gen) markReopt(live bool, hooked map[int]bool) {
	g.reopt = map[int]bool{}
	for pi := range g.plan.Points {
		pt := &g.plan.Points[pi]
		// (a DCR longer than the 16 original bytes a point keeps is not: its jmp and
		// int3s fill the whole DCR in the file, and disarming restores 16)
		if live && !pt.Withheld && !hooked[pi] && pt.Optimized() && pt.DCRLen <= 16 && g.liveKindOK(pt) {
			g.reopt[pi] = true
		}
	}
}

// makeTables fills the runtime tables and the slot area from the plan.
func (g *gen) makeTables() error {
	f, pl := g.f, g.plan
	g.tables.OrigEntry = f.Entry
	// restartable sequences' descriptors hold absolute addresses: in the code where the
	// image is at fixed addresses, else written by the runtime (kprt.SymRseqFix)
	g.dcrs.pic = !g.inlineRseq()
	if g.library {
		// the library's own DT_INIT (0: none), which the runtime's calls after start-up,
		// and DT_FINI for kprewrite_exit(); the dynamic section must have room for them
		// (the patches are made once the runtime's entries have their addresses)
		d, err := f.EditDynamic()
		if err != nil {
			return err
		}
		g.tables.OrigEntry = d.Library(0)
		if g.libraryExitHook() {
			g.tables.Fini = d.Fini(0)
		}
		if _, err := d.Patches(); err != nil {
			return err
		}
		g.tables.Flags |= kprt.HFLibrary
	}
	g.tables.Events = g.events
	g.tables.TracePath = g.opt.TracePath
	g.tables.TraceSize = g.opt.TraceSize
	g.tables.ImageName = g.opt.ImageName
	if g.tables.ImageName == "" {
		g.tables.ImageName = filepath.Base(f.Path)
	}
	if g.opt.Debug {
		g.tables.Flags |= kprt.HFDebug
	}
	g.slotOf = make([]int, len(pl.Points))
	g.pickInlineRecs()
	// --exits: the entries of the functions whose return events record at their exits
	// carry the stack pointer (kprt.DFSpEntry), as a hooked return event's entry does
	spEntry := map[uint64]bool{} // by the address the definitions asked for
	for i, p := range g.probes {
		if pi := pl.PointOf[i]; p.Def.Return && pi >= 0 && pl.Points[pi].Exit && !g.opt.CountOnly {
			spEntry[pl.Requests[i].Addr] = true
		}
	}
	entryOf := func(pt *patch.Point) bool {
		for _, j := range pt.Requests {
			if spEntry[pl.Requests[j].Addr] {
				return true
			}
		}
		return false
	}
	for i := range pl.Points {
		pt := &pl.Points[i]
		g.slotOf[i] = -1
		rp := pt.Point // the plan's point as the runtime holds it; the slot and probes added here
		if pt.NeedsSlot {
			si, err := g.slots.Add(pt.Orig, pt.Site, pt.SlotOpt)
			if err != nil {
				return fmt.Errorf("%s: probe at %#x: %w", pl.Requests[pt.Requests[0]].Name, pt.Site, err)
			}
			g.slotOf[i] = si
			n, _ := trampolines.RelocatedLen(pt.Orig, pt.Site, trampolines.Options{})
			rp.SlotLen = uint8(n)
			rp.Slot = 1 // placeholder until the slots are placed
		}
		count := g.opt.CountOnly && pt.Optimized()
		for _, ri := range runOrder(pt) {
			def := g.probes[ri].Def
			q := kprt.Probe{Type: kprt.TKprobe, Flags: kprt.FTrace, Event: g.evOf[ri]}
			if g.opt.CountOnly {
				q.Flags = 0 // --count-only: events count their hits, write no records
			}
			if def.Return && (!pt.Exit || pt.ExitTail && !g.opt.CountOnly) {
				// (--exits: at a tail call, the return address is hooked there)
				q.Type = kprt.TKretprobe
				q.MaxActive = uint32(def.MaxActive)
				count = false
				if g.probes[ri].Spare && g.opt.Handlers != nil {
					q.DataSize = spareDataSize // a kretprobe registered by name (C handlers)
				}
			}
			if g.probes[ri].Handler != nil {
				g.handlerProbe(&q, ri, len(g.tables.Points), len(rp.Probes))
				count = false
			}
			rp.Probes = append(rp.Probes, q)
		}
		if pt.Withheld {
			rp.DFlags |= kprt.DFLive // withholdLive
		} else if g.reopt[i] {
			rp.DFlags |= kprt.DFReopt // markReopt
		}
		if rp.DFlags&(kprt.DFLive|kprt.DFReopt) != 0 && pt.Optimized() {
			rp.DCRMap, _ = g.dcrMap(pt) // (liveKindOK said ok)
		}
		if count {
			rp.PFlags |= kprt.PFCount
		} else if pt.Exit && !g.opt.CountOnly {
			rp.DFlags |= kprt.DFExit // --exits: return events recorded at a ret
		} else if len(spEntry) > 0 && entryOf(pt) {
			rp.DFlags |= kprt.DFSpEntry
		}
		if pt.Optimized() || pt.Verify {
			if err := g.dcrs.add(g, i, &rp); err != nil {
				return fmt.Errorf("%s: probe at %#x: %w", pl.Requests[pt.Requests[0]].Name, pt.Site, err)
			}
		}
		g.tables.Points = append(g.tables.Points, rp)
	}
	// --verify-regions: the inner bytes, after the plan's points
	for _, in := range pl.Inner {
		g.tables.Points = append(g.tables.Points, kprt.Point{Site: in.Addr, Target: pl.Points[in.Point].Site,
			XMode: kprt.XBoost, PFlags: kprt.PFInner, InsnLen: 1, Orig: g.origBytes(in.Addr, 1),
			Probes: []kprt.Probe{{Type: kprt.TVerify, Event: -1}}})
	}
	g.desc.Image = g.tables.ImageName
	return nil
}

// runOrder is the order the runtime runs the probes of a point in: the newest
// definition first, as the kernel runs aggregated kprobes and uprobe consumers (each
// registration is added at the head of the list).
func runOrder(pt *patch.Point) []int {
	out := make([]int, 0, len(pt.Requests))
	for i := len(pt.Requests) - 1; i >= 0; i-- {
		out = append(out, pt.Requests[i])
	}
	return out
}

// imageID identifies the rewritten image in trace files: a hash of what the rewrite
// writes, with the id itself left 0: the input's bytes, the probe tables and the
// image description (which every definition and option that changes the output
// changes) and the C handlers' objects. The same rewrite always gets the same id, and
// two rewrites that differ in any byte get different ones.
func (g *gen) imageID(tables, desc []byte) uint64 {
	h := sha256.New()
	for d := g.f.Data; len(d) > 0; {
		k := min(len(d), 2<<20)
		h.Write(d[:k])
		g.f.ReleasePages(d[:k]) // a pass over the input leaves none of it resident
		d = d[k:]
	}
	fmt.Fprintf(h, "\x00tables %d\x00", len(tables))
	h.Write(tables)
	fmt.Fprintf(h, "\x00desc %d\x00", len(desc))
	h.Write(desc)
	g.hashHandlers(h)
	id := binary.LittleEndian.Uint64(h.Sum(nil))
	if id == 0 {
		id = 1
	}
	return id
}

// fillDescProbes lists the probes by runtime index.
func (g *gen) fillDescProbes(enc *kprt.Encoded) {
	pl := g.plan
	n := 0
	for _, idx := range enc.ProbeIndex {
		n += len(idx)
	}
	g.desc.Probes = make([]tracefile.DescProbe, n+len(g.tables.Free))
	for k, fp := range g.tables.Free { // (their slots are read from the tables)
		kind := map[bool]string{false: "b", true: "rb"}[fp.Probes[0].Type == kprt.TKretprobe]
		g.desc.Probes[n+k] = tracefile.DescProbe{Index: n + k, Event: fp.Probes[0].Event, Kind: kind}
	}
	for pi := range pl.Points {
		pt := &pl.Points[pi]
		for j, ri := range runOrder(pt) {
			k := enc.ProbeIndex[pi][j]
			dp := tracefile.DescProbe{Index: k, Event: g.evOf[ri], Kind: pl.Kind(ri), Addr: pl.Requests[ri].Addr, Site: pt.Site, Verify: pt.Verify, Exit: pt.Exit,
				Switchable: pt.Withheld && pt.Optimized() || g.reopt[pi]}
			if pt.Func != nil {
				dp.Symbol, dp.Offset = pt.Func.Name, pt.Site-pt.Func.Addr
			}
			g.desc.Probes[k] = dp
		}
	}
	for j, in := range pl.Inner {
		pt := &pl.Points[in.Point]
		k := enc.ProbeIndex[len(pl.Points)+j][0]
		dp := tracefile.DescProbe{Index: k, Event: -1, Kind: tracefile.KindVerify, Addr: pt.Site, Site: in.Addr}
		if pt.Func != nil {
			dp.Symbol, dp.Offset = pt.Func.Name, in.Addr-pt.Func.Addr
		}
		g.desc.Probes[k] = dp
	}
}

// newSymbols names the runtime's functions and data, the slots and the tables.
func (g *gen) newSymbols(out *objlink.Output, p symPlaces) []elfio.NewSymbol {
	var syms []elfio.NewSymbol
	sec := map[objlink.Area]string{objlink.AreaText: elfio.SecText, objlink.AreaRodata: elfio.SecRodata, objlink.AreaData: elfio.SecData, objlink.AreaBSS: elfio.SecBSS}
	for _, s := range out.Symbols {
		if strings.HasPrefix(s.Name, ".L") {
			continue
		}
		ns := elfio.NewSymbol{Name: s.Name, Section: sec[s.Area], Offset: s.Offset, Size: s.Size, Func: s.Func, Global: s.Global}
		if s.Area == objlink.AreaRodata {
			ns.Offset += p.rtRodata
		}
		syms = append(syms, ns)
	}
	syms = append(syms, p.areas...)
	for i, pt := range g.plan.Points {
		si := g.slotOf[i]
		if si < 0 {
			continue
		}
		name := fmt.Sprintf("%s%#x", SymSlotPrefix, pt.Site)
		if pt.Func != nil {
			name = fmt.Sprintf("%s%s+%#x", SymSlotPrefix, pt.Func.Name, pt.Site-pt.Func.Addr)
		}
		s := g.slots.Slot(si)
		syms = append(syms, elfio.NewSymbol{Name: name, Section: elfio.SecText, Offset: p.slots + g.slots.Offset(si), Size: uint64(len(s.Code)), Func: true})
	}
	for _, d := range g.dcrs.list {
		pt := &g.plan.Points[d.point]
		prefix := SymSlotPrefix
		if pt.Optimized() {
			prefix = SymDetourPrefix
		}
		where := fmt.Sprintf("%#x", pt.Site)
		if pt.Func != nil {
			where = fmt.Sprintf("%s+%#x", pt.Func.Name, pt.Site-pt.Func.Addr)
		}
		size := d.size
		if d.pf != nil || d.ih != nil { // the full detour, then the inline filter or update with the hits' counting
			size = d.pfOff
			name := SymFilterPrefix
			if d.ih != nil {
				name = SymHistPrefix
			}
			syms = append(syms, elfio.NewSymbol{Name: name + where, Section: elfio.SecText, Offset: p.dcrs + d.off + d.pfOff,
				Size: d.size - d.pfOff, Func: true})
		}
		if d.ir != nil { // the full detour, then the inline record
			size = d.irOff
			syms = append(syms, elfio.NewSymbol{Name: SymInlineRecPrefix + where, Section: elfio.SecText,
				Offset: p.dcrs + d.off + d.irOff, Size: uint64(d.irLen), Func: true})
		}
		syms = append(syms, elfio.NewSymbol{Name: prefix + where, Section: elfio.SecText, Offset: p.dcrs + d.off, Size: size, Func: true})
		for k, st := range d.redirs {
			to := pt.Redirects[k].To
			name := fmt.Sprintf("%s%#x", SymRedirectPrefix, to)
			if pt.Func != nil {
				name = fmt.Sprintf("%s%s+%#x", SymRedirectPrefix, pt.Func.Name, to-pt.Func.Addr)
			}
			syms = append(syms, elfio.NewSymbol{Name: name, Section: elfio.SecText, Offset: p.dcrs + st.off, Size: st.size, Func: true})
		}
	}
	if g.dcrs.ncs > 0 && !g.dcrs.pic { // data, not code, for disassemblers
		syms = append(syms, elfio.NewSymbol{Name: SymRseqCS, Section: elfio.SecText, Offset: p.dcrs + g.dcrs.csOff(),
			Size: uint64(g.dcrs.ncs) * trampolines.RseqCSSize})
	}
	return syms
}

// symPlaces are the offsets of the areas whose contents have symbols of their own,
// and the symbols of the areas named as a whole.
type symPlaces struct {
	rtRodata, slots, dcrs uint64
	areas                 []elfio.NewSymbol
}

// warnUnreferencedReturns warns about return probes that hook the return address at a
// function start nothing calls, takes the address of or exports: in a stripped binary
// such a start is often a fragment of another function (a .cold part or a shared
// epilogue with an FDE of its own), where the word at the stack pointer is no return
// address, and hooking it breaks the program (the kernel's uretprobe would too).
func (g *gen) warnUnreferencedReturns() {
	var names []string
	for i, p := range g.probes {
		pi := g.plan.PointOf[i]
		if !p.Def.Return || pi < 0 || g.plan.Points[pi].Exit || g.b.Referenced(g.plan.Requests[i].Addr) {
			continue
		}
		name := fmt.Sprintf("%#x", g.plan.Requests[i].Addr)
		if fn := g.plan.Points[pi].Func; fn != nil && fn.Addr == g.plan.Requests[i].Addr {
			name = fn.Name
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return
	}
	more := ""
	if len(names) > 5 {
		more = fmt.Sprintf(" and %d more", len(names)-5)
		names = names[:5]
	}
	g.warnings = append(g.warnings, fmt.Sprintf("return probes on %s%s: nothing calls these functions or takes their address; "+
		"if one is a fragment of another function (a .cold part, a shared epilogue), the word at its stack pointer is no return address and hooking it breaks the program",
		strings.Join(names, ", "), more))
}

// spareDataSize is the per-instance data a prepared function's return placeholder
// offers a struct kretprobe a C handler file registers on it by name at run time.
const spareDataSize = 64
