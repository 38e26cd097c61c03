package kprt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/kprewrite/kprewrite/internal/align"
)

// Tables is what the rewriter tells the runtime: probepoints with their probes, trace
// events, and start-up settings. All addresses are link-time virtual addresses.
type Tables struct {
	Flags     HeaderFlags
	OrigEntry uint64  // the original ELF entry point
	Points    []Point // any order; Encode sorts them by Site
	// Free are the free live points (RawHeader.NFree): after the sorted points, site
	// 0, each with one placeholder kprobe (its probe the last ones) and its slot of
	// FreeSlot bytes, where `kprewrite probe` places an event at an unprepared site.
	Free      []Point
	Events    []Event  // indexed by Probe.Event
	AbsSlots  []uint64 // writable 8-byte words holding link-time addresses (objlink AbsSlots)
	TracePath string   // default trace file ("" = no trace unless KPREWRITE_TRACE)
	TraceSize uint64   // record area of a new trace file (0 = DefaultTraceSize)
	ImageID   uint64   // identifies the image in trace files
	ImageName string
	// Init and Exit are the C handlers' kprewrite_init and kprewrite_exit (0 = none;
	// RawHooks). The hooks are always encoded, so the size does not depend on them.
	Init, Exit uint64
	// Fini is a library's own DT_FINI when kprewrite_rt_lib_fini replaces it (RawHooks).
	Fini uint64
	// HandlerStack is the most stack a C handler entry can use (handlers.Set.Stack).
	HandlerStack uint64
	// Sites is the embedded analysis (EncodeSites; RawHooks.Sites), nil = none.
	Sites []byte
	// Desc and DescSize locate the image description frame ("KPRWDESC") in the
	// rewritten image (0 = none); the runtime copies it into trace files.
	Desc     uint64
	DescSize uint32
	// Counters is the vaddr of the counter window (RawHeader.Counters): page-aligned,
	// CountersSize(nprobes) bytes of zero-filled writable data; 0 = none.
	Counters uint64
	// SigGuard lists the GOT words of the signal functions the runtime wraps (dynamically
	// linked programs); nil = none.
	SigGuard *SigGuard
	// Unwind is the unwind table stacktrace triggers walk user stacks with, sorted by
	// PC, relative to UnwindBase; nil = none.
	Unwind     []RawUnwind
	UnwindBase uint64
}

// SigGuard is what the runtime needs to wrap the program's signal functions: the GOT
// words, the RELRO range ld.so makes read-only, and DT_PLTGOT.
type SigGuard struct {
	Slots            []GotSlot
	Relro, RelroSize uint64 // PT_GNU_RELRO vaddr and size (0, 0: none)
	PLTGOT           uint64 // DT_PLTGOT vaddr (0: none)
}

// GotSlot is one GOT word of a wrapped function, or (Entry) one redirected entry of a
// function the image defines (static programs).
type GotSlot struct {
	Slot uint64 // vaddr of the word
	Lazy uint64 // JUMP_SLOT: the word's value in the file; 0 for GLOB_DAT and Entry
	Name string // the relocation's symbol, without version; the function's symbol
	Func uint32 // SG*
	// Entry: Slot is a writable word of the rewriter's that the function's patched
	// entry jumps through, and Copy the vaddr of the relocated copy of its entry (the
	// original function), which the runtime's wrapper calls (GSEntry).
	Entry bool
	Copy  uint64
}

// Point is one probepoint: the probed instruction and every probe on it.
type Point struct {
	Site    uint64 // the probed instruction; int3 goes here
	Slot    uint64 // out-of-line slot (not for XEmulate)
	Target  uint64 // branch target for EmuJmp/Jcc/Call/Jrcxz/Loop*
	XMode   XMode
	InsnLen uint8 // original instruction length
	SlotLen uint8 // length of the copy in the slot
	EmuOp   EmuOp
	EmuCC   uint8 // jcc condition, low nibble of the opcode
	PFlags  PointFlags
	DFlags  DetourFlags
	RetImm  uint16
	Orig    []byte // original instruction bytes (up to 16)
	// DCRMap, for a live jump point (DFLive, DFReopt) whose DCR's copy moves
	// instructions: where the copy's offsets step, up to four (start, delta) byte pairs
	// from the low bytes, a start 0 ending them: an instruction at DCR offset o >= start
	// is at o + delta in the copy (the last such pair's). 0: every offset the same.
	DCRMap uint64
	Probes []Probe
}

