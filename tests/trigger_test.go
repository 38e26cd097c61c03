package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

var triggerDefs = []string{
	"p:kpwe2e/w work a=%di:s32 b=%si:s64",
	"p:kpwe2e/o other x=%di:s32",
	"p:kpwe2e/n name s=+0(%di):string",
	"r:kpwe2e/wr work rv=$retval:s64",
}

// triggerCase is one set of triggers (written in order) and events left disabled.
type triggerCase struct {
	triggers [][2]string
	disabled []string
}

// triggerCases are checked against the kernel's uprobe tracer on triggered.c.
var triggerCases = []triggerCase{
	// traceoff runs after its record: the hit that stops tracing is recorded
	{triggers: [][2]string{{"w", "traceoff if a == 5"}}},
	// traceon (before the record, conditional: the hit that restarts tracing is not
	// recorded, as in the kernel's temp buffer) and a counted traceoff
	{triggers: [][2]string{{"w", "traceoff:2 if a == 3 || a == 9 || a == 15"}, {"o", "traceon if x == 12 || x == 28"}}},
	// an unconditional traceon runs before anything: its own hit is recorded
	{triggers: [][2]string{{"o", "traceoff:0x2"}, {"n", "traceon"}}},
	// enable_event and disable_event of a soft-disabled event, counted
	{triggers: [][2]string{{"w", "enable_event:kpwe2e:o:1 if a >= 4"}, {"n", `disable_event:kpwe2e:o if s == "gamma"`},
		{"wr", "enable_event:kpwe2e:o:2 if rv > 40000"}}, disabled: []string{"o"}},
	// unconditional enable/disable toggling every hit; a string condition
	{triggers: [][2]string{{"n", "enable_event:kpwe2e:o"}, {"w", "disable_event:kpwe2e:o:3"}, {"o", `traceoff if x > 30`}},
		disabled: []string{"o"}},
	// triggers of an event that records nothing (soft mode) still run
	{triggers: [][2]string{{"w", "traceoff if b > 2000"}, {"n", `traceon if s ~ "d*"`}}, disabled: []string{"w"}},
	// an event that switches itself on
	{triggers: [][2]string{{"o", "enable_event:kpwe2e:o if x == 20"}}, disabled: []string{"o"}},
	// stacktrace after its record: counted and conditional, on entry and return events
	{triggers: [][2]string{{"w", "stacktrace:3 if a > 10"}, {"o", "stacktrace if x == 20"}, {"wr", "stacktrace:2"}, {"n", "stacktrace"}}},
	// stacktrace and traceoff on one event, both after the record, in the kernel's order
	{triggers: [][2]string{{"w", "stacktrace if a >= 12"}, {"w", "traceoff if a == 14"}}},
	// several triggers on one event, conditions on the return value
	{triggers: [][2]string{{"wr", "disable_event:kpwe2e:w if rv < 0"}, {"wr", "enable_event:kpwe2e:n:1 if rv > 0"},
		{"o", "enable_event:kpwe2e:w if x > 20"}, {"wr", "traceoff:1 if rv > 60000"}}, disabled: []string{"n"}},
}

