package tracefile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/recentid"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Descs finds the description of each image a trace file names.
type Descs map[uint64]*Desc

// Add registers d.
func (ds Descs) Add(d *Desc) { ds[d.ImageID] = d }

// event is one parsed event definition of an image.
type event struct {
	desc  *Desc
	index int
	def   *eventdef.Probe
	err   error
	addr  map[uint64]uint64 // site -> the address asked for, of this event's probes
}

// Formatter prints trace records as the kernel's tracer prints its events.
type Formatter struct {
	descs  Descs
	events map[[2]uint64]*event  // (image, event id)
	recent recentid.Cache[event] // the last image's events by id
	addrs  map[*Desc][]map[uint64]uint64
	// Unknown counts records whose image or event has no description.
	Unknown int
	// Counter: record times are counts (kprt.ClockCounter), printed as the count the
	// way the kernel prints its counter clock, not as seconds.
	Counter bool
	// GoID: Line ends the line of a record that carries a goroutine id with
	// " goid=N" (trace --goid; the uprobe tracer's lines have no such field).
	GoID bool
}

// ClockName is the name of the clock the times of a trace with header h are of (the
// kernel's trace_clock names; see rewrite --clock).
func ClockName(h *kprt.RawTraceHeader) string {
	switch h.Clock {
	case kprt.ClockMono:
		return "mono"
	case kprt.ClockCounter:
		return "counter"
	}
	return "tsc"
}

// head is a line's start: the thread, its CPU and the record's time.
func (fm *Formatter) head(r *Record) string {
	if fm.Counter {
		return fmt.Sprintf("%16s-%-7d [%03d] %12d", r.CommString(), r.TID, r.CPU, r.TsNs)
	}
	ts := r.TsNs / 1000
	return fmt.Sprintf("%16s-%-7d [%03d] %5d.%06d", r.CommString(), r.TID, r.CPU, ts/1000000, ts%1000000)
}

// NewFormatter returns a formatter for records of the described images.
func NewFormatter(descs Descs) *Formatter {
	return &Formatter{descs: descs, events: map[[2]uint64]*event{}}
}

// siteAddrs indexes, per event of d, its probes' sites to the addresses asked for
// (one pass over the probes: a record must not cost a search of them).
func (fm *Formatter) siteAddrs(d *Desc) []map[uint64]uint64 {
	if m, ok := fm.addrs[d]; ok {
		return m
	}
	m := make([]map[uint64]uint64, len(d.Events))
	for _, p := range d.Probes {
		if p.Event < 0 || p.Event >= len(m) {
			continue
		}
		if m[p.Event] == nil {
			m[p.Event] = map[uint64]uint64{}
		}
		if _, dup := m[p.Event][p.Site]; !dup {
			m[p.Event][p.Site] = p.Addr
		}
	}
	for i, e := range d.Events { // an event added at run time: its prepared site's
		if e.freeSite != 0 {
			m[i] = map[uint64]uint64{e.freeSite: e.freeAddr} // (at a free live point: its own)
		} else if e.At > 0 && e.At <= len(m) {
			m[i] = m[e.At-1]
		}
	}
	if fm.addrs == nil {
		fm.addrs = map[*Desc][]map[uint64]uint64{}
	}
	fm.addrs[d] = m
	return m
}

func (fm *Formatter) event(image uint64, id uint32) *event {
	return fm.recent.Get(image, id, fm.lookupEvent)
}

func (fm *Formatter) lookupEvent(image uint64, id uint32) *event {
	key := [2]uint64{image, uint64(id)}
	if e, ok := fm.events[key]; ok {
		return e
	}
	var e *event
	if d := fm.descs[image]; d != nil {
		if de, i, ok := d.EventByID(id); ok {
			e = &event{desc: d, index: i, addr: fm.siteAddrs(d)[i]}
			e.def, e.err = eventdef.Parse(de.Def)
			if e.err == nil && (e.def.Group != de.Group || e.def.Event != de.Name) {
				e.err = fmt.Errorf("definition %q does not define %s/%s", de.Def, de.Group, de.Name)
			}
		}
	}
	fm.events[key] = e
	return e
}

// funcAddr is the link-time address a record's head names: the address the probe
// was asked for (a function entry, before an endbr64 the int3 went after), as the
// kernel's uprobe tracer prints the probed address.
func (e *event) funcAddr(site uint64) uint64 {
	if a, ok := e.addr[site]; ok {
		return a
	}
	return site
}

