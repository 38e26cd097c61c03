package evtrigger

import (
	"bytes"
	"reflect"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
)

type anySyms struct{}

func (anySyms) Func(string) (uint64, uint64, bool)   { return 0, 1, true }
func (anySyms) FuncAt(uint64) (uint64, uint64, bool) { return 0, 1, true }

func testEnv(t testing.TB) Env {
	p, err := eventdef.Parse("p:g/ev func a=%di:s32 s=+0(%si):string")
	if err != nil {
		t.Fatal(err)
	}
	return Env{Fields: evfilter.Fields(p), Syms: anySyms{}, Exists: func(g, e string) bool { return g == "g" && (e == "ev" || e == "x") }}
}

func TestParse(t *testing.T) {
	env := testEnv(t)
	for _, c := range []struct {
		text  string
		want  Trigger
		errno syscall.Errno
	}{
		{text: "traceon", want: Trigger{Cmd: TraceOn, Count: Unlimited}},
		{text: " traceoff:5 if a > 1 ", want: Trigger{Cmd: TraceOff, Count: 5, Filter: "a > 1"}},
		{text: "traceoff 0x10", want: Trigger{Cmd: TraceOff, Count: 16}},
		{text: "traceon:010", want: Trigger{Cmd: TraceOn, Count: 8}},
		{text: "traceon:5:junk", want: Trigger{Cmd: TraceOn, Count: 5}},
		{text: "traceon: if a==2", want: Trigger{Cmd: TraceOn, Count: Unlimited, Filter: "a==2"}},
		{text: `enable_event:g:x:3 if s ~ "o*"`, want: Trigger{Cmd: EnableEvent, Count: 3, Filter: `s ~ "o*"`, Group: "g", Event: "x"}},
		{text: "enable_event:g:x:+3", want: Trigger{Cmd: EnableEvent, Count: 3, Group: "g", Event: "x"}},
		{text: "!disable_event:g:x:junk", want: Trigger{Cmd: DisableEvent, Count: Unlimited, Group: "g", Event: "x", Remove: true}},
		{text: "!traceon:abc", want: Trigger{Cmd: TraceOn, Count: Unlimited, Remove: true}},
		{text: "traceon:abc", errno: syscall.EINVAL},
		{text: "traceon:5 if", errno: syscall.EINVAL},
		{text: "traceon if b == 1", errno: syscall.EINVAL},
		{text: "traceon:08", errno: syscall.EINVAL},
		{text: "traceon:0x", errno: syscall.EINVAL},
		{text: "traceon:99999999999999999999", errno: syscall.ERANGE},
		{text: "enable_event:g", errno: syscall.EINVAL},
		{text: "enable_event:g:nope", errno: syscall.EINVAL},
		{text: "enable_event:g:x:", errno: syscall.EINVAL},
		{text: "enable_event", errno: syscall.EINVAL},
		{text: "bogus", errno: syscall.EINVAL},
		{text: "hist:keys=nosuch", errno: syscall.EINVAL},
		{text: "hist", errno: syscall.EINVAL},
		{text: "enable_hist:g:x:2 if a > 1", want: Trigger{Cmd: EnableHist, Count: 2, Filter: "a > 1", Group: "g", Event: "x"}},
		{text: "!disable_hist:g:x", want: Trigger{Cmd: DisableHist, Count: Unlimited, Group: "g", Event: "x", Remove: true}},
		{text: "disable_hist:g:nope", errno: syscall.EINVAL},
	} {
		got, err := Parse(c.text, env)
		if c.errno != 0 {
			e, ok := err.(*Error)
			if !ok || e.Errno != c.errno {
				t.Errorf("%q: got %v, want errno %v", c.text, err, c.errno)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.text, err)
			continue
		}
		c.want.Text = c.text
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %+v, want %+v", c.text, got, c.want)
		}
	}
}

