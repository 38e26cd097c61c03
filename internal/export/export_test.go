package export

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// testDesc: f (0x100) with an entry event taking an argument and a string, and a
// return event with $retval; g (0x200) with both events and no arguments.
func testDesc() *tracefile.Desc {
	d := &tracefile.Desc{ImageID: 5, Image: "prog"}
	for i, def := range []string{"p:t/f 0x100 a=%di:s32 s=+0(%si):string", "r:t/f_ret 0x100 $retval", "p:t/g 0x200", "r:t/g_ret 0x200"} {
		ret := def[0] == 'r'
		name := strings.Fields(def)[0][4:]
		addr := uint64(0x100)
		if i >= 2 {
			addr = 0x200
		}
		d.Events = append(d.Events, tracefile.DescEvent{ID: uint32(i), Group: "t", Name: name, Def: def, Return: ret})
		d.Probes = append(d.Probes, tracefile.DescProbe{Index: i, Event: i, Kind: "o", Addr: addr, Site: addr, Symbol: map[bool]string{true: "f", false: "g"}[addr == 0x100]})
	}
	return d
}

// testTrace is a trace file of calls to f and g on two threads, one record a block.
func testTrace() []byte {
	const block = 256
	var area bytes.Buffer
	add := func(ev uint32, tid uint32, ts uint64, data []byte) {
		r := kprt.RawRecord{Commit: kprt.RecCommit, Type: kprt.RecKprobe, EventID: ev, ImageID: 5, PID: 1, TID: tid, TsNs: ts,
			IP: []uint64{0x100, 0x100, 0x200, 0x200}[ev], Probe: ev, DataLen: uint32(len(data))}
		if ev%2 == 1 {
			r.Type = kprt.RecKretprobe
		}
		r.Size = uint32(kprt.RecordSize + (len(data)+7)&^7)
		copy(r.Comm[:], "prog")
		var one bytes.Buffer
		binary.Write(&one, binary.LittleEndian, &r)
		one.Write(data)
		one.Write(make([]byte, block-one.Len()))
		area.Write(one.Bytes())
	}
	fData := func(a int32, s string) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(a))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)+1)<<16|8) // __data_loc: length, offset
		return append(append(b, s...), 0)
	}
	add(0, 1, 100, fData(-3, "x\"y"))
	add(2, 1, 110, nil)
	add(2, 2, 115, nil)
	add(3, 1, 120, nil)
	add(1, 1, 150, binary.LittleEndian.AppendUint64(nil, 7))
	add(3, 2, 160, nil)
	return traceWith(area.Bytes())
}

// traceWith makes a trace file of the record area: blocks of 256 bytes, the image of
// testDesc, its counters zero (the records count the hits).
func traceWith(area []byte) []byte {
	var h kprt.RawTraceHeader
	copy(h.Magic[:], kprt.TraceMagic)
	n := (len(area) + 255) &^ 255
	h.Version, h.DataOff, h.BlockSize = kprt.TraceVersion2, kprt.TraceHeaderSize, 256
	h.DataSize, h.Head = uint64(n), uint64(len(area))
	h.NImages = 1
	h.Images[0] = kprt.RawTraceImage{ImageID: 5, NProbes: 4, CountersOff: kprt.TraceHeaderSize + h.DataSize}
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, &h)
	out.Write(make([]byte, kprt.TraceHeaderSize-out.Len()))
	out.Write(area)
	out.Write(make([]byte, n-len(area)+4*16))
	return out.Bytes()
}

