package evhist

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
)

func testFields(t testing.TB) []evfilter.Field {
	p, err := eventdef.Parse("p:g/ev func size=%di:u64 n=%si:s32 s=+0(%dx):string")
	if err != nil {
		t.Fatal(err)
	}
	return evfilter.Fields(p)
}

func TestParseInfo(t *testing.T) {
	fs := testFields(t)
	for _, c := range []struct{ in, info string }{
		{"keys=size", "hist:keys=size:vals=hitcount:sort=hitcount:size=2048"},
		{"key=size.log2:val=n:sort=n.descending:size=200", "hist:keys=size.log2:vals=hitcount,n:sort=n.descending:size=256"},
		{"keys=s,common_pid.execname:values=hitcount,size.hex:sort=s,hitcount", "hist:keys=s,common_pid.execname:vals=hitcount,size.hex:sort=s,hitcount:size=2048"},
		{"keys=size.buckets=100:vals=n:nohitcount", "hist:keys=size.buckets=100:vals=n:sort=hitcount:size=2048:nohitcount"},
		{"keys=cpu,common_timestamp.usecs", "hist:keys=common_cpu,common_timestamp.usecs:vals=hitcount:sort=hitcount:size=2048:clock=mono"},
		{"keys=n:ts0=common_timestamp.usecs", "hist:keys=n:vals=hitcount:ts0=common_timestamp.usecs:sort=hitcount:size=2048:clock=mono"},
		{"keys=n:d=common_timestamp-$ts0+5:onmatch(g.ev).trace(lat,$d)", "hist:keys=n:vals=hitcount:d=common_timestamp-$ts0+5:sort=hitcount:size=2048:clock=mono:onmatch(g.ev).trace(lat,$d)"},
		{"keys=n:d=size-$x:onmatch(g.ev).lat($d,$x)", "hist:keys=n:vals=hitcount:d=size-$x:sort=hitcount:size=2048:onmatch(g.ev).trace(lat,$d,$x)"},
		{"keys=stacktrace,size.log2", "hist:keys=stacktrace,size.log2:vals=hitcount:sort=hitcount:size=2048"},
		{"keys=__probe_ip.sym-offset:pause", "hist:keys=__probe_ip.sym-offset:vals=hitcount:sort=hitcount:size=2048"},
		{"keys=n:m=size:onmax($m).save(s,comm,size):onmax($m).snapshot()", "hist:keys=n:vals=hitcount:m=size:sort=hitcount:size=2048:onmax($m).save(s,comm,size):onmax($m).snapshot()"},
		{"keys=n:onchange($c).trace(ev,$c):c=size", "hist:keys=n:vals=hitcount:c=size:sort=hitcount:size=2048:onchange($c).trace(ev,$c)"},
		{"keys=n:c=size:onchange($c).ev($c)", "hist:keys=n:vals=hitcount:c=size:sort=hitcount:size=2048:onchange($c).trace(ev,$c)"},
	} {
		s, err := Parse(c.in, fs)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if s.Info() != c.info {
			t.Errorf("%q: info %q, want %q", c.in, s.Info(), c.info)
		}
		// the info reads back as the same histogram (kprewrite hist reads it so)
		again, err := Parse(strings.TrimPrefix(c.info, "hist:"), fs)
		if err != nil || again.Info() != c.info {
			t.Errorf("%q: info read back: %v, %v", c.info, again, err)
		}
		if s.Link == nil && s.Tracer() == nil && !s.refs() {
			if _, err := CheckProgram(s.Program(nil)); err != nil {
				t.Errorf("%q: its program: %v", c.in, err)
			}
		}
	}
	for _, c := range []struct{ in, msg string }{
		{"vals=size", "Missing keys"},
		{"keys=nosuch", "Couldn't find field"},
		{"keys=size.what", "Invalid field modifier"},
		{"keys=n:vals=size.log2", "Invalid field modifier"},
		{"keys=size.buckets=0", "Invalid field modifier"},
		{"keys=s.hex", "Invalid field modifier"},
		{"keys=size:vals=s", "String type can not be an operand in expression"},
		{"keys=size,n,s,common_pid", "Too many keys (3 max)"},
		{"keys=size:sort=size,hitcount,size", "Too many sort fields (Max = 2)"},
		{"keys=size:sort=size.up", "Invalid sort modifier"},
		{"keys=size:sort=n", "Sort field must be a key or a val"},
		{"keys=size:size=64", "Size must be between 128 and 131072 entries"},
		{"keys=size:size=x", "Invalid size"},
		{"keys=size:nohitcount", "Non-hitcount value is required for 'nohitcount'"},
		{"keys=size:ts0=", "Empty assignment"},
		{"keys=size:t=s", "String type can not be an operand in expression"},
		{"keys=size:t=$", "Couldn't find variable"},
		{"keys=size:a=n:a=size", "Variable already defined"},
		{"keys=size:a=n+n+n+n+n", "Too many subexpressions"},
		{"keys=size:onmax($x).save(size)", "Couldn't find onmax or onchange variable"},
		{"keys=size:x=n:onmax(x).save(size)", "For onmax(x) or onchange(x), x must be a variable"},
		{"keys=size:x=n:onmax($x).save()", "No params found for save()"},
		{"keys=size:x=n:onmax($x).save(nosuch)", "Couldn't create field variable"},
		{"keys=size:x=n:onmax($x).save(size):onmax($x).save(n)", "Can't have more than one save() action per hist"},
		{"keys=size:x=n:y=size:onmax($x).save(size):onchange($y).snapshot()", "one variable with one handler"},
		{"keys=size:x=n:onmax($x).save(size", "No closing paren found"},
		{"keys=size:x=n:onmax($x)", "No action found"},
		{"keys=size:x=n:onmax($x).snapshot(size)", "Invalid action param"},
		{"keys=size:onmatch(ev).trace(x,$y)", "Missing subsystem"},
		{"keys=size:onmatch(g.ev.trace(x,$y)", "Invalid subsystem or event name"},
		{"keys=size:onmatch(g.ev).save(size)", "Handler doesn't support action"},
		{"keys=size:bogus", "Invalid attribute"},
		{"keys=size:vals=stacktrace", "Couldn't find field"},
		{"keys=stacktrace.hex", "Invalid field modifier"},
		{"keys=common_timestamp.usecs,size.usecs", "Invalid field modifier"},
	} {
		_, err := Parse(c.in, fs)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.in, err, c.msg)
		}
	}
}

