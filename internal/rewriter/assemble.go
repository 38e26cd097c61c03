package rewriter

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/align"
	"github.com/kprewrite/kprewrite/internal/objlink"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// assembly is what the phases of a rewrite with probes hand on to each other: the
// linked runtime, the new sections as areas, their layout, and the edits.
type assembly struct {
	lk        *objlink.Linker
	rs        objlink.Sizes
	enc       *kprt.Encoded
	descBytes []byte

	rodata, text, bss                         *areaSection
	desc, tables, rtRodata, dynstr, earlyRela *area // in rodata
	fix                                       *area // rodata: the rseq descriptors' fixes (PIC)
	rtText, slots, free, dcrs, hooks          *area // in text
	cs, state, words, earlyWord, window       *area // in bss
	windowSize                                uint64

	needed   *elfio.NeededPlan // the library copies' DT_NEEDED
	early    *elfio.EarlyStart // the early start's DT_RELA
	eh       *ehHdrPlan        // the return trampoline's unwind entry
	layout   elfio.Layout      // the new segments' addresses
	out      *objlink.Output   // the linked runtime and C handlers
	rt       runtimeSymbols    // where the runtime's entry points landed
	dyn      *elfio.DynEdit    // the dynamic section's edits
	entry    *uint64           // the new e_entry; nil for a library
	hookText []byte            // a static program's signal hooks
	ehHdr    []byte            // the new .eh_frame_hdr
}

// run assembles the image in named phases; each says in its comment what it decides.
func (g *gen) run() (*Result, error) {
	if err := g.prepare(); err != nil {
		return nil, err
	}
	a := &assembly{}
	for _, phase := range []func(*assembly) error{
		g.linkRuntime, g.sizeTables, g.layOut, g.place, g.fillRodata, g.buildText, g.setEntry, g.buildEHHdr,
	} {
		if err := phase(a); err != nil {
			return nil, err
		}
	}
	if err := g.collectEdits(a); err != nil {
		return nil, err
	}
	img, err := g.write(a)
	if err != nil {
		return nil, err
	}
	return g.result(img, a.layout), nil
}

// prepare turns the plan into events, the runtime's tables, slots and detours, and
// the signal guard; after it nothing needs the analysis, which is let go before the
// runtime is linked and the image made.
func (g *gen) prepare() error {
	f := g.f
	g.symbols = probedefs.SymbolTable(f)
	if err := g.makeEvents(); err != nil {
		return err
	}
	g.warnUnreferencedReturns()
	g.markLive()
	g.plan.LiveInt3 = len(g.tables.Free) > 0
	if err := g.planStaticSigGuard(); err != nil {
		return fmt.Errorf("%s: signal guard: %w", f.Path, err)
	}
	if err := g.withholdLive(); err != nil {
		return err
	}
	if err := g.makeTables(); err != nil {
		return err
	}
	if err := g.addSigGuard(); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	g.addStaticSlots()
	var err error
	if g.goSig, err = g.goSigtrapEdit(); err != nil {
		return err
	}
	g.b, g.opt.Analysis = nil, nil
	return nil
}

// linkRuntime opens the linker on the runtime object and the C handlers: their sizes
// are known now, their addresses once the layout is.
func (g *gen) linkRuntime(a *assembly) error {
	obj, err := objlink.ParseObject("kprewrite_rt.o", kprt.Object)
	if err != nil {
		return fmt.Errorf("runtime object: %w", err)
	}
	hobjs, err := g.handlerObjects()
	if err != nil {
		return err
	}
	if a.lk, err = objlink.New(append([]*objlink.Object{obj}, hobjs...)...); err != nil {
		return fmt.Errorf("link the runtime and the C handlers: %w", err)
	}
	a.rs = a.lk.Sizes()
	return g.reserveAbsSlots(a.lk)
}