// TestTriggerKernelDifferential: the same definitions and triggers on triggered.c,
// traced by the kernel's uprobe tracer (triggers written into the events' trigger
// files) and by the rewritten program (rewrite --trigger, --disable), int3 and
// jump-optimized: the lines must be the kernel's.
func TestTriggerKernelDifferential(t *testing.T) {
	needUprobeTracer(t)
	src, err := os.ReadFile("testdata/triggered.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2")
	dir, orig, kpd := sameNamePair(t, prog, "triggered")
	total, stacks := 0, 0
	for i, tc := range triggerCases {
		kernel := kernelTraceControlled(t, orig, triggerDefs, kernelControl{Triggers: tc.triggers, Disabled: tc.disabled}, nil)
		if len(kernel) == 0 || len(kernel) == 24*3+8 {
			t.Fatalf("case %d: the kernel wrote %d lines: the triggers change nothing", i, len(kernel))
		}
		for _, mode := range []string{"int3", "optimize"} {
			var flags []string
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			for _, tr := range tc.triggers {
				flags = append(flags, "--trigger", "kpwe2e/"+tr[0]+":"+tr[1])
			}
			for _, ev := range tc.disabled {
				flags = append(flags, "--disable", "kpwe2e/"+ev)
			}
			rewriteWith(t, orig, kpd, triggerDefs, flags...)
			tr := filepath.Join(dir, fmt.Sprintf("%d-%s.trace", i, mode))
			c := noASLR(kpd)
			c.Extra = []string{"KPREWRITE_TRACE=" + tr}
			if res := testprog.Run(t, c); res.Exit != 3 {
				t.Fatalf("case %d %s: %s", i, mode, res)
			}
			got := readTrace(t, tr, kpd)
			if d := diffTraceLines(kernel, got); d != "" {
				t.Fatalf("case %d (%v) %s: trace differs from the kernel's:\n%s", i, tc.triggers, mode, d)
			}
			// the kernel's stacks are its own (uprobe_dispatcher...); ours are the user
			// stack of the hit
			stacks += checkStacks(t, got, map[string][]string{"w": {"work", "main"}, "o": {"other", "main"},
				"n": {"name", "main"}, "wr": {"main"}})
			// every hit counts, recorded or not (tracing off, soft-disabled)
			if hits := profile(t, tr, kpd); hits["w"][0] != 24 || hits["o"][0] != 24 || hits["n"][0] != 8 {
				t.Errorf("case %d %s: hits w %d o %d n %d, want 24 24 8", i, mode, hits["w"][0], hits["o"][0], hits["n"][0])
			}
			total += len(got)
		}
	}
	if stacks == 0 {
		t.Fatal("no stack entries: the stacktrace cases tested nothing")
	}
	t.Logf("%d cases, %d trace lines, all equal to the kernel's; %d user stacks as expected", len(triggerCases), total, stacks)
}

// checkStacks checks every stack entry of lines against the frames want gives for the
// event line before it: those functions, innermost first, then the C library's start-up
// (a pc outside the image, where the walk stops). It returns how many it checked.
func checkStacks(t *testing.T, lines []traceLine, want map[string][]string) int {
	t.Helper()
	n := 0
	for k, l := range lines {
		if l.Event != "<stack trace>" {
			continue
		}
		if k == 0 || lines[k-1].Event == "<stack trace>" {
			t.Fatalf("line %d: a stack entry that follows no event", k+1)
		}
		ev := lines[k-1].Event
		w, ok := want[ev]
		if !ok {
			t.Fatalf("line %d: a stack entry after event %s", k+1, ev)
		}
		fr := strings.Fields(l.Stack)
		if len(fr) != len(w)+1 || !strings.HasPrefix(fr[len(w)], "<") || strings.Join(fr[:len(w)], " ") != strings.Join(w, " ") {
			t.Fatalf("line %d: the stack of %s is %q, want %q then the C library's start-up", k+1, ev, fr, w)
		}
		n++
	}
	return n
}

// kernelTriggerErrno writes text into the trigger file of diffGroup's event ev (after
// the triggers before), returning the kernel's errno (0: accepted).
func kernelTriggerErrno(ev, text string) syscall.Errno {
	err := os.WriteFile(diffInstnc+"/events/"+diffGroup+"/"+ev+"/trigger", []byte(text), 0)
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	if err != nil {
		return syscall.EIO
	}
	return 0
}

