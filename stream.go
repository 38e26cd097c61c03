package kprewrite

import (
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// ErrUndescribed is wrapped by the error Records gives for a record it cannot decode:
// its image has no description (name the rewritten binary) or the record does not
// match it. ReadTrace counts such records in Trace.Undescribed.
var ErrUndescribed = errors.New("record of no known event")

// errStop ends a Stream's Each when the loop over Records stops early.
var errStop = errors.New("stop")

// Records returns the records of the trace file at path in the order ReadTrace gives
// them, read as the loop asks for them: memory grows with the file's runs of
// records (a few per thread and 64 KiB block), not with their count. The
// descriptions come from where ReadTrace finds them (the file, binaries, path without
// ".trace"). A file that does not open gives one error and ends the sequence; a
// record that does not decode gives an error wrapping ErrUndescribed, and the loop may
// go on past it. The file is mapped until the loop ends.
func Records(path string, binaries ...string) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		s, descs, err := tracefile.OpenStream(path, binaries)
		if err != nil {
			yield(Record{}, err)
			return
		}
		defer s.Close()
		fm := tracefile.NewFormatter(descs)
		err = s.Each(func(r *tracefile.Record) error {
			rec, err := decodeRecord(fm, descs, r, r.CommString())
			if err != nil {
				err = fmt.Errorf("%s: %w", path, err)
			}
			if !yield(rec, err) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(Record{}, fmt.Errorf("%s: %w", path, err))
		}
	}
}

// decodeRecord makes the API's record of one trace record (its thread named comm): an
// event's hit, a trace_printk, a synthetic event or a --verify-regions violation.
// Records and ReadTrace both decode with it.
func decodeRecord(fm *tracefile.Formatter, descs tracefile.Descs, r *tracefile.Record, comm string) (Record, error) {
	rec := Record{Comm: comm, PID: r.PID, TID: r.TID, CPU: uint32(r.CPU), Time: time.Duration(r.TsNs), GoID: r.GoID, HasGoID: r.HasGoID}
	if d := descs[r.ImageID]; d != nil {
		rec.Image = d.Image
	}
	var err error
	switch r.Type {
	case kprt.RecKprobe, kprt.RecKretprobe:
		err = decodeEvent(fm, r, &rec)
	case kprt.RecPrintk:
		rec.Kind = KindPrintk
		rec.Event, rec.Text = tracefile.DecodePrintk(r)
		if r.IP != 0 {
			rec.Addr = r.Bias + r.IP
		}
		rec.RetAddr = r.RetIP
	case kprt.RecSynth:
		err = decodeSynth(fm, r, &rec)
	case kprt.RecViolation:
		err = decodeViolation(fm, r, &rec)
	default:
		err = fmt.Errorf("record type %d", r.Type)
	}
	if err != nil {
		return Record{}, fmt.Errorf("%w (image %#x, at %v): %w", ErrUndescribed, r.ImageID, time.Duration(r.TsNs), err)
	}
	rec.Line, err = fm.Line(r)
	if err != nil && rec.Kind == KindEvent {
		return Record{}, fmt.Errorf("%w: %w", ErrUndescribed, err)
	}
	return rec, nil
}

func decodeEvent(fm *tracefile.Formatter, r *tracefile.Record, rec *Record) error {
	ev, err := fm.Decode(r)
	if err != nil {
		return err
	}
	rec.Image, rec.Group, rec.Event, rec.Return, rec.Addr, rec.RetAddr = ev.Image, ev.Group, ev.Name, ev.Return, ev.Addr, ev.RetAddr
	rec.Fields = make([]Field, 0, len(ev.Fields))
	for _, v := range ev.Fields {
		rec.Fields = append(rec.Fields, Field{Name: v.Name, Value: v.Value})
	}
	return nil
}

func decodeSynth(fm *tracefile.Formatter, r *tracefile.Record, rec *Record) error {
	name, fields, err := fm.Synth(r)
	if err != nil {
		return err
	}
	rec.Kind, rec.Group, rec.Event, rec.Addr = KindSynthetic, "synthetic", name, r.Bias+r.IP
	for _, f := range fields {
		if f.Signed {
			rec.Fields = append(rec.Fields, Field{Name: f.Name, Value: f.Value})
		} else {
			rec.Fields = append(rec.Fields, Field{Name: f.Name, Value: uint64(f.Value)})
		}
	}
	return nil
}

func decodeViolation(fm *tracefile.Formatter, r *tracefile.Record, rec *Record) error {
	v, err := fm.DecodeViolation(r)
	if err != nil {
		return err
	}
	rec.Kind, rec.Event, rec.Addr = KindViolation, tracefile.ViolationEvent, v.At
	rec.Fields = append(rec.Fields, Field{Name: "site", Value: v.Site})
	if v.Symbol != "" {
		rec.Fields = append(rec.Fields, Field{Name: "sym", Value: v.Symbol})
	}
	return nil
}