// sizeTables sizes the tables and the image description, which do not depend on
// addresses. Both are written once, with the image id 0; the id, a hash of what is
// written, goes in last (place).
func (g *gen) sizeTables(a *assembly) error {
	enc, err := g.tables.Prepare()
	if err != nil {
		return fmt.Errorf("%s: %w", g.f.Path, err)
	}
	g.fillDescProbes(enc)
	if a.descBytes, err = g.desc.Marshal(0); err != nil {
		return err
	}
	a.enc = enc
	return nil
}

// layOut lists the new sections' areas in address order and has elfio place the
// new segments: after it every area has its address.
func (g *gen) layOut(a *assembly) error {
	if err := g.rodataAreas(a); err != nil {
		return err
	}
	g.textAndBSSAreas(a)
	for _, s := range []*areaSection{a.rodata, a.text, a.bss} {
		s.layout()
	}
	var ehSize uint64
	if g.anyRet || g.freeRet { // (a free return point hooks return addresses)
		a.eh = planEHHdr(g.f)
		ehSize = a.eh.size
	}
	layout, err := g.f.PlanLayoutEH(a.text.size, a.rodata.size, a.rs.Data, a.bss.size, ehSize)
	if err != nil {
		return err
	}
	a.layout = layout
	a.rodata.addr, a.text.addr, a.bss.addr = layout.RodataAddr, layout.TextAddr, layout.BSSAddr
	return nil
}

// rodataAreas lists the read-only areas: the description, the tables, the runtime's
// constants, and the dynamic string table and early-start relocation when needed.
func (g *gen) rodataAreas(a *assembly) error {
	a.rodata = &areaSection{name: elfio.SecRodata}
	a.desc = a.rodata.add(SymDesc, uint64(len(a.descBytes)), 1)
	a.tables = a.rodata.add(SymTables, a.enc.Size, areaAlign)
	a.rtRodata = a.rodata.add("", a.rs.Rodata, areaAlign)
	var err error
	if len(g.opt.Needed) > 0 {
		if a.needed, err = g.f.PlanNeeded(g.opt.Needed); err != nil {
			return err
		}
		a.dynstr = a.rodata.add(SymDynstr, uint64(len(a.needed.Bytes)), 8)
	}
	if a.early, err = g.planEarlyStart(a.needed); err != nil {
		return err
	}
	if a.early != nil {
		a.earlyRela = a.rodata.add(SymEarlyRela, a.early.Size(), 8)
	}
	return nil
}

// textAndBSSAreas lists the code areas (runtime, slots, detours, signal hooks) and
// the zeroed ones (runtime, rseq descriptors, probe state, hook words, the counter
// window); the rseq fix table joins rodata after them, as it always has.
func (g *gen) textAndBSSAreas(a *assembly) {
	a.text = &areaSection{name: elfio.SecText, fill: trampolines.Int3}
	a.rtText = a.text.add("", a.rs.Text, 1)
	a.slots = a.text.add("", g.slots.Size(), areaAlign)
	a.free = a.text.add(SymFreeSlots, uint64(len(g.tables.Free))*kprt.FreeSlot, areaAlign) // (int3s until placed)
	a.dcrs = a.text.add("", g.dcrs.total(), areaAlign)
	a.hooks = a.text.add("", g.hooks.size, areaAlign)
	if g.dcrs.pic && g.dcrs.ncs > 0 {
		a.fix = a.rodata.add(SymRseqFix, 8+uint64(g.dcrs.ncs)*32, 8)
	}
	a.bss = &areaSection{name: elfio.SecBSS}
	a.bss.add("", a.rs.BSS, 1)
	if a.fix != nil {
		a.cs = a.bss.add(SymRseqCS, uint64(g.dcrs.ncs)*trampolines.RseqCSSize, trampolines.RseqCSSize)
	}
	a.state = a.bss.add(SymProbeState, a.enc.StateSize, areaAlign)
	a.words = a.bss.add("", g.hooks.words, 8)
	a.earlyWord = a.bss.add("", 8, 8) // what the early start's relocation stores
	// the counter window: whole pages, page-aligned (the BSS address PlanLayout gives
	// is not, so a page of slack), at the end of the new bss
	a.windowSize = kprt.CountersSize(int(a.enc.StateSize / kprt.ProbeStateSize))
	a.window = a.bss.add("", 4096+a.windowSize, 1)
}

