package patch

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// ErrRefused is wrapped by the error of a probe the analysis refuses.
var ErrRefused = errors.New("probe refused")

// Request is one probe to place.
type Request struct {
	Name     string // how messages name it ("-e #2", "probes.txt:7")
	Addr     uint64 // the address asked for (a function entry for return probes)
	Return   bool   // a return probe: the entry probe hooks the return address
	NeedPost bool   // the probe has a post_handler: its point is single-stepped
	// NoExit, for a return probe, says why it must hook the return address even with
	// Options.TraceExits (a C handler, fetches at the entry).
	NoExit string
	// Go: a return probe of a Go function, whose return address may not be hooked
	// (Go's stack copying and unwinder reject it): it is recorded at the function's
	// exits (counted with CountExits) as with TraceExits and ExitsOnly, or refused.
	Go bool
	// Exits: a return probe recorded at its function's exits where the analysis sees
	// them all, as with Options.TraceExits, else hooking its return address (the return
	// events --calls makes: a hooked return mispredicts at every return).
	Exits bool
	// Optional: a refusal leaves it out (Plan.Refused) as Options.SkipRefused does,
	// without failing the plan (probes the rewrite made up itself, --calls).
	Optional bool
}

// Mode is how a probepoint runs its instruction, as kprobes lists it (Point.Mode).
type Mode uint8

const (
	ModeK Mode = iota // single-step the copy (or emulate loop/jrcxz), post handlers after
	ModeB             // boosted: the copy runs followed by a jmp back, or the branch is emulated
	ModeO             // jump-optimized: the DCR becomes a jmp rel32 to a detour buffer
)

func (m Mode) String() string {
	switch m {
	case ModeB:
		return "b"
	case ModeO:
		return "o"
	}
	return "k"
}

// Options tune Plan.
type Options struct {
	NoBoost     bool // every point single-steps (k, r): --no-boost
	SkipRefused bool // leave refused probes out (Plan.Refused) instead of failing
	// NoOptimize keeps every point an int3 (--no-optimize); otherwise every point
	// whose site the analysis says optimize, and that has no post handler, is
	// jump-optimized.
	NoOptimize bool
	// VerifyRegions (--verify-regions): every point that would be jump-optimized is
	// instead a boosted int3 whose slot runs the whole relocated DCR, and every other
	// byte of its DCR gets an int3 (Plan.Inner) whose hit the runtime reports as a
	// violation.
	VerifyRegions bool
	// Exclude lists code where no probe may go (--exclude): probes there are refused,
	// and no DCR may reach into it.
	Exclude []Range
	// OptimizedOnly refuses every probe that cannot be jump-optimized (or, with
	// VerifyRegions, that would not be): for programs that take SIGTRAP over (Go's
	// runtime installs its own handler), where an int3 probe would kill them.
	OptimizedOnly bool
	// Int3Step (--single-step int3) ends the out-of-line copy of a single-stepped,
	// boostable instruction with an int3 instead of single-stepping it with the trap
	// flag (the kernel's x86 kprobes do so since 5.15): two int3 traps per hit instead of
	// a trap and a debug exception, ~2.7x cheaper here. The default is the trap flag,
	// as kprobes.rst describes "k".
	Int3Step bool
	// CountExits (--count-only): a return probe of a function whose returns the analysis
	// can all see (analysis.Exits) is counted at them instead of hooking the return
	// address: one count-only point per ret or tail call, no entry point. Its points
	// have Point.Exit; a function where one of them cannot be jump-optimized keeps the
	// usual return probe.
	CountExits bool
	// ExitsOnly (with CountExits or TraceExits) refuses the return probes that cannot be
	// counted or recorded at their exits (RuleNotExits) instead of hooking their return
	// addresses; with TraceExits also those with a tail call (hooked there).
	ExitsOnly bool
	// TraceExits (--exits): as CountExits, for return probes that write records: a
	// function whose exits the analysis sees gets a jump-optimized point per exit
	// (Point.Exit, Point.ExitInsn), whose detour runs the code before the exit
	// instruction and then, at a ret, records the return with the registers of the
	// ret, or, at a tail call, hooks the return address (the callee returns through
	// the trampoline, whose record comes after the callee's). A request with
	// Request.NoExit keeps hooking at its entry.
	TraceExits bool
}

// RuleNotExits is the reason a return probe is refused with Options.ExitsOnly.
const RuleNotExits = "not-exits"

// RuleNotOptimized is the reason a probe is refused with Options.OptimizedOnly.
const RuleNotOptimized = "not-optimized"