// exportAll runs every export of the trace b and checks that the JSON ones are JSON.
func exportAll(t *testing.T, b []byte) (chrome, jsonl string) {
	s, err := tracefile.NewStream(b)
	if err != nil {
		return "", ""
	}
	d := testDesc()
	in := func() *Input { return &Input{Stream: s, Descs: tracefile.Descs{d.ImageID: d}, Errors: io.Discard} }
	var c, j bytes.Buffer
	if err := WriteChrome(&c, in()); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(c.Bytes()) {
		t.Fatalf("chrome export is not JSON:\n%s", c.String())
	}
	if err := WriteJSONLines(&j, in()); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(j.String()), "\n") {
		if l != "" && !json.Valid([]byte(l)) {
			t.Fatalf("JSON line %q", l)
		}
	}
	st, err := BuildStacks(in(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []func(io.Writer, *Stacks) error{WritePprof, WriteFolded, func(w io.Writer, s *Stacks) error { return WriteFlameSVG(w, s, "t") }} {
		if err := w(io.Discard, st); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := BuildReport(in(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range SortKeys {
		if err := rep.Sort(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := rep.Write(io.Discard, 0); err != nil {
		t.Fatal(err)
	}
	return c.String(), j.String()
}

// TestExports: the calls and fields of a small trace, as each export shows them.
func TestExports(t *testing.T) {
	chrome, jsonl := exportAll(t, testTrace())
	for _, want := range []string{
		`{"ph":"B","name":"f","pid":1,"tid":1,"ts":0.100,"cat":"prog","args":{"a":-3,"s":"x\"y"}}`,
		`{"ph":"E","name":"g","pid":1,"tid":1,"ts":0.120,"cat":"prog"}`,
		`{"ph":"E","name":"f","pid":1,"tid":1,"ts":0.150,"cat":"prog","args":{"arg1":7}}`,
		`{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"prog-2"}}`,
		`"args":{"t/f":1,"t/f_ret":1,"t/g":2,"t/g_ret":2}`,
	} {
		if !strings.Contains(chrome, want) {
			t.Errorf("chrome export lacks %s:\n%s", want, chrome)
		}
	}
	if want := `{"time_ns":100,"cpu":0,"pid":1,"tid":1,"comm":"prog","image":"prog","type":"kprobe","group":"t","event":"f","addr":256,"fields":{"a":-3,"s":"x\"y"}}`; !strings.HasPrefix(jsonl, want+"\n") {
		t.Errorf("JSON lines begin:\n%s\nwant:\n%s", jsonl, want)
	}
	s, _ := tracefile.NewStream(testTrace())
	d := testDesc()
	st, err := BuildStacks(&Input{Stream: s, Descs: tracefile.Descs{d.ImageID: d}}, false)
	if err != nil {
		t.Fatal(err)
	}
	var folded bytes.Buffer
	WriteFolded(&folded, st)
	if want := "f 40\nf;g 10\ng 45\n"; folded.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", folded.String(), want)
	}
}

// FuzzExports: no record area, however corrupt, makes an export fail or write bad
// JSON (the header's own checks are FuzzParseTrace's). Each exec runs every export, so
// the fuzzer's minimization of a new input is slow: run it with -fuzzminimizetime 1s.
func FuzzExports(f *testing.F) {
	f.Add(testTrace()[kprt.TraceHeaderSize:])
	f.Fuzz(func(t *testing.T, area []byte) {
		if len(area) > 1<<16 {
			return
		}
		exportAll(t, traceWith(area))
	})
}

// FuzzAppendString: every string is written as JSON that reads back as the string
// (invalid UTF-8 as U+FFFD, as encoding/json writes it).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\", "\x00\x1f\n\t", "é✓", "\xff\xfe", "a\u2028b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if !utf8.ValidString(s) {
			// encoding/json replaces each invalid byte
			var sb strings.Builder
			for i := 0; i < len(s); {
				r, n := utf8.DecodeRuneInString(s[i:])
				sb.WriteRune(r)
				i += n
			}
			want = sb.String()
		}
		if back != want {
			t.Fatalf("%q -> %s -> %q, want %q", s, out, back, want)
		}
	})
}

// TestReportClock: a report names a clock other than tsc, and under counter (times
// that are counts) prints calls and no time, alone or in a diff with a timed trace.
func TestReportClock(t *testing.T) {
	fn := func() []*FuncStats {
		return []*FuncStats{{Func: "f", Image: "prog", Calls: 3, Total: 3000, Self: 2000, Min: 500, Max: 1500, Avg: 1000}}
	}
	timed := regexp.MustCompile(`\d (ns|us|ms)|%`)
	for _, c := range []struct {
		clock, first string
		times        bool
	}{{"tsc", "  Total ", true}, {"mono", "# clock: mono\n", true}, {"counter", "# clock: counter: ", false}} {
		var out, diff bytes.Buffer
		r := &Report{Funcs: fn(), Clock: c.clock}
		if err := r.Write(&out, 0); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), c.first) || timed.MatchString(out.String()) != c.times || !strings.Contains(out.String(), " 3 ") {
			t.Errorf("%s: report\n%s", c.clock, out.String())
		}
		if err := r.WriteDiff(&diff, &Report{Funcs: fn(), Clock: "tsc"}, 0); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(diff.String(), c.first) || timed.MatchString(diff.String()) != c.times {
			t.Errorf("%s: diff with a tsc trace\n%s", c.clock, diff.String())
		}
	}
}
