package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// stallSrc calls work(i) N times (argv[1]) with a few microseconds of its own work
// between calls: records come slower than the disk readies the trace file's pages, as
// in most programs (a hot loop that writes faster than the disk can take it pays for
// the pages; docs/runtime.md, "Readying the record area").
const stallSrc = `#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return a * 2; }

int main(int argc, char **argv)
{
	long n = atol(argv[1]), s = 0;
	for (long i = 0; i < n; i++) {
		for (volatile int k = 0; k < 2000; k++)
			;
		s += work(i);
	}
	printf("%ld\n", s);
	return 0;
}
`

// stallGap is the gap between two consecutive records that counts as a stall
const stallGap = 100.0 // us

// recordGaps returns the gaps above stallGap (us) between consecutive records of a
// 10,000-record trace, by the index of the later record.
func recordGaps(t *testing.T, trace, bin string) map[int]float64 {
	t.Helper()
	lines := readTrace(t, trace, bin)
	if len(lines) != 10000 {
		t.Fatalf("%s: %d records, want 10000", trace, len(lines))
	}
	gaps := map[int]float64{}
	prev := 0.0
	for i, l := range lines {
		ts, err := strconv.ParseFloat(l.TS, 64)
		if err != nil {
			t.Fatalf("%s: record %d: time %q: %v", trace, i, l.TS, err)
		}
		if d := (ts - prev) * 1e6; i > 0 && d > stallGap {
			gaps[i] = d
		}
		prev = ts
	}
	return gaps
}

// repeated returns the record indexes (within 2 records) that have a gap in every run:
// a stall of the tracer's comes at the same record of each run (its chunk boundary);
// another program's taking the CPU does not.
func repeated(runs []map[int]float64) []int {
	var out []int
	for i := range runs[0] {
		all := true
		for _, r := range runs[1:] {
			near := false
			for d := -2; d <= 2; d++ {
				_, ok := r[i+d]
				near = near || ok
			}
			all = all && near
		}
		if all {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}

func maxGap(g map[int]float64) float64 {
	m := 0.0
	for _, d := range g {
		m = max(m, d)
	}
	return m
}

// TestDirectRunsNoStall: a rewritten program run directly (its own trace file, not
// pre-populated) shows no stall above 100 us between two records that `kprewrite
// record` does not show: the trace file's next chunks are readied by a thread of the
// runtime (rt_ahead.c), not by the writer that reaches them. Before, every direct run
// stopped 2-10 ms at the same record (the first chunk the file was not opened with).
// Three direct runs and three under record, alternating; a stall counts when it comes
// at the same record in all three direct runs and not in all three recorded ones. On a
// busy machine the comparison is tried up to three times.
func TestDirectRunsNoStall(t *testing.T) {
	prog := testprog.Build(t, stallSrc, "c", "-O1")
	dir := t.TempDir()
	kpd := filepath.Join(dir, "stall.kp")
	rewriteWith(t, prog, kpd, []string{"p:t/w work a=%di:s64"})
	const runs, attempts = 3, 3
	for attempt := 1; ; attempt++ {
		var direct, recorded []map[int]float64
		for r := 0; r < runs; r++ {
			dt, rt := filepath.Join(dir, "d.trace"), filepath.Join(dir, "r.trace")
			for _, f := range []string{dt, dt + ".old", rt} {
				os.Remove(f)
			}
			runIt(t, kpd, []string{"KPREWRITE_TRACE=" + dt, "KPREWRITE_QUIET=1"}, "10000")
			direct = append(direct, recordGaps(t, dt, kpd))
			kpOK(t, "record", "-q", "-o", rt, "--", kpd, "10000")
			recorded = append(recorded, recordGaps(t, rt, kpd))
		}
		var stalls []string
		inRecord := map[int]bool{}
		for _, i := range repeated(recorded) {
			inRecord[i] = true
		}
		for _, i := range repeated(direct) {
			if !inRecord[i] {
				stalls = append(stalls, fmt.Sprintf("record %d: %.0f us", i, direct[0][i]))
			}
		}
		summary := ""
		for r := range direct {
			summary += fmt.Sprintf(" [direct %.0f, record %.0f]", maxGap(direct[r]), maxGap(recorded[r]))
		}
		if len(stalls) == 0 {
			t.Logf("attempt %d: max gaps (us) of each run:%s; no stall at the same record of every direct run", attempt, summary)
			return
		}
		t.Logf("attempt %d: max gaps (us) of each run:%s; stalls in every direct run: %v", attempt, summary, stalls)
		if attempt == attempts {
			t.Fatalf("direct runs stall at the same records in %d attempts: %v", attempts, stalls)
		}
	}
}
