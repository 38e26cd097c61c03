// Package rewriter assembles a rewrite: it parses and resolves event definitions
// (ParseDefs, Resolve), has the analysis judge and package patch plan every edit,
// compiles each event's fetch program, lays out the new sections, links the runtime
// and C handlers, encodes the probe tables and the image description once their
// addresses are known, and has elfio write the image (Rewrite). The new code itself
// comes from trampolines; the formats from internal/tracefile.
//
// What to watch: a rewrite is deterministic (same input, definitions and options, same
// bytes; scripts/compare-outputs.sh compares two builds), and sizes measured before
// placement must not change when placed (checked). The layout of the new sections and
// the path of a rewrite are described in docs/design.md.
package rewriter
