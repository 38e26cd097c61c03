package rewriter

import (
	"fmt"

	"github.com/kprewrite/kprewrite/internal/align"
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
}

// dcrAlign keeps each detour's hot start in as few cache lines as its size allows.
const dcrAlign = 16

// add reserves the detour or verify slot of plan point i and fills what its table
// entry rp knows before placement.
func (a *dcrArea) add(g *gen, i int, rp *kprt.Point) error {
	pt := &g.plan.Points[i]
	n, err := trampolines.RegionLen(pt.DCRCode, pt.Site, patch.DCROptions(g.f))
	if err != nil {
		return err
	}
	if n > 255 || pt.DCRLen > 255 {
		return fmt.Errorf("a %d-byte DCR relocated to %d bytes is too long", pt.DCRLen, n)
	}
	size := n + kprt.SlotJmpBackLen
	e := dcrEntry{point: i, relocLen: n, cs: -1}
	switch {
	case rp.PFlags&kprt.PFCount != 0:
		e.count, e.nprobes = true, len(rp.Probes)
		e.flagsDead = g.flagsDead(pt.Site)
		// the inline form holds absolute addresses in imm32 fields: an image at fixed
		// ones, low enough that the segments added after it stay below 2 GiB
		if e.nprobes == 1 && !g.f.IsPIE() && g.f.ImageEnd() < trampolines.InlineAddrLimit/2 {
			e.cs = a.ncs
			a.ncs++
		}
		if e.layout, err = trampolines.CountDetourLayout(e.nprobes, true, e.cs >= 0, e.flagsDead); err != nil {
			return err
		}
		size = e.layout.Len(n)
	case pt.Optimized():
		if size, err = trampolines.DetourLen(n); err != nil {
			return err
		}
		a.anyDetour = true
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
	a.list = append(a.list, e)
	a.size = off + uint64(size)
	return nil
}

// csOff is where the rseq_cs descriptors start in the area.
func (a *dcrArea) csOff() uint64 { return align.Up(a.size, trampolines.RseqCSSize) }

// total is the area's size, descriptors included.
func (a *dcrArea) total() uint64 {
	if a.ncs == 0 {
		return a.size
	}
	return a.csOff() + uint64(a.ncs)*trampolines.RseqCSSize
}

// place relocates every DCR for the area at base and sets the slot addresses of
// the points and of the --verify-regions inner bytes in g.tables.
func (a *dcrArea) place(g *gen, base uint64) error {
	if base%dcrAlign != 0 || (a.ncs > 0 && base%trampolines.RseqCSSize != 0) {
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
			codeAt += tmplLen
		}
		reg, err := trampolines.RelocateRegion(pt.DCRCode, pt.Site, codeAt, patch.DCROptions(g.f))
		if err != nil {
			return fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		if len(reg.Code) != e.relocLen {
			return fmt.Errorf("internal error: the DCR at %#x relocated to %d bytes, %d planned", pt.Site, len(reg.Code), e.relocLen)
		}
		reg.Insns = nil // only the code and the offsets are needed from here on
		e.reg = reg
		g.tables.Points[e.point].Slot = at
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
func (a *dcrArea) build(g *gen, b []byte, enc *kprt.Encoded, optcall uint64, rs trampolines.CountRseq) error {
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
		at := a.base + e.off
		back := pt.Site + uint64(pt.DCRLen)
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
			if stub, ok := g.hooks.detourStub[e.point]; ok {
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
				if e.cs >= 0 {
					csAt := a.csOff() + uint64(e.cs)*trampolines.RseqCSSize
					ers.CS = a.base + csAt
					cs, err := trampolines.CountRseqCS(at, e.flagsDead)
					if err != nil {
						return err
					}
					copy(b[csAt:], cs)
				}
				code, err = trampolines.CountDetour(at, ctrs, shards, ers, e.flagsDead, reloc, back)
				entry = at + uint64(e.layout.Entry)
			} else {
				code, err = trampolines.Detour(at, enc.PointIndex[e.point], enc.GateAddr(e.point), optcall, reloc, back)
			}
			if err != nil {
				return err
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
	}
	return nil
}

// origBytes returns up to n original bytes at addr (fewer at the end of the
// segment's file image).
func (g *gen) origBytes(addr uint64, n int) []byte {
	for ; n > 0; n-- {
		if b, err := g.f.Bytes(addr, uint64(n)); err == nil {
			return append([]byte(nil), b...)
		}
	}
	return nil
}

// flagsDead says whether the arithmetic flags are dead at a count-only detour's site,
// so that its lock incq needs no flags save.
func (g *gen) flagsDead(site uint64) bool {
	return g.b != nil && g.b.FlagsDead(site)
}
