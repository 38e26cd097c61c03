package tests

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// liveOrderSrc calls work() then other() with the same a, in that order: a trigger of
// other()'s event at a == N switches work()'s events from work's call with a == N+1 on.
var liveOrderSrc = livePhased(`__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }
__attribute__((noinline)) long other(long a) { return a + 1; }`, `s += work(i, phase);
			s += other(i);`)

// TestLiveSwitchTrigger: enable_event and disable_event triggers whose target is an
// event added at run time (the kernel's `enable_event:grp:ev` on a kprobe_events
// event): t/n, added live and disabled with `kprewrite disable` ([DISABLED] in list),
// records from the hit after a trigger of the rewrite-time t/o enables it at a == 5, up
// to the hit where another disables it at a == 10; a trigger of a live event (t/m, at
// the same site, run before t/n as the newest) enables it too; removing t/n is refused
// (EBUSY, naming the trigger) while a trigger targets it, and done once it is removed.
func TestLiveSwitchTrigger(t *testing.T) {
	prog := testprog.Build(t, liveOrderSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/o other a=%di:s64"}, "--prepare", "work")
	addr, _ := siteOf(t, prog, "work")
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	run := func(args ...string) string { t.Helper(); return kpOK(t, args...) }
	p.step(t, 0)
	run("probe", tr, "p:t/n work a=%di:s64 b=%si:s64")
	waitByte(t, p.cmd.Process.Pid, bin, addr, liveKinds[1].armed)
	if out := run("disable", tr, "t/n"); !strings.Contains(out, "t/n (prog): disabled (was enabled)") {
		t.Fatalf("disable t/n: %q", out)
	}
	checkListed(t, tr, true)
	for _, bad := range [][]string{ // an event that does not exist (yet): refused, nothing written
		{"trigger", tr, "t/o", "enable_event:t:later"}, {"trigger", tr, "t/n", "disable_event:t:later"},
		{"disable", tr, "t/later"},
	} {
		if code, o, e := kp(bad...); code != 1 || o != "" || !strings.Contains(e, "t:later") && !strings.Contains(e, "t/later") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 naming t/later", bad, code, o, e)
		}
	}
	run("trigger", tr, "t/o", "enable_event:t:n if a == 5")
	refuseRemove(t, tr, `enable_event:t:n:unlimited if a == 5" of t/o`)
	p.next(t, 1) // a = 0..99, b = 1: t/n enabled at other(5)
	checkListed(t, tr, false)
	run("trigger", tr, "t/o", "!enable_event:t:n")
	run("trigger", tr, "t/o", "disable_event:t:n if a == 10")
	p.next(t, 2) // a = 0..49, b = 2: t/n disabled at other(10)
	run("trigger", tr, "t/o", "!disable_event:t:n")
	run("probe", tr, "p:t/m work c=%di:s64")
	if out := run("trigger", tr, "t/m", "enable_event:t:n if c == 20"); !strings.HasSuffix(out, "triggers now:\n  enable_event:t:n:unlimited if c == 20\n") {
		t.Fatalf("trigger t/m: %q", out)
	}
	refuseRemove(t, tr, `enable_event:t:n:unlimited if c == 20" of t/m`)
	p.next(t, 3) // a = 0..24, b = 3: t/m, run first, enables t/n at a == 20
	run("trigger", tr, "t/m", "!enable_event:t:n")
	run("probe", tr, "-:t/n")
	var n []string
	m := 0
	for _, l := range readTrace(t, tr, bin) {
		switch l.Event {
		case "n":
			n = append(n, strings.TrimSpace(l.Args))
		case "m":
			m++
		}
	}
	var want []string
	for _, r := range [][3]int{{6, 99, 1}, {0, 10, 2}, {20, 24, 3}} {
		for a := r[0]; a <= r[1]; a++ {
			want = append(want, fmt.Sprintf("a=%d b=%d", a, r[2]))
		}
	}
	if strings.Join(n, ",") != strings.Join(want, ",") {
		t.Errorf("t/n: %d records %v\nwant %d: a=6..99 of phase 1, a=0..10 of phase 2, a=20..24 of phase 3", len(n), n, len(want))
	}
	if m != 25 {
		t.Errorf("t/m: %d records, want 25 (phase 3)", m)
	}
	if _, list, _ := kp("probe", tr); !strings.Contains(list, "175 hits") {
		t.Errorf("probe: %q, want 175 hits of t/n (every hit counted, disabled or not)", list)
	}
	p.finish(t, "sum 26350")
}

// checkListed fails unless `kprewrite list TRACE` shows the live event at work
// [DISABLED] or not, as disabled says.
func checkListed(t *testing.T, tr string, disabled bool) {
	t.Helper()
	out := kpOK(t, "list", tr)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "work") && strings.Contains(l, "[LIVE]") {
			if strings.Contains(l, "[DISABLED]") != disabled {
				t.Errorf("list: %q, want [DISABLED] %v", l, disabled)
			}
			return
		}
	}
	t.Errorf("list: no live event at work in %q", out)
}

// refuseRemove checks that `probe TRACE -:t/n` is refused (EBUSY) naming the trigger
// (why), and that t/n stays.
func refuseRemove(t *testing.T, tr, why string) {
	t.Helper()
	code, o, e := kp("probe", tr, "-:t/n")
	if code != 1 || o != "" || !strings.Contains(e, "t/n") || !strings.Contains(e, "busy") || !strings.Contains(e, why) {
		t.Errorf("probe -:t/n while a trigger targets it: exit %d, stdout %q, stderr %q; want exit 1, busy, %s", code, o, e, why)
	}
	if _, list, _ := kp("probe", tr); !strings.Contains(list, "t/n") || strings.Contains(list, "[GONE]") {
		t.Errorf("probe: %q: t/n removed", list)
	}
}