// Line formats one record as a trace line (without the newline):
//
//	<comm>-<pid> [cpu] <sec>.<usec>: <event>: (<addr>) name=value ...
//
// with (<ret> <- <func>) for return probes, addresses as the program saw them.
func (fm *Formatter) Line(r *Record) (string, error) {
	if r.Type == kprt.RecViolation {
		return fm.violationLine(r)
	}
	if r.Type == kprt.RecPrintk {
		return fm.printkLine(r), nil // trace_printk() of a C handler (handlers.go)
	}
	if r.Type == kprt.RecStack {
		return fm.stackLines(r)
	}
	if r.Type == kprt.RecSynth {
		return fm.synthLine(r)
	}
	e, opt, err := fm.recordEvent(r)
	if err != nil {
		return "", err
	}
	body, err := eventdef.FormatEvent(e.def, r.Bias+e.funcAddr(r.IP), r.RetIP, r.Data, opt)
	if err != nil {
		return "", err
	}
	if fm.GoID && r.HasGoID {
		body += " goid=" + strconv.FormatUint(r.GoID, 10)
	}
	return fm.head(r) + ": " + body, nil
}

// recordEvent finds the event a probe's record is a hit of, and how its addresses are
// named.
func (fm *Formatter) recordEvent(r *Record) (*event, eventdef.FormatOptions, error) {
	e, err := fm.eventOf(r)
	if err != nil {
		return nil, eventdef.FormatOptions{}, err
	}
	opt := eventdef.FormatOptions{Symbolize: func(a uint64) (string, uint64, uint64, bool) {
		return e.desc.Symbolize(a - r.Bias)
	}}
	return e, opt, nil
}

// Decoded is a probe's record with its event named and its fields decoded.
type Decoded struct {
	Image  string // the image's name (the rewritten file's base name)
	Group  string
	Name   string
	Return bool
	// Addr is the probed address as the program saw it (the function's, for a return
	// probe), RetAddr the address a return probe returned to.
	Addr, RetAddr uint64
	Fields        []eventdef.Value
}

// Decode names the event of a probe's record (Type RecKprobe or RecKretprobe) and
// decodes its fields.
func (fm *Formatter) Decode(r *Record) (*Decoded, error) {
	if r.Type != kprt.RecKprobe && r.Type != kprt.RecKretprobe {
		return nil, fmt.Errorf("record of type %d is not a probe's", r.Type)
	}
	e, opt, err := fm.recordEvent(r)
	if err != nil {
		return nil, err
	}
	vals, err := eventdef.DecodeArgs(e.def, r.Data, opt)
	if err != nil {
		return nil, err
	}
	return &Decoded{Image: e.desc.Image, Group: e.def.Group, Name: e.def.Event, Return: e.def.Return,
		Addr: r.Bias + e.funcAddr(r.IP), RetAddr: r.RetIP, Fields: vals}, nil
}

// eventOf finds the event a probe's record is a hit of.
func (fm *Formatter) eventOf(r *Record) (*event, error) {
	e := fm.event(r.ImageID, r.EventID)
	if e == nil {
		fm.Unknown++
		return nil, fmt.Errorf("record of event %d of image %#x, which no description names", r.EventID, r.ImageID)
	}
	return e, e.err
}

// Head names the event of a probe's record (Type RecKprobe or RecKretprobe) as Decode
// does, without decoding its fields.
func (fm *Formatter) Head(r *Record) (d Decoded, err error) {
	e, err := fm.eventOf(r)
	if err != nil {
		return d, err
	}
	return Decoded{Image: e.desc.Image, Group: e.def.Group, Name: e.def.Event, Return: e.def.Return,
		Addr: r.Bias + e.funcAddr(r.IP), RetAddr: r.RetIP}, nil
}

// Fields decodes the fields of a probe's record as Decode does; an event without
// fetch arguments costs a lookup only.
func (fm *Formatter) Fields(r *Record) ([]eventdef.Value, error) {
	if e := fm.event(r.ImageID, r.EventID); e != nil && e.err == nil && len(e.def.Args) == 0 {
		return nil, nil
	}
	d, err := fm.Decode(r)
	if err != nil {
		return nil, err
	}
	return d.Fields, nil
}

// StackFrame is one frame of a stacktrace record: its run-time pc, and the function
// holding it when the image's description knows it (Func "" otherwise: another
// object's code, which the walk stopped at).
type StackFrame struct {
	PC, Off, Size uint64
	Func          string
}