func TestSplitFilter(t *testing.T) {
	for _, c := range []struct{ in, trig, filter string }{
		{"keys=a", "keys=a", ""},
		{"keys=a if a > 1", "keys=a", "if a > 1"},
		{"keys=diff if x", "keys=diff", "if x"},
		{"keys=a\tif\tb == 2 ", "keys=a", "if\tb == 2"},
	} {
		tr, f, err := SplitFilter(c.in)
		if err != nil || tr != c.trig || f != c.filter {
			t.Errorf("%q: %q %q %v", c.in, tr, f, err)
		}
	}
	if _, _, err := SplitFilter("if a"); err == nil {
		t.Error("a filter with no trigger accepted")
	}
}

// TestPrint builds a table by hand and checks the kernel's hist file lines.
func TestPrint(t *testing.T) {
	fs := testFields(t)
	s, err := Parse("keys=size.log2,common_pid.execname:vals=n:sort=size", fs)
	if err != nil {
		t.Fatal(err)
	}
	tab := make([]byte, s.TableWords()*8)
	le := binary.LittleEndian
	le.PutUint64(tab[16:], 3) // drops
	put := func(bucket int, key []uint64, hits, n uint64, comm string) {
		base := (HeaderWords + bucket*s.EntryWords()) * 8
		le.PutUint64(tab[base:], TagBit|uint64(bucket))
		for i, k := range key {
			le.PutUint64(tab[base+8+8*i:], k)
		}
		le.PutUint64(tab[base+8+8*len(key):], hits)
		le.PutUint64(tab[base+16+8*len(key):], n)
		copy(tab[base+24+8*len(key):], comm)
	}
	put(5, []uint64{4, 1234}, 10, ^uint64(0)-1, "prog") // n sums to -2
	put(9, []uint64{2, 1234}, 7, 70, "prog")
	le.PutUint64(tab[(HeaderWords+11*s.EntryWords())*8:], TagBusy) // being filled: left out
	le.PutUint64(tab[(HeaderWords+12*s.EntryWords())*8:], TagDead) // given up as the table filled: left out
	tb, err := s.ReadTable(tab)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	s.Print(&b, tb, nil)
	want := `# event histogram
#
# trigger info: hist:keys=size.log2,common_pid.execname:vals=hitcount,n:sort=size.log2:size=2048 [active]
#

{ size: ~ 2^2 , common_pid: prog            [      1234] } hitcount:          7  n:         70
{ size: ~ 2^4 , common_pid: prog            [      1234] } hitcount:         10  n:         -2

Totals:
    Hits: 20
    Entries: 2
    Dropped: 3
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"keys=size", "keys=size.log2:vals=n:sort=n.descending:size=200", "keys=s,common_pid.execname:pause",
		"key=cpu:val=size.hex:nohitcount", "keys=size.buckets=0x10:sort=hitcount.ascending,size"} {
		f.Add(s)
	}
	fs := testFields(f)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in, fs)
		if err != nil {
			return
		}
		again, err := Parse(strings.TrimPrefix(s.Info(), "hist:"), fs)
		if err != nil || again.Info() != s.Info() {
			t.Fatalf("%q: info %q reads back as %v, %v", in, s.Info(), again, err)
		}
		if s.Check() == nil && len(s.Actions) == 0 && !s.refs() {
			if _, err := CheckProgram(s.Program(nil)); err != nil {
				t.Fatalf("%q: program refused: %v", in, err)
			}
		}
	})
}

// TestLink: references resolve to the matching event's variable, actions to the
// synthetic event and its histograms; what does not resolve is refused.
func TestLink(t *testing.T) {
	fs := testFields(t)
	parse := func(in string) *Spec {
		s, err := Parse(in, fs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sy, err := ParseSynthetic("lat u64 lat; pid_t pid")
	if err != nil || sy.String() != "lat u64 lat; pid_t pid" {
		t.Fatalf("synthetic: %v %v", sy, err)
	}
	entry := Named{Group: "g", Event: "in", Key: "in", Spec: parse("keys=n:ts0=common_timestamp.usecs")}
	ret := Named{Group: "g", Event: "out", Key: "out", Spec: parse("keys=n:d=common_timestamp.usecs-$ts0:onmatch(g.in).trace(lat,$d,$ts0)")}
	target := Named{Group: "synthetic", Event: "lat", Key: "lat", Spec: parse("keys=size")}
	err = LinkAll([]Named{entry, ret}, map[string]*Synthetic{"lat": sy}, map[string][]Named{"lat": {target}})
	if err != nil {
		t.Fatal(err)
	}
	l := ret.Spec.Link
	if l == nil || len(l.Refs) != 1 || l.Refs[0].Of != entry.Spec || len(l.Targets) != 1 || len(l.Params) != 2 ||
		l.Params[0].Kind != OpVar || l.Params[1].Kind != OpRef {
		t.Fatalf("link %+v", l)
	}
	slots := map[string]uint32{"in": 10, "out": 20, "lat": 30}
	prog := ret.Spec.Program(func(k string, _ uint32) uint32 { return slots[k] })
	if _, err := CheckProgram(prog); err != nil {
		t.Errorf("linked program: %v", err)
	}
	for _, c := range []struct {
		spec, msg string
		synth     map[string]*Synthetic
	}{
		{"keys=n:d=common_timestamp-$nope", "Couldn't find variable", nil},
		{"keys=n:d=common_timestamp:onmatch(g.none).trace(lat,$d)", "Matching event histogram not found", nil},
		{"keys=n:d=common_timestamp:onmatch(g.in).trace(lat,$d)", "Couldn't find synthetic event", nil},
		{"keys=n:d=common_timestamp:onmatch(g.in).trace(lat,$d)", "Param count doesn't match", map[string]*Synthetic{"lat": sy}},
		{"keys=s:d=common_timestamp-$ts0", "other keys", nil},
	} {
		bad := Named{Group: "g", Event: "x", Key: "x", Spec: parse(c.spec)}
		err := LinkAll([]Named{entry, bad}, c.synth, nil)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.spec, err, c.msg)
		}
	}
}

// FuzzCheckProgram: no program panics the check the runtime mirrors (src/rt_hist.c's
// check; runtime/hist_test.go compares them), and an accepted one's table fits the
// bounds the runtime relies on.
func FuzzCheckProgram(f *testing.F) {
	fs := testFields(f)
	for _, in := range []string{"keys=size", "keys=size.log2:vals=n:size=128", "keys=s,common_pid.execname:vals=size", "keys=n:m=size:onmax($m).save(s,size)"} {
		if s, err := Parse(in, fs); err == nil {
			f.Add(s.Program(nil))
		}
	}
	sy, _ := ParseSynthetic("lat u64 lat")
	sy.ID = 3
	in, _ := Parse("keys=n:ts0=common_timestamp", fs)
	out, _ := Parse("keys=n:l=common_timestamp-$ts0:onmatch(g.in).trace(lat,$l)", fs)
	if in != nil && out != nil && LinkAll([]Named{{Group: "g", Event: "in", Key: "in", Spec: in}, {Group: "g", Event: "out", Key: "out", Spec: out}},
		map[string]*Synthetic{"lat": sy}, nil) == nil {
		f.Add(out.Program(func(string, uint32) uint32 { return 64 })) // with a record block
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		w, err := CheckProgram(p)
		if err == nil && (w <= HeaderWords || w*8 > MaxTableBytes+SnapWords*8) {
			t.Fatalf("accepted a program of %d table words", w)
		}
	})
}