// Probe is one kprobe or kretprobe at a point.
type Probe struct {
	Type      ProbeType
	Flags     ProbeFlags
	Event     int // index in Tables.Events, or -1
	MaxActive uint32
	DataSize  uint32
	// Handler addresses (0 = none) and the user's struct kprobe/kretprobe.
	PreHandler, PostHandler, FaultHandler, EntryHandler, RetHandler, User uint64
}

// Event is a trace event: its name and fetch program (internal/eventdef encoding).
type Event struct {
	Group, Name string
	Fetch       []byte
	Filter      []byte // the event's filter program (internal/evfilter), nil: none
	Triggers    []byte // its trigger program (internal/evtrigger), nil: none (EFTriggers is set for it)
	ID          uint32
	Flags       EventFlags
}

// Encoded is the tables laid out: Prepare settles their sizes and indexes, which do
// not depend on addresses, and Encode writes them once the addresses are known.
type Encoded struct {
	// RO is the read-only blob to place at the roBase given to Encode; the header is
	// at its start. Nil until Encode.
	RO []byte
	// Size is len(RO), known from Prepare.
	Size uint64
	// StateSize is the size of the zero-filled writable area to reserve at stateBase.
	StateSize uint64
	// ProbeIndex[i][j] is the runtime index of Points[i].Probes[j] after sorting
	// (RawProbeState and trace-file counters are indexed by it). Points are indexed
	// as given to Encode.
	ProbeIndex [][]int
	// PointIndex[i] is the runtime index of Points[i] (its position sorted by Site):
	// the index a detour passes to the runtime (Detour's point argument).
	PointIndex []int
	// StateBase is the stateBase given to Encode.
	StateBase uint64

	t       *Tables
	order   []int // runtime index -> index in t.Points
	nprobes int
	// offsets from the header: points, probes, events, abs slots, hooks, signal
	// guard, strings
	pointsOff, probesOff, eventsOff, absOff, hooksOff, sgOff, unwOff, strOff uint64
	strs                                                                     []byte
	strAt                                                                    map[string]uint64 // offset in strs
	strMissing                                                               bool              // Encode asked for a string Prepare did not see
	header                                                                   RawHeader
}

// GateAddr is the vaddr of the gate word of Points[i] (meaningful for XOptimized
// points): the u32 Gate of its first probe's RawProbeState, which Detour's gate field
// addresses.
func (e *Encoded) GateAddr(i int) uint64 {
	return e.StateBase + uint64(e.ProbeIndex[i][0])*ProbeStateSize + gateOffset
}

// CounterAddr is the vaddr of the hit counter of Points[i].Probes[j] in the counter
// window at counters (Tables.Counters); its nmissed counter follows it.
func (e *Encoded) CounterAddr(counters uint64, i, j int) uint64 {
	return counters + uint64(e.ProbeIndex[i][j])*CounterPairSize
}

// CounterPairSize is the size of a probe's {hit, nmissed} in the counter window and in
// trace files.
const CounterPairSize = 16

// UnwindBlock is the pc range of an entry of the unwind table's lookup index (the
// kernel's LOOKUP_BLOCK_SIZE).
const UnwindBlock = 256

// UnwindLookup is the index after the unwind rows (kprewrite_abi.h): for block b of
// UnwindBlock bytes, the last row whose pc is at most b*UnwindBlock (0 when none), one
// entry per block up to the last row's, plus one; a walk searches rows
// [lookup[b], lookup[b+1]] instead of all of them.
func UnwindLookup(rows []RawUnwind) []uint32 {
	if len(rows) == 0 {
		return nil
	}
	n := int(rows[len(rows)-1].PC/UnwindBlock) + 2
	out := make([]uint32, n)
	k := 0
	for b := range out {
		start := uint64(b) * UnwindBlock
		for k+1 < len(rows) && uint64(rows[k+1].PC) <= start {
			k++
		}
		out[b] = uint32(k)
	}
	return out
}

