package export

import (
	"io"
	"strconv"

	"github.com/kprewrite/kprewrite/internal/calls"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// WriteChrome writes the trace in the Trace Event Format (the JSON object form), which
// Perfetto UI, chrome://tracing and speedscope open:
//   - a call (an entry event and the return event of the same function on the same
//     thread, package calls) is a duration slice, B then E, named by its function, the
//     entry's fields as the B's args and the return's as the E's; a call whose return
//     was lost ends where the trace shows it (package calls: the next call from its
//     frame or further out, or an enclosing call's return), with "lost_return": true
//     in its args;
//   - every other record is a thread-scoped instant event named GROUP/EVENT with its
//     fields as args (a return whose call began before the trace also has
//     "orphan_return": true);
//   - process_name and thread_name metadata from each thread's comm, again when a comm
//     changes;
//   - at the end, each image's per-event hits and nmissed as counter events (what
//     `kprewrite profile` prints), and an instant event counting lost records.
//
// Timestamps are the records' CLOCK_MONOTONIC times in microseconds.
func WriteChrome(w io.Writer, in *Input) error {
	o := newOutput(w)
	fm := in.formatter()
	o.buf = append(o.buf, `{"displayTimeUnit":"ns","otherData":{"tool":"kprewrite"},"traceEvents":[`...)
	first := true
	sep := func() {
		if first {
			first = false
			o.buf = append(o.buf, '\n')
		} else {
			o.buf = append(o.buf, ",\n"...)
		}
	}
	head := func(ph string, name string, t *calls.Thread, ts uint64) {
		sep()
		o.buf = append(o.buf, `{"ph":"`...)
		o.buf = append(o.buf, ph...)
		o.buf = append(o.buf, `","name":`...)
		o.buf = appendString(o.buf, name)
		o.buf = append(o.buf, `,"pid":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
		o.buf = append(o.buf, `,"tid":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(t.TID), 10)
		o.buf = append(o.buf, `,"ts":`...)
		o.buf = appendMicros(o.buf, ts)
	}
	var lastTs uint64
	pids := map[uint32]bool{}
	b := calls.NewBuilder(in.Descs)
	b.OnThread = func(t *calls.Thread) {
		if !pids[t.PID] || t.PID == t.TID {
			pids[t.PID] = true
			sep()
			o.buf = append(o.buf, `{"ph":"M","name":"process_name","pid":`...)
			o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
			o.buf = append(o.buf, `,"tid":`...)
			o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
			o.buf = append(o.buf, `,"args":{"name":`...)
			o.buf = appendString(o.buf, t.Comm)
			o.buf = append(o.buf, "}}"...)
		}
		sep()
		o.buf = append(o.buf, `{"ph":"M","name":"thread_name","pid":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
		o.buf = append(o.buf, `,"tid":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(t.TID), 10)
		o.buf = append(o.buf, `,"args":{"name":`...)
		o.buf = appendString(o.buf, t.Comm+"-"+strconv.FormatUint(uint64(t.TID), 10))
		o.buf = append(o.buf, "}}"...)
	}
	// args of a call's B or E: the record's fields, none when it has none (speedscope
	// names a frame by its name and args)
	fields := func(r *tracefile.Record) {
		fs, err := fm.Fields(r)
		if err != nil {
			in.report(err)
			return
		}
		if len(fs) > 0 {
			o.buf = append(o.buf, `,"args":{`...)
			o.buf = appendFields(o.buf, fs, true)
			o.buf = append(o.buf, '}')
		}
	}
	b.OnEnter = func(t *calls.Thread, c *calls.Call, r *tracefile.Record) {
		head("B", c.Func.Name, t, c.Start)
		o.buf = append(o.buf, `,"cat":`...)
		o.buf = appendString(o.buf, c.Func.Image)
		fields(r)
		o.buf = append(o.buf, '}')
	}
	b.OnExit = func(t *calls.Thread, c *calls.Call, r *tracefile.Record) {
		head("E", c.Func.Name, t, c.End)
		o.buf = append(o.buf, `,"cat":`...)
		o.buf = appendString(o.buf, c.Func.Image)
		if c.Lost {
			o.buf = append(o.buf, `,"args":{"lost_return":true}`...)
		} else {
			fields(r)
		}
		o.buf = append(o.buf, '}')
	}
	b.OnRecord = func(t *calls.Thread, r *tracefile.Record, role calls.Role, c *calls.Call) {
		lastTs = r.TsNs
		switch role {
		case calls.Entry, calls.Return:
			return
		}
		switch r.Type {
		case kprt.RecKprobe, kprt.RecKretprobe:
			ev, err := fm.Decode(r)
			if err != nil {
				in.report(err)
				return
			}
			head("i", ev.Group+"/"+ev.Name, t, r.TsNs)
			o.buf = append(o.buf, `,"s":"t","cat":`...)
			o.buf = appendString(o.buf, ev.Group)
			o.buf = append(o.buf, `,"args":{`...)
			o.buf = appendFields(o.buf, ev.Fields, true)
			if role == calls.Orphan {
				if len(ev.Fields) > 0 {
					o.buf = append(o.buf, ',')
				}
				o.buf = append(o.buf, `"orphan_return":true`...)
			}
		case kprt.RecPrintk:
			fn, text := tracefile.DecodePrintk(r)
			head("i", "trace_printk", t, r.TsNs)
			o.buf = append(o.buf, `,"s":"t","cat":"printk","args":{"function":`...)
			o.buf = appendString(o.buf, fn)
			o.buf = append(o.buf, `,"text":`...)
			o.buf = appendString(o.buf, text)
		case kprt.RecSynth:
			name, fields, err := fm.Synth(r)
			if err != nil {
				in.report(err)
				return
			}
			head("i", "synthetic/"+name, t, r.TsNs)
			o.buf = append(o.buf, `,"s":"t","cat":"synthetic","args":{`...)
			o.buf = appendSynthFields(o.buf, fields)
		case kprt.RecViolation:
			v, err := fm.DecodeViolation(r)
			if err != nil {
				in.report(err)
				return
			}
			head("i", tracefile.ViolationEvent, t, r.TsNs)
			o.buf = append(o.buf, `,"s":"t","cat":"violation","args":{"addr":"0x`...)
			o.buf = strconv.AppendUint(o.buf, v.At, 16)
			o.buf = append(o.buf, `","site":"0x`...)
			o.buf = strconv.AppendUint(o.buf, v.Site, 16)
			o.buf = append(o.buf, `","sym":`...)
			o.buf = appendString(o.buf, v.Symbol)
		default:
			return
		}
		o.buf = append(o.buf, "}}"...)
	}
	err := in.Stream.Each(func(r *tracefile.Record) error {
		b.Add(r)
		return o.writeIfFull()
	})
	if err != nil {
		return err
	}
	b.Finish()
	// the counters kprobe_profile shows, per image, on the first process
	threads := b.Threads()
	if len(threads) > 0 {
		lines, _ := tracefile.Profile(in.Stream.Trace, in.Descs)
		byImage := map[string][]tracefile.ProfileLine{}
		var order []string
		for _, l := range lines {
			if byImage[l.Image] == nil {
				order = append(order, l.Image)
			}
			byImage[l.Image] = append(byImage[l.Image], l)
		}
		pid := threads[0]
		for _, im := range order {
			for _, kind := range []string{"hits", "nmissed"} {
				head("C", im+" "+kind, &calls.Thread{PID: pid.PID, TID: pid.PID}, lastTs)
				o.buf = append(o.buf, `,"args":{`...)
				for i, l := range byImage[im] {
					if i > 0 {
						o.buf = append(o.buf, ',')
					}
					o.buf = appendString(o.buf, l.Event)
					o.buf = append(o.buf, ':')
					n := l.Hit
					if kind == "nmissed" {
						n = l.NMissed
					}
					o.buf = strconv.AppendUint(o.buf, n, 10)
				}
				o.buf = append(o.buf, "}}"...)
			}
		}
		if lost := in.Stream.Lost + uint64(in.Stream.Torn); lost > 0 {
			head("i", "kprewrite: records lost", &calls.Thread{PID: pid.PID, TID: pid.PID}, lastTs)
			o.buf = append(o.buf, `,"s":"g","args":{"lost":`...)
			o.buf = strconv.AppendUint(o.buf, in.Stream.Lost, 10)
			o.buf = append(o.buf, `,"torn":`...)
			o.buf = strconv.AppendUint(o.buf, uint64(in.Stream.Torn), 10)
			o.buf = append(o.buf, "}}"...)
		}
	}
	o.buf = append(o.buf, "\n]}\n"...)
	return o.close()
}