// Stack decodes a stacktrace trigger's record (Type RecStack): its frames, innermost
// first, named with the symbols of the event's image.
func (fm *Formatter) Stack(r *Record) ([]StackFrame, error) {
	if r.Type != kprt.RecStack {
		return nil, fmt.Errorf("record of type %d is not a stack", r.Type)
	}
	e, err := fm.eventOf(r)
	if err != nil {
		return nil, err
	}
	fr := make([]StackFrame, 0, len(r.Data)/8)
	for k := 0; k+8 <= len(r.Data); k += 8 {
		f := StackFrame{PC: binary.LittleEndian.Uint64(r.Data[k:])}
		if name, off, size, ok := e.desc.Symbolize(f.PC - r.Bias); ok {
			f.Func, f.Off, f.Size = name, off, size
		}
		fr = append(fr, f)
	}
	return fr, nil
}

// stackLines formats a stacktrace record as the kernel's stack entry: a head line
// saying "<stack trace>", then " => FUNC" per frame (the kernel's default, without
// the sym-offset option), " => <PC>" for a pc outside the image.
func (fm *Formatter) stackLines(r *Record) (string, error) {
	fr, err := fm.Stack(r)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(fm.head(r) + ": <stack trace>")
	for _, f := range fr {
		if f.Func != "" {
			fmt.Fprintf(&b, "\n => %s", f.Func)
		} else {
			fmt.Fprintf(&b, "\n => <%016x>", f.PC)
		}
	}
	return b.String(), nil
}

// Synth names a synthetic event's record (Type RecSynth) and decodes its fields, in
// their definition's order (each kept in 8 bytes, printed at its type's size and sign).
func (fm *Formatter) Synth(r *Record) (name string, fields []SynthField, err error) {
	if r.Type != kprt.RecSynth {
		return "", nil, fmt.Errorf("record of type %d is not a synthetic event's", r.Type)
	}
	d := fm.descs[r.ImageID]
	var sy *DescSynthetic
	if d != nil {
		sy, _ = d.SyntheticByID(r.EventID)
	}
	if sy == nil {
		fm.Unknown++
		return "", nil, fmt.Errorf("record of synthetic event %d of image %#x, which no description names", r.EventID, r.ImageID)
	}
	def, err := evhist.ParseSynthetic(sy.Def)
	if err != nil {
		return "", nil, err
	}
	for i := range def.Names {
		if 8*i+8 > len(r.Data) {
			break
		}
		v := binary.LittleEndian.Uint64(r.Data[8*i:])
		fields = append(fields, SynthField{Name: def.Names[i], Type: def.Types[i], Signed: def.Signed[i], Value: synthValue(v, def.Types[i], def.Signed[i])})
	}
	return sy.Name, fields, nil
}

// SynthField is one field of a synthetic event's record.
type SynthField struct {
	Name, Type string
	Signed     bool
	Value      int64 // sign-extended from its type's size when signed, else truncated
}

// synthValue is a synthetic field's value at its type's size (u32 keeps 32 bits, s32
// is sign-extended from them), as the kernel stores and prints each field.
func synthValue(v uint64, typ string, signed bool) int64 {
	bits := 64
	switch typ {
	case "u32", "s32", "int", "unsigned int", "pid_t":
		bits = 32
	case "u16", "s16":
		bits = 16
	case "u8", "s8", "bool":
		bits = 8
	}
	if bits == 64 {
		return int64(v)
	}
	v &= 1<<bits - 1
	if signed && v>>(bits-1) != 0 {
		return int64(v) - 1<<bits
	}
	return int64(v)
}

// synthLine formats a synthetic event's record as the kernel prints one:
//
//	<comm>-<pid> [cpu] <sec>.<usec>: <name>: field=value field=value
//
// (signed fields in decimal with their sign, unsigned ones in decimal).
func (fm *Formatter) synthLine(r *Record) (string, error) {
	name, fields, err := fm.Synth(r)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s:", fm.head(r), name)
	for _, f := range fields {
		if f.Signed {
			fmt.Fprintf(&b, " %s=%d", f.Name, f.Value)
		} else {
			fmt.Fprintf(&b, " %s=%d", f.Name, uint64(f.Value))
		}
	}
	return b.String(), nil
}

// violationLine formats a --verify-regions violation record:
//
//	<comm>-<pid> [cpu] <sec>.<usec>: kprewrite_violation: (<byte>) site=<probe> sym=<func+off>
//
// with run-time addresses: control reached <byte>, inside the DCR the probe at
// <probe> would have replaced with a jmp.
func (fm *Formatter) violationLine(r *Record) (string, error) {
	v, err := fm.DecodeViolation(r)
	if err != nil {
		return "", err
	}
	sym := ""
	if v.Symbol != "" {
		sym = " sym=" + v.Symbol
	}
	return fmt.Sprintf("%s: %s: (%#x) site=%#x%s", fm.head(r), ViolationEvent, v.At, v.Site, sym), nil
}

