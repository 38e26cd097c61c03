// Package export turns a trace file into what other tools read: Trace Event Format,
// JSON lines, pprof, folded stacks, an SVG flame graph and per-function reports.
//
// The Trace Event Format is read by Perfetto, chrome://tracing and speedscope; JSON
// lines are one object per record; folded stacks are those of flamegraph.pl and
// speedscope; the per-function reports are like `uftrace report`.
//
// Every export streams: records are read in time order from the mapped file
// (tracefile.Stream) and not kept. Memory grows with the threads, their call depth
// and the number of distinct call stacks, not with the trace's length.
package export
