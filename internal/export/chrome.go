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
//     thread, or goroutine in a Go program, package calls) is a duration slice, B then E, named by its function, the
//     entry's fields as the B's args and the return's as the E's; a call whose return
//     was lost ends where the trace shows it (package calls: the next call from its
//     frame or further out, or an enclosing call's return), with "lost_return": true
//     in its args;
//   - every other record is a thread-scoped instant event named GROUP/EVENT with its
//     fields as args (a return whose call began before the trace also has
//     "orphan_return": true);
//   - process_name and thread_name metadata from each thread's comm, again when a comm
//     changes; a goroutine's track has its id as tid and "goroutine N" as name;
//   - at the end, each image's per-event hits and nmissed as counter events (what
//     `kprewrite profile` prints), and an instant event counting lost records.
//
// Timestamps are the records' CLOCK_MONOTONIC times in microseconds.
func WriteChrome(w io.Writer, in *Input) error {
	cw := &chromeWriter{o: newOutput(w), in: in, fm: in.formatter(), first: true, pids: map[uint32]bool{}}
	o := cw.o
	o.buf = append(o.buf, `{"displayTimeUnit":"ns","otherData":{"tool":"kprewrite"},"traceEvents":[`...)
	b := calls.NewBuilder(in.Descs)
	b.OnThread = cw.threadNames
	b.OnEnter = cw.enter
	b.OnExit = cw.exit
	b.OnRecord = cw.record
	err := in.Stream.Each(func(r *tracefile.Record) error {
		b.Add(r)
		return o.writeIfFull()
	})
	if err != nil {
		return err
	}
	b.Finish()
	// the counters kprobe_profile shows, per image, on the first process
	if threads := b.Threads(); len(threads) > 0 {
		pid := &calls.Thread{PID: threads[0].PID, TID: threads[0].PID}
		cw.profileCounters(pid)
		cw.lostRecords(pid)
	}
	o.buf = append(o.buf, "\n]}\n"...)
	return o.close()
}

// chromeWriter is WriteChrome's state: the output, whether an event was written yet
// (the separator), the processes named so far, and the last record's time, where
// the closing counters go.
type chromeWriter struct {
	o      *output
	in     *Input
	fm     *tracefile.Formatter
	first  bool
	pids   map[uint32]bool
	lastTs uint64
}

// sep separates the next event from the previous one.
func (cw *chromeWriter) sep() {
	o := cw.o
	if cw.first {
		cw.first = false
		o.buf = append(o.buf, '\n')
	} else {
		o.buf = append(o.buf, ",\n"...)
	}
}

// head opens an event of phase ph on t's track at ts; the caller adds the rest.
func (cw *chromeWriter) head(ph string, name string, t *calls.Thread, ts uint64) {
	o := cw.o
	cw.sep()
	o.buf = append(o.buf, `{"ph":"`...)
	o.buf = append(o.buf, ph...)
	o.buf = append(o.buf, `","name":`...)
	o.buf = appendString(o.buf, name)
	o.buf = append(o.buf, `,"pid":`...)
	o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
	o.buf = append(o.buf, `,"tid":`...)
	o.buf = strconv.AppendUint(o.buf, t.Track(), 10)
	o.buf = append(o.buf, `,"ts":`...)
	o.buf = appendMicros(o.buf, ts)
}

