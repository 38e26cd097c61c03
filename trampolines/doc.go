// Package trampolines makes every byte of new code the rewriter places in the new
// text segment: out-of-line slots, detours, the entry stub, and the instruction
// relocation they need.
//
// That code is the x86 encodings it is made of (x86.go: rel32 fields, jmp rel32, jmp
// *rel32(%rip), site jmps and their int3 filler), out-of-line slots (the relocated
// copy of a probed instruction followed by a jmp back, as the kernel's kprobe insn
// slots are), the detour buffers of jump-optimized probes (detour.go: the runtime
// object's optprobe template copied and patched at its labelled fields, the way
// arch/x86/kernel/kprobes/opt.c does; here a stub that calls one shared register save
// and restore), the count-only detours of --count-only (countdetour.go:
// runtime/src/countprobe.S's templates copied, their per-probe regions repeated, their
// labelled fields written), the entry stub of a probe-less rewrite, and the
// instruction relocation they all need. A whole DCR (the instructions a probe's
// 5-byte jmp replaces) is relocated as one block by RelocateRegion.
//
// Relocating one instruction from pc to a new address at keeps what it does:
//
//   - a RIP-relative operand (legacy, VEX, EVEX or XOP encoding) gets a new disp32
//     so that it still addresses the same byte (the immediate that may follow the
//     displacement is untouched: RIP is the end of the instruction in both places);
//   - jmp rel8/rel32 becomes jmp rel32, jcc rel8/rel32 becomes jcc rel32 (0f 8x),
//     call rel32 stays call rel32, all to the original target; branch-hint and bnd
//     prefixes are dropped (they change nothing in user space);
//   - loop, loope, loopne and jrcxz/jecxz, which only have rel8, become the
//     "sandwich" uprobes and E9Patch use: the instruction with rel8 = 2, a jmp
//     rel8 over the next instruction, and a jmp rel32 to the original target;
//   - with Options.CallPushJmp, a direct call becomes "push the original return
//     address; jmp target" and an indirect one "push the original return address;
//     jmp *operand" (the same operand: ModRM.reg 2 becomes 4), so the callee, C++
//     unwinding and backtraces see the original return address (detour buffers need
//     this; a single-stepped slot does not, the runtime fixes the pushed address after
//     the step). The push is "push $imm32" when the address fits and the code does
//     not move, else (Options.PIC, a PIE) "push %rax; lea ret(%rip),%rax; xchg
//     %rax,(%rsp)"; operands that read %rsp are refused;
//   - any other instruction is copied as it is.
//
// Every new displacement is checked to fit in 32 bits. Lengths depend only on the
// instruction and its original address, never on the new address, so a layout can
// be planned before any address is known. The tests decode every output back with
// internal/x86dec and compare targets byte for byte.
package trampolines
