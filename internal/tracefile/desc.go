package tracefile

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// The description of a rewritten image: what `kprewrite list`, `trace` and `profile`
// need to name probes and events and to print records (event definitions, probe
// kinds, the runtime index of each probe). It is a framed JSON document at the start
// of .kprewrite.rodata:
//
//	0  [8]byte "KPRWDESC"
//	8  u32     DescVersion
//	12 u32     n, bytes of the payload
//	16 u64     vaddr of the probe tables' header (struct kprw_header)
//	24 u64     the image id (version 4; before, "image_id" in the JSON)
//	32 payload[n], then zero padding to 8 (24 before version 4)
//
// The payload is the JSON compressed with DEFLATE: a program with a probe on each of
// 10,000 functions copies its description into every new trace file at start-up,
// which costs ~0.3 us a KiB there. Version 3 leaves out what follows from the entry
// before (descLean: consecutive probe indexes, events and ids, a site equal to the
// address, the next line of the same definitions file): 317 KB compressed for
// python3.11's 9,809 probes became 190 KB. Version 2 held the whole JSON compressed,
// version 1 the JSON itself; all are still read. Version 4 moved the image id
// to the frame's header: the id is a hash of the image with the id left 0, so it is
// known only after the description is compressed. The frame is self-contained (no
// addresses to relocate), so the runtime can copy it into a trace file as is when it
// registers the image there.
const (
	DescMagic   = "KPRWDESC"
	DescVersion = 4
	descHdrSize = 32
	maxDescSize = 64 << 20
)

// ErrDesc reports a missing or malformed description.
var ErrDesc = errors.New("bad kprewrite image description")

// Desc describes one rewritten image.
type Desc struct {
	ImageID   uint64      `json:"image_id"`
	Image     string      `json:"image"` // name of the rewritten file
	Input     string      `json:"input"` // name of the original file
	PIE       bool        `json:"pie"`
	TracePath string      `json:"trace_path,omitempty"` // the rewrite-time default
	Events    []DescEvent `json:"events"`
	Probes    []DescProbe `json:"probes"` // by runtime probe index
	// Symbols are the image's functions, when an event prints the symbol or symstr
	// types (to name run-time addresses as %pS does).
	Symbols []DescSymbol `json:"symbols,omitempty"`
	// Synthetic are the image's synthetic events (hist triggers' onmatch() targets)
	// and their histograms.
	Synthetic []DescSynthetic `json:"synthetic,omitempty"`
	// Go: the image is a Go program, whose goroutine stacks move (runtime.morestack
	// copies a stack that grows) and share threads: an entry's stack pointer says
	// nothing about which calls have ended (internal/calls).
	Go bool `json:"go,omitempty"`

	tablesAddr uint64
	nLive      int // events added from the trace file's live-event frames (at the end)
}

// DescSynthetic is a synthetic event: its definition ("NAME TYPE FIELD; ...") and its
// hist triggers with their tables' slots in the image's control area.
type DescSynthetic struct {
	Name     string   `json:"name"`
	Def      string   `json:"def"`
	Triggers []string `json:"triggers,omitempty"`
	CtlSlots []uint32 `json:"ctl_slots,omitempty"`
	// ID names its records (after the image's events' ids; 0: an older rewrite, whose
	// synthetic events wrote no records); SwitchSlot is the control area's word whose
	// bit 0 flips Disabled, its state as rewritten (--disable synthetic/NAME).
	ID         uint32 `json:"id,omitempty"`
	SwitchSlot uint32 `json:"switch_slot,omitempty"`
	Disabled   bool   `json:"disabled,omitempty"`
	// Filter is its filter as rewritten ("" none): its records it refuses are not
	// written.
	Filter string `json:"filter,omitempty"`
}

// SyntheticByID returns the synthetic event with trace id id.
func (d *Desc) SyntheticByID(id uint32) (*DescSynthetic, bool) {
	for i := range d.Synthetic {
		if d.Synthetic[i].ID == id && id != 0 {
			return &d.Synthetic[i], true
		}
	}
	return nil, false
}

