package kprt_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

// kstepSpecs are single-stepped probes with post handlers; pflags PFInt3Step ends
// their steps with an int3 instead of the trap flag.
func kstepSpecs(pflags PointFlags) []pointSpec {
	return []pointSpec{
		{site: "t_add_s0", xmode: XSStep, pflags: pflags, probes: []probeSpec{traced(kprobe("pre_add", "post_add"), 0)}},
		{site: "t_nest_s0", xmode: XSStep, pflags: pflags, probes: []probeSpec{kprobe("pre_nest", "")}},
		{site: "t_push_s0", xmode: XSStep, pflags: pflags, probes: []probeSpec{kprobe("pre_push", "post_push")}},
	}
}

// TestInt3Step: the same single-stepped probes give the same results stepped with the
// trap flag and ended by an int3: post handlers see the registers after the
// instruction (ip back in the original code, sp moved by a push), a hit nested in a
// handler is missed and runs no post handler, 8 threads step concurrently.
func TestInt3Step(t *testing.T) {
	for _, m := range []struct {
		name   string
		pflags PointFlags
	}{{"tf", 0}, {"int3", PFInt3Step}} {
		t.Run(m.name, func(t *testing.T) {
			b := buildRewritten(t, "testdata/kstep.c", nil, kstepSpecs(m.pflags))
			r := b.run(t, "basic")
			if r.status != 0 {
				t.Fatalf("exit %v", r.status)
			}
			r.want(t, "r", "20", "n_pre", "2", "n_post", "2", "bad", "0", "nest_pre", "1", "push_post", "1", "push_bad", "0",
				"traps", "5", "steps", "5", "boosts", "0")
			if c := b.counter(t, r, 0, 0); c.Hit != 2 || c.NMissed != 1 {
				t.Errorf("t_add counters %+v, want 2 hits 1 missed", c)
			}
			if len(r.trace.Records) != 2 {
				t.Errorf("%d records, want 2", len(r.trace.Records))
			}
			r = b.run(t, "threads")
			r.want(t, "wrong", "0", "n_pre", "40000", "n_post", "40000", "bad", "0", "steps", "40000")
			if len(r.trace.Records) != 40000 || r.trace.Torn != 0 {
				t.Errorf("%d records, %d torn", len(r.trace.Records), r.trace.Torn)
			}
		})
	}
}

// TestInt3StepCost measures a k hit (pre and post handler) both ways.
func TestInt3StepCost(t *testing.T) {
	cost := map[string]float64{}
	for _, m := range []struct {
		name   string
		pflags PointFlags
	}{{"tf", 0}, {"int3", PFInt3Step}} {
		b := buildRewritten(t, "testdata/kstep.c", nil, kstepSpecs(m.pflags))
		best := 0.0
		for i := 0; i < 3; i++ {
			v := runKBench(t, b)
			if best == 0 || v["k"]-v["bare"] < best {
				best = v["k"] - v["bare"]
			}
		}
		cost[m.name] = best
	}
	t.Logf("ns per k hit (pre + post handler), best of 3: trap flag %.0f, int3 %.0f", cost["tf"], cost["int3"])
}

func runKBench(t testing.TB, b *probedBin) map[string]float64 {
	out, err := exec.Command(b.path, "bench", "20000").CombinedOutput()
	if err != nil {
		t.Fatalf("bench: %v: %s", err, out)
	}
	v := map[string]float64{}
	for _, f := range strings.Fields(string(out)) {
		if k, s, ok := strings.Cut(f, "="); ok {
			v[k], _ = strconv.ParseFloat(s, 64)
		}
	}
	if v["n_post"] != 20000 {
		t.Fatalf("bench output %q", out)
	}
	return v
}
