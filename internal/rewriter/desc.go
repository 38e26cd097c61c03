package rewriter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// The description of a rewritten image: what `kprewrite list`, `trace` and `profile`
// need to name probes and events and to print records (event definitions, probe
// kinds, the runtime index of each probe). It is a framed JSON document at the start
// of .kprewrite.rodata:
//
//	0  [8]byte "KPRWDESC"
//	8  u32     DescVersion
//	12 u32     n, bytes of JSON
//	16 u64     vaddr of the probe tables' header (struct kprw_header)
//	24 JSON[n], then zero padding to 8
//
// The frame is self-contained (no addresses to relocate), so the runtime can copy it
// into a trace file as is when it registers the image there.
const (
	DescMagic   = "KPRWDESC"
	DescVersion = 1
	descHdrSize = 24
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

	tablesAddr uint64
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
}

// DescProbe is one probe, indexed by its runtime index (the trace file's counters).
type DescProbe struct {
	Index  int    `json:"index"`
	Event  int    `json:"event"` // index in Events
	Kind   string `json:"kind"`  // k, b, r, rb
	Addr   uint64 `json:"addr"`  // the address asked for (the function entry)
	Site   uint64 `json:"site"`  // the int3 (after an entry endbr64)
	Symbol string `json:"symbol"`
	Offset uint64 `json:"offset"` // of Site from Symbol ("" when no function holds it)
}

// DescSymbol is one function of the image.
type DescSymbol struct {
	Addr uint64 `json:"addr"`
	Size uint64 `json:"size"`
	Name string `json:"name"`
}

// Marshal returns the framed description with the tables' header at tablesAddr.
func (d *Desc) Marshal(tablesAddr uint64) ([]byte, error) {
	js, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("image description: %w", err)
	}
	if len(js) > maxDescSize {
		return nil, fmt.Errorf("image description of %d bytes is too large", len(js))
	}
	b := make([]byte, descHdrSize, descHdrSize+len(js)+8)
	copy(b, DescMagic)
	le := binary.LittleEndian
	le.PutUint32(b[8:], DescVersion)
	le.PutUint32(b[12:], uint32(len(js)))
	le.PutUint64(b[16:], tablesAddr)
	b = append(b, js...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b, nil
}

// ParseDesc parses a framed description at the start of b.
func ParseDesc(b []byte) (*Desc, error) {
	if len(b) < descHdrSize || string(b[:8]) != DescMagic {
		return nil, fmt.Errorf("%w: no %s frame", ErrDesc, DescMagic)
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[8:]); v != DescVersion {
		return nil, fmt.Errorf("%w: version %d (this kprewrite reads %d)", ErrDesc, v, DescVersion)
	}
	n := uint64(le.Uint32(b[12:]))
	if n > uint64(len(b)-descHdrSize) {
		return nil, fmt.Errorf("%w: %d bytes of JSON in a %d-byte frame", ErrDesc, n, len(b))
	}
	d := &Desc{tablesAddr: le.Uint64(b[16:])}
	if err := json.Unmarshal(b[descHdrSize:descHdrSize+n], d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDesc, err)
	}
	if err := d.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDesc, err)
	}
	return d, nil
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
	if len(data) < descHdrSize || !bytes.Equal(data[:8], []byte(DescMagic)) {
		return nil, false
	}
	n := uint64(binary.LittleEndian.Uint32(data[12:]))
	end := (descHdrSize + n + 7) &^ 7
	if end > uint64(len(data)) {
		return nil, false
	}
	return data[:end], true
}
