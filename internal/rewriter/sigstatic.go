package rewriter

import (
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/align"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// The placement of a static program's signal guard, which package patch plans
// (patch.PlanStaticGuard): each redirected entry gets a stub "jmp *word(%rip)" and a
// relocated copy of its first instructions followed by a jmp back (the original
// function the runtime's wrapper calls), in an area of .kprewrite.text after the
// detours, and a word in .kprewrite.bss after the probe state.

// sigHook is one redirected entry with its place in the hook area.
type sigHook struct {
	patch.SigHook
	off  uint64 // of the stub in the hook area; the copy follows at off+hookStubLen
	size uint64
	word uint64 // of its word in the hook words (bss)
	// after place
	stub, copy, wordAddr uint64
}

const (
	hookStubLen = 8 // jmp *rel32(%rip) (6 bytes), int3 filler
	hookAlign   = 16
)

// sigHooks are the redirected entries of one rewrite.
type sigHooks struct {
	list  []sigHook
	size  uint64 // of the area in .kprewrite.text
	words uint64 // bytes of words in .kprewrite.bss
	// detourStub maps a jump-optimized plan point on a redirected entry to its stub,
	// which its detour jumps to in place of the relocated DCR
	detourStub map[int]uint64
}

// planStaticSigGuard has the plan choose the entries to redirect (patch.PlanStaticGuard)
// and lays out their stubs, copies and words. It runs before the tables are made; the
// addresses come with placeStaticHooks.
func (g *gen) planStaticSigGuard() error {
	sg, err := g.plan.PlanStaticGuard(g.b, g.fastRead, g.excl)
	if err != nil {
		return err
	}
	g.warnings = append(g.warnings, sg.Warnings...)
	if sg.FastRead {
		g.tables.Flags |= kprt.HFFastRead
	}
	g.slowGo = sg.GoDynamic && !sg.FastRead
	off := uint64(0)
	for i, h := range sg.Hooks {
		off = align.Up(off, hookAlign)
		sh := sigHook{SigHook: h, off: off, size: hookStubLen + uint64(len(h.Endbr)+h.Reloc) + trampolines.JmpRel32Len, word: uint64(i) * 8}
		off += sh.size
		g.hooks.list = append(g.hooks.list, sh)
	}
	g.hooks.size = off
	g.hooks.words = uint64(len(g.hooks.list)) * 8
	return nil
}

// addStaticSlots lists the hooks in the tables' signal guard, with placeholder
// addresses until placed.
func (g *gen) addStaticSlots() {
	if len(g.hooks.list) == 0 {
		return
	}
	if g.tables.SigGuard == nil {
		g.tables.SigGuard = &kprt.SigGuard{}
	}
	for _, h := range g.hooks.list {
		g.tables.SigGuard.Slots = append(g.tables.SigGuard.Slots, kprt.GotSlot{Slot: 1, Name: h.Name, Func: h.Class, Entry: true, Copy: 1})
	}
}

// placeStaticHooks gives the hooks their addresses (area in .kprewrite.text at text,
// words at words in .kprewrite.bss), fills the tables and the entries' jmps, and
// returns the area's bytes.
func (g *gen) placeStaticHooks(text, words uint64) ([]byte, error) {
	if len(g.hooks.list) == 0 {
		return nil, nil
	}
	out := trampolines.Filled(nil, int(g.hooks.size))
	opt := patch.DCROptions(g.f)
	k := 0
	for i := range g.hooks.list {
		h := &g.hooks.list[i]
		h.stub, h.copy, h.wordAddr = text+h.off, text+h.off+hookStubLen, words+h.word
		stub, err := trampolines.JmpIndirectRIP(h.stub, h.wordAddr)
		if err != nil {
			return nil, fmt.Errorf("signal guard stub of %s: %w", h.Name, err)
		}
		b := out[h.off:]
		copy(b, stub)
		at := h.copy + uint64(len(h.Endbr))
		reg, err := trampolines.RelocateRegion(h.Code, h.Site, at, opt)
		if err != nil {
			return nil, fmt.Errorf("signal guard of %s: %w", h.Name, err)
		}
		if len(reg.Code) != h.Reloc {
			return nil, fmt.Errorf("internal error: the entry of %s relocated to %d bytes, %d planned", h.Name, len(reg.Code), h.Reloc)
		}
		jb, err := trampolines.JmpRel32(at+uint64(len(reg.Code)), h.Back)
		if err != nil {
			return nil, fmt.Errorf("signal guard of %s: %w", h.Name, err)
		}
		c := append(append(append([]byte(nil), h.Endbr...), reg.Code...), jb...)
		copy(b[hookStubLen:], c)
		switch {
		case h.Detour:
			if g.hooks.detourStub == nil {
				g.hooks.detourStub = map[int]uint64{}
			}
			g.hooks.detourStub[h.Point] = h.stub // dcrArea.build
		case h.Point >= 0:
			g.tables.Points[h.Point].Target = h.stub
			g.plan.SetTarget(h.Point, h.stub)
		default:
			site, err := trampolines.SiteJmpTo(h.Site, h.DCR, h.stub)
			if err != nil {
				return nil, fmt.Errorf("signal guard of %s: %w", h.Name, err)
			}
			if err := g.plan.SetEntryJmp(h.Site, site); err != nil {
				return nil, fmt.Errorf("signal guard of %s: %w", h.Name, err)
			}
		}
		for ; k < len(g.tables.SigGuard.Slots); k++ {
			if s := &g.tables.SigGuard.Slots[k]; s.Entry {
				s.Slot, s.Copy = h.wordAddr, h.copy
				k++
				break
			}
		}
	}
	return out, nil
}

// hookSymbols names the stubs and copies.
func (g *gen) hookSymbols(off uint64) []elfio.NewSymbol {
	var syms []elfio.NewSymbol
	for _, h := range g.hooks.list {
		syms = append(syms,
			elfio.NewSymbol{Name: SymSigStubPrefix + h.Name, Section: elfio.SecText, Offset: off + h.off, Size: 6, Func: true},
			elfio.NewSymbol{Name: SymSigCopyPrefix + h.Name, Section: elfio.SecText, Offset: off + h.off + hookStubLen, Size: h.size - hookStubLen, Func: true})
	}
	return syms
}