func TestSet(t *testing.T) {
	env := testEnv(t)
	var s Set
	apply := func(text string) error {
		tr, err := Parse(text, env)
		if err != nil {
			t.Fatal(err)
		}
		s, err = s.Apply(tr)
		return err
	}
	for _, ok := range []string{"traceon", "enable_event:g:x", "disable_event:g:ev:2", "!traceoff", "traceoff:1 if a < 0", "!enable_event:g:x", "enable_hist:g:x", "disable_hist:g:ev", "!disable_hist:g:ev"} {
		if err := apply(ok); err != nil {
			t.Fatalf("%q: %v", ok, err)
		}
	}
	for _, dup := range []string{"traceon", "traceoff", "enable_event:g:ev", "disable_hist:g:x"} {
		if err := apply(dup); err == nil || err.(*Error).Errno != syscall.EEXIST {
			t.Errorf("%q: %v, want EEXIST", dup, err)
		}
	}
	var got []string
	for _, tr := range s {
		got = append(got, tr.String())
	}
	want := []string{"enable_hist:g:x:unlimited", "traceoff:count=1 if a < 0", "disable_event:g:ev:count=2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("set %q, want %q", got, want)
	}
}

func TestProgramRoundTrip(t *testing.T) {
	env := testEnv(t)
	var cs []Compiled
	for i, text := range []string{"traceoff:3 if a > 1", "enable_event:g:x", "traceon"} {
		tr, err := Parse(text, env)
		if err != nil {
			t.Fatal(err)
		}
		c := Compiled{Trigger: tr, Slot: uint32(i * 7)}
		if tr.Filter != "" {
			f, err := evfilter.Parse(tr.Filter, env.Fields, env.Syms)
			if err != nil {
				t.Fatal(err)
			}
			c.Filter = f.Program()
		}
		if tr.Cmd == EnableEvent {
			c.Targets = []uint32{1, 4}
		}
		cs = append(cs, c)
	}
	b, err := Program(cs)
	if err != nil {
		t.Fatal(err)
	}
	if !Cond(cs) || b[6] != 1 {
		t.Error("a conditional set is not marked cond")
	}
	back, err := Decode(b, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		g, w := back[i], cs[i]
		if g.Cmd != w.Cmd || g.Count != w.Count || g.Slot != w.Slot || !reflect.DeepEqual(g.Targets, w.Targets) || string(g.Filter) != string(w.Filter) {
			t.Errorf("trigger %d: decoded %+v, want %+v", i, g, w)
		}
	}
	if _, err := Decode(b, 4); err == nil {
		t.Error("a target past the events decoded")
	}
}

// TestLiveTargetRoundTrip: an enable_event target naming a live event's switch word
// (LiveTarget and its slot) decodes whatever the number of events; a slot past
// MaxSlots does not.
func TestLiveTargetRoundTrip(t *testing.T) {
	tr, err := Parse("enable_event:g:x", testEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		target uint32
		ok     bool
	}{{LiveTarget | 12, true}, {LiveTarget | (MaxSlots - 1), true}, {LiveTarget | MaxSlots, false}} {
		b, err := Program([]Compiled{{Trigger: tr, Targets: []uint32{2, c.target}}})
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(b, 3)
		if (err == nil) != c.ok {
			t.Errorf("target %#x: decoded %v, want %v (%v)", c.target, err == nil, c.ok, err)
		} else if c.ok && !reflect.DeepEqual(back[0].Targets, []uint32{2, c.target}) {
			t.Errorf("target %#x: decoded targets %v", c.target, back[0].Targets)
		}
	}
}

// FuzzParse: no input panics; an accepted trigger's listing parses back to the same
// trigger (without the count's "count=" spelling, which the kernel does not read).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"traceon", "traceoff:5 if a > 1", "enable_event:g:x:3 if s ~ \"o*\"", "!traceon", "traceon:0x10", "disable_event:g:ev"} {
		f.Add(s)
	}
	env := testEnv(f)
	f.Fuzz(func(t *testing.T, text string) {
		tr, err := Parse(text, env)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("%q: error %T", text, err)
			}
			return
		}
		_ = tr.String()
		var s Set
		s.Apply(tr)
	})
}