// place links the runtime and the handlers at their addresses, places the slots,
// detours and signal hooks, encodes the tables, and seals the description and the
// tables with the image id.
func (g *gen) place(a *assembly) error {
	f, text, bss, rodata := g.f, a.text, a.bss, a.rodata
	tablesAddr := rodata.at(a.tables)
	g.tables.Counters = align.Up(bss.at(a.window), 4096)
	var err error
	a.out, err = a.lk.Link(objlink.Bases{Text: text.at(a.rtText), Rodata: rodata.at(a.rtRodata), Data: a.layout.DataAddr, BSS: a.layout.BSSAddr}, g.programSymbol)
	if err != nil {
		return fmt.Errorf("link runtime: %w", err)
	}
	if a.rt, err = lookupRuntime(a.out); err != nil {
		return err
	}
	if err := g.placeHandlers(a.out); err != nil {
		return err
	}
	if err := g.slots.Place(text.at(a.slots)); err != nil {
		return err
	}
	for i := range g.plan.Points {
		if si := g.slotOf[i]; si >= 0 {
			g.tables.Points[i].Slot = g.slots.Slot(si).Addr
		}
	}
	for k := range g.tables.Free {
		g.tables.Free[k].Slot = text.at(a.free) + uint64(k)*kprt.FreeSlot
	}
	if err := g.dcrs.place(g, text.at(a.dcrs)); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if a.hookText, err = g.placeStaticHooks(text.at(a.hooks), bss.at(a.words)); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	g.tables.AbsSlots = a.out.AbsSlots
	g.tables.Desc, g.tables.DescSize = rodata.at(a.desc), uint32(len(a.descBytes))
	if err := a.enc.Encode(tablesAddr, bss.at(a.state)); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	// the description says where the tables are in its frame's header
	g.desc.Place(a.descBytes, tablesAddr)
	id := g.imageID(a.enc.RO, a.descBytes)
	a.enc.SetImageID(id)
	g.desc.SetImageID(a.descBytes, id)
	return nil
}

// fillRodata writes the read-only areas, and the dynamic-section edits that point
// into them (the library copies' names, the early start's relocation).
func (g *gen) fillRodata(a *assembly) error {
	rodata := a.rodata
	rodataBytes := rodata.alloc()
	err := errors.Join(rodata.put(a.desc, a.descBytes), rodata.put(a.tables, a.enc.RO), rodata.put(a.rtRodata, a.out.Rodata))
	if err != nil {
		return err
	}
	dyn, err := g.f.EditDynamic()
	if err != nil && (g.library || a.needed != nil || a.early != nil) {
		return err
	}
	a.dyn = dyn
	if a.needed != nil {
		if err := rodata.put(a.dynstr, a.needed.Bytes); err != nil {
			return err
		}
		a.needed.Edit(dyn, rodata.at(a.dynstr))
	}
	if a.early != nil {
		if err := rodata.put(a.earlyRela, a.early.Table(a.rt.relocEntry, a.bss.at(a.earlyWord))); err != nil {
			return err
		}
		a.early.Edit(dyn, rodata.at(a.earlyRela))
	}
	a.enc.RO = nil // in rodataBytes now
	binary.LittleEndian.PutUint64(rodataBytes[a.rt.hdrRel-rodata.addr:], uint64(kprt.HdrRel(a.rt.hdrRel, rodata.at(a.tables))))
	return nil
}

// buildText writes the code areas: the runtime, the slots, the detours (now that the
// runtime's optprobe body and rseq words have addresses) and the signal hooks, and
// the rseq fix table a PIC image's runtime writes its descriptors from.
func (g *gen) buildText(a *assembly) error {
	text := a.text
	g.dcrs.pfCtlGen, g.dcrs.trigBase, g.dcrs.irSyms = a.rt.pfCtlGen, a.rt.trigBase, a.rt.ir
	text.alloc()
	if a.cs != nil {
		g.dcrs.picCS = a.bss.at(a.cs)
	}
	if err := g.dcrs.build(g, text.span(a.dcrs), a.enc, a.rt); err != nil {
		return fmt.Errorf("%s: %w", g.f.Path, err)
	}
	if err := g.putRseqFix(a); err != nil {
		return err
	}
	return errors.Join(text.put(a.rtText, a.out.Text), text.put(a.slots, g.slots.Bytes()), text.put(a.hooks, a.hookText))
}