// DescEvent is one trace event (kprobe-event definition).
type DescEvent struct {
	ID       uint32 `json:"id"` // as trace records name it
	Group    string `json:"group"`
	Name     string `json:"name"`
	Def      string `json:"def"`    // the definition, as given
	Origin   string `json:"origin"` // where it came from ("-e #1", "probes.txt:3")
	Return   bool   `json:"return,omitempty"`
	Disabled bool   `json:"disabled,omitempty"` // registered disabled
	// Soft: disabled but armed (it has triggers or a trigger names it): its triggers
	// run, and enable_event or kprewrite enable switches its records on
	Soft bool `json:"soft,omitempty"`
	// Live: its sites keep their original bytes while it is off; switching it arms and
	// disarms them in the running program (rewrite --disable EVENT; docs/runtime.md,
	// "Live probes")
	Live bool `json:"live,omitempty"`
	// Spare: a prepared site's placeholder (rewrite --prepare), which records nothing;
	// events added at run time (kprewrite probe) ride its probe. At is, for such an
	// event (Live, from the trace file's frames), 1 + the index of that placeholder.
	Spare bool `json:"spare,omitempty"`
	At    int  `json:"at,omitempty"`
	// Free: the placeholder of the free live points (Spare too), where kprewrite probe
	// places events at sites no rewrite prepared; its probes have no site of their own.
	Free bool `json:"free,omitempty"`
	// Jprobe: a C handler's DEFINE_JPROBE (a kprobe whose handler calls the probed
	// function's entry): `list` says j, as the kernel's kprobes/list did.
	Jprobe bool `json:"jprobe,omitempty"`
	// liveHits: an event added at run time, its hits when the file was opened (its
	// count is in the trace file, not among the probes' counters)
	liveHits uint64
	// freeSite, freeAddr: an event added at run time at a site no rewrite prepared (a
	// free live point): its site and the address asked for (freeSite 0: none)
	freeSite, freeAddr uint64
	Filter             string `json:"filter,omitempty"` // the event's filter (kernel grammar), "" for none
	// Triggers are the event's triggers as the kernel's trigger file lists them, in
	// the order they run ("traceoff:count=1 if a > 3").
	Triggers []string `json:"triggers,omitempty"`
	// CtlSlots are the slots of the triggers' counts in the image's control area, in
	// the order of Triggers.
	CtlSlots []uint32 `json:"ctl_slots,omitempty"`
	// GoID is, for an event at a Go function of a Go program, 1 + the offset in its
	// records' data of the goroutine id the rewrite appended after the definition's
	// fixed fields (Record.GoID); 0 when its records carry none.
	GoID int `json:"goid,omitempty"`
}

// DescProbe is one probe, indexed by its runtime index (the trace file's counters).
type DescProbe struct {
	Index  int    `json:"index"`
	Event  int    `json:"event"` // index in Events
	Kind   string `json:"kind"`  // k, b, o, r, rb, ro, or KindVerify
	Addr   uint64 `json:"addr"`  // the address asked for (the function entry)
	Site   uint64 `json:"site"`  // the int3 (after an entry endbr64)
	Symbol string `json:"symbol"`
	Offset uint64 `json:"offset"` // of Site from Symbol ("" when no function holds it)
	// Verify: a would-be-optimized probe of a --verify-regions rewrite (an int3
	// running its whole DCR out of line).
	Verify bool `json:"verify,omitempty"`
	// Exit: one of the places a --count-only return probe counts its function's
	// returns (a ret, the straight-line code before one, or a tail call: Site) instead
	// of hooking the return address at Addr.
	Exit bool `json:"exit,omitempty"`
	// Switchable: a jump-optimized probe whose kind can change while the program
	// runs (kprewrite optimize FILE off|on: an int3 into its detour, or its jmp).
	Switchable bool `json:"switchable,omitempty"`
}