// FuzzDecode: no blob panics the decoder, which checks what the runtime checks.
func FuzzDecode(f *testing.F) {
	b, _ := Program([]Compiled{{Trigger: Trigger{Cmd: TraceOff, Count: 2}, Slot: 1}, {Trigger: Trigger{Cmd: EnableEvent, Count: Unlimited}, Targets: []uint32{0}}})
	f.Add(b, 2)
	if tr, err := Parse("hist:keys=a:vals=a if a > 1", testEnv(f)); err == nil { // a table to place
		b, _ = Program([]Compiled{{Trigger: tr, Hist: tr.Hist.Program(nil), Alloc: true}})
		f.Add(b, 1)
	}
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		Decode(b, n)
	})
}

// TestHistSet: hist triggers follow hist_register_trigger: several per event, the same
// one again is EEXIST unless it pauses, continues or clears it, cont/clear of none is
// ENOENT, '!' removes the matching one.
func TestHistSet(t *testing.T) {
	env := testEnv(t)
	var s Set
	apply := func(text string) error {
		tr, err := Parse(text, env)
		if err != nil {
			return err
		}
		s, err = s.Apply(tr)
		return err
	}
	errno := func(err error) syscall.Errno {
		if e, ok := err.(*Error); ok {
			return e.Errno
		}
		return 0
	}
	if err := apply("hist:keys=a"); err != nil {
		t.Fatal(err)
	}
	if err := apply("hist:keys=a:vals=a if a > 1"); err != nil {
		t.Fatal(err)
	}
	if err := apply("hist:key=a"); errno(err) != syscall.EEXIST {
		t.Errorf("the same histogram again: %v, want EEXIST", err)
	}
	if err := apply("hist:keys=a:pause"); err != nil || s[1].String() != "hist:keys=a:vals=hitcount:sort=hitcount:size=2048 [paused]" {
		t.Errorf("pause: %v, %v", err, s)
	}
	if err := apply("hist:keys=a:cont"); err != nil || s[1].Hist.Pause {
		t.Errorf("cont: %v, %v", err, s)
	}
	if err := apply("hist:keys=s:clear"); errno(err) != syscall.ENOENT {
		t.Errorf("clear of no histogram: %v, want ENOENT", err)
	}
	if err := apply("!hist:keys=a:vals=a if a > 1"); err != nil || len(s) != 1 || s[0].String() != "hist:keys=a:vals=hitcount:sort=hitcount:size=2048 [active]" {
		t.Errorf("remove: %v, %v", err, s)
	}
	if err := apply("traceon"); err != nil || len(s) != 2 {
		t.Errorf("a traceon beside a histogram: %v, %v", err, s)
	}
}

// TestAllocRoundTrip: a hist trigger whose table is still to be placed (a run-time
// one) keeps its mark through Decode and Program, and the mark is refused on anything
// but a hist trigger with a program.
func TestAllocRoundTrip(t *testing.T) {
	tr, err := Parse("hist:keys=a:vals=a if a > 1", testEnv(t))
	if err != nil {
		t.Fatal(err)
	}
	c := Compiled{Trigger: tr, Hist: tr.Hist.Program(nil), Alloc: true}
	b, err := Program([]Compiled{c, {Trigger: Trigger{Cmd: TraceOn, Count: Unlimited}, Slot: 3}})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := Decode(b, 1)
	if err != nil || len(cs) != 2 || !cs[0].Alloc || cs[1].Alloc || cs[0].Slot != 0 {
		t.Fatalf("decoded %+v, %v", cs, err)
	}
	cs[0].Slot, cs[0].Alloc = 77, false
	b2, err := Program(cs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Decode(b2, 1)
	if err != nil || again[0].Alloc || again[0].Slot != 77 || len(b2) != len(b) || !bytes.Equal(again[0].Hist, c.Hist) {
		t.Errorf("placed: %+v, %v", again, err)
	}
	bad := append([]byte(nil), b...)
	bad[len(bad)-triggerSize+1] |= FlagAlloc // on the traceon, the last trigger (no targets, no filter)
	if _, err := Decode(bad, 1); err == nil {
		t.Error("a table to place on a traceon trigger was accepted")
	}
}
