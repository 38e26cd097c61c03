package export

import (
	"io"

	"github.com/google/pprof/profile"
)

// WritePprof writes the trace's calls as a gzipped pprof profile: one sample per
// distinct call stack, with two values, the calls that had that stack ("calls",
// count) and their self time ("time", nanoseconds, the default). pprof's flat column
// is then a function's self time and cum its total time (recursion counted once), so
// `go tool pprof -top` lists functions as `kprewrite report` does.
func WritePprof(w io.Writer, s *Stacks) error {
	p := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "calls", Unit: "count"}, {Type: "time", Unit: "nanoseconds"}},
		DefaultSampleType: "time",
		PeriodType:        &profile.ValueType{Type: "time", Unit: "nanoseconds"},
		Period:            1,
		DurationNanos:     int64(s.Last - s.First),
	}
	// one mapping per image: the functions are already named (HasFunctions), so pprof
	// does not look for the binaries to symbolize them
	maps := map[string]*profile.Mapping{}
	mapping := func(image string) *profile.Mapping {
		if m := maps[image]; m != nil {
			return m
		}
		m := &profile.Mapping{ID: uint64(len(p.Mapping) + 1), File: image, HasFunctions: true}
		maps[image] = m
		p.Mapping = append(p.Mapping, m)
		return m
	}
	locs := make([]*profile.Location, len(s.Funcs))
	for i, f := range s.Funcs {
		image := f.Image
		if image == "" {
			image = "[threads]"
		}
		sys := f.Symbol
		if sys == "" {
			sys = f.Name
		}
		fn := &profile.Function{ID: uint64(i + 1), Name: f.Name, SystemName: sys, Filename: f.Image}
		p.Function = append(p.Function, fn)
		locs[i] = &profile.Location{ID: uint64(i + 1), Mapping: mapping(image), Address: f.Addr, Line: []profile.Line{{Function: fn}}}
		p.Location = append(p.Location, locs[i])
	}
	for n := 1; n < len(s.Nodes); n++ {
		node := &s.Nodes[n]
		if node.Calls == 0 {
			continue
		}
		var stack []*profile.Location // leaf first
		for m := int32(n); m > 0; m = s.Nodes[m].Parent {
			stack = append(stack, locs[s.Nodes[m].Func])
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: stack, Value: []int64{int64(node.Calls), int64(node.Self)}})
	}
	if err := p.CheckValid(); err != nil {
		return err
	}
	return p.Write(w)
}