// CountersSize is the size of the counter window of nprobes probes: whole pages, so
// that the runtime can map the trace file's counters over it.
func CountersSize(nprobes int) uint64 {
	return (uint64(nprobes)*CounterPairSize + 4095) &^ 4095
}

// PFGenAddr is the vaddr of the PFGen word of Points[i]'s first probe (DFPrefilter).
func (e *Encoded) PFGenAddr(i int) uint64 {
	return e.StateBase + uint64(e.ProbeIndex[i][0])*ProbeStateSize + pfgenOffset
}

// gateOffset and pfgenOffset are the offsets of Gate and PFGen in RawProbeState.
const (
	gateOffset  = 20
	pfgenOffset = 24
)

// ErrTables reports tables the runtime would refuse.
var ErrTables = errors.New("invalid probe tables")

// Encode lays out t with its header at roBase and the probe state at stateBase: Prepare
// and Encode in one.
func (t *Tables) Encode(roBase, stateBase uint64) (*Encoded, error) {
	enc, err := t.Prepare()
	if err != nil {
		return nil, err
	}
	if err := enc.Encode(roBase, stateBase); err != nil {
		return nil, err
	}
	return enc, nil
}

// Prepare checks t and settles what does not depend on where the tables go: their
// size, the probe state's size, and the runtime index of every point and probe. The
// counts and strings of t must not change before Encode; addresses may.
func (t *Tables) Prepare() (*Encoded, error) {
	if len(t.Points) > MaxPoints {
		return nil, fmt.Errorf("%w: %d probepoints (max %d)", ErrTables, len(t.Points), MaxPoints)
	}
	order := make([]int, len(t.Points))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return t.Points[order[a]].Site < t.Points[order[b]].Site })
	nprobes := 0
	for k, i := range order {
		p := &t.Points[i]
		if k > 0 && t.Points[order[k-1]].Site == p.Site {
			return nil, fmt.Errorf("%w: two probepoints at %#x (aggregate their probes)", ErrTables, p.Site)
		}
		if err := checkPoint(p, len(t.Events)); err != nil {
			return nil, fmt.Errorf("%w: probepoint %#x: %w", ErrTables, p.Site, err)
		}
		nprobes += len(p.Probes)
	}
	for _, p := range t.Free {
		if p.Site != 0 || len(p.Probes) != 1 || (p.Probes[0].Type != TKprobe && p.Probes[0].Type != TKretprobe) {
			return nil, fmt.Errorf("%w: a free live point must be unplaced with one kprobe or kretprobe", ErrTables)
		}
		nprobes++
	}
	if nprobes > math.MaxUint32/2 || len(t.Events) > math.MaxUint32/2 || len(t.AbsSlots) > math.MaxUint32/2 {
		return nil, fmt.Errorf("%w: too many entries", ErrTables)
	}
	for _, e := range t.Events {
		if len(e.Fetch) > math.MaxUint32 || len(e.Filter) > 0xffff {
			return nil, fmt.Errorf("%w: event %s/%s: fetch or filter program too long", ErrTables, e.Group, e.Name)
		}
	}
	e := &Encoded{t: t, order: order, nprobes: nprobes, StateSize: uint64(nprobes) * ProbeStateSize,
		ProbeIndex: make([][]int, len(t.Points)), PointIndex: make([]int, len(t.Points)), strAt: map[string]uint64{}}
	probe := 0
	for k, i := range order {
		e.PointIndex[i] = k
		e.ProbeIndex[i] = make([]int, len(t.Points[i].Probes))
		for j := range e.ProbeIndex[i] {
			e.ProbeIndex[i][j] = probe
			probe++
		}
	}

	// layout: header, points, probes, events, abs slots, hooks, signal guard, strings
	// and fetch programs
	off := uint64(HeaderSize)
	e.pointsOff = off
	off += uint64(len(t.Points)+len(t.Free)) * PointSize
	e.probesOff = off
	off += uint64(nprobes) * ProbeSize
	e.eventsOff = off
	off += uint64(len(t.Events)) * EventSize
	e.absOff = off
	off += uint64(len(t.AbsSlots)) * 8
	e.hooksOff = off
	off += HooksSize
	e.sgOff = off
	if sg := t.SigGuard; sg != nil {
		if len(sg.Slots) > math.MaxUint32/2 {
			return nil, fmt.Errorf("%w: too many GOT slots", ErrTables)
		}
		for _, g := range sg.Slots {
			if g.Func < 1 || g.Func > SGMax || g.Slot == 0 || g.Name == "" || g.Entry != (g.Copy != 0) || (g.Entry && g.Lazy != 0) {
				return nil, fmt.Errorf("%w: GOT slot %#x (%q, function %d)", ErrTables, g.Slot, g.Name, g.Func)
			}
		}
		off += SigGuardSize + uint64(len(sg.Slots))*GotSlotSize
	}
	e.unwOff = off
	if len(t.Unwind) > math.MaxUint32/2 {
		return nil, fmt.Errorf("%w: too many unwind rows", ErrTables)
	}
	off += uint64(len(t.Unwind))*UnwindSize + uint64(len(UnwindLookup(t.Unwind)))*4
	off = (off + 7) &^ 7
	e.strOff = off
	// the strings in the order Encode asks for them
	if t.TracePath != "" {
		e.addStr(t.TracePath, true)
	}
	if t.ImageName != "" {
		e.addStr(t.ImageName, true)
	}
	for _, ev := range t.Events {
		e.addStr(ev.Group, true)
		e.addStr(ev.Name, true)
		if len(ev.Fetch)+len(ev.Filter)+len(ev.Triggers) > 0 {
			e.addStr(string(ev.Fetch)+string(ev.Filter)+string(ev.Triggers), false)
		}
	}
	if sg := t.SigGuard; sg != nil {
		for _, g := range sg.Slots {
			e.addStr(g.Name, true)
		}
	}
	if len(t.Sites) > 0 {
		e.addStr(string(t.Sites), false)
	}
	e.Size = align.Up(off+uint64(len(e.strs)), 8)
	return e, nil
}

