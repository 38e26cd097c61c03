package export

import (
	"bytes"
	"io"
	"strconv"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// WriteJSONLines writes one JSON object per record, in time order, one per line (the
// form DuckDB's read_json, ClickHouse's JSONEachRow and Spark read):
//
//	{"time_ns":N,"cpu":N,"pid":N,"tid":N,"comm":S,"image":S,"type":"kprobe",
//	 "group":S,"event":S,"addr":N,"fields":{"a":1,"s":"x"}}
//
// type is kprobe, kretprobe (with "ret_addr"), printk ("function", "text") or
// violation ("site", "sym"); addresses are the program's, integers exact.
func WriteJSONLines(w io.Writer, in *Input) error {
	o := newOutput(w)
	jw := &jsonlWriter{in: in, fm: in.formatter()}
	err := in.Stream.Each(func(r *tracefile.Record) error {
		start := len(o.buf)
		b, ok := jw.appendRecord(o.buf, r)
		if !ok {
			o.buf = b[:start]
			return nil
		}
		o.buf = append(b, "}\n"...)
		return o.writeIfFull()
	})
	if err != nil {
		return err
	}
	return o.close()
}

// jsonlWriter is WriteJSONLines's state: the formatter, and the last record's image
// id and the JSON string of its name, which consecutive records mostly share.
type jsonlWriter struct {
	in        *Input
	fm        *tracefile.Formatter
	lastID    uint64
	lastImage []byte
}

// appendRecord appends r's object without its closing brace; ok is false for a
// record left out (a kind this form has no type for, or one that does not decode:
// the reason is reported), whose partial object the caller drops.
func (jw *jsonlWriter) appendRecord(b []byte, r *tracefile.Record) (_ []byte, ok bool) {
	b = jw.appendCommon(b, r)
	var err error
	switch r.Type {
	case kprt.RecKprobe, kprt.RecKretprobe:
		b, err = jw.appendProbe(b, r)
	case kprt.RecPrintk:
		fn, text := tracefile.DecodePrintk(r)
		b = append(b, `,"type":"printk","function":`...)
		b = appendString(b, fn)
		b = append(b, `,"text":`...)
		b = appendString(b, text)
	case kprt.RecViolation:
		b, err = jw.appendViolation(b, r)
	case kprt.RecSynth:
		b, err = jw.appendSynth(b, r)
	case kprt.RecStack:
		b, err = jw.appendStack(b, r)
	default:
		return b, false
	}
	if err != nil {
		jw.in.report(err)
		return b, false
	}
	return b, true
}

// appendCommon appends the members every record has: time, CPU, pid, tid (and the
// goroutine id of a record that carries one), comm and image.
func (jw *jsonlWriter) appendCommon(b []byte, r *tracefile.Record) []byte {
	b = append(b, `{"time_ns":`...)
	b = strconv.AppendUint(b, r.TsNs, 10)
	b = append(b, `,"cpu":`...)
	b = strconv.AppendUint(b, uint64(r.CPU), 10)
	b = append(b, `,"pid":`...)
	b = strconv.AppendUint(b, uint64(r.PID), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(r.TID), 10)
	if r.HasGoID {
		b = append(b, `,"goid":`...)
		b = strconv.AppendUint(b, r.GoID, 10)
	}
	b = append(b, `,"comm":`...)
	b = appendString(b, commBytes(r))
	if r.ImageID != jw.lastID || jw.lastImage == nil {
		jw.lastID, jw.lastImage = r.ImageID, []byte{}
		if d := jw.in.Descs[r.ImageID]; d != nil {
			jw.lastImage = appendString(nil, d.Image)
		} else {
			jw.lastImage = appendString(nil, "")
		}
	}
	b = append(b, `,"image":`...)
	return append(b, jw.lastImage...)
}

// appendProbe appends a kprobe's or kretprobe's members: its event, the probed
// address (and a return's ret_addr) and its fields.
func (jw *jsonlWriter) appendProbe(b []byte, r *tracefile.Record) ([]byte, error) {
	ev, err := jw.fm.Head(r)
	var fields []eventdef.Value
	if err == nil {
		fields, err = jw.fm.Fields(r)
	}
	if err != nil {
		return b, err
	}
	if ev.Return {
		b = append(b, `,"type":"kretprobe","group":`...)
	} else {
		b = append(b, `,"type":"kprobe","group":`...)
	}
	b = appendString(b, ev.Group)
	b = append(b, `,"event":`...)
	b = appendString(b, ev.Name)
	b = append(b, `,"addr":`...)
	b = strconv.AppendUint(b, ev.Addr, 10)
	if ev.Return {
		b = append(b, `,"ret_addr":`...)
		b = strconv.AppendUint(b, ev.RetAddr, 10)
	}
	b = append(b, `,"fields":{`...)
	b = appendFields(b, fields, false)
	return append(b, '}'), nil
}

// appendViolation appends a violation's members: the address, the probe site and,
// when known, its symbol.
func (jw *jsonlWriter) appendViolation(b []byte, r *tracefile.Record) ([]byte, error) {
	v, err := jw.fm.DecodeViolation(r)
	if err != nil {
		return b, err
	}
	b = append(b, `,"type":"violation","event":"`+tracefile.ViolationEvent+`","addr":`...)
	b = strconv.AppendUint(b, v.At, 10)
	b = append(b, `,"site":`...)
	b = strconv.AppendUint(b, v.Site, 10)
	if v.Symbol != "" {
		b = append(b, `,"sym":`...)
		b = appendString(b, v.Symbol)
	}
	return b, nil
}

// appendSynth appends a synthetic event's members: its name, the address it was
// generated at and its fields.
func (jw *jsonlWriter) appendSynth(b []byte, r *tracefile.Record) ([]byte, error) {
	name, fields, err := jw.fm.Synth(r)
	if err != nil {
		return b, err
	}
	b = append(b, `,"type":"synthetic","group":"synthetic","event":`...)
	b = appendString(b, name)
	b = append(b, `,"addr":`...)
	b = strconv.AppendUint(b, r.Bias+r.IP, 10)
	b = append(b, `,"fields":{`...)
	b = appendSynthFields(b, fields)
	return append(b, '}'), nil
}

// appendStack appends a stacktrace trigger's members: its event and the frames,
// each a pc with, when symbolized, its function and offset.
func (jw *jsonlWriter) appendStack(b []byte, r *tracefile.Record) ([]byte, error) {
	ev, err := jw.fm.Head(r)
	var frames []tracefile.StackFrame
	if err == nil {
		frames, err = jw.fm.Stack(r)
	}
	if err != nil {
		return b, err
	}
	b = append(b, `,"type":"stack","group":`...)
	b = appendString(b, ev.Group)
	b = append(b, `,"event":`...)
	b = appendString(b, ev.Name)
	b = append(b, `,"frames":[`...)
	for k, f := range frames {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"pc":`...)
		b = strconv.AppendUint(b, f.PC, 10)
		if f.Func != "" {
			b = append(b, `,"func":`...)
			b = appendString(b, f.Func)
			b = append(b, `,"off":`...)
			b = strconv.AppendUint(b, f.Off, 10)
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// commBytes is a record's comm without its NUL padding.
func commBytes(r *tracefile.Record) []byte {
	c := r.Comm[:]
	if i := bytes.IndexByte(c, 0); i >= 0 {
		c = c[:i]
	}
	return c
}

// appendSynthFields appends a synthetic event's fields as JSON members.
func appendSynthFields(b []byte, fields []tracefile.SynthField) []byte {
	for k, f := range fields {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendString(b, f.Name)
		b = append(b, ':')
		if f.Signed {
			b = strconv.AppendInt(b, f.Value, 10)
		} else {
			b = strconv.AppendUint(b, uint64(f.Value), 10)
		}
	}
	return b
}
