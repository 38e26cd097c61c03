// Package export turns a trace file into what other tools read: the Trace Event Format
// (Perfetto, chrome://tracing, speedscope), one JSON object per record, a pprof
// profile, folded stacks (flamegraph.pl, speedscope) and an SVG flame graph, and
// per-function reports like `uftrace report`.
//
// Every export streams: records are read in time order from the mapped file
// (tracefile.Stream) and not kept. Memory grows with the threads, their call depth
// and the number of distinct call stacks, not with the trace's length.
package export
