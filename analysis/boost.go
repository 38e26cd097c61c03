package analysis

import "github.com/kprewrite/kprewrite/internal/x86dec"

// Boosting, adapted from the kernel's can_boost (arch/x86/kernel/kprobes/core.c).
//
// A boosted probe runs the copied instruction out of line followed by a jmp
// back to the next original instruction, with no trap-flag step. The kernel's
// rules, kept here:
//   - 2e (CS override) and 67 (address-size) prefixes: not boostable;
//   - one-byte opcodes 70-7f (jcc), 9c (pushf), cc-ce (int3, int n, into),
//     cf (iret), ea (far jmp), f1 (int1), f4 (hlt), fa/fb (cli/sti): not
//     boostable; 9d (popf) is excluded too;
//   - ff: indirect jmp (/4) is boostable, indirect call (/2), far call (/3)
//     and far jmp (/5) are not (an out-of-line call pushes the slot address);
//   - two-byte opcodes (0f xx): the kernel's twobyte_is_boostable bitmap.
//
// User-space adaptations, because user code owns its vector state and has no
// kernel exception table:
//   - the SSE/MMX rows the kernel avoids (0f 10-17, 0f 28-2f, 0f 50-7f,
//     0f c2-c7, 0f d0-ff), the hint/nop and prefetch space (0f 0d, 0f 18-1f),
//     popcnt (0f b8), bt imm (0f ba), the three-byte maps 0f 38/0f 3a and
//     VEX/EVEX/XOP instructions are boostable;
//   - ff /0 (inc), /1 (dec) and /6 (push) are boostable (plain data ops).
//
// Kept unboostable as in the kernel: 0f 00, 0f 01 groups, 0f 05/07 (also
// refused by uprobes), 0f 0b (ud2), 0f 0e/0f (3DNow!), 0f 30-37, 0f 80-8f
// (jcc, emulated instead), 0f a2 (cpuid may be made to fault, arch_prctl
// ARCH_SET_CPUID), 0f aa, 0f ae (fences, fxsave/xsave, {rd,wr}{fs,gs}base),
// 0f b9 (ud1), 0f ff (ud0).
//
// Relative jmp/jcc/call/loop and ret are not boosted but emulated (Emulate),
// as the kernel does since 5.15 and as uprobes does for branches.

// twobyteBoostable is the kernel's twobyte_is_boostable with the user-space
// rows above turned on. Bit n of word n/32 is opcode 0f n.
var twobyteBoostable = func() [8]uint32 {
	rows := [16]string{
		"0011001011000100", // 00 (0f 0d prefetch: user space)
		"1111111111111111", // 10 sse moves, hint nops, prefetch, endbr: user space
		"1111111111111111", // 20 mov cr/dr (refused by uprobes anyway), sse: user space
		"0000000000000000", // 30 wrmsr rdtsc rdmsr rdpmc sysenter sysexit getsec, escapes
		"1111111111111111", // 40 cmovcc
		"1111111111111111", // 50 sse: user space
		"1111111111111111", // 60 mmx/sse: user space
		"1111111111111111", // 70 mmx/sse: user space
		"0000000000000000", // 80 jcc rel32: emulated
		"1111111111111111", // 90 setcc
		"1101110011011101", // a0
		"1111111111111111", // b0 (b8 popcnt, ba bt imm: user space; b9 ud1 cleared below)
		"1111111111111111", // c0 (c2-c7 sse/cmpxchg16b/rdrand: user space)
		"1111111111111111", // d0 mmx/sse: user space
		"1111111111111111", // e0 mmx/sse: user space
		"1111111111111111", // f0 mmx/sse: user space (ff ud0 cleared below)
	}
	var t [8]uint32
	for r, row := range rows {
		for c, ch := range row {
			if ch == '1' {
				op := r*16 + c
				t[op/32] |= 1 << (op % 32)
			}
		}
	}
	for _, op := range []int{0xb9, 0xff, 0x0b, 0x05, 0x07, 0x0e, 0x0f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27} {
		t[op/32] &^= 1 << (op % 32)
	}
	return t
}()

// emulated reports the kinds the runtime emulates instead of copying.
func emulated(k x86dec.Kind) bool {
	switch k {
	case x86dec.KindJmp, x86dec.KindJcc, x86dec.KindLoop, x86dec.KindCall, x86dec.KindRet:
		return true
	}
	return false
}

// boostable reports whether the instruction (raw bytes) can be copied out of
// line and followed by a jmp back, and if not, why.
func boostable(raw []byte, in *x86dec.Inst) (bool, string) {
	if in.NoOutOfLine != "" {
		return false, in.NoOutOfLine
	}
	if emulated(in.Kind) {
		return false, "relative branch or ret: emulated, not copied"
	}
	for _, p := range raw[:max(0, min(in.OpcodeOff, len(raw)))] {
		switch p {
		case 0x2e:
			return false, "cs segment prefix (kernel can_boost)"
		case 0x67:
			return false, "address-size prefix (kernel can_boost)"
		}
	}
	m, op := opcodeOf(raw, in)
	switch m {
	case 0:
		switch {
		case op >= 0x70 && op <= 0x7f:
			return false, "jcc"
		case op == 0x9c, op == 0x9d:
			return false, "pushf/popf (kernel can_boost)"
		case op >= 0xcc && op <= 0xcf, op == 0xea, op == 0xf1, op == 0xf4, op == 0xfa, op == 0xfb:
			return false, "trap, iret, far jmp, hlt or cli/sti"
		case op == 0xff:
			if in.ModRMOff < 0 || in.ModRMOff >= len(raw) {
				return false, "ff without ModRM"
			}
			switch raw[in.ModRMOff] >> 3 & 7 {
			case 2:
				return false, "indirect call: out of line it would push the slot's address"
			case 3, 5:
				return false, "far call/jmp"
			}
		}
		return true, ""
	case 1:
		if twobyteBoostable[op/32]&(1<<(op%32)) == 0 {
			return false, "two-byte opcode not boostable (kernel twobyte_is_boostable)"
		}
		return true, ""
	case 2, 3, 4:
		return true, ""
	}
	return false, "unknown opcode map"
}
