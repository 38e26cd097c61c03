package tests

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// swSrc is phasedSrc with 8-byte arguments (the fast path's register copies) and a
// warm-up: the runtime measures the TSC's rate over its first milliseconds of hits
// (src/rt_clock.c), and until then every record takes the C path, which reads each
// switch itself.
var swSrc = strings.NewReplacer(
	"int work(int a)", "long work(long a)",
	"int other(int a)", "long other(long a)",
	"int main(void)", "__attribute__((noinline)) long warm(long a) { __asm__ volatile(\"\"); return a + 3; }\nint main(void)",
	"\tfor (int phase", "\tfor (int i = 0; i < 20; i++) {\n\t\ts += warm(i);\n\t\tusleep(1000);\n\t}\n\tfor (int phase",
).Replace(phasedSrc)

// swEvents is events without the warm-up's records.
func swEvents(t *testing.T, tr, bin string) string {
	var got []string
	for _, r := range strings.Fields(events(t, tr, bin)) {
		if !strings.HasPrefix(r, "warm") {
			got = append(got, r)
		}
	}
	return strings.Join(got, " ")
}

// swWant lists the records of phasedSrc's loop (w and o each i in phase*100 .. +9) that
// keep returns true for.
func swWant(keep func(ev string, a int) bool) string {
	var want []string
	for phase := 0; phase < 4; phase++ {
		for i := phase * 100; i < phase*100+10; i++ {
			for _, ev := range []string{"w", "o"} {
				if keep(ev, i) {
					want = append(want, fmt.Sprintf("%sa=0x%x", ev, i))
				}
			}
		}
	}
	return strings.Join(want, " ")
}

// TestSwitchesReachHotLines: a jump-optimized event whose record the detour's assembly
// writes (8-byte register fetches, no filter: its kprw_hot line caches the trace
// header's sw_gen under which it found the event open) stops recording at once when a
// switch closes it, from another process (kprewrite disable, traceoff, a filter frame)
// or from a trigger in the program (disable_event, traceoff): each writer bumps sw_gen.
// Fails when a writer leaves sw_gen alone (the line keeps writing).
func TestSwitchesReachHotLines(t *testing.T) {
	prog := testprog.Build(t, swSrc, "c", "-O2")
	defs := []string{"p:sw/w work a=%di", "p:sw/o other a=%di", "p:sw/warm warm"}
	t.Run("tool", func(t *testing.T) {
		kpd := filepath.Join(t.TempDir(), "phased")
		rewriteWith(t, prog, kpd, defs)
		tr := kpd + ".trace"
		runPhased(t, kpd, nil, [][][]string{
			{{"disable", tr, "sw/w"}},
			{{"enable", tr, "sw/w"}, {"traceoff", tr}},
			{{"traceon", tr}, {"filter", tr, "sw/w", "a & 1"}},
		})
		want := swWant(func(ev string, a int) bool {
			switch a / 100 {
			case 1:
				return ev == "o"
			case 2:
				return false
			case 3:
				return ev == "o" || a&1 == 1
			}
			return true
		})
		if got := swEvents(t, tr, kpd); got != want {
			t.Errorf("records\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("disable_event", func(t *testing.T) {
		kpd := filepath.Join(t.TempDir(), "phased")
		rewriteWith(t, prog, kpd, defs, "--trigger", "sw/o:disable_event:sw:w if a == 105")
		tr := kpd + ".trace"
		runPhased(t, kpd, nil, nil)
		want := swWant(func(ev string, a int) bool { return ev == "o" || a <= 105 })
		if got := swEvents(t, tr, kpd); got != want {
			t.Errorf("records\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("traceoff", func(t *testing.T) {
		kpd := filepath.Join(t.TempDir(), "phased")
		// (on the return of other(205), after its record: nothing after it)
		rewriteWith(t, prog, kpd, append(defs, "r:sw/r other v=$retval:u64"), "--trigger", "sw/r:traceoff if v == 207")
		tr := kpd + ".trace"
		runPhased(t, kpd, nil, nil)
		var want []string
		for _, r := range strings.Fields(swWant(func(ev string, a int) bool { return a <= 205 })) {
			want = append(want, r)
			if a := strings.TrimPrefix(r, "oa="); a != r {
				var v int
				fmt.Sscanf(a, "0x%x", &v)
				want = append(want, fmt.Sprintf("rv=%d", v+2))
			}
		}
		if got := swEvents(t, tr, kpd); got != strings.Join(want, " ") {
			t.Errorf("records\n%s\nwant\n%s", got, strings.Join(want, " "))
		}
	})
}

// TestSwitchesOlderFile: a program that joins a trace file of version 4 (made by an
// older kprewrite, whose programs and commands do not bump sw_gen) does not trust
// sw_gen there: a `kprewrite disable` between its phases, which bumps nothing in such a
// file, still stops the event's records at once (the C path reads the switches). Fails
// when the runtime takes sw_gen from a file older than version 5.
func TestSwitchesOlderFile(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // the second run adds to the first's file
	prog := testprog.Build(t, swSrc, "c", "-O2")
	kpd := filepath.Join(t.TempDir(), "phased")
	rewriteWith(t, prog, kpd, []string{"p:sw/w work a=%di", "p:sw/o other a=%di", "p:sw/warm warm"})
	tr := kpd + ".trace"
	runPhased(t, kpd, nil, nil) // makes the file (version 5)
	f, err := os.OpenFile(tr, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var v [4]byte
	binary.LittleEndian.PutUint32(v[:], kprt.TraceVersion4)
	if _, err := f.WriteAt(v[:], int64(unsafe.Offsetof(kprt.RawTraceHeader{}.Version))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runPhased(t, kpd, nil, [][][]string{{{"disable", tr, "sw/w"}}})
	all := swWant(func(string, int) bool { return true })
	second := swWant(func(ev string, a int) bool { return ev == "o" || a < 100 })
	if got := swEvents(t, tr, kpd); got != all+" "+second {
		t.Errorf("records\n%s\nwant\n%s\n%s", got, all, second)
	}
}
