package rewriter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/internal/align"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// dcrArea holds, back to back in .kprewrite.text after the out-of-line slots, the
// detour buffers of jump-optimized points and the whole-DCR slots of
// --verify-regions points. Sizes are known when the tables are made (relocated
// lengths do not depend on addresses); the code is made in two steps: place (once
// the text address is known: the relocated DCRs, and the slot addresses the tables
// need) and build (once the tables are encoded: the detours need each point's
// runtime index and gate address).
type dcrArea struct {
	list      []dcrEntry
	byPoint   map[int]int // plan point -> index in list
	size      uint64
	base      uint64
	anyDetour bool // a full detour (the template): its entry is entryOff in
	entryOff  int
	// inline-form count-only detours (trampolines.CountRseq.Inline) have their rseq_cs
	// descriptors after the detours, 32-byte aligned, in the order of their cs index
	ncs int
	// pfCtlGen is the runtime's SymPFCtlGen, which inline filters read (set before build)
	pfCtlGen uint64
	// trigBase is the runtime's SymTrigBase, which inline histogram updates read
	trigBase uint64
	// irSyms are the runtime's words inline records read (set before build)
	irSyms trampolines.InlineRecSyms
	// the restartable sequences' descriptors: in the area (an image at fixed
	// addresses), or (pic) in the bss at picCS, written at start-up by the runtime
	// from fix (SymRseqFix: u64 count, then per descriptor its address, start_ip,
	// post_commit_offset and abort_ip as linked)
	pic   bool
	picCS uint64
	fix   []byte
}

type dcrEntry struct {
	point     int    // index in plan.Points (and tables.Points)
	off, size uint64 // in the area
	relocLen  int
	reg       *trampolines.Region // the relocated DCR, after place
	count     bool                // a count-only detour (kprt.PFCount)
	flagsDead bool                // count-only: no flags save (the analysis saw them dead)
	nprobes   int
	cs        int                     // count-only, inline form: index of its rseq_cs descriptor; -1: none
	layout    trampolines.CountLayout // count-only: where its entry and its DCR copy are
	// an inline filter (kprt.DFPrefilter): after the full detour's jmp back, at pfOff,
	// the filter's code (pfLen bytes), then a count-only detour of the probe (layout),
	// with its own copy of the DCR (reg2), where refused hits go
	pf    *trampolines.PrefilterSpec
	ih    *trampolines.InlineHistSpec // or an inline histogram update (kprt.DFInlineHist) there
	pfOff uint64
	pfLen int
	reg2  *trampolines.Region
	// or an inline record (kprt.DFInlineRec) there: irLen bytes at irOff, its own
	// copy of the DCR (reg2) and jmp back included
	ir    *trampolines.InlineRecSpec
	irOff uint64
	irLen int
	// or, for a record of --calls, the word body its stub calls (wordBody)
	word wordShape
	// redirs: per redirect of the point (patch.Point.Redirects), the copy of the DCR from
	// the jump's target on, followed by a jmp back, where the redirected jump goes
	redirs []redirStub
	// what the detour copies (copySource): the DCR, or for an exit point (kprt.DFExit)
	// whose site is before its exit instruction, that instruction (src at srcAddr) and
	// the straight-line code up to it (preSrc): the detour starts with that code (pre,
	// preLen bytes relocated with the jmp to the template's entry that follows it), and
	// its "DCR copy" is the ret or tail call's jmp (reg), run after the probes
	src     []byte
	srcAddr uint64
	preSrc  []byte
	pre     *trampolines.Region
	preLen  int
}

// redirStub is the code a redirected jump goes to (analysis.Redirect): the DCR's
// instructions from its target on, relocated, then a jmp to the end of the DCR.
type redirStub struct {
	off, size uint64 // in the area
	relocLen  int
	reg       *trampolines.Region
}

// dcrAlign keeps each detour's hot start in as few cache lines as its size allows.
const dcrAlign = 16

