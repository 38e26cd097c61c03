package export

import (
	"io"
	"os"
	"testing"

	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// benchInput opens the trace file $KPREWRITE_BENCH_TRACE (docs/benchmarks.md says how
// to make one: python3.11 with an entry and a return event on every function).
func benchInput(b *testing.B) *Input {
	path := os.Getenv("KPREWRITE_BENCH_TRACE")
	if path == "" {
		b.Skip("KPREWRITE_BENCH_TRACE names no trace file")
	}
	s, descs, err := tracefile.OpenStream(path, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return &Input{Stream: s, Descs: descs}
}

// BenchmarkExport measures each export of a whole trace; records/s is the figure
// docs/benchmarks.md gives.
func BenchmarkExport(b *testing.B) {
	for _, c := range []struct {
		name string
		run  func(*Input) error
	}{
		{"text", func(in *Input) error { return tracefile.WriteTrace(io.Discard, io.Discard, in.Stream, in.Descs, false) }},
		{"json", func(in *Input) error { return WriteJSONLines(io.Discard, in) }},
		{"chrome", func(in *Input) error { return WriteChrome(io.Discard, in) }},
		{"report", func(in *Input) error { _, err := BuildReport(in, false); return err }},
		{"stacks", func(in *Input) error { _, err := BuildStacks(in, false); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := benchInput(b)
			for b.Loop() {
				in.fm = nil
				if err := c.run(in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(in.Stream.Count)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