// putRseqFix writes the rseq fix table, and the runtime's word that names it.
func (g *gen) putRseqFix(a *assembly) error {
	if a.fix == nil {
		return nil
	}
	fix, data := a.rt.rseqFix, a.layout.DataAddr
	if fix < data || fix-data+8 > uint64(len(a.out.Data)) {
		return fmt.Errorf("runtime object has no %s in its data", kprt.SymRseqFix)
	}
	if len(g.dcrs.fix) != int(a.fix.size) {
		return fmt.Errorf("internal error: %d bytes of rseq descriptor fixes for %d", len(g.dcrs.fix), a.fix.size)
	}
	if err := a.rodata.put(a.fix, g.dcrs.fix); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(a.out.Data[fix-data:], a.rodata.at(a.fix))
	return nil
}

// setEntry decides where the runtime starts: a program's e_entry, or a library's
// DT_INIT (which then calls the original) and, when its exit hook is needed, DT_FINI.
func (g *gen) setEntry(a *assembly) error {
	if !g.library {
		a.entry = &a.rt.entry
		return nil
	}
	a.dyn.Library(a.rt.libEntry)
	if g.libraryExitHook() {
		a.dyn.Fini(a.rt.libFini)
	}
	return nil
}

// buildEHHdr makes the new .eh_frame_hdr, in which the return trampoline's FDE joins
// the unwinder's table (unwind.go).
func (g *gen) buildEHHdr(a *assembly) error {
	if a.eh == nil {
		return nil
	}
	var err error
	if a.ehHdr, err = a.eh.build(a.layout.EHHdrAddr, a.out, a.layout.DataAddr); err != nil {
		return fmt.Errorf("%s: %w", g.f.Path, err)
	}
	return nil
}

// collectEdits adds the edits of the file's own structures to the plan's probe edits:
// the dynamic section's (DT_NEEDED, DT_RELA, a library's DT_INIT and DT_FINI) and the
// shadow-stack bit of the GNU property note. Return probes replace return addresses,
// and a detour may resume through iretq (a redirecting handler): both are
// incompatible with a CET shadow stack.
func (g *gen) collectEdits(a *assembly) error {
	if g.library || a.needed != nil || a.early != nil {
		ps, err := a.dyn.Patches()
		if err != nil {
			return err
		}
		if err := g.plan.AddEdits("dynamic section", ps); err != nil {
			return err
		}
	}
	if err := g.plan.AddEdits("Go's SIGTRAP entry in runtime.sigtable", g.goSig); err != nil {
		return err
	}
	if g.anyRet || g.freeRet || g.dcrs.anyDetour {
		ps, err := g.f.ClearShadowStack()
		if err != nil {
			return err
		}
		if err := g.plan.AddEdits("shadow stack", ps); err != nil {
			return err
		}
	}
	return nil
}

// write names the new pieces in .symtab and has elfio write the image with the
// plan's edits of the original bytes.
func (g *gen) write(a *assembly) (*elfio.Output, error) {
	areaSyms := []elfio.NewSymbol{
		a.rodata.symbol(a.desc), a.rodata.symbol(a.tables), a.bss.symbol(a.state),
		// the window, not its area: the area has a page of slack before it
		{Name: SymCounters, Section: a.bss.name, Offset: g.tables.Counters - a.bss.addr, Size: a.windowSize},
	}
	if a.needed != nil {
		areaSyms = append(areaSyms, a.rodata.symbol(a.dynstr))
	}
	if a.early != nil {
		areaSyms = append(areaSyms, a.rodata.symbol(a.earlyRela))
	}
	if a.free.size > 0 {
		areaSyms = append(areaSyms, a.text.symbol(a.free))
	}
	syms := g.newSymbols(a.out, symPlaces{rtRodata: a.rtRodata.off, slots: a.slots.off, dcrs: a.dcrs.off, areas: areaSyms})
	return g.f.Rewrite(&elfio.Addition{
		Layout:     a.layout,
		Text:       a.text.buf,
		Rodata:     a.rodata.buf,
		Data:       a.out.Data,
		BSS:        a.bss.size,
		EHFrameHdr: a.ehHdr,
		Symbols:    append(syms, g.hookSymbols(a.hooks.off)...),
		Patches:    g.plan.Commit(),
		Entry:      a.entry,
	})
}