// KindVerify is the kind of the pseudo-probe on an inner byte of a would-be DCR
// (--verify-regions): its hit counter counts violations; Addr is the would-be-
// optimized probe's site, Site the inner byte.
const KindVerify = "verify"

// DescSymbol is one function of the image.
type DescSymbol struct {
	Addr uint64 `json:"addr"`
	Size uint64 `json:"size"`
	Name string `json:"name"`
}

// DescVerify lists, compactly, the KindVerify pseudo-probes of one would-be-optimized
// site (--verify-regions): the inner bytes Site+1 .. Site+N have the runtime probe
// indexes First .. First+N-1 (inner points follow their site in address order). Only
// the JSON uses it: ParseDesc expands it into Probes, so Probes is always dense.
type DescVerify struct {
	Site  uint64 `json:"s"`
	First int    `json:"i"`
	N     int    `json:"n"`
}

// descJSON is the serialized form: Probes without the KindVerify entries, which
// Verify lists compactly (a verify rewrite of node has ~400,000 of them).
type descJSON struct {
	*Desc
	Verify []DescVerify `json:"verify,omitempty"`
}

// descLean is the version 3 form: descJSON with leanProbe and leanEvent entries.
type descLean struct {
	*Desc
	// ImageID hides Desc's: version 4 has it in the frame's header, version 3 here.
	ImageID uint64       `json:"image_id,omitempty"`
	Events  []leanEvent  `json:"events"`
	Probes  []leanProbe  `json:"probes"`
	Verify  []DescVerify `json:"verify,omitempty"`
}

// leanProbe is a DescProbe without what follows from the one before it: an absent
// index or event is the previous one's plus 1 (0 for the first), an absent site the
// address.
type leanProbe struct {
	Index  *int    `json:"i,omitempty"`
	Event  *int    `json:"e,omitempty"`
	Kind   string  `json:"kind"`
	Addr   uint64  `json:"addr"`
	Site   *uint64 `json:"site,omitempty"`
	Symbol string  `json:"symbol,omitempty"`
	Offset uint64  `json:"offset,omitempty"`
	Verify bool    `json:"verify,omitempty"`
	Exit   bool    `json:"exit,omitempty"`
	Switch bool    `json:"sw,omitempty"`
}

// leanEvent is a DescEvent without what follows from the one before it: an absent id
// is the previous one's plus 1 (1 for the first), an absent origin the next line of
// the previous one's file ("defs.txt:7" after "defs.txt:6").
type leanEvent struct {
	ID       *uint32  `json:"id,omitempty"`
	Group    string   `json:"group"`
	Name     string   `json:"name"`
	Def      string   `json:"def"`
	Origin   *string  `json:"origin,omitempty"`
	Return   bool     `json:"return,omitempty"`
	Disabled bool     `json:"disabled,omitempty"`
	Filter   string   `json:"filter,omitempty"`
	Triggers []string `json:"triggers,omitempty"`
	CtlSlots []uint32 `json:"ctl_slots,omitempty"`
	Soft     bool     `json:"soft,omitempty"`
	Live     bool     `json:"live,omitempty"`
	Spare    bool     `json:"spare,omitempty"`
	Free     bool     `json:"free,omitempty"`
	Jprobe   bool     `json:"jprobe,omitempty"`
	GoID     int      `json:"goid,omitempty"`
}

// nextOrigin is the origin an event after one from origin has by default.
func nextOrigin(origin string) string {
	i := strings.LastIndexByte(origin, ':')
	if i < 0 {
		return ""
	}
	n, err := strconv.ParseUint(origin[i+1:], 10, 31)
	if err != nil || strconv.FormatUint(n, 10) != origin[i+1:] {
		return ""
	}
	return origin[:i+1] + strconv.FormatUint(n+1, 10)
}

