package tests

import (
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// trackSrc calls work(key, val, tag) n times with keys and values from a known
// generator (tag is the call's index), and mark() once, after the call of index n/2.
const trackSrc = `
#include <stdio.h>
#include <stdlib.h>
static volatile long sink;
__attribute__((noinline)) long work(long key, long val, long tag) { sink += val; return key + val + tag; }
__attribute__((noinline)) int mark(int m) { sink += m; return m + 1; }
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 200;
	unsigned long long x = 12345;
	for (long i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		work((long)((x >> 33) % 5), (long)((x >> 40) % 1000) + 1, i);
		if (i == n / 2)
			mark(7);
	}
	printf("done\n");
	return 0;
}
`

type trackCall struct{ key, val, tag uint64 }

// forProbeModes runs body once with jump-optimized probes and once with int3 ones
// (modeFlags: the rewrite flags that choose it).
func forProbeModes(t *testing.T, body func(t *testing.T, modeFlags []string)) {
	for _, mode := range []string{"optimize", "int3"} {
		t.Run(mode, func(t *testing.T) {
			var flags []string
			if mode == "int3" {
				flags = []string{"--no-optimize"}
			}
			body(t, flags)
		})
	}
}

// trackCalls are trackSrc's calls of work, in order.
func trackCalls(n int) []trackCall {
	x := uint64(12345)
	out := make([]trackCall, n)
	for i := range out {
		x = x*6364136223846793005 + 1442695040888963407
		out[i] = trackCall{(x >> 33) % 5, (x>>40)%1000 + 1, uint64(i)}
	}
	return out
}

var trackEntryRe = regexp.MustCompile(`\{ key: +(\d+) \} hitcount: +(\d+)\n\t(max|changed): +(\d+)((?:  \w+: +\d+)*)`)

// trackEntries reads the entries of the histogram whose trigger info starts with info
// from `kprewrite hist` output: key -> hitcount, tracked value, saved fields as printed.
func trackEntries(t *testing.T, out, info string) map[uint64][3]string {
	t.Helper()
	k := strings.Index(out, "# trigger info: "+info)
	if k < 0 {
		t.Fatalf("no histogram %q in\n%s", info, out)
	}
	block := out[k:]
	if e := strings.Index(block, "Totals:"); e >= 0 {
		block = block[:e]
	}
	got := map[uint64][3]string{}
	for _, m := range trackEntryRe.FindAllStringSubmatch(block, -1) {
		key, _ := strconv.ParseUint(m[1], 10, 64)
		got[key] = [3]string{m[2], m[4], strings.Join(strings.Fields(m[5]), " ")}
	}
	return got
}

// snapshotLines is `kprewrite trace --snapshot` of file: its header's snapshot line and
// its event lines.
func snapshotLines(t *testing.T, file, bin string) (string, []traceLine) {
	t.Helper()
	code, out, errs := kp("trace", "--snapshot", "-b", bin, file)
	if code != 0 {
		t.Fatalf("trace --snapshot: exit %d: %s", code, errs)
	}
	head := ""
	var body []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "# snapshot: ") {
			head = l
		}
		if !strings.HasPrefix(l, "#") {
			body = append(body, l)
		}
	}
	return head, parseTraceLines(t, strings.Join(body, "\n"))
}

