// Package debuginfo reads what source-level probes need from a program's DWARF:
// functions and their inlined copies, line tables, and the variables in scope at an
// address with their locations.
//
// The debug information is looked for in the binary, a --debug-file, the build-id
// directory or the .gnu_debuglink file; locations are DWARF 4 and 5 location
// expressions and location lists, with a frame base computed from the CFA rule of
// .eh_frame.
//
// It never guesses: a location it cannot reduce to a register, a memory slot or a
// constant at the address asked for is reported as unavailable, with the reason, so
// that a probe never reads a variable from the wrong place.
package debuginfo