func leanEvents(evs []DescEvent) []leanEvent {
	out := make([]leanEvent, len(evs))
	id, origin := uint32(1), ""
	for i, e := range evs {
		l := leanEvent{Group: e.Group, Name: e.Name, Def: e.Def, Return: e.Return, Disabled: e.Disabled, Filter: e.Filter,
			Triggers: e.Triggers, CtlSlots: e.CtlSlots, Soft: e.Soft, Live: e.Live, Spare: e.Spare, Free: e.Free, Jprobe: e.Jprobe, GoID: e.GoID}
		if e.ID != id {
			l.ID = &evs[i].ID
		}
		if next := nextOrigin(origin); i == 0 || e.Origin != next {
			l.Origin = &evs[i].Origin
		}
		out[i] = l
		id, origin = e.ID+1, e.Origin
	}
	return out
}

func fullEvents(ls []leanEvent) []DescEvent {
	out := make([]DescEvent, len(ls))
	id, origin := uint32(1), ""
	for i, l := range ls {
		e := DescEvent{ID: id, Group: l.Group, Name: l.Name, Def: l.Def, Origin: nextOrigin(origin), Return: l.Return, Disabled: l.Disabled,
			Filter: l.Filter, Triggers: l.Triggers, CtlSlots: l.CtlSlots, Soft: l.Soft, Live: l.Live, Spare: l.Spare, Free: l.Free, Jprobe: l.Jprobe, GoID: l.GoID}
		if i == 0 {
			e.Origin = ""
		}
		if l.ID != nil {
			e.ID = *l.ID
		}
		if l.Origin != nil {
			e.Origin = *l.Origin
		}
		out[i] = e
		id, origin = e.ID+1, e.Origin
	}
	return out
}

func leanProbes(ps []DescProbe) []leanProbe {
	out := make([]leanProbe, len(ps))
	index, event := 0, 0
	for i, p := range ps {
		l := leanProbe{Kind: p.Kind, Addr: p.Addr, Symbol: p.Symbol, Offset: p.Offset, Verify: p.Verify, Exit: p.Exit, Switch: p.Switchable}
		if p.Index != index {
			l.Index = &ps[i].Index
		}
		if p.Event != event {
			l.Event = &ps[i].Event
		}
		if p.Site != p.Addr {
			l.Site = &ps[i].Site
		}
		out[i] = l
		index, event = p.Index+1, p.Event+1
	}
	return out
}

func fullProbes(ls []leanProbe) []DescProbe {
	out := make([]DescProbe, len(ls))
	index, event := 0, 0
	for i, l := range ls {
		p := DescProbe{Index: index, Event: event, Kind: l.Kind, Addr: l.Addr, Site: l.Addr, Symbol: l.Symbol, Offset: l.Offset, Verify: l.Verify, Exit: l.Exit, Switchable: l.Switch}
		if l.Index != nil {
			p.Index = *l.Index
		}
		if l.Event != nil {
			p.Event = *l.Event
		}
		if l.Site != nil {
			p.Site = *l.Site
		}
		out[i] = p
		index, event = p.Index+1, p.Event+1
	}
	return out
}