// add reserves the detour or verify slot of plan point i and fills what its table
// entry rp knows before placement.
func (a *dcrArea) add(g *gen, i int, rp *kprt.Point) error {
	pt := &g.plan.Points[i]
	src, srcAddr, pre, err := g.copySource(pt, rp)
	if err != nil {
		return err
	}
	n, err := trampolines.RegionLen(src, srcAddr, patch.DCROptions(g.f))
	if err != nil {
		return err
	}
	if n > 255 || pt.DCRLen > 255 {
		return fmt.Errorf("a %d-byte DCR relocated to %d bytes is too long", pt.DCRLen, n)
	}
	size := n + kprt.SlotJmpBackLen
	e := dcrEntry{point: i, relocLen: n, cs: -1, src: src, srcAddr: srcAddr, preSrc: pre}
	if len(pre) > 0 {
		if e.preLen, err = trampolines.RegionLen(pre, pt.Site, patch.DCROptions(g.f)); err != nil {
			return err
		}
		e.preLen += trampolines.JmpRel32Len
	}
	switch {
	case rp.PFlags&kprt.PFCount != 0:
		e.count, e.nprobes = true, len(rp.Probes)
		e.flagsDead = g.flagsDead(pt.Site)
		if e.nprobes == 1 {
			e.cs = a.ncs
			a.ncs++
		}
		if e.layout, err = trampolines.CountDetourLayout(e.nprobes, true, a.form(e.cs), e.flagsDead); err != nil {
			return err
		}
		size = e.layout.Len(n)
	case pt.Optimized():
		if size, err = trampolines.DetourLen(n); err != nil {
			return err
		}
		size += e.preLen
		a.anyDetour = true
		if e.pf, e.pfLen, err = g.prefilterOf(i, rp); err != nil {
			return err
		}
		if e.pf == nil {
			if e.ih, e.pfLen, err = g.inlineHistOf(i, rp); err != nil {
				return err
			}
		}
		if e.pf != nil || e.ih != nil {
			// refusals (and inline updates) count in a restartable sequence of their
			// own, as a count-only point's do
			e.cs = a.ncs
			a.ncs++
			if e.layout, err = trampolines.CountDetourLayout(1, true, a.form(e.cs), e.inlineFlagsDead()); err != nil {
				return err
			}
			e.pfOff = uint64(size)
			size += e.pfLen + e.layout.Len(n)
			if e.pf != nil {
				rp.DFlags |= kprt.DFPrefilter
			} else {
				rp.DFlags |= kprt.DFInlineHist
			}
		} else if size, err = g.addInlineRec(&e, i, rp, size); err != nil {
			return err
		} else if e.ir == nil {
			e.word = g.wordShapeOf(i, rp)
		}
	}
	if pt.Optimized() {
		rp.InsnLen = uint8(pt.DCRLen)
		rp.Orig = g.origBytes(pt.Site, min(pt.DCRLen, 16))
	}
	rp.SlotLen = uint8(n)
	rp.Slot = 1 // placeholder until placed
	off := align.Up(a.size, dcrAlign)
	if a.byPoint == nil {
		a.byPoint = map[int]int{}
	}
	a.byPoint[i] = len(a.list)
	e.off, e.size = off, uint64(size)
	a.size = off + uint64(size)
	for _, r := range pt.Redirects {
		n, err := trampolines.RegionLen(pt.DCRCode[r.To-pt.Site:], r.To, patch.DCROptions(g.f))
		if err != nil {
			return err
		}
		st := redirStub{off: align.Up(a.size, dcrAlign), size: uint64(n + kprt.SlotJmpBackLen), relocLen: n}
		e.redirs = append(e.redirs, st)
		a.size = st.off + st.size
	}
	a.list = append(a.list, e)
	return nil
}

// csOff is where the rseq_cs descriptors start in the area.
func (a *dcrArea) csOff() uint64 { return align.Up(a.size, trampolines.RseqCSSize) }