// addStr puts s (NUL-terminated if nul) in the string table once, 8-aligned, and
// returns its offset there.
func (e *Encoded) addStr(s string, nul bool) uint64 {
	key := s
	if nul {
		key += "\x00"
	}
	if a, ok := e.strAt[key]; ok {
		return a
	}
	for len(e.strs)%8 != 0 {
		e.strs = append(e.strs, 0)
	}
	a := uint64(len(e.strs))
	e.strs = append(e.strs, key...)
	e.strAt[key] = a
	return a
}

// str is the vaddr of a string Prepare put in the table.
func (e *Encoded) str(roBase uint64, s string, nul bool) uint64 {
	if nul {
		s += "\x00"
	}
	a, ok := e.strAt[s]
	e.strMissing = e.strMissing || !ok
	return roBase + e.strOff + a
}

// errChanged reports tables whose counts or strings changed after Prepare.
var errChanged = fmt.Errorf("%w: the tables changed between Prepare and Encode", ErrTables)

// Encode writes the prepared tables into RO with their header at roBase and the probe
// state at stateBase.
func (e *Encoded) Encode(roBase, stateBase uint64) error {
	t := e.t
	nprobes := len(t.Free)
	for _, p := range t.Points {
		nprobes += len(p.Probes)
	}
	if len(e.order) != len(t.Points) || nprobes != e.nprobes {
		return errChanged
	}
	flags := t.Flags
	if t.idle() {
		flags |= HFIdle
	}
	h := RawHeader{
		Magic: Magic, Version: Version, HeaderSize: HeaderSize, Flags: flags,
		NPoints: uint32(len(t.Points)), NProbes: uint32(nprobes), NEvents: uint32(len(t.Events)),
		NAbs: uint32(len(t.AbsSlots)), Self: roBase, OrigEntry: t.OrigEntry,
		Points: roBase + e.pointsOff, Probes: roBase + e.probesOff, Events: roBase + e.eventsOff,
		AbsSlots: roBase + e.absOff, State: stateBase, TraceSize: t.TraceSize, ImageID: t.ImageID,
		Desc: t.Desc, DescSize: t.DescSize, Hooks: roBase + e.hooksOff, NFree: uint32(len(t.Free)),
	}
	if t.Counters != 0 {
		if t.Counters%4096 != 0 {
			return fmt.Errorf("%w: counter window at %#x is not page-aligned", ErrTables, t.Counters)
		}
		h.Counters, h.CountersSize = t.Counters, CountersSize(nprobes)
	}
	if t.SigGuard != nil {
		h.SigGuard = roBase + e.sgOff
	}
	if len(t.Unwind) > 0 {
		h.Unwind, h.UnwindBase, h.NUnwind = roBase+e.unwOff, t.UnwindBase, uint32(len(t.Unwind))
	}
	if t.TracePath != "" {
		h.TracePath = e.str(roBase, t.TracePath, true)
	}
	if t.ImageName != "" {
		h.ImageName = e.str(roBase, t.ImageName, true)
	}
	var out bytes.Buffer
	out.Grow(int(e.Size))                                                 // node's tables are ~20 MB: no doubling
	put := func(v any) { _ = binary.Write(&out, binary.LittleEndian, v) } // bytes.Buffer never fails

	put(&h)
	e.header = h
	probes := make([]RawProbe, 0, nprobes)
	points := make([]*Point, 0, len(t.Points)+len(t.Free))
	for _, i := range e.order {
		points = append(points, &t.Points[i])
	}
	for i := range t.Free {
		points = append(points, &t.Free[i])
	}
	for k, p := range points {
		rp := RawPoint{
			Site: p.Site, Slot: p.Slot, Target: p.Target, FirstProbe: uint32(len(probes)),
			NProbes: uint16(len(p.Probes)), XMode: p.XMode, InsnLen: p.InsnLen, SlotLen: p.SlotLen,
			EmuOp: p.EmuOp, EmuCC: p.EmuCC, PFlags: p.PFlags, DFlags: p.DFlags, RetImm: p.RetImm,
			Aux: p.DCRMap,
		}
		copy(rp.Orig[:], p.Orig)
		put(&rp)
		for _, q := range p.Probes {
			ev := uint32(NoEvent)
			if q.Event >= 0 {
				ev = uint32(q.Event)
			}
			probes = append(probes, RawProbe{
				Point: uint32(k), Event: ev, Type: q.Type, Flags: q.Flags, MaxActive: q.MaxActive,
				DataSize: q.DataSize, PreHandler: q.PreHandler, PostHandler: q.PostHandler,
				FaultHandler: q.FaultHandler, EntryHandler: q.EntryHandler, RetHandler: q.RetHandler,
				User: q.User,
			})
		}
	}
	for i := range probes {
		put(&probes[i])
	}
	for _, ev := range t.Events {
		re := RawEvent{Group: e.str(roBase, ev.Group, true), Name: e.str(roBase, ev.Name, true), FetchLen: uint32(len(ev.Fetch)),
			ID: ev.ID, Flags: ev.Flags, FilterLen: uint32(len(ev.Filter))}
		if len(ev.Triggers) > 0 {
			re.Flags |= EFTriggers
		}
		if len(ev.Fetch)+len(ev.Filter)+len(ev.Triggers) > 0 {
			// the filter and the triggers right after the fetch program: one address
			re.Fetch = e.str(roBase, string(ev.Fetch)+string(ev.Filter)+string(ev.Triggers), false)
		}
		put(&re)
	}
	for _, a := range t.AbsSlots {
		put(a)
	}
	hooks := RawHooks{Init: t.Init, Exit: t.Exit, Stack: t.HandlerStack, Fini: t.Fini}
	if len(t.Sites) > 0 {
		hooks.Sites = e.str(roBase, string(t.Sites), false)
	}
	put(&hooks)
	if sg := t.SigGuard; sg != nil {
		put(&RawSigGuard{Slots: roBase + e.sgOff + SigGuardSize, NSlots: uint32(len(sg.Slots)), Relro: sg.Relro,
			RelroSize: sg.RelroSize, PLTGOT: sg.PLTGOT})
		for _, g := range sg.Slots {
			rg := RawGotSlot{Slot: g.Slot, Lazy: g.Lazy, Name: e.str(roBase, g.Name, true), Func: g.Func}
			if g.Entry {
				rg.Lazy, rg.Flags = g.Copy, GSEntry
			}
			put(&rg)
		}
	}
	if len(t.Unwind) > 0 {
		put(t.Unwind)
		put(UnwindLookup(t.Unwind))
		for out.Len()%8 != 0 {
			out.WriteByte(0)
		}
	}
	if uint64(out.Len()) != e.strOff || e.strMissing {
		return errChanged
	}
	out.Write(e.strs)
	for out.Len()%8 != 0 {
		out.WriteByte(0)
	}
	e.RO, e.StateBase = out.Bytes(), stateBase
	return nil
}

