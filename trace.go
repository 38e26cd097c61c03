package kprewrite

import (
	"time"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Trace is a trace file read back: its records in time order and its counters.
type Trace struct {
	Records []Record
	// Lost counts records that did not fit in the file, Torn records their writer died
	// while writing; Undescribed records of images with no description (name their
	// rewritten binaries to ReadTrace) or that do not decode.
	Lost        uint64
	Torn        int
	Undescribed int
	// Overwritten counts records a `record --overwrite` ring's writers wrote over
	// (written, not kept: the flight recorder keeps the most recent ones).
	Overwritten uint64
	// Profile is what `kprewrite profile` prints: hits and misses per event.
	Profile []ProfileLine
}

// RecordKind says what a record is.
type RecordKind uint8

const (
	// KindEvent is an event's hit (a kprobe or return probe definition, or a C handler
	// probe with an event): Group, Event, Return, Fields.
	KindEvent RecordKind = iota
	// KindPrintk is a C handler's trace_printk: Event is the function that called it,
	// Text its text; Addr the site of the probe whose handler ran (0 outside any, as
	// in kprewrite_init), RetAddr the address trace_printk returned to.
	KindPrintk
	// KindViolation is a --verify-regions violation: control reached Addr, inside the
	// region the probe at field "site" (uint64) would have replaced with a jmp; Event
	// is "kprewrite_violation", and field "sym" names Addr as FUNC+0xOFF when the
	// image's description knows it.
	KindViolation
	// KindSynthetic is a synthetic event an onmatch() or onmax() trace action
	// generated: Group "synthetic", Event its name, Fields its fields (uint64, or
	// int64 for the signed types), Addr the site of the hit whose trigger generated it.
	KindSynthetic
)

// Record is one trace record: a probe's hit with its event's fields decoded, a C
// handler's trace_printk, or a --verify-regions violation (Kind).
type Record struct {
	Kind   RecordKind
	Image  string // the rewritten image's name
	Group  string
	Event  string
	Return bool // a return probe's record
	Comm   string
	PID    uint32
	TID    uint32
	CPU    uint32
	// Time is the record's CLOCK_MONOTONIC timestamp (the kernel tracer's default
	// clock is the same time base).
	Time time.Duration
	// Addr is the probed address as the program saw it (the function's, for a return
	// probe); RetAddr the address a return probe returned to.
	Addr    uint64
	RetAddr uint64
	// Fields are the event's fetch arguments in definition order: uint64 for the
	// unsigned, hex, bitfield and symbol types, int64 for the signed ones, float32
	// and float64 for f32 and f64 (NaN and the infinities as their text), byte for
	// char, string for string, ustring and symstr (nil where the read faulted, which
	// the kernel prints as "(fault)") and for a value an enum table names, []any for
	// arrays.
	Fields []Field
	// Text is a trace_printk's text (KindPrintk), without its trailing newline.
	Text string
	// Line is the record as `kprewrite trace` prints it (the kernel tracer's format).
	Line string
}

// Field is one fetch argument of a record.
type Field struct {
	Name  string
	Value any
}

// Field returns the value of the field named name.
func (r *Record) Field(name string) (any, bool) {
	for _, f := range r.Fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return nil, false
}

// ProfileLine is one event's counters, as kprobe_profile prints them.
type ProfileLine struct {
	Image   string
	Event   string // GROUP/EVENT
	Hits    uint64
	NMissed uint64
}

// ReadTrace reads the trace file at path. The descriptions that name its events come
// from the file itself (a rewritten program copies its image's description in), or
// from the rewritten binaries given, or from path without its ".trace" suffix.
// Every record `kprewrite trace` prints is there, in the same order: events' hits, C
// handlers' trace_printk and --verify-regions violations (Record.Kind).
func ReadTrace(path string, binaries ...string) (*Trace, error) {
	tr, descs, err := tracefile.Open(path, binaries)
	if err != nil {
		return nil, err
	}
	out := &Trace{Lost: tr.Lost, Torn: tr.Torn, Overwritten: tr.Overwritten}
	fm := tracefile.NewFormatter(descs)
	for i := range tr.Records {
		r := &tr.Records[i]
		rec := Record{Comm: r.CommString(), PID: r.PID, TID: r.TID, CPU: uint32(r.CPU), Time: time.Duration(r.TsNs)}
		if d := descs[r.ImageID]; d != nil {
			rec.Image = d.Image
		}
		switch r.Type {
		case kprt.RecKprobe, kprt.RecKretprobe:
		case kprt.RecPrintk:
			rec.Kind = KindPrintk
			rec.Event, rec.Text = tracefile.DecodePrintk(r)
			if r.IP != 0 {
				rec.Addr = r.Bias + r.IP
			}
			rec.RetAddr = r.RetIP
			rec.Line, _ = fm.Line(r)
			out.Records = append(out.Records, rec)
			continue
		case kprt.RecSynth:
			name, fields, err := fm.Synth(r)
			if err != nil {
				out.Undescribed++
				continue
			}
			rec.Kind, rec.Group, rec.Event, rec.Addr = KindSynthetic, "synthetic", name, r.Bias+r.IP
			for _, f := range fields {
				if f.Signed {
					rec.Fields = append(rec.Fields, Field{Name: f.Name, Value: f.Value})
				} else {
					rec.Fields = append(rec.Fields, Field{Name: f.Name, Value: uint64(f.Value)})
				}
			}
			rec.Line, _ = fm.Line(r)
			out.Records = append(out.Records, rec)
			continue
		case kprt.RecViolation:
			v, err := fm.DecodeViolation(r)
			if err != nil {
				out.Undescribed++
				continue
			}
			rec.Kind, rec.Event, rec.Addr = KindViolation, tracefile.ViolationEvent, v.At
			rec.Fields = append(rec.Fields, Field{Name: "site", Value: v.Site})
			if v.Symbol != "" {
				rec.Fields = append(rec.Fields, Field{Name: "sym", Value: v.Symbol})
			}
			rec.Line, _ = fm.Line(r)
			out.Records = append(out.Records, rec)
			continue
		default:
			out.Undescribed++
			continue
		}
		ev, err := fm.Decode(r)
		if err != nil {
			out.Undescribed++
			continue
		}
		line, err := fm.Line(r)
		if err != nil {
			out.Undescribed++
			continue
		}
		rec.Image, rec.Group, rec.Event, rec.Return, rec.Addr, rec.RetAddr, rec.Line = ev.Image, ev.Group, ev.Name, ev.Return, ev.Addr, ev.RetAddr, line
		for _, v := range ev.Fields {
			rec.Fields = append(rec.Fields, Field{Name: v.Name, Value: v.Value})
		}
		out.Records = append(out.Records, rec)
	}
	lines, _ := tracefile.Profile(tr, descs)
	for _, l := range lines {
		out.Profile = append(out.Profile, ProfileLine{Image: l.Image, Event: l.Event, Hits: l.Hit, NMissed: l.NMissed})
	}
	return out, nil
}