// ViolationHit is a --verify-regions violation record decoded: control reached At (a
// run-time address), inside the DCR the probe at Site would have replaced with a jmp;
// Symbol names At as FUNC+0xOFF when the image's description knows it.
type ViolationHit struct {
	At, Site uint64
	Symbol   string
}

// DecodeViolation decodes a record of type RecViolation.
func (fm *Formatter) DecodeViolation(r *Record) (*ViolationHit, error) {
	if r.Type != kprt.RecViolation {
		return nil, fmt.Errorf("record of type %d is not a violation", r.Type)
	}
	if len(r.Data) < 8 {
		return nil, fmt.Errorf("violation record at %#x without its probe address", r.IP)
	}
	v := &ViolationHit{At: r.Bias + r.IP, Site: r.Bias + binary.LittleEndian.Uint64(r.Data)}
	if d := fm.descs[r.ImageID]; d != nil {
		for i := range d.Probes {
			if p := &d.Probes[i]; p.Kind == KindVerify && p.Site == r.IP && p.Symbol != "" {
				v.Symbol = fmt.Sprintf("%s+%#x", p.Symbol, p.Offset)
				break
			}
		}
	}
	return v, nil
}

// ViolationEvent names --verify-regions violation records in `kprewrite trace`.
const ViolationEvent = "kprewrite_violation"

// WriteTrace prints every record of s in time order, after a header like the kernel's
// trace file has. Records it cannot format are reported on errw (once per event) and
// left out.
func WriteTrace(w, errw io.Writer, s *Stream, descs Descs, header bool) error {
	return WriteTraceEvents(w, errw, s, descs, header, nil, false)
}

