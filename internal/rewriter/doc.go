// Package rewriter assembles the rewritten image of one ELF file from its resolved
// probes: the plan, the events' fetch programs, the new sections, the linked runtime
// and C handlers, the probe tables and the image description.
//
// Rewrite has package patch plan every edit (the analysis having judged each site),
// then run assembles the image in named phases (assemble.go): prepare (events,
// tables, slots, detours, the signal guard), linkRuntime, sizeTables, layOut,
// place, fillRodata, buildText, setEntry, buildEHHdr, collectEdits (the dynamic
// section's and the property note's edits join the plan's, so every edit of the
// original bytes is the plan's) and write. It returns the image (an elfio.Output)
// for internal/pipeline to write. The new code itself comes from trampolines; the
// formats from internal/tracefile.
//
// What to watch: a rewrite is deterministic (same input, definitions and options, same
// bytes; scripts/compare-outputs.sh compares two builds), and sizes measured before
// placement must not change when placed (checked). The layout of the new sections and
// the path of a rewrite are described in docs/design.md.
package rewriter
