package tests

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestCallsExitsDefault: --calls records its return events at the functions' rets by
// default where the analysis sees every exit ([EXIT] in list, as --exits does), and
// --calls-hook keeps hooking every return address; both traces of calls_lost.c
// (longjmp out of nested calls, a tail call) read the same: `trace` line for line up
// to times and load addresses, `report` call for call, lost returns included, and the
// Chrome export nests the same slices, fib's 465 returns included: it recurses 12 deep,
// deeper than the kernel's default maxactive (10) but not than --calls' (64), so
// hooked or at its rets every return is recorded.
func TestCallsExitsDefault(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			prog := testprog.Build(t, readSource(t, "calls_lost.c"), "c", opt)
			dir := t.TempDir()
			def, hook := filepath.Join(dir, "def.kp"), filepath.Join(dir, "hook.kp")
			for _, c := range []struct {
				out   string
				flags []string
			}{{def, nil}, {hook, []string{"--calls-hook"}}} {
				args := append([]string{"rewrite", "--calls", "*", "-o", c.out}, c.flags...)
				if code, o, e := kp(append(args, prog)...); code != 0 {
					t.Fatalf("%s: exit %d\n%s%s", strings.Join(args, " "), code, o, e)
				}
				testprog.Same(t, prog, c.out, testprog.Cmd{}, nil)
			}
			_, dl, _ := kp("list", def)
			_, hl, _ := kp("list", hook)
			for _, fn := range []string{"fib", "leaf"} {
				if !regexp.MustCompile(`(?m) r  ` + fn + `\+0x[0-9a-f]+ .*\[EXIT\]$`).MatchString(dl) {
					t.Errorf("--calls: %s's return not recorded at its rets:\n%s", fn, dl)
				}
			}
			if strings.Contains(hl, "[EXIT]") {
				t.Errorf("--calls-hook: a return recorded at an exit:\n%s", hl)
			}
			for _, view := range [][]string{{"trace"}, {"report"}, {"trace", "--format", "chrome"}} {
				d, h := callsView(t, def+".trace", view), callsView(t, hook+".trace", view)
				if d != h {
					t.Errorf("%s differs:\n=== --calls\n%s\n=== --calls-hook\n%s", strings.Join(view, " "), d, h)
				}
			}
			_, dt, _ := kp("trace", def+".trace")
			_, ht, _ := kp("trace", hook+".trace")
			if d, h := strings.Count(dt, "fib__return:"), strings.Count(ht, "fib__return:"); d != 465 || h != 465 {
				t.Errorf("fib's returns: %d recorded at its rets, %d hooked (want 465 each: maxactive 64)", d, h)
			}
			if _, r, _ := kp("report", def+".trace"); !strings.Contains(r, "jumper  (12 lost returns)") {
				t.Errorf("report: want the 12 calls of jumper longjmp left (3 times 4 nested):\n%s", r)
			}
		})
	}
}

// callsView is a view of a trace without what differs between two runs of one
// program: times, durations, pids and load addresses (the page offset stays); report's
// lines sorted (it orders functions by time); the counts of entries written left out.
func callsView(t *testing.T, trace string, view []string) string {
	t.Helper()
	code, out, e := kp(append(view, trace)...)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", strings.Join(view, " "), code, e)
	}
	for _, re := range []struct{ from, to string }{
		{`(?m)^ *\S+-[0-9]+ +\[[0-9]+\] +[0-9.]+:`, ""}, // trace: TASK-PID CPU TIMESTAMP
		{`[0-9.]+ (ns|us|ms|s)\b`, "T"},                 // report: times
		{`"(ts|dur|pid|tid)":[0-9.e+-]+`, `"$1":N`},     // chrome: times and ids
		{`0x[0-9a-f]*([0-9a-f]{3})\b`, "0x.$1"},         // load addresses
		{`[a-z_.]+\.kp(-[0-9]+)?\b`, "PROG"},            // the program's name (and tid)
		{` +`, " "},                                     // report's columns
	} {
		out = regexp.MustCompile(re.from).ReplaceAllString(out, re.to)
	}
	lines := slices.DeleteFunc(strings.Split(out, "\n"), func(l string) bool {
		return strings.Contains(l, "entries-written")
	})
	if view[0] == "report" {
		slices.Sort(lines)
	}
	return strings.Join(lines, "\n")
}

// TestCallsHookRunTimeTrigger: a function whose entry and hooked return events share a
// jump-optimized point (the runtime's KPRW_HOT_CALL line) runs a trigger added to its
// entry event while the program runs, at every hit after: a histogram of the hits of
// phases 1-3 counts 30; every hit is recorded and counted.
func TestCallsHookRunTimeTrigger(t *testing.T) {
	prog := testprog.Build(t, phasedSrc, "c", "-O2")
	kpd := filepath.Join(t.TempDir(), "phased")
	rewriteWith(t, prog, kpd, []string{"p:ctl/w work", "r:ctl/wr work"})
	if _, l, _ := kp("list", kpd); strings.Contains(l, "[EXIT]") || strings.Count(l, "[OPTIMIZED]") != 2 {
		t.Fatalf("want both events at work's jump-optimized entry:\n%s", l)
	}
	tr := kpd + ".trace"
	runPhased(t, kpd, nil, [][][]string{{{"trigger", tr, "ctl/w", "hist:keys=common_pid"}}})
	_, out, _ := kp("trace", tr)
	if w, wr := strings.Count(out, " w: "), strings.Count(out, " wr: "); w != 40 || wr != 40 {
		t.Errorf("records: %d of w, %d of wr; want 40 each", w, wr)
	}
	code, h, e := kp("hist", tr)
	if code != 0 || !regexp.MustCompile(`hitcount: +30\b`).MatchString(h) {
		t.Errorf("hist: exit %d, want hitcount 30 (phases 1-3)\n%s%s", code, h, e)
	}
}

// TestCallsHookReturnControls: the return event of a hooked pair (a KPRW_HOT_CALL line,
// whose returns the trampoline records on the fast path, hot_ret_fast) follows the
// controls changed while the program runs: after phase 0 a filter that refuses every
// record, after phase 1 the filter gone and the event switched off, after phase 2 on
// again. Entry records: all 40; return records: phases 0 and 3, 20.
func TestCallsHookReturnControls(t *testing.T) {
	prog := testprog.Build(t, phasedSrc, "c", "-O2")
	kpd := filepath.Join(t.TempDir(), "phased")
	rewriteWith(t, prog, kpd, []string{"p:ctl/w work", "r:ctl/wr work"})
	tr := kpd + ".trace"
	runPhased(t, kpd, nil, [][][]string{
		{{"filter", tr, "ctl/wr", "common_pid == 0"}},
		{{"filter", tr, "ctl/wr", "0"}, {"disable", tr, "ctl/wr"}},
		{{"enable", tr, "ctl/wr"}},
	})
	_, out, _ := kp("trace", tr)
	if w, wr := strings.Count(out, " w: "), strings.Count(out, " wr: "); w != 40 || wr != 20 {
		t.Errorf("records: %d of w, %d of wr; want 40 and 20\n%s", w, wr, out)
	}
}