// Marshal returns the framed description with the tables' header at tablesAddr.
// The description then says it is at tablesAddr (TablesAddr), as a parsed one does.
func (d *Desc) Marshal(tablesAddr uint64) ([]byte, error) {
	d.tablesAddr = tablesAddr
	c := *d
	c.Probes = nil
	var ver []DescVerify
	for _, p := range d.Probes {
		if p.Kind != KindVerify {
			c.Probes = append(c.Probes, p)
			continue
		}
		if n := len(ver); n > 0 && ver[n-1].Site == p.Addr && ver[n-1].First+ver[n-1].N == p.Index && p.Site == p.Addr+uint64(ver[n-1].N)+1 {
			ver[n-1].N++
			continue
		}
		if p.Site != p.Addr+1 {
			return nil, fmt.Errorf("image description: the first inner byte of the DCR at %#x is %#x", p.Addr, p.Site)
		}
		ver = append(ver, DescVerify{Site: p.Addr, First: p.Index, N: 1})
	}
	js, err := json.Marshal(descLean{&c, 0, leanEvents(c.Events), leanProbes(c.Probes), ver})
	if err != nil {
		return nil, fmt.Errorf("image description: %w", err)
	}
	if len(js) > maxDescSize {
		return nil, fmt.Errorf("image description of %d bytes is too large", len(js))
	}
	var z bytes.Buffer
	zw, _ := flate.NewWriter(&z, flate.DefaultCompression) // the level is valid
	zw.Write(js)                                           // bytes.Buffer never fails
	zw.Close()
	js = z.Bytes()
	b := make([]byte, descHdrSize, descHdrSize+len(js)+8)
	copy(b, DescMagic)
	le := binary.LittleEndian
	le.PutUint32(b[8:], DescVersion)
	le.PutUint32(b[12:], uint32(len(js)))
	le.PutUint64(b[16:], tablesAddr)
	le.PutUint64(b[24:], d.ImageID)
	b = append(b, js...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b, nil
}

// Place records in d and in frame, d's framed description from Marshal, that the
// tables' header is at tablesAddr, as Marshal(tablesAddr) would have: the address is
// in the frame's header, outside the compressed document, so placing a description
// does not change its size or need a second compression.
func (d *Desc) Place(frame []byte, tablesAddr uint64) []byte {
	d.tablesAddr = tablesAddr
	binary.LittleEndian.PutUint64(frame[16:], tablesAddr)
	return frame
}

// SetImageID records id in d and in frame, d's framed description from Marshal: the
// id is in the frame's header, so that it can be set last.
func (d *Desc) SetImageID(frame []byte, id uint64) {
	d.ImageID = id
	binary.LittleEndian.PutUint64(frame[24:], id)
}

// frameHdrSize is the size of a frame's header, by the version at b[8:] (b holds at
// least the 24 bytes every version has).
func frameHdrSize(b []byte) uint64 {
	if binary.LittleEndian.Uint32(b[8:]) >= 4 {
		return descHdrSize
	}
	return 24
}

// DescJSON returns the JSON document of the framed description at the start of b
// (inflated from a version 2 frame).
func DescJSON(b []byte) ([]byte, error) {
	if len(b) < 24 || string(b[:8]) != DescMagic {
		return nil, fmt.Errorf("%w: no %s frame", ErrDesc, DescMagic)
	}
	le := binary.LittleEndian
	v := le.Uint32(b[8:])
	if v < 1 || v > DescVersion {
		return nil, fmt.Errorf("%w: version %d (this kprewrite reads 1 to %d)", ErrDesc, v, DescVersion)
	}
	hs := frameHdrSize(b)
	n := uint64(le.Uint32(b[12:]))
	if hs > uint64(len(b)) || n > uint64(len(b))-hs {
		return nil, fmt.Errorf("%w: %d bytes of payload in a %d-byte frame", ErrDesc, n, len(b))
	}
	js := b[hs : hs+n]
	if v == 1 {
		return js, nil
	}
	// bounded: a frame never inflates past maxDescSize
	js, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(js)), maxDescSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDesc, err)
	}
	if len(js) > maxDescSize {
		return nil, fmt.Errorf("%w: inflates past %d bytes", ErrDesc, maxDescSize)
	}
	return js, nil
}

// ParseDesc parses a framed description at the start of b.
func ParseDesc(b []byte) (*Desc, error) {
	js, err := DescJSON(b)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	d := &Desc{tablesAddr: le.Uint64(b[16:])}
	var verify []DescVerify
	if v := le.Uint32(b[8:]); v >= 3 {
		dl := descLean{Desc: d}
		if err := json.Unmarshal(js, &dl); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDesc, err)
		}
		d.Events, d.Probes, verify = fullEvents(dl.Events), fullProbes(dl.Probes), dl.Verify
		d.ImageID = dl.ImageID
		if v >= 4 {
			d.ImageID = le.Uint64(b[24:])
		}
	} else {
		dj := descJSON{Desc: d}
		if err := json.Unmarshal(js, &dj); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDesc, err)
		}
		verify = dj.Verify
	}
	if err := d.expandVerify(verify); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDesc, err)
	}
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDesc, err)
	}
	return d, nil
}

