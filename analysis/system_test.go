package analysis

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/elfio"
)

const nodePath = "/usr/bin/node"

var systemBinaries = []string{"/usr/bin/python3.11", "/usr/bin/git", "/lib/x86_64-linux-gnu/libc.so.6", nodePath}

// coverage summarises the entry sites of a binary.
type coverage struct {
	sites, optimize int
	verdicts        map[Verdict]int
	rules           map[string]int
	example         map[string]string
}

func entryCoverage(b *Binary) coverage {
	c := coverage{verdicts: map[Verdict]int{}, rules: map[string]int{}, example: map[string]string{}}
	for _, s := range b.EntrySites() {
		c.sites++
		c.verdicts[s.Verdict]++
		if s.Verdict == Optimize {
			c.optimize++
			continue
		}
		seen := map[string]bool{}
		for _, r := range s.Blocking() {
			if !seen[r.Rule] {
				seen[r.Rule] = true
				c.rules[r.Rule]++
				if c.example[r.Rule] == "" {
					c.example[r.Rule] = fmt.Sprintf("%s: %s", s.FuncName, r)
				}
			}
		}
	}
	return c
}

func (c coverage) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d entries, %.2f%% optimize (boost %d, single-step %d, refuse %d)\n", c.sites,
		100*float64(c.optimize)/float64(c.sites), c.verdicts[Boost], c.verdicts[SingleStep], c.verdicts[Refuse])
	var ks []string
	for k := range c.rules {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return c.rules[ks[i]] > c.rules[ks[j]] })
	for _, k := range ks {
		ex := c.example[k]
		if len(ex) > 200 {
			ex = ex[:200] + "..."
		}
		fmt.Fprintf(&b, "  %6d %s   e.g. %s\n", c.rules[k], k, ex)
	}
	return b.String()
}

// TestSystemCoverage measures the share of function entries that can be
// jump-optimized on real binaries (goal: at least 97%) and prints where the
// misses come from.
func TestSystemCoverage(t *testing.T) {
	for _, p := range systemBinaries {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			if _, err := os.Stat(p); err != nil {
				t.Skipf("%s: %v", p, err)
			}
			if p == nodePath && testing.Short() {
				t.Skip("node in -short mode")
			}
			t0 := time.Now()
			b := analyzeFile(t, p, Options{})
			c := entryCoverage(b)
			t.Logf("%s in %v: %+v\n%s", p, time.Since(t0).Round(time.Millisecond), b.Stats, c)
			if share := float64(c.optimize) / float64(c.sites); share < 0.97 {
				t.Errorf("%s: %.2f%% of entries optimizable, want >= 97%%", p, 100*share)
			}
		})
	}
}

// TestSystemObjdump checks every instruction boundary of libc: no optimized
// site may contain a branch target objdump sees, or a landing pad.
func TestSystemObjdump(t *testing.T) {
	const p = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s: %v", p, err)
	}
	if testing.Short() {
		t.Skip("-short")
	}
	b := analyzeFile(t, p, Options{})
	checkAgainstObjdump(t, b, p, true)
}

// BenchmarkAnalyzeNode measures Analyze + EntrySites on /usr/bin/node (the
// budget is 4 s wall and 1 GiB peak RSS on a 2-core machine).
func BenchmarkAnalyzeNode(b *testing.B) {
	f, err := elfio.Open(nodePath)
	if err != nil {
		b.Skipf("%s: %v", nodePath, err)
	}
	b.ReportAllocs()
	var sites int
	for i := 0; i < b.N; i++ {
		bin, err := Analyze(f, Options{})
		if err != nil {
			b.Fatal(err)
		}
		sites = len(bin.EntrySites())
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(sites), "sites")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "sys-MiB")
}
