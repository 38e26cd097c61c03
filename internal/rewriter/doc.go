// Package rewriter makes the rewritten image of one ELF file from its resolved
// probes: the plan, the events' fetch programs, the new sections, the linked runtime
// and C handlers, the probe tables and the image description.
//
// Rewrite has package patch plan every edit (the analysis having judged each site),
// compiles each event's fetch program, lays out the new sections, links the runtime
// and C handlers, encodes the probe tables and the image description once their
// addresses are known, and returns the image (an elfio.Output) for the caller to
// write. The package also holds the definitions' parsing and resolving (ParseDefs,
// Resolve), which the root package's Rewrite runs, with the analysis, before it. The
// new code itself comes from trampolines; the formats from internal/tracefile.
//
// What to watch: a rewrite is deterministic (same input, definitions and options, same
// bytes; scripts/compare-outputs.sh compares two builds), and sizes measured before
// placement must not change when placed (checked). The layout of the new sections and
// the path of a rewrite are described in docs/design.md.
package rewriter