// TestTriggerParseMatchesKernel: sequences of trigger writes, each answered by the
// kernel (accepted, or its errno) and by internal/evtrigger (Parse, then Set.Apply):
// the answers must agree, and so must what the trigger files then list.
func TestTriggerParseMatchesKernel(t *testing.T) {
	needUprobeTracer(t)
	src, err := os.ReadFile("testdata/triggered.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2")
	_, orig, _ := sameNamePair(t, prog, "triggered")
	kernelTraceControlled(t, orig, triggerDefs, kernelControl{}, nil) // defines the events and the instance
	seqs := [][]string{
		{"traceon", "traceoff", "!traceoff", "traceoff:3 if a > 1", "!traceon"},
		{"traceon:abc", "traceon:5 if", "traceon if a ==", "traceon:5if a==1", "traceon:", "traceon: if a==2"},
		{"traceon:0x", "traceon:08", "traceon:010", "traceon:99999999999999999999", "traceon:18446744073709551615"},
		{"traceon:5:junk", "!traceon:7", "traceoff 4", "!traceoff", "traceoff\t2 if a<3"},
		{"enable_event:kpwe2e", "enable_event:kpwe2e:nosuch", "enable_event:kpwe2e:o", "enable_event:kpwe2e:o",
			"disable_event:kpwe2e:o", "!disable_event:kpwe2e:o", "disable_event:kpwe2e:o:2 if a < 0"},
		{"enable_event:kpwe2e:n:", "enable_event:kpwe2e:n:x", "enable_event:kpwe2e:n:+3", "enable_event:nosuch:o",
			"disable_event::o", "enable_event:kpwe2e:w if b > 0", "!enable_event:kpwe2e:zzz"},
		{"stacktrace", "stacktrace:2 if a == 1", "bogus", "", "  traceon  ", "!bogus", "traceon if nosuchfield == 1",
			"traceon if a == \"x\"", "!stacktrace"},
		{"traceoff if a > 1 && (b < 2 || a == 3)", "enable_event:kpwe2e:wr:1 if a & 1", "disable_event:kpwe2e:n:0x1",
			"!enable_event:kpwe2e:wr"},
	}
	fields := map[string][]evfilter.Field{}
	for _, d := range triggerDefs {
		p, err := eventdef.Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		fields[p.Event] = evfilter.Fields(p)
	}
	exists := func(group, event string) bool { return group == diffGroup && fields[event] != nil }
	n := 0
	for _, seq := range seqs {
		ev := "w"
		var set evtrigger.Set
		for _, text := range seq {
			if text == "" {
				continue // an empty write is no write
			}
			want := kernelTriggerErrno(ev, text)
			var got syscall.Errno
			tr, err := evtrigger.Parse(text, evtrigger.Env{Fields: fields[ev], Syms: anySyms{}, Exists: exists})
			if err == nil {
				set, err = set.Apply(tr)
			}
			var te *evtrigger.Error
			switch {
			case errors.As(err, &te):
				got = te.Errno
			case err != nil:
				t.Fatalf("%q: %v", text, err)
			}
			if got != want {
				t.Errorf("trigger %q: kernel %v, evtrigger %v (%v)", text, errnoText(want), errnoText(got), err)
			}
			n++
		}
		listed, err := os.ReadFile(diffInstnc + "/events/" + diffGroup + "/" + ev + "/trigger")
		if err != nil {
			t.Fatal(err)
		}
		var ours []string
		for _, tr := range set {
			ours = append(ours, tr.String())
		}
		kl := strings.TrimSpace(string(listed))
		if strings.HasPrefix(kl, "# Available triggers") {
			kl = ""
		}
		if kl != strings.Join(ours, "\n") {
			t.Errorf("after %q the kernel lists\n%s\nevtrigger\n%s", seq, kl, strings.Join(ours, "\n"))
		}
		for _, tr := range set { // clear for the next sequence
			rm := "!" + tr.Cmd.String()
			if tr.Group != "" {
				rm += ":" + tr.Group + ":" + tr.Event
			}
			if e := kernelTriggerErrno(ev, rm); e != 0 {
				t.Fatalf("%q: %v", rm, e)
			}
		}
	}
	t.Logf("%d trigger writes answered as the kernel answers them", n)
}

func errnoText(e syscall.Errno) string {
	if e == 0 {
		return "accepted"
	}
	return e.Error()
}

// anySyms resolves every .function name.
type anySyms struct{}

func (anySyms) Func(string) (uint64, uint64, bool)   { return 0, 1, true }
func (anySyms) FuncAt(uint64) (uint64, uint64, bool) { return 0, 1, true }

