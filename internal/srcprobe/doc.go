// Package srcprobe turns source-level event definitions (lines, variables by name)
// into kernel-form ones, as perf probe does for uprobe_events.
//
// Probe points are given by source line (FUNC:RELLINE, FILE:LINE) or by function and
// file (FUNC@FILE), and arguments by variable name with member, pointer and index
// chains (VAR, VAR->FIELD, VAR.FIELD, VAR[N]), $params, $vars and a typed $retval,
// all resolved from the program's DWARF (package debuginfo) at each probed address.
//
// The result is ordinary definitions ("p:GRP/EV 0xADDR NAME=+8(%sp):s32 ..."), one
// per address, so a source-level event compiles to the same fetch program, and
// costs the same, as one written with registers. A line with several addresses
// becomes a multi-probe event. A variable that is not available at an address
// (optimized out, not live, computed, or in a register no fetch reaches) is refused
// with the reason; it is never read from somewhere else.
package srcprobe