// TestHistOnMaxSaveSnapshot: onmax($v).save(...) keeps, per entry, the largest value
// and the fields of the hit that first reached it; onmax($v).snapshot() and a
// conditional snapshot trigger take the trace file's snapshot, and `trace --snapshot`
// prints exactly the records written up to the latest one (the hit that took it
// included, as the kernel's hist and conditional triggers run before the event is
// committed); the hist file says which key set the global maximum.
func TestHistOnMaxSaveSnapshot(t *testing.T) {
	prog := testprog.Build(t, trackSrc, "c", "-O2")
	const n = 200
	calls := trackCalls(n)
	type best struct{ hits, max, tag uint64 }
	per := map[uint64]*best{}
	var gmax, gkey, gidx, snaps uint64
	for _, c := range calls {
		b := per[c.key]
		if b == nil {
			b = &best{}
			per[c.key] = b
		}
		b.hits++
		if c.val > b.max {
			b.max, b.tag = c.val, c.tag
			if c.val > gmax {
				gmax, gkey, gidx = c.val, c.key, c.tag
				snaps++
			}
		}
	}
	const cond = 37 // the conditional snapshot trigger's call
	last := max(gidx, cond)
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := filepath.Join(t.TempDir(), "track")
		flags := []string{
			"--trigger", "h/w:hist:keys=key:m=val:onmax($m).save(tag,val):onmax($m).snapshot()",
			"--trigger", fmt.Sprintf("h/w:snapshot:1 if tag == %d", cond),
		}
		flags = append(flags, modeFlags...)
		rewriteWith(t, prog, kpd, []string{"p:h/w work key=%di:u64 val=%si:u64 tag=%dx:u64"}, flags...)
		testprog.MustRun(t, kpd, strconv.Itoa(n))
		code, out, errs := kp("hist", kpd+".trace")
		if code != 0 {
			t.Fatalf("hist: %s", errs)
		}
		got := trackEntries(t, out, "hist:keys=key:vals=hitcount:m=val:sort=hitcount:size=2048:onmax($m).save(tag,val):onmax($m).snapshot() [active]")
		if len(got) != len(per) {
			t.Errorf("%d entries with a max, want %d\n%s", len(got), len(per), out)
		}
		for key, b := range per {
			want := [3]string{fmt.Sprint(b.hits), fmt.Sprint(b.max), fmt.Sprintf("tag: %d val: %d", b.tag, b.max)}
			if got[key] != want {
				t.Errorf("key %d: %q, want %q", key, got[key], want)
			}
		}
		wantSnap := fmt.Sprintf("\nSnapshot taken (see kprewrite trace --snapshot).  Details:\n\ttriggering value { onmax($m) }: %10d\ttriggered by event with key: { key: %10d }\n", gmax, gkey)
		if !strings.Contains(out, wantSnap) {
			t.Errorf("hist output lacks %q:\n%s", wantSnap, out)
		}
		head, lines := snapshotLines(t, kpd+".trace", kpd)
		if want := fmt.Sprintf("the latest of %d snapshots", snaps+1); !strings.Contains(head, want) {
			t.Errorf("snapshot header %q, want %q", head, want)
		}
		if uint64(len(lines)) != last+1 {
			t.Fatalf("snapshot holds %d records, want %d (calls 0..%d)", len(lines), last+1, last)
		}
		for i, l := range lines {
			if want := fmt.Sprintf(" key=%d val=%d tag=%d", calls[i].key, calls[i].val, i); l.Args != want {
				t.Fatalf("snapshot record %d: %q, want %q", i, l.Args, want)
			}
		}
		if all := readTrace(t, kpd+".trace", kpd); len(all) != n {
			t.Errorf("the trace holds %d records, want %d: a snapshot keeps the trace whole", len(all), n)
		}
	})
}

