// Package x86dec owns all x86-64 instruction decoding for kprewrite: its own length
// decoder, with x86asm as a second opinion.
//
// The kprobes analysis needs three things from a decoder: exact instruction
// lengths (a wrong length shifts every later boundary and can put a jmp in
// the middle of an instruction), the control-flow class and direct target of
// every branch (for the branch-target index and insn_jump_into_range), and
// the facts the out-of-line copy needs (RIP-relative displacement offsets,
// rel8/rel32 fields, and whether the instruction may run out of line at all,
// the uprobes good_insns_64 rules).
//
// golang.org/x/arch/x86/x86asm alone is not safe for that: measured against
// objdump it gets vzeroupper/vzeroall lengths wrong, returns a 1-byte Op == 0
// "instruction" for endbr64, adcx/adox and prefixed VEX, reports a VEX/EVEX
// RIP-relative operand as absolute, and fails on XOP, rdpkru and rdseed.
// So this package has its own structural length decoder (legacy prefixes,
// REX, the 1-byte/0F/0F38/0F3A maps, VEX, EVEX and XOP, ModRM/SIB/disp and
// immediate sizes). Its length is authoritative; x86asm is run as a second
// opinion to name the instruction (Inst.Op) and to flag disagreements
// (Inst.Agree, Inst.Trusted).
//
// Decode is the full decoder: use it for the instructions of a function
// that is being analysed for a probe, and refuse the function when any
// instruction is not Trusted. Flow (length, kind, direct target), Length and
// DecodeFast (everything but the x86asm fields) use only this package's
// tables, never allocate, and are meant for sweeping whole binaries (tens of
// millions of instructions), e.g. to build the branch-target index.
//
// Lengths and direct-branch and RIP-relative targets are checked in the
// tests against objdump on libc, libstdc++ and python3.11, on an assembled
// list of tricky encodings, on every opcode of every map, and on random
// bytes.
package x86dec
