package analysis

import (
	"fmt"

	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// jmpLen is the size of the jmp rel32 an optimized probe writes.
const jmpLen = 5

// maxPerRule bounds how many reasons of one rule a Site lists.
const maxPerRule = 8

// Check analyses one probe site.
func (b *Binary) Check(req SiteRequest) Site {
	s := Site{Requested: req.Addr, Addr: req.Addr}
	if !b.isCode(req.Addr) {
		s.refuse(RuleNotCode, req.Addr, "the address is not inside an executable section")
		return s
	}
	fi := b.funcAt(req.Addr)
	if fi < 0 {
		s.refuse(RuleNoFunction, req.Addr, fmt.Sprintf("the address is in %s but inside no known function", b.sec(req.Addr).name))
		return s
	}
	return b.check(fi, req)
}

// EntrySites checks every function entry (after endbr64 when present), in
// parallel, and returns the sites in function order.
func (b *Binary) EntrySites() []Site {
	out := make([]Site, len(b.Funcs.List))
	var next atomic.Int64
	var wg sync.WaitGroup
	const batch = 64
	for w := 0; w < b.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(batch) - batch)
				if lo >= len(out) {
					return
				}
				for i := lo; i < min(lo+batch, len(out)); i++ {
					out[i] = b.check(i, SiteRequest{Addr: b.Funcs.List[i].Addr})
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func (s *Site) add(rule string, addr uint64, detail string) {
	s.Reasons = append(s.Reasons, Reason{Rule: rule, Addr: addr, Detail: detail})
}

func (s *Site) note(rule string, addr uint64, detail string) {
	s.Reasons = append(s.Reasons, Reason{Rule: rule, Addr: addr, Detail: detail, Note: true})
}

func (s *Site) refuse(rule string, addr uint64, detail string) {
	s.Verdict = Refuse
	s.add(rule, addr, detail)
}

func (b *Binary) check(fi int, req SiteRequest) Site {
	fn := &b.Funcs.List[fi]
	info := &b.info[fi]
	s := Site{Requested: req.Addr, Addr: req.Addr, Func: fn, FuncName: fn.Name}
	code := b.code(fn.Addr, fn.Size)
	if code == nil {
		s.refuse(RuleDecodeError, fn.Addr, "function bytes are not inside one executable section")
		return s
	}
	// Rule 1: at an entry endbr64, probe after it (the kernel's
	// arch_adjust_kprobe_addr does the same).
	entry := fn.Addr
	if in, err := x86dec.DecodeFast(code, fn.Addr); err == nil && in.Endbr {
		entry += uint64(in.Len)
		if s.Addr == fn.Addr {
			s.Addr = entry
			s.note(RuleEndbrSkip, fn.Addr, fmt.Sprintf("%s starts with endbr64: the probe goes at %#x", fn.Name, entry))
		}
	}
	if why := b.goNoProbeReason(fn.Addr); why != "" {
		s.Offset = s.Addr - fn.Addr
		s.refuse(RuleGoNoProbe, s.Addr, why)
		return s
	}
	// Go: an entry probe after the stack check, which morestack restarts
	if s.Addr == fn.Addr && !req.Return {
		if at, why := b.goEntry(fn.Addr, fn.Name, code); why != "" {
			s.Addr = at
			s.note(RuleGoStackCheck, fn.Addr, why)
		}
	}
	s.Offset = s.Addr - fn.Addr
	if s.Addr >= b.copiedLo && s.Addr < b.copiedHi {
		s.refuse(RuleCopiedCode, s.Addr, fmt.Sprintf("%s is in %s", fn.Name, b.copiedWhat))
		return s
	}
	if req.Return && s.Addr != entry {
		s.refuse(RuleRetprobeEntry, s.Addr, fmt.Sprintf("return probes go at a function entry (%s at %#x)", fn.Name, entry))
		return s
	}
	if req.Return && (fn.Addr == b.File.Entry || entry == b.File.Entry) {
		s.refuse(RuleRetprobeStart, s.Addr, fmt.Sprintf("%s is the process entry point: it never returns, and (%%rsp) there is argc, which a return probe would overwrite", fn.Name))
		return s
	}
	s.SignalsBlocked = b.signalsBlocked(fi)
	// (a Go function's return goes at its exits: no instance to take)
	if req.Return && s.SignalsBlocked != "" && !b.IsGoCode(fn.Addr) {
		s.refuse(RuleSignalsBlocked, s.Addr, s.SignalsBlocked+": a return probe there would take its instance from the parent thread, whose memory the child shares")
		return s
	}
	if req.Return && b.IsGoCode(fn.Addr) {
		s.note(RuleGoReturn, s.Addr, fmt.Sprintf("%s is Go code: its return events go at its exits (recorded, or counted with --count-only), "+
			"never by hooking its return address, which Go's stack copying and unwinder reject; refused where the exits cannot take them", fn.Name))
	}
	if req.Return {
		if at, why, switched := b.returnSlotUse(fi, entry); switched {
			s.refuse(RuleStackSwitch, at, fmt.Sprintf("%s: %s; a return probe puts the trampoline's address in that word", fn.Name, why))
			return s
		} else if why != "" {
			s.refuse(RuleRetAddrUse, at, fmt.Sprintf("%s: %s; a return probe puts the trampoline's address there", fn.Name, why))
			return s
		}
		if name, why := b.noRetprobeReason(fn.Addr); why != "" {
			s.refuse(RuleNoRetprobe, s.Addr, fmt.Sprintf("%s: %s", name, why))
			return s
		}
	}
	if s.Addr >= fn.End() {
		s.refuse(RuleNotBoundary, s.Addr, fmt.Sprintf("%s ends at %#x", fn.Name, fn.End()))
		return s
	}
	// Rule 1: the site must be an instruction boundary of the decoded
	// function; a decoding failure at or before it leaves the boundary unknown.
	if !info.clean() && info.badAddr <= s.Addr {
		s.refuse(info.badRule, info.badAddr, fmt.Sprintf("%s (%s at %#x): instruction boundaries up to the site are not known", info.badDetail, fn.Name, info.badAddr))
		return s
	}
	off := 0
	for fn.Addr+uint64(off) < s.Addr {
		n, err := x86dec.Length(code[off:])
		if err != nil || n <= 0 {
			s.refuse(RuleDecodeError, fn.Addr+uint64(off), fmt.Sprintf("instruction at %#x does not decode: %v", fn.Addr+uint64(off), err))
			return s
		}
		if fn.Addr+uint64(off+n) > s.Addr {
			s.refuse(RuleNotBoundary, s.Addr, fmt.Sprintf("%#x is inside the %d-byte instruction at %#x", s.Addr, n, fn.Addr+uint64(off)))
			return s
		}
		off += n
	}
	in, err := x86dec.Decode(code[off:], s.Addr)
	if err != nil {
		s.refuse(RuleDecodeError, s.Addr, err.Error())
		return s
	}
	raw := code[off : off+in.Len]
	s.Insn = mnemonic(&in)
	if in.Kind == x86dec.KindInt3 {
		s.refuse(RuleExistingInt3, s.Addr, "the site already holds an int3 (a debugger breakpoint or a deliberate trap)")
		return s
	}
	if in.NoOutOfLine != "" {
		s.refuse(RuleUprobesRefuses, s.Addr, fmt.Sprintf("%s cannot run out of line: %s", s.Insn, in.NoOutOfLine))
		return s
	}
	if in.RIPRel && !fitsRel32(b.detourLo, b.detourHi, in.RIPTarget) {
		s.refuse(RuleRIPRelReach, s.Addr, fmt.Sprintf("the RIP-relative operand %#x is out of rel32 reach of the out-of-line slots at %#x..%#x", in.RIPTarget, b.detourLo, b.detourHi))
		return s
	}
	var whyNot string
	s.Boostable, whyNot = boostable(raw, &in)
	s.Emulate = emulated(in.Kind)

	b.optimizeBlockers(&s, fi, code, req)
	blocked := false
	for _, r := range s.Reasons {
		if !r.Note {
			blocked = true
		}
	}
	switch {
	case !blocked:
		s.Verdict = Optimize
	case req.NeedPostHandler:
		s.Verdict = SingleStep
	case s.Boostable:
		s.Verdict = Boost
	case s.Emulate:
		s.Verdict = Boost
		s.note(RuleEmulated, s.Addr, fmt.Sprintf("%s is emulated by the runtime", s.Insn))
	default:
		s.Verdict = SingleStep
		s.add(RuleNotBoostable, s.Addr, fmt.Sprintf("%s: %s", s.Insn, whyNot))
	}
	if s.Verdict != Optimize {
		s.Redirects = nil
	}
	if s.SignalsBlocked != "" {
		if s.Verdict != Optimize {
			s.refuse(RuleSignalsBlocked, s.Addr, s.SignalsBlocked+": an int3 there would kill the process, and the site cannot be jump-optimized")
		} else {
			s.note(RuleSignalsBlocked, s.Addr, s.SignalsBlocked+": only a jump-optimized probe may go here (not with --no-optimize)")
		}
	}
	return s
}

func mnemonic(in *x86dec.Inst) string {
	switch {
	case in.Endbr:
		return "endbr64"
	case in.Op == 0:
		return "(unnamed)"
	}
	return strings.ToLower(in.Op.String())
}

// optimizeBlockers adds every reason the site cannot be jump-optimized.
func (b *Binary) optimizeBlockers(s *Site, fi int, code []byte, req SiteRequest) {
	fn := &b.Funcs.List[fi]
	info := &b.info[fi]
	addr := s.Addr
	if req.NeedPostHandler {
		s.add(RulePostHandler, addr, "the probe has a post_handler, which runs after a single-step (kprobes never optimizes such probes)")
	}
	if !info.clean() {
		s.add(info.badRule, info.badAddr, fmt.Sprintf("%s: %s does not decode cleanly, so it cannot be jump-optimized", info.badDetail, fn.Name))
	}

	// Rule 2 and 7: the DCR.
	end := fn.End()
	pc := addr
	total := 0
	for total < jmpLen {
		if pc >= end {
			s.add(RuleDCRCrossesFunc, pc, fmt.Sprintf("%s ends at %#x, %d bytes after the site; the jmp needs %d", fn.Name, end, total, jmpLen))
			break
		}
		in, err := x86dec.Decode(code[pc-fn.Addr:], pc)
		if err != nil {
			s.add(RuleDecodeError, pc, err.Error())
			break
		}
		s.DCR = append(s.DCR, InstRef{Addr: pc, Len: in.Len})
		total += in.Len
		b.dcrInsn(s, pc, &in, code[pc-fn.Addr:pc-fn.Addr+uint64(in.Len)], total >= jmpLen)
		pc += uint64(in.Len)
		if !in.FallsThrough() && total < jmpLen {
			if n, detail, ok := b.paddingTail(fi, pc, jmpLen-total); ok {
				s.note(RulePaddingTail, pc, detail)
				total += n
			} else {
				s.add(RuleDCRPastJmp, pc-uint64(in.Len), fmt.Sprintf("%s at %#x ends the code %d bytes after the site; %s", mnemonic(&in), pc-uint64(in.Len), total, detail))
			}
			break
		}
	}
	s.DCRLen = total
	grown := false
	if !req.NoRedirect && total >= jmpLen && len(s.Blocking()) == 0 && !s.Has(RulePaddingTail) && !s.Has(RuleCallRelocated) {
		grown = b.growForLoops(s, fi, code)
		total = s.DCRLen
	}
	l := uint64(max(total, jmpLen))
	lo, hi := addr+1, addr+l // the DCR interior (addr, addr+L)
	region := fmt.Sprintf("the %d-byte region %#x..%#x", l, addr, addr+l)
	if k, ok := b.startsIn(addr, addr+l); ok {
		g := &b.Funcs.List[k]
		s.add(RuleDCRCrossesFunc, g.Addr, fmt.Sprintf("function %s starts at %#x inside %s", g.Name, g.Addr, region))
	}

	// Rules 3 and 4: anything that may transfer control into the interior.
	counts, notes := map[string]int{}, 0
	var edges []edge
	b.edges.in(lo, hi, func(e *edge) bool { edges = append(edges, *e); return true })
	slices.SortFunc(edges, func(a, c edge) int {
		if a.src != c.src {
			if a.src < c.src {
				return -1
			}
			return 1
		}
		return int(a.dst) - int(c.dst)
	})
	for i, e := range edges {
		if i > 0 && e == edges[i-1] {
			continue
		}
		if in, ok := insideInsn(s.DCR, e.dst); ok && (e.kind == ekData || e.kind == ekImm) {
			// a word or immediate equal to an address inside an instruction is a number,
			// not a code pointer: no compiler makes one to jump through (python3.11 has
			// three data words that equal PyWeakref_GetObject+4, inside its test)
			if notes++; notes <= maxPerRule {
				s.note(RuleAddrTakenInDCR, e.src, fmt.Sprintf("%#x at %#x is inside the instruction at %#x, so it is no code address: allowed", e.dst, e.src, in.Addr))
			}
			continue
		}
		if grown && e.kind == ekBranch && e.src >= addr && e.src < addr+l && slices.ContainsFunc(s.DCR, func(d InstRef) bool { return d.Addr == e.dst }) {
			continue // the loop the region was grown over: its copy branches to its copies
		}
		rule, detail := b.edgeReason(&e, region)
		if e.kind == ekBranch && !req.NoRedirect && !grown {
			r, why := b.redirect(&e, s, addr, addr+l, req.OtherProbes)
			if why == "" {
				s.Redirects = append(s.Redirects, r)
				s.note(RuleJumpRedirected, e.src, fmt.Sprintf("%s: a jump-optimized probe redirects it to a relocated copy of the region from %#x on, followed by a jmp back to %#x", detail, e.dst, addr+uint64(s.DCRLen)))
				continue
			}
			detail += " (it cannot be redirected: " + why + ")"
		}
		if counts[rule]++; counts[rule] <= maxPerRule {
			s.add(rule, srcAddr(&e), detail)
		}
	}
	for rule, n := range counts {
		if n > maxPerRule {
			s.add(rule, addr, fmt.Sprintf("and %d more", n-maxPerRule))
		}
	}
	if p := info.poison; p != nil {
		where := "it"
		if p.fn != fi {
			where = b.Funcs.List[p.fn].Name + ", a fragment of it,"
		}
		s.add(RuleIndirectJump, p.addr, fmt.Sprintf("%s has an indirect jmp at %#x whose targets are unknown (%s), so it may land inside %s", where, p.addr, p.why, region))
	}
	b.jumpNotes(s, info)

	// Rule 5: landing pads.
	for _, p := range b.padsIn(lo, hi) {
		s.add(RuleLandingPad, p.addr, fmt.Sprintf("exception landing pad %#x (call-site table of the LSDA at %#x, FDE at %#x) is inside %s", p.addr, p.lsda, p.fdeStart, region))
	}
	for _, e := range b.lsdaErrs {
		if addr < e.end && addr+l > e.start {
			s.add(RuleLSDAUnreadable, e.lsda, fmt.Sprintf("the call-site table (LSDA at %#x) of the code %#x..%#x could not be read: %s", e.lsda, e.start, e.end, e.err))
		}
	}
	if b.ehBroken != nil && !b.coveredByFDE(addr) {
		s.add(RuleLSDAUnreadable, addr, fmt.Sprintf("no parsed FDE covers the site and .eh_frame has entries that could not be read (%v): its landing pads are unknown", b.ehBroken))
	}

	// Rule 6: other probes.
	n := 0
	for _, p := range req.OtherProbes {
		if p >= lo && p < hi {
			if n++; n <= maxPerRule {
				s.add(RuleOtherProbe, p, fmt.Sprintf("another probe at %#x is inside %s", p, region))
			}
		}
	}

	// Rule 7: the site and the jmp back must reach the detour window.
	if !fitsRel32(b.detourLo, b.detourHi, addr) || !fitsRel32(b.detourLo, b.detourHi, addr+l) {
		s.add(RuleDetourReach, addr, fmt.Sprintf("%#x is out of rel32 reach of the detour window %#x..%#x", addr, b.detourLo, b.detourHi))
	}
}

// dcrInsn applies the per-instruction rules 6 and 7 to one DCR instruction.
func (b *Binary) dcrInsn(s *Site, pc uint64, in *x86dec.Inst, raw []byte, last bool) {
	name := mnemonic(in)
	switch {
	case in.Kind == x86dec.KindInt3:
		s.add(RuleInt3InDCR, pc, fmt.Sprintf("int3 at %#x inside the region the jmp would overwrite", pc))
		return
	case in.Kind == x86dec.KindCall || in.Kind == x86dec.KindCallIndirect || in.Kind == x86dec.KindCallFar:
		if ok, why := b.callRelocatable(in, raw, last); !ok {
			s.add(RuleCallInDCR, pc, fmt.Sprintf("%s at %#x: %s", name, pc, why))
			return
		}
		s.note(RuleCallRelocated, pc, fmt.Sprintf("%s at %#x ends the region: the detour runs it as push $%#x (the original return address) + jmp to the target, so the callee returns to original code and unwinding sees original addresses", name, pc, pc+uint64(in.Len)))
	case in.NoOutOfLine != "":
		s.add(RuleDCRInsnRefused, pc, fmt.Sprintf("%s at %#x cannot run out of line: %s", name, pc, in.NoOutOfLine))
		return
	}
	if in.Endbr && pc != s.Addr {
		s.add(RuleEndbrInDCR, pc, fmt.Sprintf("endbr64 at %#x marks an indirect-branch target (-fcf-protection): an indirect jmp or call may land inside the region", pc))
	}
	if in.RIPRel && !fitsRel32(b.detourLo, b.detourHi, in.RIPTarget) {
		s.add(RuleRIPRelReach, pc, fmt.Sprintf("%s at %#x addresses %#x, out of rel32 reach of the detour window %#x..%#x", name, pc, in.RIPTarget, b.detourLo, b.detourHi))
	}
	if in.Kind.IsDirectBranch() && !fitsRel32(b.detourLo, b.detourHi, in.Target) {
		s.add(RuleBranchReach, pc, fmt.Sprintf("%s at %#x targets %#x, out of rel32 reach of the detour window %#x..%#x", name, pc, in.Target, b.detourLo, b.detourHi))
	}
}

// paddingTail decides whether the `need` bytes at from, after a final ret or
// jmp, are dead padding the jmp may overwrite: inter-function or alignment
// padding made only of nop/int3 instructions, in the same section, inside no
// other function, and targeted by nothing. It returns how many bytes it adds.
func (b *Binary) paddingTail(fi int, from uint64, need int) (int, string, bool) {
	fn := &b.Funcs.List[fi]
	end := from + uint64(need)
	if k, ok := b.startsIn(from-1, end); ok {
		return 0, fmt.Sprintf("function %s starts at %#x, no room for padding", b.Funcs.List[k].Name, b.Funcs.List[k].Addr), false
	}
	if k := b.funcAt(end - 1); k >= 0 && k != fi {
		return 0, fmt.Sprintf("the bytes after it belong to %s", b.Funcs.List[k].Name), false
	}
	code := b.code(from, uint64(need))
	if code == nil {
		return 0, "the section ends", false
	}
	if b.edges.any(from, end) || len(b.padsIn(from, end)) > 0 {
		return 0, fmt.Sprintf("the bytes %#x..%#x after it are a branch target", from, end), false
	}
	all := b.codeFrom(from)
	for pc := from; pc < end; {
		in, err := x86dec.DecodeFast(all[pc-from:], pc)
		if err != nil || in.Len <= 0 {
			return 0, fmt.Sprintf("the bytes at %#x after it do not decode", pc), false
		}
		if in.Kind != x86dec.KindInt3 && !isNop(all[pc-from:pc-from+uint64(in.Len)], &in) {
			return 0, fmt.Sprintf("the bytes at %#x after it are code, not padding", pc), false
		}
		pc += uint64(in.Len)
	}
	where := "inter-function padding"
	if end <= fn.End() {
		where = "alignment padding inside " + fn.Name
	}
	return need, fmt.Sprintf("the %d bytes %#x..%#x after the final ret/jmp are %s (nop/int3) that nothing targets; the jmp overwrites them and they are never executed", need, from, end, where), true
}

// maxGrow bounds a region grown over a loop (growForLoops), from the site.
const maxGrow = 32

// growForLoops extends the DCR over a short loop that branches back into it (a retry
// loop: sem_trywait's jne to its +3): the region runs to the end of the last branch
// of the function that goes back into its interior from within maxGrow bytes of the
// site, when the instructions it takes in fall through (but that last) and can run
// out of line. The copy keeps the loop (trampolines.RelocateRegion sends branches to
// instructions of the region to their copies). It reports whether it grew the DCR.
func (b *Binary) growForLoops(s *Site, fi int, code []byte) bool {
	fn := &b.Funcs.List[fi]
	addr, end := s.Addr, s.Addr+uint64(s.DCRLen)
	newEnd := end
	b.edges.in(addr+1, end, func(e *edge) bool {
		if e.kind == ekBranch && e.src >= end && e.src < addr+maxGrow && e.src < fn.End() {
			if n, err := x86dec.Length(code[e.src-fn.Addr:]); err == nil {
				newEnd = max(newEnd, e.src+uint64(n))
			}
		}
		return true
	})
	if newEnd == end || newEnd > addr+maxGrow || newEnd > fn.End() {
		return false
	}
	var t Site // the rules of the instructions taken in, apart until they all pass
	var ext []InstRef
	for pc := end; pc < newEnd; {
		raw := code[pc-fn.Addr:]
		in, err := x86dec.Decode(raw, pc)
		if err != nil || pc+uint64(in.Len) > newEnd {
			return false
		}
		last := pc+uint64(in.Len) == newEnd
		if !last && !in.FallsThrough() {
			return false
		}
		b.dcrInsn(&t, pc, &in, raw[:in.Len], last)
		ext = append(ext, InstRef{Addr: pc, Len: in.Len})
		pc += uint64(in.Len)
	}
	if len(t.Blocking()) > 0 {
		return false
	}
	s.DCR = append(s.DCR, ext...)
	s.DCRLen = int(newEnd - addr)
	s.note(RuleDCRGrown, end, fmt.Sprintf("a branch at %#x goes back into the region: the region runs to %#x, over the loop, and its copy keeps the loop (%d instructions, %d bytes)", newEnd-uint64(ext[len(ext)-1].Len), newEnd, len(s.DCR), s.DCRLen))
	s.Reasons = append(s.Reasons, t.Reasons...)
	return true
}

// redirect decides whether the branch e into the interior of the region [lo, hi) of
// site s can be redirected to a copy of the region's rest (Redirect), and says why not
// when it cannot.
func (b *Binary) redirect(e *edge, s *Site, lo, hi uint64, others []uint64) (Redirect, string) {
	raw := b.codeFrom(e.src)
	in, err := x86dec.Decode(raw, e.src)
	if err != nil {
		return Redirect{}, "it does not decode"
	}
	r := Redirect{From: e.src, Len: in.Len, To: e.dst}
	if b.funcAt(e.src) < 0 {
		// bytes decoded between functions may be data: never written
		return r, "it is in code that belongs to no function"
	}
	switch {
	case in.Len == 2 && raw[0] == 0xeb:
		r.Edit = 5
	case in.Len == 5 && raw[0] == 0xe9:
		r.Edit = 5
	case in.Len == 6 && raw[0] == 0x0f && raw[1]&0xf0 == 0x80:
		r.Edit = 6
	default:
		return r, "only a jmp rel32, a jcc rel32 or a jmp rel8 followed by padding is"
	}
	if !slices.ContainsFunc(s.DCR[1:], func(d InstRef) bool { return d.Addr == e.dst }) {
		return r, "its target is not the start of one of the region's instructions"
	}
	end := e.src + uint64(r.Edit)
	if e.src < hi && end > lo {
		return r, "it is inside the region"
	}
	if !fitsRel32(b.detourLo, b.detourHi, e.src) || !fitsRel32(b.detourLo, b.detourHi, end) {
		return r, "it is out of rel32 reach of the detour window"
	}
	for _, p := range others {
		// that probe's int3 or jmp would take the jump's bytes, and its copy or
		// emulation of the jump would keep the old target
		if p < end && p+b.jmpSpan(p) > e.src {
			return r, fmt.Sprintf("the probe at %#x may take its bytes", p)
		}
	}
	if r.Edit == r.Len {
		return r, ""
	}
	// a jmp rel8 becomes a jmp rel32 over the padding after it
	if len(raw) < r.Edit {
		return r, "its code section ends after it"
	}
	for pc := e.src + uint64(in.Len); pc < end; {
		p, err := x86dec.Decode(raw[pc-e.src:], pc)
		if err != nil || p.Kind != x86dec.KindInt3 && !isNop(raw[pc-e.src:pc-e.src+uint64(p.Len)], &p) {
			return r, fmt.Sprintf("the bytes at %#x after it are code, not padding it could grow into", pc)
		}
		pc += uint64(p.Len)
	}
	if _, ok := b.startsIn(e.src, end); ok {
		return r, "a function starts in the padding after it"
	}
	if b.edges.any(e.src+1, end) || len(b.padsIn(e.src+1, end)) > 0 {
		return r, "the padding after it is a branch target"
	}
	for _, pc := range []uint64{e.src, end - 1} {
		if k := b.funcAt(pc); k >= 0 && b.info[k].poison != nil {
			return r, fmt.Sprintf("%s has an indirect jmp whose targets are unknown, which may land in the padding after it", b.Funcs.List[k].Name)
		}
	}
	return r, ""
}

// jmpSpan bounds the bytes a probe at p may take: its whole instructions up to the 5 a
// jmp needs (a padding tail after a final jmp or ret is at most that too).
func (b *Binary) jmpSpan(p uint64) uint64 {
	raw := b.codeFrom(p)
	n := 0
	for n < jmpLen {
		l, err := x86dec.Length(raw[n:])
		if err != nil || l <= 0 {
			return 16
		}
		n += l
	}
	return uint64(max(n, jmpLen))
}

// isNop recognises the nop encodings compilers and assemblers pad with: 90
// (with 66 prefixes) and 0f 1f /0 (with 66 and segment prefixes).
func isNop(raw []byte, in *x86dec.Inst) bool {
	m, op := opcodeOf(raw, in)
	if in.Enc != x86dec.EncLegacy {
		return false
	}
	switch {
	case m == 0 && op == 0x90:
		// 90 is xchg %eax,%eax only without REX.B (41 90 is xchg %r8d,%eax).
		for _, p := range raw[:in.OpcodeOff] {
			if p >= 0x40 && p <= 0x4f && p&1 != 0 {
				return false
			}
		}
		return true
	case m == 1 && op == 0x1f && in.ModRMOff >= 0 && raw[in.ModRMOff]>>3&7 == 0:
		return true
	}
	return false
}

// insideInsn returns the DCR instruction a strictly contains (not at its start).
func insideInsn(dcr []InstRef, a uint64) (InstRef, bool) {
	for _, in := range dcr {
		if a > in.Addr && a < in.Addr+uint64(in.Len) {
			return in, true
		}
	}
	return InstRef{}, false
}

func srcAddr(e *edge) uint64 {
	if e.kind == ekSymbol {
		return e.dst
	}
	return e.src
}

// edgeReason turns an edge into the region into a reason.
func (b *Binary) edgeReason(e *edge, region string) (string, string) {
	switch e.kind {
	case ekBranch, ekCall:
		name := "branch"
		if raw := b.codeFrom(e.src); raw != nil {
			if in, err := x86dec.Decode(raw, e.src); err == nil {
				name = mnemonic(&in)
			}
		}
		where := ""
		if k := b.funcAt(e.src); k >= 0 {
			where = fmt.Sprintf(" (in %s)", b.Funcs.List[k].Name)
		}
		return RuleJumpIntoDCR, fmt.Sprintf("%s at %#x%s targets %#x inside %s", name, e.src, where, e.dst, region)
	case ekTable:
		return RuleTableIntoDCR, fmt.Sprintf("an entry of the jump table used by the jmp at %#x targets %#x inside %s", e.src, e.dst, region)
	case ekLea:
		return RuleAddrTakenInDCR, fmt.Sprintf("lea at %#x takes the address %#x inside %s (a computed goto or hand-written code may jump there)", e.src, e.dst, region)
	case ekImm:
		return RuleAddrTakenInDCR, fmt.Sprintf("the immediate at %#x is the code address %#x inside %s", e.src, e.dst, region)
	case ekData:
		sec := "?"
		if s := sectionAt(b.File, e.src); s != nil {
			sec = s.Name
		}
		return RuleAddrTakenInDCR, fmt.Sprintf("the 8-byte word at %#x (%s) holds the code address %#x inside %s", e.src, sec, e.dst, region)
	case ekReloc:
		return RuleAddrTakenInDCR, fmt.Sprintf("the dynamic relocation of the slot %#x resolves to %#x inside %s", e.src, e.dst, region)
	case ekSymbol:
		name := "?"
		if int(e.src) < len(b.File.Symbols) {
			name = b.File.Symbols[e.src].Name
		}
		if int(e.src) < len(b.File.Symbols) && b.File.Symbols[e.src].Value != e.dst {
			return RuleAddrTakenInDCR, fmt.Sprintf("%#x, derived from symbol %q (Go's goexit+PCQuantum fake return address), lies inside %s", e.dst, name, region)
		}
		return RuleAddrTakenInDCR, fmt.Sprintf("symbol %q is at %#x inside %s", name, e.dst, region)
	}
	return RuleJumpIntoDCR, fmt.Sprintf("edge from %#x to %#x inside %s", e.src, e.dst, region)
}

// jumpNotes summarises the function's resolved jump tables and pointer jumps.
func (b *Binary) jumpNotes(s *Site, info *funcInfo) {
	var tables, ptrs []indirectJump
	for _, ij := range info.jumps {
		switch ij.class {
		case ijTable:
			tables = append(tables, ij)
		case ijPointer:
			ptrs = append(ptrs, ij)
		}
	}
	if len(tables) > 0 {
		more := ""
		if len(tables) > 1 {
			more = fmt.Sprintf(" (and %d more tables)", len(tables)-1)
		}
		s.note(RuleJumpTable, tables[0].addr, fmt.Sprintf("jmp at %#x: %s; its entries are in the branch-target index%s", tables[0].addr, tables[0].detail, more))
	}
	if len(ptrs) > 0 {
		more := ""
		if len(ptrs) > 1 {
			more = fmt.Sprintf(" (and %d more)", len(ptrs)-1)
		}
		s.note(RulePointerJump, ptrs[0].addr, fmt.Sprintf("jmp at %#x: %s; code pointers are covered by the address-taken index%s", ptrs[0].addr, ptrs[0].detail, more))
	}
}

// callRelocatable decides whether a call in the DCR can be copied as
// push $orig_ret; jmp target (docs/design.md: a relocated call pushes the ORIGINAL
// return address). That is only right when the call is the last instruction
// of the DCR, so that orig_ret is the first byte after the region; a call in
// the middle would return into the bytes the jmp overwrote. The kernel, whose
// detours push their own address, refuses every call (Options.StrictCalls).
func (b *Binary) callRelocatable(in *x86dec.Inst, raw []byte, last bool) (bool, string) {
	switch {
	case b.strictCalls:
		return false, "run from the detour it would push the detour's address as the return address (strict kernel rule)"
	case in.Kind == x86dec.KindCallFar:
		return false, "far call"
	case !last:
		return false, "the call does not end the region: the original return address would be inside the bytes the jmp overwrites"
	case in.Kind == x86dec.KindCallIndirect:
		if why := x86dec.IndirectCallSP(raw); why != "" {
			return false, why
		}
	}
	return true, ""
}