// total is the area's size, descriptors included.
func (a *dcrArea) total() uint64 {
	if a.ncs == 0 || a.pic {
		return a.size
	}
	return a.csOff() + uint64(a.ncs)*trampolines.RseqCSSize
}

// form is the inline form of a count-only detour with descriptor cs (-1: none).
func (a *dcrArea) form(cs int) trampolines.InlineForm {
	switch {
	case cs < 0:
		return trampolines.InlineNone
	case a.pic:
		return trampolines.InlinePIC
	}
	return trampolines.InlineAbs
}

// descriptor makes the rseq_cs descriptor cs of the count-only detour at countAt and
// returns its address: in the area's bytes b, or, PIC, in the bss, by a fix entry.
func (a *dcrArea) descriptor(b []byte, cs int, countAt uint64, flagsDead bool) (uint64, error) {
	desc, err := trampolines.CountRseqCS(countAt, a.form(cs), flagsDead)
	if err != nil {
		return 0, err
	}
	if !a.pic {
		at := a.csOff() + uint64(cs)*trampolines.RseqCSSize
		copy(b[at:], desc)
		return a.base + at, nil
	}
	addr := a.picCS + uint64(cs)*trampolines.RseqCSSize
	if a.fix == nil {
		a.fix = make([]byte, 8+a.ncs*32)
		binary.LittleEndian.PutUint64(a.fix, uint64(a.ncs))
	}
	e := a.fix[8+32*cs:]
	binary.LittleEndian.PutUint64(e, addr)
	copy(e[8:32], desc[8:32]) // start_ip, post_commit_offset, abort_ip
	return addr, nil
}