// SetImageID writes id into the encoded header: the id is a hash of the tables
// encoded with id 0, so it is known last.
func (e *Encoded) SetImageID(id uint64) {
	e.t.ImageID, e.header.ImageID = id, id
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, &e.header) // bytes.Buffer never fails
	copy(e.RO, b.Bytes())
}

func checkPoint(p *Point, nevents int) error {
	switch {
	case len(p.Probes) == 0:
		return errors.New("no probes")
	case len(p.Probes) > MaxProbesPerPoint:
		return fmt.Errorf("%d probes (max %d)", len(p.Probes), MaxProbesPerPoint)
	case p.InsnLen == 0 || (p.InsnLen > 15 && p.XMode != XOptimized):
		return fmt.Errorf("instruction length %d", p.InsnLen)
	case len(p.Orig) > 16:
		return fmt.Errorf("%d original bytes (max 16)", len(p.Orig))
	}
	if p.PFlags&PFInner != 0 {
		q := p.Probes[0]
		switch {
		case p.XMode != XBoost:
			return errors.New("an inner-byte point (--verify-regions) must be XBoost")
		case len(p.Probes) != 1 || q.Type != TVerify:
			return errors.New("an inner-byte point has exactly one TVerify probe")
		case q.Event != -1 || q.Flags != 0 || q.PreHandler|q.PostHandler|q.FaultHandler|q.EntryHandler|q.RetHandler|q.User != 0:
			return errors.New("a TVerify probe has no event, flags or handlers")
		case (p.Slot == 0) != (p.SlotLen == 0):
			return errors.New("an inner-byte point has a slot and its length, or neither")
		}
		return nil
	}
	if p.PFlags&PFCount != 0 && p.XMode != XOptimized {
		return errors.New("a count-only point is jump-optimized")
	}
	if p.DFlags&DFPrefilter != 0 {
		q := p.Probes[0]
		if p.XMode != XOptimized || p.PFlags&PFCount != 0 || len(p.Probes) != 1 || q.Type != TKprobe ||
			q.Flags != FTrace || q.Event < 0 || q.PreHandler|q.PostHandler|q.FaultHandler|q.EntryHandler|q.RetHandler|q.User != 0 {
			return errors.New("an inline filter is for a jump-optimized point with one traced event kprobe")
		}
	}
	if p.DFlags&DFSpEntry != 0 && p.DFlags&DFExit != 0 {
		return errors.New("an exit point is no function's entry")
	}
	if p.DFlags&DFExit != 0 {
		if p.XMode != XOptimized || p.PFlags&PFCount != 0 || p.DFlags&(DFPrefilter|DFInlineHist) != 0 {
			return errors.New("an exit point is a jump-optimized point with no inline code")
		}
		for _, q := range p.Probes {
			if q.Type != p.Probes[0].Type || q.Type != TKprobe && q.Type != TKretprobe || q.Flags != FTrace || q.Event < 0 ||
				q.PreHandler|q.PostHandler|q.FaultHandler|q.EntryHandler|q.RetHandler|q.User != 0 {
				return errors.New("an exit point has only traced return events without handlers, all recorded there (kprobes) or all hooking there (kretprobes)")
			}
		}
	}
	if p.PFlags&PFInt3Step != 0 && (p.XMode != XSStep || p.PFlags&(PFBranch|PFCall|PFPushf) != 0) {
		return errors.New("an int3-ended single-step is for a single-stepped copy that falls through")
	}
	switch p.XMode {
	case XSStep, XBoost:
		if p.Slot == 0 || p.SlotLen == 0 {
			return errors.New("single-step and boost need a slot")
		}
	case XEmulate:
		if p.EmuOp < EmuNop || p.EmuOp > EmuLoopne {
			return fmt.Errorf("emulation op %d", p.EmuOp)
		}
	case XOptimized:
		if p.PFlags&PFCount != 0 {
			for _, q := range p.Probes {
				if q.Type != TKprobe || q.Flags&(FTrace|FUser) != 0 || q.Event < 0 ||
					q.PreHandler|q.PostHandler|q.FaultHandler|q.EntryHandler|q.RetHandler|q.User != 0 {
					return errors.New("a count-only point has only plain event kprobes")
				}
			}
		}
		if p.Slot == 0 || p.InsnLen < 5 {
			return fmt.Errorf("a jump-optimized point needs a detour and a DCR of 5 bytes or more (has %d)", p.InsnLen)
		}
		for _, q := range p.Probes {
			if q.PostHandler != 0 {
				return errors.New("a probe with a post handler cannot be jump-optimized")
			}
		}
	default:
		return fmt.Errorf("execution mode %d", p.XMode)
	}
	for _, q := range p.Probes {
		if q.Type != TKprobe && q.Type != TKretprobe {
			return fmt.Errorf("probe type %d", q.Type)
		}
		if q.Event < -1 || q.Event >= nevents {
			return fmt.Errorf("event index %d of %d", q.Event, nevents)
		}
		if q.Flags&FTrace != 0 && q.Event < 0 {
			return errors.New("a tracing probe needs an event")
		}
		if q.Flags&FUser != 0 && (q.User == 0 || q.PreHandler|q.PostHandler|q.FaultHandler|q.EntryHandler|q.RetHandler != 0) {
			return errors.New("a C handler probe (FUser) has its struct (User) and no handler addresses in the table")
		}
		if q.DataSize > MaxDataSize || q.MaxActive > MaxMaxActive {
			return fmt.Errorf("data_size %d / maxactive %d too large", q.DataSize, q.MaxActive)
		}
	}
	return nil
}

