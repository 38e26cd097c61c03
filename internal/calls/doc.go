// Package calls rebuilds the call nesting of a trace, per thread (per goroutine for
// records that carry a goroutine id), from the entry and return events of functions.
//
// A function that has both an entry event (a probe at its address) and a return
// event is a call, open from its entry record to its return record on the same
// thread; calls nest per thread. What `kprewrite trace --format chrome`, `report`,
// `profile --format pprof` and `flamegraph` show is built from it.
//
// In a Go program the records of Go functions carry their goroutine's id
// (tracefile.Record.GoID), and those nest per goroutine: a goroutine moves between
// threads. Its stack moves too when it grows, so stack pointers order none of its
// calls; an entry that repeats the call just opened at the same stack pointer is the
// function restarted by Go's stack check (Restart), not a new call.
//
// Records come in time order (tracefile.Stream.Each) and are not kept: memory grows
// with the threads and their call depth, not with the trace. A return whose call is
// not on top of its thread's stack closes the calls above it first: their returns
// were lost (longjmp, an exception, a signal handler that never returned), so they
// end at the first record that shows it, marked Lost. Calls still open at the end of
// the trace end at their thread's last record, marked Lost too.
package calls
