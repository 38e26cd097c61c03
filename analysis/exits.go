package analysis

import (
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Exits finds where the function entered at entry returns, for counting its returns
// without hooking the return address (a --count-only return probe): one site per
// ret, each a place a count-only detour can go, so that every return of every call
// passes exactly one of them and nothing else does. others returns the other probes'
// addresses near an address (rule 6; nil: none).
//
// It answers only for functions whose control flow is closed, with their split
// fragments (gcc's .cold parts: separate FDEs that only this function jumps to, at
// their start or inside, and that nothing calls, takes the address of or exports), and
// otherwise returns the reason:
// nothing jumps out of them (a tail call, an indirect jmp of any kind would be an exit
// or a path to one that we do not see), nothing but the entry is entered from outside
// (no branch, jump-table entry, taken address or symbol inside them from elsewhere),
// and every ret has a site: the ret itself when padding follows it, or the
// straight-line instructions before it (no branch, call or target among them, so
// whoever reaches the site reaches the ret and nobody reaches the ret without passing
// the site), with the analysis' optimize verdict. A reason starts with its rule
// ("leaves-function: ...").
func (b *Binary) Exits(entry uint64, others func(addr uint64) []uint64) ([]Site, string) {
	return b.exits(entry, others, false)
}

// ExitsAfter is Exits for probes that run after the straight-line code between a site
// and its exit instruction (a traced return event recorded with the registers of the
// ret, rewrite --exits): that code may also hold a jcc leaving the range, whose taken
// path never reaches the ret (and passes another exit's site, or none), so that a site
// can start before a jcc that comes too close to the ret for a jmp after it.
func (b *Binary) ExitsAfter(entry uint64, others func(addr uint64) []uint64) ([]Site, string) {
	return b.exits(entry, others, true)
}

// exits is Exits and ExitsAfter: the function at entry must be clean, entered at its
// start (or just after an endbr64 there) and closed with its fragments; then each
// exit gets its site.
func (b *Binary) exits(entry uint64, others func(addr uint64) []uint64, after bool) ([]Site, string) {
	fi, why := b.exitsFunc(entry)
	if why != "" {
		return nil, why
	}
	w := &exitWalk{b: b, fn: &b.Funcs.List[fi], members: []int{fi}}
	if why := w.walk(); why != "" {
		return nil, why
	}
	if why := w.enteredInside(); why != "" {
		return nil, why
	}
	if len(w.exits) == 0 {
		return nil, fmt.Sprintf("no-ret: %s never returns", w.fn.Name)
	}
	sites := make([]Site, 0, len(w.exits))
	for _, r := range w.exits {
		s, why := b.exitSite(r.fc.idx, r.fc, r.k, others, after)
		if why != "" {
			return nil, why
		}
		sites = append(sites, s)
	}
	return sites, ""
}

// exitsFunc finds the function entered at entry, refusing one that does not decode
// cleanly, that an indirect jmp may land in, or whose entry is not entry.
func (b *Binary) exitsFunc(entry uint64) (int, string) {
	fi := b.funcAt(entry)
	if fi < 0 {
		return -1, "no-function: no function holds the entry"
	}
	fn := &b.Funcs.List[fi]
	info := &b.info[fi]
	if !info.clean() {
		return -1, fmt.Sprintf("not-clean: %s does not decode cleanly (%s at %#x)", fn.Name, info.badRule, info.badAddr)
	}
	if info.poison != nil {
		return -1, fmt.Sprintf("indirect-jump: an indirect jmp at %#x may land inside %s", info.poison.addr, fn.Name)
	}
	lo := fn.Addr
	if entry != lo {
		// an entry endbr64: the probe's site is after it
		if in, err := x86dec.DecodeFast(b.code(lo, fn.End()-lo), lo); err != nil || !in.Endbr || lo+uint64(in.Len) != entry {
			return -1, fmt.Sprintf("not-entry: %#x is not the entry of %s", entry, fn.Name)
		}
	}
	return fi, ""
}

// exitWalk is the function's closure as exits builds it: the function and its
// fragments (gcc's .cold parts, separate FDEs in a stripped binary: starts that it
// jumps to and that nothing calls, takes the address of or exports), their code in
// the same order, and the exits found so far.
type exitWalk struct {
	b       *Binary
	fn      *elfio.Func
	members []int
	fcs     []*fcode
	exits   []exitInsn
}

// exitInsn is an exit of the function: a ret or a tail call, fc.insts[k].
type exitInsn struct {
	fc *fcode
	k  int
}

// in is the member holding a, else -1.
func (w *exitWalk) in(a uint64) int {
	for _, m := range w.members {
		if a >= w.b.Funcs.List[m].Addr && a < w.b.Funcs.List[m].End() {
			return m
		}
	}
	return -1
}

// join decides a target outside the members: a fragment joins them (nil), else why
// not.
func (w *exitWalk) join(from uint64, kind string, t uint64) error {
	// (a target inside a fragment, not at its start, joins it too: gcc's .cold parts
	// are entered at many places; whatever else enters it is checked below)
	g := w.b.funcAt(t)
	if g < 0 || w.b.referenced[g].Load() {
		return fmt.Errorf("leaves-function: %s at %#x leaves %s for %#x", kind, from, w.fn.Name, t)
	}
	if len(w.members) >= 16 {
		return fmt.Errorf("leaves-function: %s has more than 16 fragments", w.fn.Name)
	}
	w.members = append(w.members, g)
	return nil
}

// walk goes through the members' code, the list growing as fragments join: every
// jump stays inside, joins a fragment or is a tail call; every exit is noted.
func (w *exitWalk) walk() string {
	for n := 0; n < len(w.members); n++ {
		m := w.members[n]
		mf := &w.b.Funcs.List[m]
		mi := &w.b.info[m]
		if n > 0 && (!mi.clean() || mi.poison != nil) {
			return fmt.Sprintf("not-clean: %s, a fragment of %s, does not decode cleanly or may be entered by an indirect jmp", mf.Name, w.fn.Name)
		}
		fc := w.b.loadFunc(m)
		w.fcs = append(w.fcs, fc)
		for k := range fc.insts {
			if why := w.insn(fc, mi, k); why != "" {
				return why
			}
		}
	}
	return ""
}

// insn decides fc.insts[k] (mi is its member's info): a jump that leaves the
// members is refused unless a fragment joins or it is a tail call (an exit), a far
// transfer is refused, a call inside the members but to the entry is refused, a
// ret is an exit.
func (w *exitWalk) insn(fc *fcode, mi *funcInfo, k int) string {
	x := &fc.insts[k]
	c := &x.in
	switch c.Kind {
	case x86dec.KindJmp, x86dec.KindJcc, x86dec.KindLoop, x86dec.KindXbegin:
		// (a jmp back to the entry, a loop at the entry, self tail recursion,
		// Go's restart after growing the stack, stays in the same call: it returns
		// once, and is counted once, where a hooked return address would be hooked
		// again at each pass through the entry)
		if w.in(c.Target) >= 0 {
			return ""
		}
		err := w.join(x.addr, c.Kind.String(), c.Target)
		if err == nil {
			return ""
		}
		// a tail call: the jmp is an exit (the callee returns to our caller)
		if _, start := w.b.startIndex(c.Target); c.Kind != x86dec.KindJmp || !start {
			return err.Error()
		}
		w.exits = append(w.exits, exitInsn{fc, k})
	case x86dec.KindJmpIndirect:
		return w.indirectJump(fc, mi, k)
	case x86dec.KindJmpFar, x86dec.KindRetFar, x86dec.KindIret:
		return fmt.Sprintf("indirect-jump: %s at %#x", c.Kind, x.addr)
	case x86dec.KindCall:
		if w.in(c.Target) >= 0 && c.Target != w.fn.Addr {
			return fmt.Sprintf("call-inside: call at %#x targets %#x, inside %s", x.addr, c.Target, w.fn.Name)
		}
	case x86dec.KindRet:
		w.exits = append(w.exits, exitInsn{fc, k})
	}
	return ""
}

// indirectJump decides the indirect jmp fc.insts[k]: through a pointer it is a tail
// call (an exit); through a jump table that reads again, its targets stay inside or
// join as fragments; any other is refused.
func (w *exitWalk) indirectJump(fc *fcode, mi *funcInfo, k int) string {
	x := &fc.insts[k]
	class := ijUnresolved
	for _, ij := range mi.jumps {
		if ij.addr == x.addr {
			class = ij.class
		}
	}
	switch class {
	case ijPointer: // a tail call through a pointer
		w.exits = append(w.exits, exitInsn{fc, k})
	case ijTable:
		t, ok := w.b.matchTable(fc, k)
		if !ok {
			return fmt.Sprintf("indirect-jump: the jump table at %#x does not read again", x.addr)
		}
		for _, dst := range t.targets {
			if w.in(dst) < 0 {
				if err := w.join(x.addr, "jump table", dst); err != nil {
					return err.Error()
				}
			}
		}
	default:
		return fmt.Sprintf("indirect-jump: jmp at %#x: its targets are unknown", x.addr)
	}
	return ""
}

// enteredInside checks that nothing from outside enters the members but through the
// entry: no branch or jump-table entry from elsewhere, no call, no taken address of
// an instruction inside them (a fragment's start included).
func (w *exitWalk) enteredInside() string {
	for n, m := range w.members {
		mf := &w.b.Funcs.List[m]
		from := mf.Addr + 1
		if n > 0 {
			from = mf.Addr // a fragment's start too
		}
		// the lowest such edge (the index's chunks come from parallel workers: the
		// first one found is not the same from run to run)
		var first *edge
		w.b.edges.in(from, mf.End(), func(e *edge) bool {
			if (e.kind == ekBranch || e.kind == ekTable) && w.in(e.src) >= 0 {
				return true
			}
			if (e.kind == ekData || e.kind == ekImm) && !w.fcs[n].isInsn(e.dst) {
				return true // a number inside an instruction, no code address (as in check)
			}
			if first == nil || e.dst < first.dst || e.dst == first.dst && (e.src < first.src || e.src == first.src && e.kind < first.kind) {
				first = e
			}
			return true
		})
		if e := first; e != nil {
			if e.kind == ekBranch || e.kind == ekTable || e.kind == ekCall {
				return fmt.Sprintf("entered-inside: code at %#x jumps to %#x, inside %s", e.src, e.dst, w.fn.Name)
			}
			return fmt.Sprintf("address-taken-inside: %#x, inside %s, is a taken address (%s at %#x)", e.dst, w.fn.Name, e.kind, e.src)
		}
	}
	return ""
}

// exitSite finds the count site of the exit fc.insts[k], a ret or a tail call (see Exits).
func (b *Binary) exitSite(fi int, fc *fcode, k int, others func(addr uint64) []uint64, after bool) (Site, string) {
	ret := &fc.insts[k]
	end := ret.addr + uint64(ret.in.Len)
	try := func(at uint64) (Site, bool) {
		var near []uint64
		if others != nil {
			near = others(at)
		}
		s := b.check(fi, SiteRequest{Addr: at, OtherProbes: near, NoRedirect: true})
		s.ExitInsn, s.TailCall = ret.addr, ret.in.Kind != x86dec.KindRet
		if s.Verdict != Optimize || s.Addr != at {
			return s, false
		}
		// whatever the DCR does not cover up to the ret must not be a target either
		if dcrEnd := at + uint64(s.DCRLen); dcrEnd < end && b.edges.any(dcrEnd, end) {
			return s, false
		}
		// nor where an exception lands (a caught one goes on to the ret)
		if len(b.padsIn(at+1, end)) > 0 {
			return s, false
		}
		return s, true
	}
	if s, ok := try(ret.addr); ok {
		return s, "" // the ret, and padding after it
	}
	n := ret.in.Len
	for j := k - 1; j >= 0 && n < jmpLen; j-- {
		in := &fc.insts[j]
		if in.addr+uint64(in.in.Len) != fc.insts[j+1].addr {
			break
		}
		// (after: a jcc whose target is outside the range; the targets inside it are
		// refused below, instruction by instruction)
		jccOut := after && in.in.Kind == x86dec.KindJcc && (in.in.Target < in.addr || in.in.Target >= end)
		if (in.in.Kind != x86dec.KindOther || !in.in.fall) && !jccOut {
			return Site{}, fmt.Sprintf("ret-site: the %s at %#x follows a %s at %#x too closely for a jmp", ret.in.Kind, ret.addr, in.in.Kind, in.addr)
		}
		if t := fc.insts[j+1].addr; b.edges.any(t, t+1) {
			// a jump lands there: a site may start there (what jumps in runs the
			// detour as what falls in does) when the bytes from it through the ret and
			// the padding after it have room for the jmp
			if s, ok := try(t); ok {
				return s, ""
			}
			return Site{}, fmt.Sprintf("ret-site: the %s at %#x: %#x before it is a branch target", ret.in.Kind, ret.addr, t)
		}
		n += in.in.Len
		if n >= jmpLen {
			if s, ok := try(in.addr); ok {
				return s, ""
			}
			return Site{}, fmt.Sprintf("ret-site: the %s at %#x: the site %#x before it cannot be jump-optimized", ret.in.Kind, ret.addr, in.addr)
		}
	}
	return Site{}, fmt.Sprintf("ret-site: the %s at %#x has no room for a jmp before it", ret.in.Kind, ret.addr)
}

// Referenced reports whether the function starting at addr is called, has its address
// taken or is exported somewhere: a function proper. A start that is only jumped to is
// a fragment of another function's code (a .cold part, a shared epilogue with an FDE of
// its own in a stripped binary) or a function reached only by tail calls; at a
// fragment's start the word at the stack pointer is not a return address.
func (b *Binary) Referenced(addr uint64) bool {
	i, ok := b.startIndex(addr)
	return ok && b.referenced[i].Load()
}

// ExitRule is a reason a return probe cannot be counted or recorded at its function's
// exits (Exits, ExitsAfter): the reason string starts with its id.
type ExitRule struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// ExitRules lists the reasons Exits and ExitsAfter give, and the planner's tail-call
// reason under --exits --exits-only (docs/rules.md).
var ExitRules = []ExitRule{
	{ID: "no-function", Text: "no function holds the entry"},
	{ID: "not-clean", Text: "the function, or one of its fragments, does not decode cleanly, or may be entered by an indirect jmp"},
	{ID: "not-entry", Text: "the address is not the function's entry (an endbr64 may come first)"},
	{ID: "indirect-jump", Text: "an indirect jmp whose targets are unknown, a far jmp, a far ret or an iret"},
	{ID: "leaves-function", Text: "a jump leaves the function for code that is not an unreferenced fragment of it (gcc's `.cold` parts join, entered at their start or inside), or more than 16 fragments"},
	{ID: "call-inside", Text: "a call targets the function's own code (not its entry)"},
	{ID: "entered-inside", Text: "code outside the function (and its fragments) jumps inside it"},
	{ID: "address-taken-inside", Text: "an address inside the function is taken (lea, immediate, data word, relocation, symbol; a data word or immediate inside an instruction is a number, not an address)"},
	{ID: "no-ret", Text: "the function never returns"},
	{ID: "ret-site", Text: "an exit has no room for a jump-optimized site: the straight-line code before its ret or tail call is shorter than 5 bytes before a branch target (a site may start at the target itself when the target, the ret and the padding after it hold 5 bytes), a call, a jmp or another exit (with `--exits` a jcc leaving the range may be part of it: the record is written after that code ran)"},
	{ID: "tail-call", Text: "(`--exits --exits-only`) an exit is a tail call, where `--exits` hooks the return address so that the record follows the callee's"},
}