// HdrRel is the value to store (little-endian int64) in the runtime word SymHdrRel,
// given that word's link-time address and the header's.
func HdrRel(hdrRelAddr, headerAddr uint64) int64 {
	return int64(headerAddr - hdrRelAddr)
}

// idle says whether nothing of t is armed at start-up, so that nothing reads its probe
// tables before the live-probe thread has checked them (HFIdle): every point a live one
// (DFLive) or a jump-optimized one whose probes are all of live events (a gated live
// point: its jmp stays, its gate closed), every probe of a soft-disabled live event
// without triggers (every event is one), no C handler, no count-only, verify, exit or
// inline-filter point.
func (t *Tables) idle() bool {
	if t.Init != 0 || t.Exit != 0 || len(t.Points) == 0 {
		return false
	}
	for _, e := range t.Events { // (the runtime's start-up fills their control words unread)
		if e.Flags&(EFSoftDisabled|EFLive) != EFSoftDisabled|EFLive || e.Flags&EFTriggers != 0 {
			return false
		}
	}
	for _, p := range t.Points {
		if p.PFlags&(PFCount|PFInner) != 0 || p.DFlags&(DFPrefilter|DFInlineHist|DFExit|DFReopt) != 0 {
			return false
		}
		if p.DFlags&DFLive == 0 && p.XMode != XOptimized {
			return false
		}
		for _, q := range p.Probes {
			if q.Event < 0 || q.Event >= len(t.Events) || q.Flags&FUser != 0 || q.Type == TVerify {
				return false
			}
		}
	}
	return true
}