// expandVerify puts the KindVerify probes of ver back into Probes at their indexes,
// named after the probe at their site.
func (d *Desc) expandVerify(ver []DescVerify) error {
	if len(ver) == 0 {
		return nil
	}
	total := len(d.Probes)
	for _, v := range ver {
		if v.N <= 0 || v.N > 255 || v.First < 0 || v.First > maxDescSize {
			return fmt.Errorf("verify entry %+v", v)
		}
		total += v.N
	}
	if total > maxDescSize {
		return fmt.Errorf("%d probes", total)
	}
	dense := make([]DescProbe, total)
	set := make([]bool, total)
	bySite := map[uint64]*DescProbe{}
	for i := range d.Probes {
		p := &d.Probes[i]
		if p.Index < 0 || p.Index >= total || set[p.Index] {
			return fmt.Errorf("probe index %d", p.Index)
		}
		dense[p.Index], set[p.Index] = *p, true
		bySite[p.Site] = p
	}
	for _, v := range ver {
		at := bySite[v.Site]
		for k := 0; k < v.N; k++ {
			i := v.First + k
			if i >= total || set[i] {
				return fmt.Errorf("verify probe index %d", i)
			}
			p := DescProbe{Index: i, Event: -1, Kind: KindVerify, Addr: v.Site, Site: v.Site + uint64(k) + 1}
			if at != nil && at.Symbol != "" {
				p.Symbol, p.Offset = at.Symbol, at.Offset+uint64(k)+1
			}
			dense[i], set[i] = p, true
		}
	}
	d.Probes = dense
	return nil
}

// TablesAddr is the link-time address of the probe tables' header.
func (d *Desc) TablesAddr() uint64 { return d.tablesAddr }

func (d *Desc) validate() error {
	ids := map[uint32]bool{}
	for _, e := range d.Events {
		if ids[e.ID] {
			return fmt.Errorf("two events with id %d", e.ID)
		}
		ids[e.ID] = true
	}
	for i, p := range d.Probes {
		if p.Index != i {
			return fmt.Errorf("probe %d has index %d", i, p.Index)
		}
		if p.Event < -1 || p.Event >= len(d.Events) {
			return fmt.Errorf("probe %d: event %d of %d", i, p.Event, len(d.Events))
		}
	}
	if !sort.SliceIsSorted(d.Symbols, func(i, j int) bool { return d.Symbols[i].Addr < d.Symbols[j].Addr }) {
		return errors.New("symbols are not sorted")
	}
	return nil
}

// EventByID returns the event with trace id id.
func (d *Desc) EventByID(id uint32) (*DescEvent, int, bool) {
	for i := range d.Events {
		if d.Events[i].ID == id {
			return &d.Events[i], i, true
		}
	}
	return nil, -1, false
}

// Symbolize names the function holding link-time address a: name, offset, size.
func (d *Desc) Symbolize(a uint64) (string, uint64, uint64, bool) {
	i := sort.Search(len(d.Symbols), func(i int) bool { return d.Symbols[i].Addr > a }) - 1
	if i < 0 {
		return "", 0, 0, false
	}
	s := d.Symbols[i]
	if a-s.Addr >= max(s.Size, 1) {
		return "", 0, 0, false
	}
	return s.Name, a - s.Addr, s.Size, true
}

// FindDesc returns the description frame at the start of data, trimmed to its size.
func FindDesc(data []byte) ([]byte, bool) {
	if len(data) < 24 || !bytes.Equal(data[:8], []byte(DescMagic)) {
		return nil, false
	}
	n := uint64(binary.LittleEndian.Uint32(data[12:]))
	end := (frameHdrSize(data) + n + 7) &^ 7
	if end > uint64(len(data)) {
		return nil, false
	}
	return data[:end], true
}
