// Package objlink is kprewrite's small static linker: it places the runtime and C
// handlers into the new segments and applies their relocations.
//
// The objects are x86-64 relocatable objects (the runtime, user-written C handlers);
// their sections go into the four areas of the new segments (text, rodata, data, bss)
// at addresses the rewriter chooses.
//
// Only position-independent code is accepted: PC-relative relocations, GOT references
// that can be relaxed to direct ones (there is no GOT), and 64-bit absolute addresses in
// writable data, which are reported as AbsSlots for the runtime to rebase at start-up.
// The output therefore needs no dynamic relocations in PIE and non-PIE programs alike.
package objlink