// TestHistOnChangeTrace: onchange($v).save() keeps the last value of each entry that
// differed from the one before and the fields of its hit; onmax($v).trace() generates
// its synthetic event only at a new maximum (its histogram counts exactly those); an
// unconditional snapshot trigger on another event leaves its own hit out of the
// snapshot.
func TestHistOnChangeTrace(t *testing.T) {
	prog := testprog.Build(t, trackSrc, "c", "-O2")
	const n = 300
	calls := trackCalls(n)
	type change struct{ hits, val, tag uint64 }
	per := map[uint64]*change{}
	maxOf := map[uint64]uint64{}
	newMax := map[uint64]uint64{} // value -> keys where it was a new maximum
	for _, c := range calls {
		ch := per[c.key]
		if ch == nil {
			ch = &change{}
			per[c.key] = ch
		}
		ch.hits++
		if c.val != ch.val {
			ch.val, ch.tag = c.val, c.tag
		}
		if c.val > maxOf[c.key] {
			maxOf[c.key] = c.val
			newMax[c.val]++
		}
	}
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := filepath.Join(t.TempDir(), "track")
		flags := []string{
			"--trigger", "h/w:hist:keys=key:c=val:onchange($c).save(tag)",
			"--trigger", "h/w:hist:keys=key:m=val:onmax($m).trace(newmax,$m)",
			"--trigger", "synthetic/newmax:hist:keys=m:sort=m",
			"--trigger", "h/m:snapshot",
		}
		flags = append(flags, modeFlags...)
		rewriteWith(t, prog, kpd, []string{"s:newmax u64 m", "p:h/w work key=%di:u64 val=%si:u64 tag=%dx:u64", "p:h/m mark m=%di:s32"}, flags...)
		testprog.MustRun(t, kpd, strconv.Itoa(n))
		code, out, errs := kp("hist", kpd+".trace")
		if code != 0 {
			t.Fatalf("hist: %s", errs)
		}
		got := trackEntries(t, out, "hist:keys=key:vals=hitcount:c=val:sort=hitcount:size=2048:onchange($c).save(tag) [active]")
		for key, ch := range per {
			want := [3]string{fmt.Sprint(ch.hits), fmt.Sprint(ch.val), fmt.Sprintf("tag: %d", ch.tag)}
			if got[key] != want {
				t.Errorf("onchange key %d: %q, want %q", key, got[key], want)
			}
		}
		maxes := trackEntries(t, out, "hist:keys=key:vals=hitcount:m=val:sort=hitcount:size=2048:onmax($m).trace(newmax,$m) [active]")
		for key, m := range maxOf {
			if maxes[key][1] != fmt.Sprint(m) {
				t.Errorf("onmax key %d: max %s, want %d", key, maxes[key][1], m)
			}
		}
		want := map[string]uint64{}
		var total uint64
		for v, c := range newMax {
			want[fmt.Sprintf("m: %d", v)] = c
			total += c
		}
		checkCounts(t, findHist(t, parseHist(t, out), "hist:keys=m:"), want, total)
		// each new maximum is a newmax record too, after the hit that set it
		recs := map[uint64]uint64{}
		for _, l := range readTrace(t, kpd+".trace", kpd) {
			if l.Event == "newmax" {
				var m uint64
				if _, err := fmt.Sscanf(strings.TrimSpace(l.Args), "m=%d", &m); err != nil {
					t.Fatalf("newmax record %q", l.Args)
				}
				recs[m]++
			}
		}
		if !reflect.DeepEqual(recs, newMax) {
			t.Errorf("newmax records %v, want %v", recs, newMax)
		}
		_, all := snapshotLines(t, kpd+".trace", kpd)
		var lines []traceLine // work's (the snapshot has the newmax records of its time too)
		for _, l := range all {
			if l.Event != "newmax" {
				lines = append(lines, l)
			}
		}
		if len(lines) != n/2+1 {
			t.Fatalf("snapshot holds %d records, want %d (work calls 0..%d, not mark's own)", len(lines), n/2+1, n/2)
		}
		if l := lines[len(lines)-1]; l.Event != "w" || l.Args != fmt.Sprintf(" key=%d val=%d tag=%d", calls[n/2].key, calls[n/2].val, n/2) {
			t.Errorf("snapshot's last record %+v, want work's call %d", l, n/2)
		}
	})
}

// TestHistEnableDisable: enable_hist and disable_hist continue and pause another
// event's histograms (and an event's own): a histogram that starts paused counts
// exactly the calls after mark() enabled it, up to and including the one whose
// condition disabled it again.
func TestHistEnableDisable(t *testing.T) {
	prog := testprog.Build(t, trackSrc, "c", "-O2")
	const n, stop = 300, 250
	want := map[string]uint64{}
	var total uint64
	for _, c := range trackCalls(n) {
		if c.tag > n/2 && c.tag <= stop {
			want[fmt.Sprintf("key: %d", c.key)]++
			total++
		}
	}
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := filepath.Join(t.TempDir(), "track")
		flags := []string{
			"--trigger", fmt.Sprintf("h/w:disable_hist:h:w:1 if tag == %d", stop),
			"--trigger", "h/w:hist:keys=key:pause",
			"--trigger", "h/m:enable_hist:h:w",
		}
		flags = append(flags, modeFlags...)
		rewriteWith(t, prog, kpd, []string{"p:h/w work key=%di:u64 val=%si:u64 tag=%dx:u64", "p:h/m mark m=%di:s32"}, flags...)
		testprog.MustRun(t, kpd, strconv.Itoa(n))
		b := findHist(t, histOf(t, kpd+".trace"), "hist:keys=key:")
		checkCounts(t, b, want, total)
		if !strings.HasSuffix(b.Info, "[paused]") {
			t.Errorf("histogram %q: want it paused again by disable_hist", b.Info)
		}
		code, out, _ := kp("list", "-v", kpd)
		if code != 0 || !strings.Contains(out, "enable_hist:h:w:unlimited") || !strings.Contains(out, fmt.Sprintf("disable_hist:h:w:count=1 if tag == %d", stop)) {
			t.Errorf("list -v does not show the triggers as the kernel lists them:\n%s", out)
		}
	})
}