// result is the rewrite's result, with the warning of a program whose exceptions can
// leave a return-probed function.
func (g *gen) result(img *elfio.Output, layout elfio.Layout) *Result {
	res := &Result{Image: img, Layout: layout, Plan: g.plan, Desc: g.desc, Refused: g.plan.Refused, Warnings: g.warnings,
		Edits: g.plan.Edits()}
	if g.anyRet && g.f.Section(".gcc_except_table") != nil {
		w := "the program uses exceptions: when a C++ exception or a forced unwind (pthread_cancel, pthread_exit) " +
			"leaves a return-probed function, that call's return event is lost (counted as a miss); calls the exception does not leave keep theirs"
		if g.opt.TraceExits || g.anyExit() {
			w += " (a call recorded at its function's rets, [EXIT] in list, leaves neither)"
		}
		res.Warnings = append(res.Warnings, w)
	}
	return res
}

// runtimeSymbols are the runtime's entry points and words the rewrite writes or
// points at, looked up once after the link.
type runtimeSymbols struct {
	entry, libEntry, libFini, relocEntry, hdrRel, optBody, pfCtlGen, trigBase, rseqFix uint64
	rseq                                                                               trampolines.CountRseq
	ir                                                                                 trampolines.InlineRecSyms
	wordBody                                                                           [2][2]uint64 // kprt.SymWordBody's
}

// lookupRuntime finds every symbol of runtimeSymbols in the linked runtime.
func lookupRuntime(out *objlink.Output) (runtimeSymbols, error) {
	var s runtimeSymbols
	for _, w := range []struct {
		name string
		at   *uint64
	}{
		{kprt.SymEntry, &s.entry}, {kprt.SymLibEntry, &s.libEntry}, {kprt.SymLibFini, &s.libFini},
		{kprt.SymRelocEntry, &s.relocEntry}, {kprt.SymHdrRel, &s.hdrRel}, {kprt.SymOptBody, &s.optBody},
		{kprt.SymPFCtlGen, &s.pfCtlGen}, {kprt.SymTrigBase, &s.trigBase}, {kprt.SymRseqFix, &s.rseqFix},
		{kprt.SymRseqOff, &s.rseq.Off}, {kprt.SymRseqCount, &s.rseq.Count}, {kprt.SymRseqShardtab, &s.rseq.Shardtab},
		{kprt.SymRT, &s.ir.RT}, {kprt.SymTctxTab, &s.ir.TctxTab}, {kprt.SymTblkTab, &s.ir.TblkTab},
		{kprt.SymWordBody[0][0], &s.wordBody[0][0]}, {kprt.SymWordBody[0][1], &s.wordBody[0][1]},
		{kprt.SymWordBody[1][0], &s.wordBody[1][0]}, {kprt.SymWordBody[1][1], &s.wordBody[1][1]},
	} {
		a, ok := out.Addr(w.name)
		if !ok || a == 0 {
			return s, fmt.Errorf("runtime object has no %s", w.name)
		}
		*w.at = a
	}
	return s, nil
}

// anyExit reports whether some return event is recorded at its function's rets.
func (g *gen) anyExit() bool {
	for i := range g.plan.Points {
		if pt := &g.plan.Points[i]; pt.Exit && !pt.ExitTail {
			return true
		}
	}
	return false
}