// Point is one probepoint: an instruction whose first byte becomes int3, and every
// probe on it.
type Point struct {
	// Point is the probepoint as the runtime's tables hold it (struct kprw_point): the
	// site, its original bytes (Orig, InsnLen) and how the runtime executes it
	// (XMode, EmuOp, EmuCC, Target, RetImm, PFlags). The plan fills these; the
	// rewriter adds what placement decides, the slot's address and length, and the
	// probes.
	kprt.Point
	Func *elfio.Func

	// Boosted: an emulated instruction (XEmulate) that counts as boosted ("b"),
	// as every boosted copy does; without it, it is single-stepped ("k").
	Boosted bool

	// NeedsSlot: the point's copy runs in an out-of-line slot (not for XEmulate,
	// jump-optimized or Verify points), made with SlotOpt.
	NeedsSlot bool
	SlotOpt   trampolines.SlotOptions

	// Jump-optimized points and --verify-regions points (Verify): the DCR.
	DCR     []analysis.InstRef
	DCRLen  int    // bytes the jmp and its filler replace (a padding tail included)
	DCRCode []byte // original bytes of the DCR's whole instructions (no padding tail)
	// Redirects are the jumps into the DCR's interior that go instead to a relocated
	// copy of the DCR's rest (analysis.Redirect): the rewriter makes the copies and
	// replaces each jump's placeholder edit (SetRedirectJmp).
	Redirects []analysis.Redirect
	// Verify: a would-be-optimized point in --verify-regions mode. It is XBoost, and
	// its slot (made by the rewriter) is the relocated DCR then a jmp to Site+DCRLen;
	// its inner bytes are in Plan.Inner.
	Verify bool

	Requests []int // indices of its requests, in request order
	// Exit: a count-only point where the function of its requests (return probes,
	// Options.CountExits) returns: a ret, the straight-line code before one, or a tail
	// call. It counts the return probes' hits. With Options.TraceExits its return
	// probes record there, and ExitInsn is the ret the site leads to (the site itself,
	// or after straight-line code the detour runs first); at a tail call (ExitTail),
	// the jmp, before which they hook the return address, as their function's entry
	// would have.
	Exit     bool
	ExitInsn uint64
	ExitTail bool
	// Withheld: a live point (Withhold): its site keeps the original bytes in the
	// output; the runtime writes its int3 or jmp while some probe on it is enabled, and
	// an int3 on its first byte while it writes a jmp (so it needs the SIGTRAP handler).
	Withheld bool
}

// Optimized reports whether the point is jump-optimized.
func (pt *Point) Optimized() bool { return pt.XMode == kprt.XOptimized }

// Mode is the point's kind in kprobes' list: single-stepped, boosted or
// jump-optimized.
func (pt *Point) Mode() Mode {
	switch {
	case pt.XMode == kprt.XOptimized:
		return ModeO
	case pt.XMode == kprt.XBoost, pt.XMode == kprt.XEmulate && pt.Boosted:
		return ModeB
	}
	return ModeK
}

// DCROptions is how the instructions of a DCR of f are relocated, for detours and
// --verify-regions slots alike: a call ending the DCR pushes its original return
// address (RIP-relatively in a PIE, whose addresses move at load time), so the callee
// returns to the original code after the DCR.
func DCROptions(f *elfio.File) trampolines.Options {
	return trampolines.Options{CallPushJmp: true, PIC: f.IsPIE()}
}

// Inner is an inner byte of a would-be DCR in --verify-regions mode: an int3 whose
// hit is a violation (control reached a byte a jmp would have overwritten).
type Inner struct {
	Addr  uint64 // the byte
	Point int    // index in Plan.Points of the would-be-optimized point
	Off   int    // Addr - the point's Site
	// Boundary: a DCR instruction starts here, so execution can go on in the
	// relocated copy from that instruction; otherwise the runtime can only report.
	Boundary bool
	// Int3: the byte gets an int3 edit; false when the original byte is already an
	// int3 (padding), which traps by itself.
	Int3 bool
}

// Refusal is a request left out with Options.SkipRefused.
type Refusal struct {
	Request int
	Site    analysis.Site
	Err     error
}

// Plan is the set of probepoints for a list of requests.
type Plan struct {
	Requests []Request
	Sites    []analysis.Site // per request: the analysis
	PointOf  []int           // per request: index in Points, -1 when refused
	Points   []Point         // sorted by Site
	Inner    []Inner         // --verify-regions: inner DCR bytes, sorted by Addr
	Refused  []Refusal
	// LiveInt3: the image takes int3s placed while it runs at sites no point holds
	// (free live points, kprewrite probe): the signal guard is needed as for an int3
	// point.
	LiveInt3 bool
	// patcher holds the edits until committed: one int3 per int3 point and inner
	// byte, and for each jump-optimized point (and each entry the static signal guard
	// redirects) a placeholder over its whole DCR that the rewriter replaces with the
	// real jmp (SetSiteJmp, SetEntryJmp) once the target's address is known.
	patcher *Patcher
}

// Commit returns the plan's edits of the original code, sorted by address; the plan
// takes no more edits.
func (pl *Plan) Commit() []elfio.Patch { return pl.patcher.Commit() }

