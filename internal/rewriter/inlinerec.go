package rewriter

import (
	"fmt"

	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// inlineRecRegs is where the record data of plan point i's one event is at the probe:
// the x86 numbers of its registers, when the point may write its record inline
// (kprt.DFInlineRec, trampolines.InlineRec): a jump-optimized entry point (not an
// exit's) of one traced kprobe event without a C handler, filter or trigger, in an
// image without C handlers, with --count-only off and the TSC clock (the code reads
// it; another clock chosen at run time, by `record --clock`, makes it decline), whose every argument is an
// 8-byte general register (at most trampolines.InlineRecMaxRegs) — the record the
// runtime's line fixes by its count (KPRW_HOT_SEQ), which it checks again before the
// code may run (iropen).
func (g *gen) inlineRecRegs(i int) ([]int, bool) {
	pt := &g.plan.Points[i]
	d, ok := g.plainTSCRecord(i)
	if !ok || pt.Exit || g.reopt[i] || d.Def.Return || g.evOf[pt.Requests[0]] < 0 ||
		len(d.Def.Args) > trampolines.InlineRecMaxRegs {
		return nil, false
	}
	regs := make([]int, 0, len(d.Def.Args))
	for k := range d.Def.Args {
		loc, ok := d.Def.Direct(k)
		if !ok || loc.Reg < 0 || d.Def.Args[k].SlotSize() != 8 {
			return nil, false
		}
		r, ok := trampolines.PrefilterRegs[loc.Reg]
		if !ok {
			return nil, false
		}
		regs = append(regs, r)
	}
	return regs, true
}

// pickInlineRecs decides which points write their records inline: every point that
// may (inlineRecRegs), unless there are more than kprt.InlineRecMax of them: a program
// probed at thousands of functions keeps the one shared detour body in its caches.
func (g *gen) pickInlineRecs() {
	g.inlineRec = map[int][]int{}
	for i := range g.plan.Points {
		if regs, ok := g.inlineRecRegs(i); ok {
			g.inlineRec[i] = regs
		}
	}
	if len(g.inlineRec) > kprt.InlineRecMax {
		g.inlineRec = nil
	}
}

// addInlineRec reserves plan point i's inline record in its detour entry e (whose
// size so far is size, its relocated DCR relocLen bytes) when pickInlineRecs chose it
// and its table entry rp has no spev word (kprt.DFSpEntry, which the plan alone does
// not say; the rest inlineRecRegs checked); it returns the entry's new size.
func (g *gen) addInlineRec(e *dcrEntry, i int, rp *kprt.Point, size int) (int, error) {
	regs, ok := g.inlineRec[i]
	if !ok || rp.DFlags&kprt.DFSpEntry != 0 {
		return size, nil
	}
	spec := &trampolines.InlineRecSpec{Regs: regs, FlagsDead: g.flagsDead(g.plan.Points[i].Site)}
	n, err := trampolines.InlineRecLen(*spec, e.relocLen)
	if err != nil {
		return 0, err
	}
	e.ir, e.irOff, e.irLen = spec, uint64(size), n
	rp.DFlags |= kprt.DFInlineRec
	return size + n, nil
}

// buildInlineRec appends entry e's inline record to its detour code (the template at
// at, which enters at full) and returns the code and the site jmp's target: the
// record's entry. A redirected signal function's (stubbed) copy of the DCR is a jmp to
// its stub, as the detour's is.
func (a *dcrArea) buildInlineRec(g *gen, e dcrEntry, code []byte, full uint64, enc *kprt.Encoded, stub uint64,
	stubbed bool) ([]byte, uint64, error) {
	pt := &g.plan.Points[e.point]
	irAt := a.base + e.off + e.irOff
	if uint64(len(code)) != e.irOff {
		return nil, 0, fmt.Errorf("internal error: a %d-byte detour at %#x, %d planned", len(code), a.base+e.off, e.irOff)
	}
	t, err := trampolines.OptTemplate()
	if err != nil {
		return nil, 0, err
	}
	if !trampolines.StartsWithRedZoneStep(t.Code[t.Entry:]) {
		return nil, 0, fmt.Errorf("internal error: the detour template does not start with its step over the red zone")
	}
	spec := *e.ir
	spec.Probe = uint32(enc.ProbeIndex[e.point][0])
	spec.IROpen = enc.PFGenAddr(e.point) // (the same u64: iropen)
	spec.Syms = a.irSyms
	relocAt := e.irRelocAt(a.base)
	reloc := e.reg2.Code
	if stubbed {
		j, err := trampolines.JmpRel32(relocAt, stub)
		if err != nil {
			return nil, 0, fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		reloc = trampolines.Filled(j, len(reloc))
	}
	ir, err := trampolines.InlineRec(irAt, spec, full+trampolines.RedZoneStepLen, reloc, pt.Site+uint64(pt.DCRLen))
	if err != nil {
		return nil, 0, fmt.Errorf("probe at %#x: %w", pt.Site, err)
	}
	if len(ir) != e.irLen {
		return nil, 0, fmt.Errorf("internal error: a %d-byte inline record at %#x, %d planned", len(ir), irAt, e.irLen)
	}
	entry, err := trampolines.InlineRecEntry(spec.FlagsDead)
	if err != nil {
		return nil, 0, err
	}
	return append(code, ir...), irAt + uint64(entry), nil
}

// irRelocAt is where entry e's inline record's copy of the DCR is, the area at base.
func (e *dcrEntry) irRelocAt(base uint64) uint64 {
	return base + e.off + e.irOff + uint64(e.irLen-e.relocLen-kprt.SlotJmpBackLen)
}
