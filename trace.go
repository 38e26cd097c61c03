package kprewrite

import (
	"time"

	"github.com/kprewrite/kprewrite/internal/tracefile"
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
	// Clock is the clock of the records' times (RewriteOptions.Clock): "tsc", "mono"
	// or "counter", under which a Record's Time is a count, an order, not a duration.
	Clock string
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
	// GoID is the goroutine that wrote the record, when HasGoID: an event at a Go
	// function of a Go program (docs/rewrite.md, "Goroutines").
	GoID    uint64
	HasGoID bool
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
// handlers' trace_printk and --verify-regions violations (Record.Kind). The records
// are all in memory (a few hundred bytes each, their fields decoded): EachRecord reads
// a trace of any length in memory bounded by its threads.
func ReadTrace(path string, binaries ...string) (*Trace, error) {
	var recs []Record
	out, err := eachRecord(path, binaries, func(n int) { recs = make([]Record, 0, n) }, func(r *Record) error {
		recs = append(recs, *r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Records = recs
	return out, nil
}

// EachRecord calls fn with each record of the trace file at path, in ReadTrace's
// order, without holding them: the record is fn's to keep. An error from fn ends the
// reading and is returned. The Trace returned has no Records, the rest as ReadTrace's
// (Undescribed and the counts of the records read).
func EachRecord(path string, fn func(*Record) error, binaries ...string) (*Trace, error) {
	return eachRecord(path, binaries, func(int) {}, fn)
}

// eachRecord is EachRecord; count is told how many records the file holds first.
func eachRecord(path string, bins []string, count func(int), fn func(*Record) error) (*Trace, error) {
	s, descs, err := tracefile.OpenStream(path, bins)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	count(s.Count)
	out := &Trace{Lost: s.Lost, Torn: s.Torn, Overwritten: s.Overwritten, Clock: tracefile.ClockName(&s.Header)}
	c := converter{fm: tracefile.NewFormatter(descs), descs: descs, comms: map[[16]byte]string{}}
	err = s.Each(func(r *tracefile.Record) error {
		rec, ok := c.record(r)
		if !ok {
			out.Undescribed++
			return nil
		}
		return fn(&rec)
	})
	if err != nil {
		return nil, err
	}
	lines, _ := tracefile.Profile(s.Trace, descs)
	for _, l := range lines {
		out.Profile = append(out.Profile, ProfileLine{Image: l.Image, Event: l.Event, Hits: l.Hit, NMissed: l.NMissed})
	}
	return out, nil
}

// converter makes Records of a file's raw records.
type converter struct {
	fm    *tracefile.Formatter
	descs tracefile.Descs
	comms map[[16]byte]string // one string per thread name, not one per record
}

// record converts r (decodeRecord, the thread's name shared); false when it cannot be
// decoded (no description, another type).
func (c *converter) record(r *tracefile.Record) (Record, bool) {
	comm, ok := c.comms[r.Comm]
	if !ok {
		comm = r.CommString()
		c.comms[r.Comm] = comm
	}
	rec, err := decodeRecord(c.fm, c.descs, r, comm)
	return rec, err == nil
}