// diffTraceLines says how ours differs from the kernel's lines ("" when equal).
func diffTraceLines(kernel, ours []traceLine) string {
	if len(ours) != len(kernel) {
		return fmt.Sprintf("kprewrite wrote %d lines, the kernel %d\nkernel:\n%s\nkprewrite:\n%s", len(ours), len(kernel), joinLines(kernel), joinLines(ours))
	}
	var b strings.Builder
	for k := range kernel {
		a, o := kernel[k], ours[k]
		if a.Event != o.Event || a.Args != o.Args || a.Comm != o.Comm || a.Head != o.Head {
			fmt.Fprintf(&b, "line %d:\n  kernel:    %s %s %s%s\n  kprewrite: %s %s %s%s\n", k+1, a.Comm, a.Event, a.Head, a.Args, o.Comm, o.Event, o.Head, o.Args)
		}
	}
	return b.String()
}

const phasedSrc = `
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int work(int a) { __asm__ volatile(""); return a + 1; }
__attribute__((noinline)) int other(int a) { __asm__ volatile(""); return a + 2; }
int main(void)
{
	char c;
	long s = 0;
	for (int phase = 0; phase < 4; phase++) {
		for (int i = 0; i < 10; i++)
			s += work(phase * 100 + i) + other(phase * 100 + i);
		printf("phase %d\n", phase);
		fflush(stdout);
		if (read(0, &c, 1) != 1)
			break;
	}
	return s == 0;
}
`

// TestTraceControlRunning: kprewrite traceoff/traceon/disable/enable change what a
// running program records, between its phases; every hit is still counted.
func TestTraceControlRunning(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // enable before a run: the run after adds to the file
	prog := testprog.Build(t, phasedSrc, "c", "-O2")
	for _, mode := range []string{"int3", "optimize"} {
		t.Run(mode, func(t *testing.T) {
			kpd := filepath.Join(t.TempDir(), "phased")
			flags := []string{}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, kpd, []string{"p:ctl/w work a=%di:s32", "p:ctl/o other a=%di:s32"}, flags...)
			tr := kpd + ".trace"
			runPhased(t, kpd, nil, [][][]string{
				{{"traceoff", tr}},
				{{"traceon", tr}, {"disable", tr, "w"}},
				{{"enable", tr, "ctl/w"}, {"disable", tr, "ctl/*"}, {"enable", tr, "w"}},
			})
			got := events(t, tr, kpd)
			var want []string
			for i := 0; i < 10; i++ { // phase 0: both
				want = append(want, fmt.Sprintf("wa=%d", i), fmt.Sprintf("oa=%d", i))
			}
			for i := 200; i < 210; i++ { // phase 2: other only
				want = append(want, fmt.Sprintf("oa=%d", i))
			}
			for i := 300; i < 310; i++ { // phase 3: work only
				want = append(want, fmt.Sprintf("wa=%d", i))
			}
			if got != strings.Join(want, " ") {
				t.Errorf("records\n%q\nwant\n%q", got, want)
			}
			if hits := profile(t, tr, kpd); hits["w"][0] != 40 || hits["o"][0] != 40 {
				t.Errorf("hits w %d o %d, want 40 each", hits["w"][0], hits["o"][0])
			}
			// an event rewritten disabled is live (its sites keep the original bytes): it
			// records nothing until switched on, and a run after the switch arms it at
			// start-up and records every hit
			rewriteWith(t, prog, kpd, []string{"p:ctl/w work a=%di:s32"}, append(flags, "--disable", "w")...)
			os.Remove(tr)
			for run := 0; run < 2; run++ {
				if res := testprog.Run(t, testprog.Cmd{Path: kpd, Stdin: "xxxx"}); res.Exit != 0 {
					t.Fatal(res)
				}
				if n := len(readTrace(t, tr, kpd)); n != 40*run {
					t.Errorf("run %d: %d records, want %d", run, n, 40*run)
				}
				if run == 0 {
					if code, _, e := kp("enable", tr, "w"); code != 0 {
						t.Errorf("enable of a live event: exit %d %s", code, e)
					}
				}
			}
			if code, _, e := kp("disable", tr, "nosuch"); code == 0 || !strings.Contains(e, "no event nosuch") {
				t.Errorf("disable of no event: exit %d %s", code, e)
			}
		})
	}
}