// Withhold drops the site edit of point pi (its int3, or a jump-optimized point's jmp,
// which SetSiteJmp then leaves out), whose site then keeps its original bytes in the
// output: a live point, which the runtime arms by writing the edit itself. A jump's
// redirected jumps into the DCR keep theirs: the copies they reach run the same code.
func (pl *Plan) Withhold(pi int) error {
	pt := &pl.Points[pi]
	if pt.Verify || pt.Exit {
		return fmt.Errorf("%w %#x: a --verify-regions or exit point's edits cannot be withheld", ErrEdit, pt.Site)
	}
	if err := pl.patcher.Undo(pt.Site); err != nil {
		return err
	}
	pt.Withheld = true
	return nil
}

// AddEdits records edits of the file's own structures that the rewrite makes besides
// its probes (the dynamic section's entries, the GNU property note's shadow-stack
// bit; what names them in errors), so that every edit of the original bytes is the
// plan's: checked against the others and listed by Edits.
func (pl *Plan) AddEdits(what string, ps []elfio.Patch) error {
	return addEdits(pl.patcher, what, ps)
}

// addEdits writes ps through p.
func addEdits(p *Patcher, what string, ps []elfio.Patch) error {
	for _, e := range ps {
		if err := p.Write(e.Addr, e.Bytes); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// Edits returns the edits recorded so far, for inspection.
func (pl *Plan) Edits() []Edit { return pl.patcher.Edits() }

// SetSiteJmp replaces the placeholder edit of jump-optimized point pi with b (the
// jmp rel32 to its detour and filler, DCRLen bytes).
func (pl *Plan) SetSiteJmp(pi int, b []byte) error {
	pt := &pl.Points[pi]
	if !pt.Optimized() || len(b) != pt.DCRLen {
		return fmt.Errorf("%w %#x: %d bytes for a point of mode %v with a %d-byte DCR", ErrEdit, pt.Site, len(b), pt.Mode(), pt.DCRLen)
	}
	if pt.Withheld {
		return nil // a live point: the runtime writes the jmp
	}
	return pl.patcher.Replace(pt.Site, b)
}

// SetRedirectJmp replaces the placeholder edit of redirect k of point pi with b (the
// redirected jmp or jcc, Edit bytes).
func (pl *Plan) SetRedirectJmp(pi, k int, b []byte) error {
	pt := &pl.Points[pi]
	if k >= len(pt.Redirects) || len(b) != pt.Redirects[k].Edit {
		return fmt.Errorf("%w: %d bytes for redirect %d of the point at %#x", ErrEdit, len(b), k, pt.Site)
	}
	return pl.patcher.Replace(pt.Redirects[k].From, b)
}

// Kind returns the kprobes list kind of request i: "k", "b" (boosted), "o"
// (jump-optimized), "r", "rb" or "ro".
func (pl *Plan) Kind(i int) string {
	pi := pl.PointOf[i]
	if pi < 0 {
		return ""
	}
	k := pl.Points[pi].Mode().String()
	if pl.Requests[i].Return {
		if k == "k" {
			return "r"
		}
		return "r" + k
	}
	return k
}

// planner plans the points of one list of requests: what every step reads (the
// analysis, the options, the excluded code, the requests' sorted addresses) and the
// plan it fills.
type planner struct {
	b       *analysis.Binary
	opt     Options
	excl    []Range
	addrs   []uint64 // every request's address, sorted, distinct
	refused []bool   // per request: the analysis (or --exits-only) refuses it
	// sites are the points' sites, sorted, and claim the bytes each may take from its
	// site (its longest DCR, at least the int3): a jump another point redirects must
	// not lie in them (placeAll fills both)
	sites []uint64
	claim map[uint64]int
	pl    *Plan
}

// MakePlan checks every request with the analysis and groups them into probepoints.
//
// Several probes whose sites fall inside one DCR are planned deliberately, as the
// kernel does: a point whose DCR interior holds another point's site is never
// jump-optimized (the analysis' other-probe-in-dcr rule, and a check here over the
// final sites), so the later probe may be optimized and the earlier one stays an
// int3 whose slot jumps back before the later one's jmp. No probe is ever left in
// bytes a jmp overwrote.
//
// The steps: every request is checked (checkSites); the return probes counted at
// their exits are chosen (planExits), once, so that each exit site can be
// jump-optimized; the requests are grouped by site, and each point is placed by the
// first placement tactic that applies (place).
func MakePlan(b *analysis.Binary, reqs []Request, opt Options) (*Plan, error) {
	p := &planner{b: b, opt: opt, excl: normalizeRanges(opt.Exclude), refused: make([]bool, len(reqs))}
	p.pl = &Plan{
		Requests: append([]Request(nil), reqs...),
		Sites:    make([]analysis.Site, len(reqs)),
		PointOf:  make([]int, len(reqs)),
		patcher:  NewPatcher(b.File.Bytes),
	}
	p.addrs = make([]uint64, len(reqs))
	for i, r := range reqs {
		p.addrs[i] = r.Addr
	}
	slices.Sort(p.addrs)
	p.addrs = slices.Compact(p.addrs)
	p.checkSites()
	ex := p.planExits()
	bySite, err := p.group(ex)
	if err != nil {
		return nil, err
	}
	if err := p.placeAll(bySite, ex); err != nil {
		return nil, err
	}
	pl := p.pl
	if err := pl.checkRegions(); err != nil {
		return nil, err
	}
	sort.Slice(pl.Refused, func(i, j int) bool { return pl.Refused[i].Request < pl.Refused[j].Request })
	return pl, nil
}

// check runs the analysis on request i with the probes at others around it.
func (p *planner) check(i int, others []uint64, noRedirect bool) analysis.Site {
	r := p.pl.Requests[i]
	return p.b.Check(analysis.SiteRequest{Addr: r.Addr, Return: r.Return, NeedPostHandler: r.NeedPost, OtherProbes: neighbours(others, r.Addr), NoRedirect: noRedirect})
}

// checkSites fills Plan.Sites and p.refused: the analysis of every request, with the
// excluded code refused.
func (p *planner) checkSites() {
	pl := p.pl
	anyRefused := false
	for i, r := range pl.Requests {
		s := p.check(i, p.addrs, false)
		if rg, ok := excludedBy(p.excl, min(s.Addr, r.Addr), max(s.Addr, r.Addr)+1); ok {
			s.Verdict = analysis.Refuse
			s.Reasons = append(s.Reasons, analysis.Reason{Rule: RuleExcluded, Addr: s.Addr,
				Detail: fmt.Sprintf("the site is in code excluded by --exclude %s (%#x..%#x)", rg.Pattern, rg.Lo, rg.Hi)})
		}
		pl.Sites[i] = s
		p.refused[i] = s.Verdict == analysis.Refuse
		anyRefused = anyRefused || p.refused[i]
	}
	// A refused probe leaves no point: it must not keep a neighbour from being
	// optimized. Check again those whose verdict another probe lowered.
	if anyRefused { // (without SkipRefused, group fails on a refused request that is not Optional)
		var kept []uint64
		for i, r := range pl.Requests {
			if !p.refused[i] {
				kept = append(kept, r.Addr)
			}
		}
		slices.Sort(kept)
		kept = slices.Compact(kept)
		for i := range pl.Requests {
			if !p.refused[i] && pl.Sites[i].Has(analysis.RuleOtherProbe) {
				pl.Sites[i] = p.check(i, kept, false)
			}
		}
	}
}

// group refuses what the analysis (or --exits-only) refuses and returns the requests
// of each site: a request's own site, or each of its exit sites.
func (p *planner) group(ex exitPlan) (map[uint64][]int, error) {
	pl := p.pl
	notExits := map[int]error{}
	for i, why := range ex.whyNot {
		s := &pl.Sites[i]
		switch {
		case pl.Requests[i].Go:
			notExits[i] = fmt.Errorf("%s: %w at %#x (%s): %s (a Go function, whose return address is never hooked: "+
				"Go's stack copying and unwinder fail on it): %s", pl.Requests[i].Name, ErrRefused, s.Addr, s.FuncName, RuleNotExits, why)
		case p.opt.ExitsOnly:
			notExits[i] = fmt.Errorf("%s: %w at %#x (%s): %s (--exits-only): %s", pl.Requests[i].Name, ErrRefused, s.Addr, s.FuncName, RuleNotExits, why)
		default:
			continue
		}
		p.refused[i] = true
	}
	for i, r := range pl.Requests {
		pl.PointOf[i] = -1
		if !p.refused[i] {
			continue
		}
		s := &pl.Sites[i]
		err := refusal(r, s)
		if e, ok := notExits[i]; ok {
			err = e
		}
		if !p.opt.SkipRefused && !r.Optional {
			return nil, err
		}
		pl.Refused = append(pl.Refused, Refusal{Request: i, Site: *s, Err: err})
	}
	return p.bySite(ex), nil
}

// bySite returns the requests of each point's site, in request order: a request's
// own site, or each of its exit sites; refused requests (also those --exits-only
// refuses) have none.
func (p *planner) bySite(ex exitPlan) map[uint64][]int {
	pl := p.pl
	m := map[uint64][]int{}
	for i := range pl.Requests {
		if _, out := ex.whyNot[i]; p.refused[i] || (out && (p.opt.ExitsOnly || pl.Requests[i].Go)) {
			continue
		}
		if sites := ex.of[i]; len(sites) > 0 {
			for _, a := range sites {
				m[a] = append(m[a], i)
			}
			continue
		}
		m[pl.Sites[i].Addr] = append(m[pl.Sites[i].Addr], i)
	}
	return m
}

// placeAll makes the point of every site, in address order.
func (p *planner) placeAll(bySite map[uint64][]int, ex exitPlan) error {
	pl := p.pl
	sites := slices.Sorted(maps.Keys(bySite))
	p.sites, p.claim = sites, make(map[uint64]int, len(sites))
	for _, site := range sites {
		n := 1
		for _, i := range bySite[site] {
			n = max(n, pl.Sites[i].DCRLen)
		}
		if es, ok := ex.checks[site]; ok {
			n = max(n, es.DCRLen)
		}
		p.claim[site] = n
	}
	pl.Points = make([]Point, 0, len(sites)) // a Point is large: no doubling of the array
	for k, site := range sites {
		idx := bySite[site]
		next := uint64(0) // the next point's site, or 0
		if k+1 < len(sites) {
			next = sites[k+1]
		}
		var exit *analysis.Site
		if es, ok := ex.checks[site]; ok {
			exit = &es
			if j := stayingWithExit(idx, ex); j >= 0 {
				return fmt.Errorf("internal error: a probe stays at the exit site %#x of %s", site, pl.Requests[j].Name)
			}
		}
		pt, err := p.place(site, idx, next, exit)
		if err == nil {
			err = pl.edit(&pt, len(pl.Points))
		}
		if exit != nil && (err != nil || !(pt.Optimized() || pt.Verify)) {
			// planExits took only exit sites that can be jump-optimized
			if err == nil {
				_ = pl.patcher.Undo(pt.Site)
			}
			return fmt.Errorf("internal error: %s: the exit site %#x could not be jump-optimized (%v)", pl.Requests[idx[0]].Name, site, err)
		}
		if err != nil {
			if !p.opt.SkipRefused && slices.ContainsFunc(idx, func(i int) bool { return !pl.Requests[i].Optional }) {
				return err
			}
			for _, i := range idx {
				pl.Refused = append(pl.Refused, Refusal{Request: i, Site: pl.Sites[i], Err: err})
			}
			continue
		}
		for _, i := range idx {
			if pl.PointOf[i] < 0 {
				pl.PointOf[i] = len(pl.Points) // an exit-counted request: its first exit
			}
		}
		pl.Points = append(pl.Points, pt)
	}
	return nil
}

// edit records the byte edits of point pt, which becomes Points[pi]: an int3, or a
// placeholder over the DCR of a jump-optimized point (jmp to itself, then int3
// filler: never run, replaced by SetSiteJmp), or, in --verify-regions mode, int3s on
// the site and every inner byte. On error nothing of it stays recorded.
func (pl *Plan) edit(pt *Point, pi int) error {
	if err := pl.editSite(pt, pi); err != nil {
		return err
	}
	for k, r := range pt.Redirects {
		if err := pl.patcher.Write(r.From, trampolines.SitePlaceholder(r.Edit)); err != nil {
			for _, done := range pt.Redirects[:k] {
				_ = pl.patcher.Undo(done.From)
			}
			pl.undoSite(pt)
			return err
		}
	}
	return nil
}

// undoSite drops the edits editSite recorded for pt.
func (pl *Plan) undoSite(pt *Point) {
	_ = pl.patcher.Undo(pt.Site)
	if pt.Verify {
		for _, in := range pl.Inner {
			if in.Addr > pt.Site && in.Addr < pt.Site+uint64(pt.DCRLen) && in.Int3 {
				_ = pl.patcher.Undo(in.Addr)
			}
		}
		pl.Inner = slices.DeleteFunc(pl.Inner, func(in Inner) bool { return in.Addr > pt.Site && in.Addr < pt.Site+uint64(pt.DCRLen) })
	}
}

// editSite records the edits of pt's site (and, in --verify-regions mode, of its inner
// bytes).
func (pl *Plan) editSite(pt *Point, pi int) error {
	switch {
	case pt.Optimized():
		return pl.patcher.Write(pt.Site, trampolines.SitePlaceholder(pt.DCRLen))
	case pt.Verify:
		if err := pl.patcher.Int3(pt.Site); err != nil {
			return err
		}
		orig, err := pl.patcher.read(pt.Site, uint64(pt.DCRLen))
		if err != nil {
			_ = pl.patcher.Undo(pt.Site)
			return fmt.Errorf("%w %#x: %w", ErrEdit, pt.Site, err)
		}
		boundary := map[int]bool{}
		for _, in := range pt.DCR {
			boundary[int(in.Addr-pt.Site)] = true
		}
		var inner []Inner
		for off := 1; off < pt.DCRLen; off++ {
			in := Inner{Addr: pt.Site + uint64(off), Point: pi, Off: off, Boundary: boundary[off], Int3: orig[off] != Int3}
			if in.Int3 {
				if err := pl.patcher.Int3(in.Addr); err != nil {
					for _, done := range inner {
						if done.Int3 {
							_ = pl.patcher.Undo(done.Addr)
						}
					}
					_ = pl.patcher.Undo(pt.Site)
					return err
				}
			}
			inner = append(inner, in)
		}
		pl.Inner = append(pl.Inner, inner...)
		return nil
	}
	return pl.patcher.Int3(pt.Site)
}

// checkRegions is the invariant of multi-probe planning: no point's site and no
// other edit lies inside the DCR of a jump-optimized or verify point.
func (pl *Plan) checkRegions() error {
	for i := range pl.Points {
		pt := &pl.Points[i]
		if !pt.Optimized() && !pt.Verify {
			continue
		}
		end := pt.Site + uint64(pt.DCRLen)
		if i+1 < len(pl.Points) && pl.Points[i+1].Site < end {
			return fmt.Errorf("internal error: the probe at %#x is inside the %d-byte DCR of the probe at %#x", pl.Points[i+1].Site, pt.DCRLen, pt.Site)
		}
	}
	return nil
}

// neighbourSpan bounds where another probe can matter to a site's verdict (rule 6:
// inside the region a jmp would overwrite, at most 15 bytes past an endbr64).
const neighbourSpan = 64

// neighbours returns the addresses of sorted near addr (other than addr), so that
// checking n probes stays O(n log n).
func neighbours(sorted []uint64, addr uint64) []uint64 {
	lo := addr - min(addr, neighbourSpan)
	i, _ := slices.BinarySearch(sorted, lo)
	var out []uint64
	for ; i < len(sorted) && sorted[i] < addr+neighbourSpan; i++ {
		if sorted[i] != addr {
			out = append(out, sorted[i])
		}
	}
	return out
}

func refusal(r Request, s *analysis.Site) error {
	where := fmt.Sprintf("%#x", s.Addr)
	if s.Func != nil {
		where = fmt.Sprintf("%#x (%s+%#x)", s.Addr, s.Func.Name, s.Offset)
	}
	for _, reason := range s.Blocking() {
		return fmt.Errorf("%s: %w at %s: %s at %#x: %s", r.Name, ErrRefused, where, reason.Rule, reason.Addr, reason.Detail)
	}
	return fmt.Errorf("%s: %w at %s", r.Name, ErrRefused, where)
}

// pointCase is what the placement tactics of one point read.
type pointCase struct {
	s        analysis.Site // the analysis of the site (its first request's, or the exit's)
	code     []byte        // up to 16 original bytes at the site
	inst     x86dec.Inst   // the instruction there
	needPost bool          // a probe on it has a post handler: it is single-stepped
	optimize bool          // its DCR can become a jmp (optimizable filled the point's DCR)
}

// A tactic is one way to place a point: it reports whether it applies and, when it
// does, fills the point's execution fields (an error refuses the point). MakePlan
// tries them in order and takes the first that applies; the edits it then records
// are undone if they cannot all be made (Plan.edit).
type tactic func(pt *Point, c *pointCase, opt Options) (bool, error)

// tactics, best first: a jmp to a detour, the --verify-regions form of one, then the
// int3 ways from the cheapest: emulating the instruction, running its copy with a jmp
// back (boosted), single-stepping its copy.
var tactics = []tactic{jumpOptimize, verifyRegion, emulate, boost, singleStep}

// place decides how the point at site executes its instruction. next is the site of
// the following point (0 when none): a DCR reaching it cannot be replaced.
func (p *planner) place(site uint64, idx []int, next uint64, exit *analysis.Site) (Point, error) {
	pl := p.pl
	first := pl.Requests[idx[0]]
	c := pointCase{s: pl.Sites[idx[0]]}
	if exit != nil {
		c.s = *exit
	}
	s := &c.s
	pt := Point{Point: kprt.Point{Site: site}, Func: s.Func, Requests: idx, Exit: exit != nil}
	if exit != nil {
		pt.ExitInsn, pt.ExitTail = exit.ExitInsn, exit.TailCall
	}
	code, err := insnBytes(p.b.File, site, s.Func)
	if err != nil {
		return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
	}
	in, err := x86dec.Decode(code, site)
	if err != nil {
		return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
	}
	pt.Orig, pt.InsnLen, c.code, c.inst = bytes.Clone(code[:in.Len]), uint8(in.Len), code, in
	for _, i := range idx {
		c.needPost = c.needPost || pl.Requests[i].NeedPost
	}
	if len(s.Redirects) > 0 && p.redirectBlocked(site, s) {
		// a jump it would redirect is another point's or in excluded code: it blocks the
		// region (rule 3) as the kernel's does (exit sites are checked without redirects)
		for _, i := range idx {
			pl.Sites[i] = p.check(i, p.sites, true)
		}
		c.s = pl.Sites[idx[0]]
	}
	c.optimize = !p.opt.NoOptimize && !c.needPost && p.optimizable(&pt, s, idx, next)
	if s.SignalsBlocked != "" && (!c.optimize || p.opt.VerifyRegions) {
		return pt, fmt.Errorf("%s: %w at %#x: %s at %#x: %s: only a jump-optimized probe may go there", first.Name, ErrRefused, site,
			analysis.RuleSignalsBlocked, s.Addr, s.SignalsBlocked)
	}
	if !c.optimize && p.opt.OptimizedOnly {
		why := "the analysis' verdict is " + s.Verdict.String()
		for _, r := range s.Blocking() {
			why = fmt.Sprintf("%s at %#x: %s", r.Rule, r.Addr, r.Detail)
			break
		}
		if s.Verdict == analysis.Optimize {
			why = "its DCR reaches another probe or excluded code, or it needs a post handler"
		}
		return pt, fmt.Errorf("%s: %w at %#x: %s (--optimized-only): %s", first.Name, ErrRefused, site, RuleNotOptimized, why)
	}
	for _, t := range tactics {
		ok, err := t(&pt, &c, p.opt)
		if err != nil {
			return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
		}
		if ok {
			return pt, nil
		}
	}
	return pt, fmt.Errorf("internal error: %s: no way to place the probe at %#x", first.Name, site)
}

// jumpOptimize: the DCR becomes a jmp rel32 to a detour buffer.
func jumpOptimize(pt *Point, c *pointCase, opt Options) (bool, error) {
	if !c.optimize || opt.VerifyRegions {
		return false, nil
	}
	pt.XMode = kprt.XOptimized
	return true, nil
}

// verifyRegion (--verify-regions): a would-be-optimized point is a boosted int3 whose
// slot is the whole relocated DCR, with an int3 on every inner byte.
func verifyRegion(pt *Point, c *pointCase, opt Options) (bool, error) {
	if !c.optimize {
		return false, nil
	}
	pt.XMode, pt.Verify = kprt.XBoost, true
	return true, nil
}

// canBoost says whether the copy of the instruction may run without a trap after it.
func (c *pointCase) canBoost(opt Options) bool {
	return !opt.NoBoost && !c.needPost && (c.s.Boostable || c.s.Emulate)
}

// emulate: the runtime does what a relative branch, call, ret or loop does (loop and
// jrcxz always: their rel8 copies cannot run out of line).
func emulate(pt *Point, c *pointCase, opt Options) (bool, error) {
	boosted := c.canBoost(opt)
	if c.inst.Kind != x86dec.KindLoop && !(boosted && c.s.Emulate) {
		return false, nil
	}
	pt.XMode, pt.Boosted = kprt.XEmulate, boosted
	return true, setEmulation(pt, &c.inst, c.code)
}

// boost: the copy runs in its slot followed by a jmp back.
func boost(pt *Point, c *pointCase, opt Options) (bool, error) {
	if !c.canBoost(opt) {
		return false, nil
	}
	pt.XMode = kprt.XBoost
	pt.SlotOpt = trampolines.SlotOptions{JmpBack: true}
	return true, slotPoint(pt, c, opt)
}

// singleStep: the copy runs with the trap flag (or, with Options.Int3Step, an int3
// after it), post handlers after it.
func singleStep(pt *Point, c *pointCase, opt Options) (bool, error) {
	pt.XMode = kprt.XSStep
	pt.SlotOpt = trampolines.SlotOptions{JmpBack: true, Step: true}
	return true, slotPoint(pt, c, opt)
}

// slotPoint fills what a point whose copy runs in a slot needs: the branch flags the
// runtime fixes up after the copy by, and checks that the copy can be made.
func slotPoint(pt *Point, c *pointCase, opt Options) error {
	in, s := c.inst, &c.s
	pt.NeedsSlot = true
	switch in.Kind {
	case x86dec.KindCall, x86dec.KindCallIndirect:
		pt.PFlags |= kprt.PFCall | kprt.PFBranch
	case x86dec.KindJmp, x86dec.KindJcc, x86dec.KindRet, x86dec.KindJmpIndirect:
		pt.PFlags |= kprt.PFBranch
	}
	if isPushf(c.code, &in) {
		pt.PFlags |= kprt.PFPushf
	}
	// A copy that is neither boostable nor a plain branch must never run without the
	// trap flag: the slot then has no usable jmp back.
	if !s.Boostable && in.Kind != x86dec.KindJmp && in.Kind != x86dec.KindJcc && in.Kind != x86dec.KindRet {
		pt.PFlags |= kprt.PFNoBoost
	}
	// With Options.Int3Step, a single-stepped copy that could have been boosted (it
	// falls through) ends with an int3 instead of using the trap flag, as the kernel
	// single-steps kprobes since 5.15: two int3 traps per hit, ~2.7x cheaper here.
	if opt.Int3Step && pt.XMode == kprt.XSStep && s.Boostable && in.Kind == x86dec.KindOther && pt.PFlags&kprt.PFPushf == 0 {
		opt := trampolines.SlotOptions{Step: true, Int3End: true}
		if _, err := trampolines.SlotLen(c.code, pt.Site, opt); err == nil {
			pt.SlotOpt = opt
			pt.PFlags |= kprt.PFInt3Step
		}
	}
	_, err := trampolines.SlotLen(c.code, pt.Site, pt.SlotOpt)
	return err
}

// optimizable decides whether the point can be jump-optimized, and fills its DCR
// fields when it can: every probe on it got the optimize verdict, the DCR reaches
// no other point and no excluded code, and its instructions relocate.
func (p *planner) optimizable(pt *Point, s *analysis.Site, idx []int, next uint64) bool {
	for _, i := range idx {
		if !pt.Exit && p.pl.Sites[i].Verdict != analysis.Optimize {
			return false
		}
	}
	if s.Verdict != analysis.Optimize || next != 0 && next < pt.Site+uint64(s.DCRLen) {
		return false
	}
	code, ok := p.dcrCode(s)
	if !ok {
		return false
	}
	pt.DCR, pt.DCRLen, pt.DCRCode = slices.Clone(s.DCR), s.DCRLen, code
	pt.Redirects = slices.Clone(s.Redirects)
	return true
}

// redirectBlocked reports whether a jump that the point at site would redirect lies in
// bytes another point may take (its int3 or its DCR) or in excluded code: that point
// would copy or emulate the jump with its original target, inside the overwritten
// region.
func (p *planner) redirectBlocked(site uint64, s *analysis.Site) bool {
	for _, r := range s.Redirects {
		end := r.From + uint64(r.Edit)
		if _, ok := excludedBy(p.excl, r.From, end); ok {
			return true
		}
		i, _ := slices.BinarySearch(p.sites, r.From-min(r.From, neighbourSpan))
		for ; i < len(p.sites) && p.sites[i] < end; i++ {
			t := p.sites[i]
			if t != site && t+uint64(p.claim[t]) > r.From {
				return true
			}
		}
	}
	return false
}

// dcrCode returns the original bytes of the DCR of site s when it can become a jmp:
// at least 5 bytes starting at the site, no excluded code, and its instructions
// relocate.
func (p *planner) dcrCode(s *analysis.Site) ([]byte, bool) {
	if s.DCRLen < 5 || len(s.DCR) == 0 || s.DCR[0].Addr != s.Addr {
		return nil, false
	}
	end := s.Addr + uint64(s.DCRLen)
	if _, ok := excludedBy(p.excl, s.Addr, end); ok {
		return nil, false
	}
	last := s.DCR[len(s.DCR)-1]
	n := last.Addr + uint64(last.Len) - s.Addr
	if n > uint64(s.DCRLen) {
		return nil, false
	}
	code, err := p.b.File.Bytes(s.Addr, n)
	if err != nil {
		return nil, false
	}
	if _, err := trampolines.RegionLen(code, s.Addr, DCROptions(p.b.File)); err != nil {
		return nil, false
	}
	return bytes.Clone(code), true
}

// setEmulation fills the emulation fields of a relative branch, call or ret.
func setEmulation(pt *Point, in *x86dec.Inst, code []byte) error {
	op := code[in.OpcodeOff]
	pt.Target = in.Target
	switch in.Kind {
	case x86dec.KindJmp:
		pt.EmuOp = kprt.EmuJmp
	case x86dec.KindJcc:
		pt.EmuOp, pt.EmuCC = kprt.EmuJcc, op&0x0f
	case x86dec.KindCall:
		pt.EmuOp = kprt.EmuCall
	case x86dec.KindRet:
		pt.EmuOp, pt.Target = kprt.EmuRet, 0
		if op == 0xc2 {
			if in.ImmOff < 0 || in.ImmOff+2 > len(code) {
				return fmt.Errorf("ret imm16 without its immediate")
			}
			pt.RetImm = uint16(code[in.ImmOff]) | uint16(code[in.ImmOff+1])<<8
		}
	case x86dec.KindLoop:
		switch op {
		case 0xe0:
			pt.EmuOp = kprt.EmuLoopne
		case 0xe1:
			pt.EmuOp = kprt.EmuLoope
		case 0xe2:
			pt.EmuOp = kprt.EmuLoop
		case 0xe3:
			pt.EmuOp = kprt.EmuJrcxz
		default:
			return fmt.Errorf("loop opcode %#x", op)
		}
		for _, p := range code[:in.OpcodeOff] {
			if p == 0x67 {
				pt.PFlags |= kprt.PFAddr32
			}
		}
	default:
		return fmt.Errorf("%v cannot be emulated", in.Kind)
	}
	return nil
}

// isPushf reports a pushf (9c), whose pushed flags would show the trap flag after a
// single-step.
func isPushf(code []byte, in *x86dec.Inst) bool {
	return in.Enc == x86dec.EncLegacy && in.OpcodeOff == in.Len-1 && code[in.OpcodeOff] == 0x9c
}

// insnBytes returns up to 16 original bytes at addr, not past the function's end
// (or the segment's file image).
func insnBytes(f *elfio.File, addr uint64, fn *elfio.Func) ([]byte, error) {
	n := uint64(16)
	if fn != nil && fn.End() > addr && fn.End()-addr < n {
		n = fn.End() - addr
	}
	for ; n > 0; n-- {
		if b, err := f.Bytes(addr, n); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no file bytes at %#x", addr)
}