// place relocates every DCR for the area at base and sets the slot addresses of
// the points and of the --verify-regions inner bytes in g.tables.
func (a *dcrArea) place(g *gen, base uint64) error {
	if base%dcrAlign != 0 || (a.ncs > 0 && !a.pic && base%trampolines.RseqCSSize != 0) {
		return fmt.Errorf("internal error: detour area at %#x is not aligned", base)
	}
	a.base = base
	var tmplLen uint64
	if a.anyDetour {
		t, err := trampolines.OptTemplate()
		if err != nil {
			return err
		}
		tmplLen = uint64(len(t.Code))
	}
	for k := range a.list {
		e := &a.list[k]
		pt := &g.plan.Points[e.point]
		at := base + e.off
		codeAt := at
		switch {
		case e.count:
			codeAt += uint64(e.layout.Reloc)
		case pt.Optimized():
			codeAt += uint64(e.preLen) + tmplLen
		}
		reg, err := trampolines.RelocateRegion(e.src, e.srcAddr, codeAt, patch.DCROptions(g.f))
		if err != nil {
			return fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		if len(e.preSrc) > 0 {
			if e.pre, err = trampolines.RelocateRegion(e.preSrc, pt.Site, at, patch.DCROptions(g.f)); err != nil {
				return fmt.Errorf("probe at %#x: %w", pt.Site, err)
			}
			if len(e.pre.Code)+trampolines.JmpRel32Len != e.preLen {
				return fmt.Errorf("internal error: the code before the exit at %#x relocated to %d bytes, %d planned", pt.ExitInsn, len(e.pre.Code), e.preLen)
			}
			e.pre.Insns = nil
		}
		if len(reg.Code) != e.relocLen {
			return fmt.Errorf("internal error: the DCR at %#x relocated to %d bytes, %d planned", pt.Site, len(reg.Code), e.relocLen)
		}
		reg.Insns = nil // only the code and the offsets are needed from here on
		e.reg = reg
		if e.pf != nil || e.ih != nil || e.ir != nil {
			// the refused hits' count-only detour runs a copy of its own, and an
			// inline record
			at2 := at + e.pfOff + uint64(e.pfLen) + uint64(e.layout.Reloc)
			if e.ir != nil {
				at2 = e.irRelocAt(base)
			}
			if e.reg2, err = trampolines.RelocateRegion(pt.DCRCode, pt.Site, at2, patch.DCROptions(g.f)); err != nil {
				return fmt.Errorf("probe at %#x: %w", pt.Site, err)
			}
			if len(e.reg2.Code) != e.relocLen {
				return fmt.Errorf("internal error: the DCR at %#x relocated to %d bytes, %d planned", pt.Site, len(e.reg2.Code), e.relocLen)
			}
			e.reg2.Insns = nil
		}
		for k := range e.redirs {
			st := &e.redirs[k]
			r := pt.Redirects[k]
			if st.reg, err = trampolines.RelocateRegion(pt.DCRCode[r.To-pt.Site:], r.To, base+st.off, patch.DCROptions(g.f)); err != nil {
				return fmt.Errorf("probe at %#x: the jump at %#x into its DCR: %w", pt.Site, r.From, err)
			}
			if len(st.reg.Code) != st.relocLen {
				return fmt.Errorf("internal error: the rest of the DCR at %#x relocated to %d bytes, %d planned", r.To, len(st.reg.Code), st.relocLen)
			}
			st.reg.Insns = nil
		}
		g.tables.Points[e.point].Slot = at + uint64(e.preLen)
	}
	np := len(g.plan.Points)
	for j, in := range g.plan.Inner {
		rp := &g.tables.Points[np+j]
		if !in.Boundary {
			continue // inside an instruction: no copy can start here
		}
		e := &a.list[a.byPoint[in.Point]]
		off, ok := e.reg.OffsetOf(in.Off)
		if !ok {
			return fmt.Errorf("internal error: no relocated instruction for the inner byte %#x", in.Addr)
		}
		rp.Slot = base + e.off + uint64(off)
		rp.SlotLen = uint8(e.relocLen - off)
	}
	return nil
}

// build writes the area's bytes into b (a.total() bytes, all int3: the text section's
// fill, which the gaps between detours keep) and replaces each
// jump-optimized point's placeholder edit with the jmp to its detour.
func (a *dcrArea) build(g *gen, b []byte, enc *kprt.Encoded, rt runtimeSymbols) error {
	rs := rt.rseq
	if uint64(len(b)) != a.total() {
		return fmt.Errorf("internal error: a %d-byte detour area in %d bytes", a.total(), len(b))
	}
	if a.anyDetour {
		t, err := trampolines.OptTemplate()
		if err != nil {
			return err
		}
		a.entryOff = t.Entry
	}
	for _, e := range a.list {
		pt := &g.plan.Points[e.point]
		start := a.base + e.off
		at := start + uint64(e.preLen) // the template, after an exit's code before its exit
		back := pt.Site + uint64(pt.DCRLen)
		if e.pre != nil {
			back = pt.ExitInsn + uint64(len(e.src)) // (after the ret or jmp: never reached)
		}
		var code []byte
		var err error
		if pt.Optimized() {
			entry := at + uint64(a.entryOff)
			reloc, relocAt := e.reg.Code, at+uint64(a.entryOff)
			if e.count {
				relocAt = at + uint64(e.layout.Reloc)
			} else {
				t, err := trampolines.OptTemplate()
				if err != nil {
					return err
				}
				relocAt = at + uint64(len(t.Code))
			}
			stub, stubbed := g.hooks.detourStub[e.point]
			if stubbed {
				// a redirected signal function (sigstatic.go): the function's first
				// instructions run from the guard's copy, after its wrapper
				j, err := trampolines.JmpRel32(relocAt, stub)
				if err != nil {
					return fmt.Errorf("probe at %#x: %w", pt.Site, err)
				}
				reloc = trampolines.Filled(nil, len(e.reg.Code))
				copy(reloc, j)
			}
			if e.count {
				ctrs := make([]uint64, e.nprobes)
				shards := make([]uint32, e.nprobes)
				for j := range ctrs {
					ctrs[j] = enc.CounterAddr(g.tables.Counters, e.point, j)
					shards[j] = uint32(enc.ProbeIndex[e.point][j]) * 8
				}
				ers := rs // without a descriptor (CS), the call form
				ers.PIC = a.pic
				if e.cs >= 0 {
					if ers.CS, err = a.descriptor(b, e.cs, at, e.flagsDead); err != nil {
						return err
					}
				}
				code, err = trampolines.CountDetour(at, ctrs, shards, ers, e.flagsDead, reloc, back)
				entry = at + uint64(e.layout.Entry)
			} else {
				code, err = trampolines.Detour(at, enc.PointIndex[e.point], enc.GateAddr(e.point), e.body(rt), reloc, back)
				if err == nil && (e.pf != nil || e.ih != nil) {
					code, entry, err = a.buildPrefilter(g, b, e, code, entry, enc, rs, stub, stubbed)
				} else if err == nil && e.ir != nil {
					code, entry, err = a.buildInlineRec(g, e, code, entry, enc, stub, stubbed)
				}
			}
			if err != nil {
				return err
			}
			if e.pre != nil {
				// the code before the exit, then into the template
				j, err := trampolines.JmpRel32(start+uint64(len(e.pre.Code)), entry)
				if err != nil {
					return fmt.Errorf("probe at %#x: %w", pt.Site, err)
				}
				code = append(append(append([]byte(nil), e.pre.Code...), j...), code...)
				entry = start
			}
			jmp, err := trampolines.SiteJmpTo(pt.Site, pt.DCRLen, entry)
			if err != nil {
				return err
			}
			if err := g.plan.SetSiteJmp(e.point, jmp); err != nil {
				return err
			}
		} else {
			j, err := trampolines.JmpRel32(at+uint64(len(e.reg.Code)), back)
			if err != nil {
				return fmt.Errorf("probe at %#x: %w", pt.Site, err)
			}
			reloc := e.reg.Code
			if stub, ok := g.hooks.detourStub[e.point]; ok {
				// a --verify-regions point on a redirected signal function: as a detour's
				if reloc, err = trampolines.JmpRel32(at, stub); err != nil {
					return fmt.Errorf("probe at %#x: %w", pt.Site, err)
				}
				reloc = append(reloc, trampolines.Filled(nil, len(e.reg.Code)-len(reloc))...)
			}
			code = append(append([]byte(nil), reloc...), j...)
		}
		if uint64(len(code)) != e.size {
			return fmt.Errorf("internal error: %d bytes made for the %d reserved at %#x", len(code), e.size, at)
		}
		copy(b[e.off:], code)
		if err := a.buildRedirects(g, b, e); err != nil {
			return err
		}
	}
	return nil
}

// buildRedirects writes the stubs of entry e's redirected jumps and replaces each
// jump's placeholder edit with the jump to its stub.
func (a *dcrArea) buildRedirects(g *gen, b []byte, e dcrEntry) error {
	pt := &g.plan.Points[e.point]
	for k, st := range e.redirs {
		r := pt.Redirects[k]
		at := a.base + st.off
		back, err := trampolines.JmpRel32(at+uint64(len(st.reg.Code)), pt.Site+uint64(pt.DCRLen))
		if err != nil {
			return fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		copy(b[st.off:], append(append([]byte(nil), st.reg.Code...), back...))
		j, err := trampolines.Redirected(g.origBytes(r.From, r.Len), r.From, r.Edit, at)
		if err != nil {
			return fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		if err := g.plan.SetRedirectJmp(e.point, k, j); err != nil {
			return err
		}
	}
	return nil
}

// buildPrefilter appends to the full detour code of entry e (entered at full) its inline
// filter and the count-only detour of its refused hits, and returns the bytes and the
// entry the site's jmp lands on (the filter's).
func (a *dcrArea) buildPrefilter(g *gen, b []byte, e dcrEntry, code []byte, full uint64, enc *kprt.Encoded, rs trampolines.CountRseq,
	stub uint64, stubbed bool) ([]byte, uint64, error) {
	pt := &g.plan.Points[e.point]
	at := a.base + e.off
	pfAt := at + e.pfOff
	countAt := pfAt + uint64(e.pfLen)
	if uint64(len(code)) != e.pfOff {
		return nil, 0, fmt.Errorf("internal error: a %d-byte detour at %#x, %d planned", len(code), at, e.pfOff)
	}
	// a refused hit enters the count-only detour after its save, which is the filter's
	save := trampolines.PrefilterSave(e.inlineFlagsDead())
	var pf []byte
	var err error
	if e.pf != nil {
		spec := *e.pf
		spec.CtlGen, spec.PFGen = a.pfCtlGen, enc.PFGenAddr(e.point)
		pf, err = trampolines.Prefilter(pfAt, spec, full, countAt+uint64(e.layout.Entry+len(save)))
	} else {
		spec := *e.ih
		spec.CtlGen, spec.PFGen, spec.TrigBase = a.pfCtlGen, enc.PFGenAddr(e.point), a.trigBase
		pf, err = trampolines.InlineHist(pfAt, spec, full, countAt+uint64(e.layout.Entry+len(save)))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("probe at %#x: %w", pt.Site, err)
	}
	if len(pf) != e.pfLen {
		return nil, 0, fmt.Errorf("internal error: a %d-byte inline filter at %#x, %d planned", len(pf), pfAt, e.pfLen)
	}
	reloc := e.reg2.Code
	if stubbed {
		j, err := trampolines.JmpRel32(countAt+uint64(e.layout.Reloc), stub)
		if err != nil {
			return nil, 0, fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		reloc = trampolines.Filled(j, len(reloc))
	}
	crs := rs
	crs.CS, crs.PIC = 0, a.pic // the call form, or the inline form with its descriptor
	if e.cs >= 0 {
		if crs.CS, err = a.descriptor(b, e.cs, countAt, e.inlineFlagsDead()); err != nil {
			return nil, 0, err
		}
	}
	cd, err := trampolines.CountDetour(countAt, []uint64{enc.CounterAddr(g.tables.Counters, e.point, 0)},
		[]uint32{uint32(enc.ProbeIndex[e.point][0]) * 8}, crs, e.inlineFlagsDead(), reloc, pt.Site+uint64(pt.DCRLen))
	if err != nil {
		return nil, 0, err
	}
	if !bytes.HasPrefix(cd[e.layout.Entry:], save) {
		return nil, 0, fmt.Errorf("internal error: the count-only detour at %#x does not start as the inline filter does", countAt)
	}
	return append(append(code, pf...), cd...), pfAt, nil
}

// prefilterOf is the inline filter of plan point i (its table entry rp) and its length,
// or nil: a
// jump-optimized point with one probe, a traced event with a filter and no trigger
// whose every predicate the detour can test on the live registers and the stack
// (trampolines.Prefilter), in an image without C handlers (whose runtime keeps the full
// path: kprw_pf_update).
func (g *gen) prefilterOf(i int, rp *kprt.Point) (*trampolines.PrefilterSpec, int, error) {
	pt := &g.plan.Points[i]
	q, d, ok := g.inlineCandidate(i, rp)
	if !ok || len(d.Triggers) > 0 || g.events[q.Event].Filter == nil {
		return nil, 0, nil
	}
	spec := &trampolines.PrefilterSpec{Prog: g.events[q.Event].Filter, Field: directField(d), FlagsDead: g.flagsDead(pt.Site)}
	code, err := trampolines.Prefilter(0, *spec, 0, 0) // its length does not depend on the addresses
	if err != nil {
		if errors.Is(err, trampolines.ErrNoPrefilter) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	return spec, len(code), nil
}

// inlineCandidate is what inline code before a detour needs of plan point i (its
// table entry rp): a jump-optimized point of one probe, a traced event's kprobe without
// a C handler, in an image without C handlers (whose runtime keeps the full path: a
// hit inside a handler is a miss there). It returns the probe and its definition.
func (g *gen) inlineCandidate(i int, rp *kprt.Point) (kprt.Probe, *probedefs.Probe, bool) {
	pt := &g.plan.Points[i]
	if rp.PFlags&kprt.PFCount != 0 || rp.DFlags&kprt.DFExit != 0 || len(rp.Probes) != 1 || len(pt.Requests) != 1 || g.opt.Handlers != nil {
		return kprt.Probe{}, nil, false
	}
	q := rp.Probes[0]
	d := &g.probes[pt.Requests[0]]
	ok := q.Type == kprt.TKprobe && q.Flags == kprt.FTrace && q.Event >= 0 && q.Event < len(g.events) && d.Handler == nil
	return q, d, ok
}

// directField says where the size bytes at off of probe d's record data are at its
// probe point: a register or the stack (false: its fetch program reads them otherwise).
func directField(d *probedefs.Probe) func(off, size int) (trampolines.PrefilterField, bool) {
	offs := make([]int, len(d.Def.Args))
	for k, o := 0, 0; k < len(d.Def.Args); k++ {
		offs[k] = o
		o += d.Def.Args[k].SlotSize()
	}
	return func(off, size int) (trampolines.PrefilterField, bool) {
		for k, o := range offs {
			if o != off || d.Def.Args[k].SlotSize() != size {
				continue
			}
			loc, ok := d.Def.Direct(k)
			if !ok {
				return trampolines.PrefilterField{}, false
			}
			if loc.Reg < 0 {
				return trampolines.PrefilterField{Reg: -1, SPOff: loc.SPOff}, true
			}
			r, ok := trampolines.PrefilterRegs[loc.Reg]
			return trampolines.PrefilterField{Reg: r}, ok
		}
		return trampolines.PrefilterField{}, false
	}
}

// inlineFlagsDead is the flags save of the inline code of entry e and of the
// count-only detour after it.
func (e *dcrEntry) inlineFlagsDead() bool {
	if e.pf != nil {
		return e.pf.FlagsDead
	}
	return e.ih != nil && e.ih.FlagsDead
}

// inlineHistOf is the inline histogram update of plan point i (its table entry rp)
// and its length, or nil: a jump-optimized point with one probe, a traced event that
// starts switched off (--disable) with no filter and one trigger, a histogram with no
// condition, count, variable, action or shared name, whose one key and at most four
// values the detour can read itself (a register or the stack), the key plain or
// .log2, in an image without C handlers (whose runtime keeps the full path).
func (g *gen) inlineHistOf(i int, rp *kprt.Point) (*trampolines.InlineHistSpec, int, error) {
	pt := &g.plan.Points[i]
	q, d, ok := g.inlineCandidate(i, rp)
	if !ok || len(d.Triggers) != 1 || g.events[q.Event].Filter != nil || g.events[q.Event].Flags&kprt.EFSoftDisabled == 0 ||
		q.Event >= len(g.desc.Events) || len(g.desc.Events[q.Event].CtlSlots) != 1 {
		return nil, 0, nil
	}
	td := d.Triggers[0]
	h := td.Hist
	if td.Cmd != evtrigger.Hist || h == nil || td.Filter != "" || td.Count != evtrigger.Unlimited || h.Filter != "" ||
		h.Name != "" || len(h.Vars) > 0 || len(h.Actions) > 0 || len(h.Save) > 0 || len(h.Keys) != 1 || h.KeyWords() != 1 {
		return nil, 0, nil
	}
	field := directField(d)
	hf := func(f *evhist.Field, key bool) (trampolines.InlineHistField, bool) {
		if f.Src != evfilter.SrcData || f.String || f.Comm || f.Stack {
			return trampolines.InlineHistField{}, false
		}
		switch f.Mod {
		case evhist.ModNone, evhist.ModHex, evhist.ModSyscall:
		case evhist.ModLog2:
			if !key {
				return trampolines.InlineHistField{}, false
			}
		default:
			return trampolines.InlineHistField{}, false
		}
		loc, ok := field(f.Off, f.Size)
		return trampolines.InlineHistField{PrefilterField: loc, Size: f.Size, Signed: f.Signed, Log2: f.Mod == evhist.ModLog2}, ok
	}
	key, ok := hf(&h.Keys[0], true)
	if !ok {
		return nil, 0, nil
	}
	spec := &trampolines.InlineHistSpec{Key: key, FlagsDead: g.flagsDead(pt.Site),
		CtlOff:   int32(4*q.Event) - int32(kprt.CtlFlagBytes(len(g.events))),
		SoftBit:  kprt.CtlEvSoftDisabled,
		TabOff:   int32(8 * g.desc.Events[q.Event].CtlSlots[0]),
		Mask:     uint32(h.Buckets() - 1),
		EntBytes: uint32(8 * h.EntryWords()),
		KeyWords: h.KeyWords(),
		Seed:     evhist.HashSeed, Mul: evhist.HashMul, TagBit: evhist.TagBit,
		HdrBytes: 8 * evhist.HeaderWords,
	}
	for k := range h.Vals {
		v, ok := hf(&h.Vals[k], false)
		if !ok {
			return nil, 0, nil
		}
		spec.Vals = append(spec.Vals, v)
	}
	code, err := trampolines.InlineHist(0, *spec, 0, 0) // its length does not depend on the addresses
	if err != nil {
		if errors.Is(err, trampolines.ErrNoInlineHist) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	return spec, len(code), nil
}

// origBytes returns up to n original bytes at addr (fewer at the end of the
// segment's file image).
// copySource is what the detour of point pt copies and from where: its DCR, or for an
// exit point (kprt.DFExit) whose site is before its exit instruction (a ret or a tail
// call's jmp), that instruction, with the straight-line code from the site to it in pre.
func (g *gen) copySource(pt *patch.Point, rp *kprt.Point) (code []byte, addr uint64, pre []byte, err error) {
	if rp.DFlags&kprt.DFExit == 0 || pt.ExitInsn <= pt.Site {
		return pt.DCRCode, pt.Site, nil, nil
	}
	b := g.origBytes(pt.ExitInsn, 16)
	in, err := x86dec.Decode(b, pt.ExitInsn)
	if err != nil || in.Kind != x86dec.KindRet && in.Kind != x86dec.KindJmp && in.Kind != x86dec.KindJmpIndirect {
		return nil, 0, nil, fmt.Errorf("internal error: no ret or tail call at the exit %#x", pt.ExitInsn)
	}
	pre = g.origBytes(pt.Site, int(pt.ExitInsn-pt.Site))
	if uint64(len(pre)) != pt.ExitInsn-pt.Site {
		return nil, 0, nil, fmt.Errorf("internal error: the code before the exit at %#x cannot be read", pt.ExitInsn)
	}
	return b[:in.Len], pt.ExitInsn, pre, nil
}

func (g *gen) origBytes(addr uint64, n int) []byte {
	for ; n > 0; n-- {
		if b, err := g.f.Bytes(addr, uint64(n)); err == nil {
			return append([]byte(nil), b...)
		}
	}
	return nil
}

// inlineRseq says whether a count can take the inline form that holds absolute
// addresses in imm32 fields: an image at fixed ones, low enough that the segments
// added after it stay below 2 GiB.
func (g *gen) inlineRseq() bool {
	return !g.f.IsPIE() && g.f.ImageEnd() < trampolines.InlineAddrLimit/2
}

// flagsDead says whether the arithmetic flags are dead at a count-only detour's site,
// so that its lock incq needs no flags save.
func (g *gen) flagsDead(site uint64) bool {
	return g.b != nil && g.b.FlagsDead(site)
}
