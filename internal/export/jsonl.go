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
	fm := in.formatter()
	var lastID uint64
	var lastImage []byte // the JSON string of the last record's image
	err := in.Stream.Each(func(r *tracefile.Record) error {
		b := o.buf
		start := len(b)
		b = append(b, `{"time_ns":`...)
		b = strconv.AppendUint(b, r.TsNs, 10)
		b = append(b, `,"cpu":`...)
		b = strconv.AppendUint(b, uint64(r.CPU), 10)
		b = append(b, `,"pid":`...)
		b = strconv.AppendUint(b, uint64(r.PID), 10)
		b = append(b, `,"tid":`...)
		b = strconv.AppendUint(b, uint64(r.TID), 10)
		b = append(b, `,"comm":`...)
		b = appendString(b, commBytes(r))
		if r.ImageID != lastID || lastImage == nil {
			lastID, lastImage = r.ImageID, []byte{}
			if d := in.Descs[r.ImageID]; d != nil {
				lastImage = appendString(nil, d.Image)
			} else {
				lastImage = appendString(nil, "")
			}
		}
		b = append(b, `,"image":`...)
		b = append(b, lastImage...)
		switch r.Type {
		case kprt.RecKprobe, kprt.RecKretprobe:
			ev, err := fm.Head(r)
			var fields []eventdef.Value
			if err == nil {
				fields, err = fm.Fields(r)
			}
			if err != nil {
				in.report(err)
				o.buf = b[:start]
				return nil
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
			b = append(b, '}')
		case kprt.RecPrintk:
			fn, text := tracefile.DecodePrintk(r)
			b = append(b, `,"type":"printk","function":`...)
			b = appendString(b, fn)
			b = append(b, `,"text":`...)
			b = appendString(b, text)
		case kprt.RecViolation:
			v, err := fm.DecodeViolation(r)
			if err != nil {
				in.report(err)
				o.buf = b[:start]
				return nil
			}
			b = append(b, `,"type":"violation","event":"`+tracefile.ViolationEvent+`","addr":`...)
			b = strconv.AppendUint(b, v.At, 10)
			b = append(b, `,"site":`...)
			b = strconv.AppendUint(b, v.Site, 10)
			if v.Symbol != "" {
				b = append(b, `,"sym":`...)
				b = appendString(b, v.Symbol)
			}
		case kprt.RecSynth:
			name, fields, err := fm.Synth(r)
			if err != nil {
				in.report(err)
				o.buf = b[:start]
				return nil
			}
			b = append(b, `,"type":"synthetic","group":"synthetic","event":`...)
			b = appendString(b, name)
			b = append(b, `,"addr":`...)
			b = strconv.AppendUint(b, r.Bias+r.IP, 10)
			b = append(b, `,"fields":{`...)
			b = appendSynthFields(b, fields)
			b = append(b, '}')
		case kprt.RecStack:
			ev, err := fm.Head(r)
			var frames []tracefile.StackFrame
			if err == nil {
				frames, err = fm.Stack(r)
			}
			if err != nil {
				in.report(err)
				o.buf = b[:start]
				return nil
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
			b = append(b, ']')
		default:
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