// threadNames writes t's thread_name metadata, and its process's process_name the
// first time the process is seen or when its main thread's comm changes.
func (cw *chromeWriter) threadNames(t *calls.Thread) {
	o := cw.o
	if !cw.pids[t.PID] || (t.PID == t.TID && !t.Goroutine) {
		cw.pids[t.PID] = true
		cw.sep()
		o.buf = append(o.buf, `{"ph":"M","name":"process_name","pid":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
		o.buf = append(o.buf, `,"tid":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
		o.buf = append(o.buf, `,"args":{"name":`...)
		o.buf = appendString(o.buf, t.Comm)
		o.buf = append(o.buf, "}}"...)
	}
	cw.sep()
	o.buf = append(o.buf, `{"ph":"M","name":"thread_name","pid":`...)
	o.buf = strconv.AppendUint(o.buf, uint64(t.PID), 10)
	o.buf = append(o.buf, `,"tid":`...)
	o.buf = strconv.AppendUint(o.buf, t.Track(), 10)
	o.buf = append(o.buf, `,"args":{"name":`...)
	o.buf = appendString(o.buf, t.Name())
	o.buf = append(o.buf, "}}"...)
}

// fields writes the args of a call's B or E: the record's fields, none when it has
// none (speedscope names a frame by its name and args).
func (cw *chromeWriter) fields(r *tracefile.Record) {
	o := cw.o
	fs, err := cw.fm.Fields(r)
	if err != nil {
		cw.in.report(err)
		return
	}
	if len(fs) > 0 {
		o.buf = append(o.buf, `,"args":{`...)
		o.buf = appendFields(o.buf, fs, true)
		o.buf = append(o.buf, '}')
	}
}

// enter begins a call's slice (B) at its entry event.
func (cw *chromeWriter) enter(t *calls.Thread, c *calls.Call, r *tracefile.Record) {
	o := cw.o
	cw.head("B", c.Func.Name, t, c.Start)
	o.buf = append(o.buf, `,"cat":`...)
	o.buf = appendString(o.buf, c.Func.Image)
	cw.fields(r)
	o.buf = append(o.buf, '}')
}

// exit ends a call's slice (E) at its return event, or where package calls ends a
// call whose return was lost.
func (cw *chromeWriter) exit(t *calls.Thread, c *calls.Call, r *tracefile.Record) {
	o := cw.o
	cw.head("E", c.Func.Name, t, c.End)
	o.buf = append(o.buf, `,"cat":`...)
	o.buf = appendString(o.buf, c.Func.Image)
	if c.Lost {
		o.buf = append(o.buf, `,"args":{"lost_return":true}`...)
	} else {
		cw.fields(r)
	}
	o.buf = append(o.buf, '}')
}

// record writes a record that is not part of a call as an instant event: a probe's
// event, trace_printk, a synthetic event or a violation; other records are left out.
func (cw *chromeWriter) record(t *calls.Thread, r *tracefile.Record, role calls.Role, c *calls.Call) {
	cw.lastTs = r.TsNs
	switch role {
	case calls.Entry, calls.Return, calls.Restart: // (a restart is its call's entry again)
		return
	}
	var err error
	switch r.Type {
	case kprt.RecKprobe, kprt.RecKretprobe:
		err = cw.probeEvent(t, r, role)
	case kprt.RecPrintk:
		cw.printkEvent(t, r)
	case kprt.RecSynth:
		err = cw.synthEvent(t, r)
	case kprt.RecViolation:
		err = cw.violationEvent(t, r)
	default:
		return
	}
	if err != nil {
		cw.in.report(err)
		return
	}
	cw.o.buf = append(cw.o.buf, "}}"...)
}

// probeEvent writes a kprobe or kretprobe event's head and args (left open); a
// return whose call began before the trace is marked orphan_return.
func (cw *chromeWriter) probeEvent(t *calls.Thread, r *tracefile.Record, role calls.Role) error {
	o := cw.o
	ev, err := cw.fm.Decode(r)
	if err != nil {
		return err
	}
	cw.head("i", ev.Group+"/"+ev.Name, t, r.TsNs)
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
	return nil
}

// printkEvent writes a trace_printk record's head and args (left open).
func (cw *chromeWriter) printkEvent(t *calls.Thread, r *tracefile.Record) {
	o := cw.o
	fn, text := tracefile.DecodePrintk(r)
	cw.head("i", "trace_printk", t, r.TsNs)
	o.buf = append(o.buf, `,"s":"t","cat":"printk","args":{"function":`...)
	o.buf = appendString(o.buf, fn)
	o.buf = append(o.buf, `,"text":`...)
	o.buf = appendString(o.buf, text)
}

// synthEvent writes a synthetic event's head and args (left open).
func (cw *chromeWriter) synthEvent(t *calls.Thread, r *tracefile.Record) error {
	o := cw.o
	name, fields, err := cw.fm.Synth(r)
	if err != nil {
		return err
	}
	cw.head("i", "synthetic/"+name, t, r.TsNs)
	o.buf = append(o.buf, `,"s":"t","cat":"synthetic","args":{`...)
	o.buf = appendSynthFields(o.buf, fields)
	return nil
}

// violationEvent writes a violation's head and args (left open): the address, the
// probe site and its symbol.
func (cw *chromeWriter) violationEvent(t *calls.Thread, r *tracefile.Record) error {
	o := cw.o
	v, err := cw.fm.DecodeViolation(r)
	if err != nil {
		return err
	}
	cw.head("i", tracefile.ViolationEvent, t, r.TsNs)
	o.buf = append(o.buf, `,"s":"t","cat":"violation","args":{"addr":"0x`...)
	o.buf = strconv.AppendUint(o.buf, v.At, 16)
	o.buf = append(o.buf, `","site":"0x`...)
	o.buf = strconv.AppendUint(o.buf, v.Site, 16)
	o.buf = append(o.buf, `","sym":`...)
	o.buf = appendString(o.buf, v.Symbol)
	return nil
}

// profileCounters writes, per image in the order the profile lists them, a hits and
// an nmissed counter event with one series per event, on pid's track at the end.
func (cw *chromeWriter) profileCounters(pid *calls.Thread) {
	o := cw.o
	lines, _ := tracefile.Profile(cw.in.Stream.Trace, cw.in.Descs)
	byImage := map[string][]tracefile.ProfileLine{}
	var order []string
	for _, l := range lines {
		if byImage[l.Image] == nil {
			order = append(order, l.Image)
		}
		byImage[l.Image] = append(byImage[l.Image], l)
	}
	for _, im := range order {
		for _, kind := range []string{"hits", "nmissed"} {
			cw.head("C", im+" "+kind, pid, cw.lastTs)
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
}

// lostRecords writes a global instant event counting the records lost and torn, when
// there are any.
func (cw *chromeWriter) lostRecords(pid *calls.Thread) {
	o, st := cw.o, cw.in.Stream
	if lost := st.Lost + uint64(st.Torn); lost > 0 {
		cw.head("i", "kprewrite: records lost", pid, cw.lastTs)
		o.buf = append(o.buf, `,"s":"g","args":{"lost":`...)
		o.buf = strconv.AppendUint(o.buf, st.Lost, 10)
		o.buf = append(o.buf, `,"torn":`...)
		o.buf = strconv.AppendUint(o.buf, uint64(st.Torn), 10)
		o.buf = append(o.buf, "}}"...)
	}
}