// WriteTraceEvents is WriteTrace of the records of the events match accepts (nil:
// every record): a probe's record by its event's group and name, a stack trace with
// the record it follows, a synthetic event's as group "synthetic"; with match, a C
// handler's trace_printk text and a violation are left out.
func WriteTraceEvents(w, errw io.Writer, s *Stream, descs Descs, header bool, match func(group, name string) bool, goid bool) error {
	if header && s.Until != 0 {
		until := fmt.Sprintf("%d.%06d", s.Until/1e9, s.Until%1e9/1e3)
		if s.Header.Clock == kprt.ClockCounter {
			until = fmt.Sprint(s.Until)
		}
		fmt.Fprintf(w, "# tracer: kprewrite\n#\n# snapshot: the records written up to %s, the latest of %d snapshots\n# clock: %s\n",
			until, s.Header.SnapCount, ClockName(&s.Header))
		header = false
		fmt.Fprintf(w, "#\n#           TASK-PID     CPU#   TIMESTAMP  FUNCTION\n#              | |         |       |         |\n")
	}
	if header {
		fmt.Fprintf(w, "# tracer: kprewrite\n#\n# entries-in-buffer/entries-written: %d/%d\n", s.Count, uint64(s.Count)+s.Lost+uint64(s.Torn)+s.Overwritten)
		fmt.Fprintf(w, "# clock: %s\n", ClockName(&s.Header))
		if s.Overwritten > 0 {
			// record --overwrite: the flight recorder keeps the most recent ones
			fmt.Fprintf(w, "# overwritten: %d records were overwritten by later ones in the ring (record --overwrite)\n", s.Overwritten)
		}
		if s.Lost > 0 && s.Header.RingBlocks != 0 {
			// kprewrite record's ring: a writer found no free block
			fmt.Fprintf(w, "# lost: %d records found the ring full (the recorder fell behind, was stopped or had finished)\n", s.Lost)
		} else if s.Lost > 0 {
			fmt.Fprintf(w, "# lost: %d records did not fit in the trace file\n", s.Lost)
		}
		if s.Torn > 0 {
			fmt.Fprintf(w, "# torn: %d records were cut short by their writer's death\n", s.Torn)
		}
		fmt.Fprintf(w, "#\n#           TASK-PID     CPU#   TIMESTAMP  FUNCTION\n#              | |         |       |         |\n")
	}
	fm := NewFormatter(descs)
	fm.Counter = s.Header.Clock == kprt.ClockCounter
	fm.GoID = goid
	reported := map[string]bool{}
	var sb strings.Builder
	keepStack := true
	err := s.Each(func(r *Record) error {
		if match != nil && !fm.keep(r, match, &keepStack) {
			return nil
		}
		line, err := fm.Line(r)
		if err != nil {
			if msg := err.Error(); !reported[msg] {
				reported[msg] = true
				fmt.Fprintf(errw, "kprewrite trace: %s\n", msg)
			}
			return nil
		}
		sb.WriteString(line)
		sb.WriteByte('\n')
		if sb.Len() > 1<<16 {
			if _, err := io.WriteString(w, sb.String()); err != nil {
				return err
			}
			sb.Reset()
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, sb.String())
	return err
}

// ProfileLine is one event's counters.
type ProfileLine struct {
	Image   string
	Event   string // GROUP/EVENT
	Name    string // EVENT
	Hit     uint64
	NMissed uint64
}

// Violation is the count of --verify-regions violations at one inner byte.
type Violation struct {
	Image  string
	Byte   uint64 // link-time address of the inner byte reached
	Site   uint64 // the would-be-optimized probe whose DCR holds it
	Symbol string // function+offset of Byte, when known
	Hits   uint64
}

// Violations sums, per image rewritten with --verify-regions, the hits on inner DCR
// bytes (the KindVerify probes' counters): verify reports whether any image of tr
// was such a rewrite, total the hits, and list the bytes that were hit.
func Violations(tr *Trace, descs Descs) (verify bool, total uint64, list []Violation) {
	for _, im := range tr.Images {
		d := descs[im.ImageID]
		if d == nil || len(d.Probes) != len(im.Counters) {
			continue
		}
		for i, c := range im.Counters {
			p := &d.Probes[i]
			if p.Kind != KindVerify {
				continue
			}
			verify = true
			if c.Hit == 0 {
				continue
			}
			total += c.Hit
			v := Violation{Image: d.Image, Byte: p.Site, Site: p.Addr, Hits: c.Hit}
			if p.Symbol != "" {
				v.Symbol = fmt.Sprintf("%s+%#x", p.Symbol, p.Offset)
			}
			list = append(list, v)
		}
	}
	return verify, total, list
}

// Profile sums the trace file's {hit, nmissed} counters per event, in image and
// definition order. Images without a description are skipped and counted.
func Profile(tr *Trace, descs Descs) (lines []ProfileLine, unknown int) {
	for _, im := range tr.Images {
		d := descs[im.ImageID]
		if d == nil || len(d.Probes) != len(im.Counters) {
			unknown++
			continue
		}
		per := make([]ProfileLine, len(d.Events))
		for i, e := range d.Events {
			per[i] = ProfileLine{Image: d.Image, Event: e.Group + "/" + e.Name, Name: e.Name, Hit: e.liveHits}
		}
		for i, c := range im.Counters {
			if ev := d.Probes[i].Event; ev >= 0 {
				per[ev].Hit += c.Hit
				per[ev].NMissed += c.NMissed
			}
		}
		for i, e := range d.Events {
			if !e.Spare || per[i].Hit+per[i].NMissed > 0 { // (a prepared site's own event, once switched on)
				lines = append(lines, per[i])
			}
		}
	}
	return lines, unknown
}

// printkLine formats a trace_printk record as the kernel's tracer prints one:
//
//	<comm>-<pid> [cpu] <sec>.<usec>: <function>: <text>
func (fm *Formatter) printkLine(r *Record) string {
	fn, text := DecodePrintk(r)
	return fm.head(r) + ": " + fn + ": " + text
}

// DecodePrintk splits a trace_printk record (RecPrintk) into the name of the function
// that called trace_printk and its text, without the trailing newlines.
func DecodePrintk(r *Record) (fn, text string) {
	f, t, _ := bytes.Cut(r.Data, []byte{0})
	return string(f), strings.TrimRight(string(t), "\n")
}

// keep says whether record r is of an event match accepts; *stack carries, from a
// probe's record to the stack trace after it, whether it was kept.
func (fm *Formatter) keep(r *Record, match func(group, name string) bool, stack *bool) bool {
	switch r.Type {
	case kprt.RecKprobe, kprt.RecKretprobe:
		d, err := fm.Head(r)
		*stack = err == nil && match(d.Group, d.Name)
		return *stack
	case kprt.RecStack:
		return *stack
	case kprt.RecSynth:
		if name, _, err := fm.Synth(r); err == nil {
			return match("synthetic", name)
		}
	}
	return false
}
