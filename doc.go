// Package kprewrite is the Go API of the kprewrite command (Check, Rewrite,
// RecordProgram, ReadTrace, Hist, Report, Export), for build pipelines and test
// suites that rewrite binaries, run them and read their traces.
//
// kprewrite brings Linux kprobes to user-space x86-64 ELF programs, offline.
//
//   - Check analyses a binary the way the kernel's optprobe code does and says, per
//     probe site, whether a probe there can be jump-optimized, boosted, single-stepped
//     or must be refused, and why (the report `kprewrite check --json` prints).
//   - Rewrite writes a new binary with probes from kprobe-event definitions
//     ("p:grp/ev func+off a=%di", "r:grp/ev func $retval") and C handler files.
//   - ReadTrace reads the trace file a rewritten program wrote: typed records (event,
//     pid, tid, cpu, timestamp, fields as Go values; C handlers' trace_printk text;
//     --verify-regions violations) and the per-event profile; Records reads them one
//     at a time, and RecordProgram rewrites a program, runs it and records its trace.
//   - Hist, Report and Export give what `kprewrite hist`, `report`, `trace --format
//     chrome|json`, `profile --format pprof` and `flamegraph` print: histograms and
//     per-function calls as data, the exports as the commands' bytes.
//
// The packages under internal/, analysis/, elfio/, patch/, trampolines/ and runtime/
// are the implementation (docs/design.md's layout table gives each one's role); this
// package is the stable surface.
package kprewrite

// docs/design.md's layout table is made from the package comments (internal/layoutdoc;
// TestLayoutTable fails when it is out of date): `go generate .` rewrites it.
//
//go:generate go run ./internal/layoutdoc/cmd
