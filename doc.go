// Package kprewrite brings Linux kprobes to user-space x86-64 ELF programs, offline:
// the Go API of the kprewrite command, for build pipelines and test suites that
// rewrite binaries, run them and read their traces.
//
//   - Check analyses a binary the way the kernel's optprobe code does and says, per
//     probe site, whether a probe there can be jump-optimized, boosted, single-stepped
//     or must be refused, and why (the report `kprewrite check --json` prints).
//   - Rewrite writes a new binary with probes from kprobe-event definitions
//     ("p:grp/ev func+off a=%di", "r:grp/ev func $retval") and C handler files.
//   - ReadTrace reads the trace file a rewritten program wrote: typed records (event,
//     pid, tid, cpu, timestamp, fields as Go values; C handlers' trace_printk text;
//     --verify-regions violations) and the per-event profile.
//
// The packages under internal/, analysis/, elfio/, patch/, trampolines/ and runtime/
// are the implementation; this package is the stable surface.
package kprewrite
