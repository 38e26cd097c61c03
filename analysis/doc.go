// Package analysis is kprewrite's safety analysis: for each probe site of a
// user-space x86-64 ELF executable it decides whether the site can be
// jump-optimized (a 5-byte jmp to a detour buffer, like the kernel's optprobes),
// boosted (int3, then the copied instruction runs out of line followed by a jmp
// back, or a relative branch is emulated), single-stepped (int3 plus the trap
// flag), or must be refused, and it says exactly which rule decided and which
// instruction or address made it fire.
//
// Analyze does the whole-binary work once and returns an immutable *Binary that
// answers Check and EntrySites concurrently:
//
//   - every function (symbols and .eh_frame FDEs, via elfio) is decoded with
//     internal/x86dec; a function decodes cleanly only if every instruction
//     decodes without error and x86asm agrees with our length decoder (or the
//     disagreement is one of x86dec's known, objdump-checked x86asm gaps:
//     endbr64, vzeroupper, adcx/adox, ...);
//   - a branch-target index covers all executable code, not just functions
//     (GCC's .cold/.part fragments jump back into their parents), plus resolved
//     jump-table entries, code addresses taken by lea/immediates, code pointers
//     in data and in dynamic relocations, and symbols inside code;
//   - every indirect jmp is classified: a resolved jump table (the GCC/Clang
//     patterns, PIE and non-PIE, -O0 to -O3), a pointer jump (the target is a
//     64-bit value loaded from memory, returned by a call or passed in by the
//     caller: tail calls through pointers, the GOT, vtables, computed goto
//     tables), or unresolved (a computed target we cannot bound), which keeps
//     the whole function and its split fragments from being jump-optimized;
//   - exception landing pads come from the FDEs' LSDAs (.gcc_except_table).
//
// The rules, their stable ids and the tests that make each fire are listed in
// rules.go. The analysis reads the original bytes only (rule 9): it never sees
// or writes probes, and OtherProbes in a SiteRequest are addresses, not bytes.
//
// Where detours are assumed to live (for the rel32 reach of relocated
// RIP-relative operands and branches) is stated once, in DetourWindow.
package analysis
