package analysis

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Arithmetic-flag liveness at a probe site. A count-only detour bumps its
// counter with `lock incq`, which clobbers CF PF AF ZF SF OF; where the code
// after the site overwrites all six before reading any, the detour need not
// save and restore them.
//
// What the walk assumes, stated so it can be checked:
//   - a flag an instruction leaves "undefined" (Intel SDM, Flags Affected)
//     counts as written: no correct program reads it afterwards;
//   - a signal taken between the site and the flag writer (asynchronous, or
//     a fault of an instruction on the way) sees the clobbered flags in its
//     ucontext; a handler that returns resumes on the same straight-line
//     code, which overwrites them before reading, and one that longjmps away
//     goes where flags are dead anyway (a call boundary). A handler that
//     redirects the saved rip to code reading the flags would see the
//     difference: nothing this package can check.

// flagSet is a set of the arithmetic flags.
type flagSet uint8

const (
	fCF flagSet = 1 << iota
	fPF
	fAF
	fZF
	fSF
	fOF

	fAll = fCF | fPF | fAF | fZF | fSF | fOF
)

func (s flagSet) String() string {
	if s == 0 {
		return "none"
	}
	out := ""
	for i, n := range []string{"CF", "PF", "AF", "ZF", "SF", "OF"} {
		if s&(1<<i) != 0 {
			if out != "" {
				out += " "
			}
			out += n
		}
	}
	return out
}

// flagCount says how an instruction's flag writes depend on its count
// operand (shifts and rotates: a masked count of 0 changes no flag).
type flagCount uint8

const (
	countNone flagCount = iota // no count operand: reads and writes are unconditional
	countArg1                  // count is Args[1] (shl, shr, sar, rol, ror, rcl, rcr)
	countArg2                  // count is Args[2] (shld, shrd)
)

// flagEffect is what one instruction does to the arithmetic flags: the
// flags it reads (before writing) and the flags it writes or leaves
// undefined.
type flagEffect struct {
	reads, writes flagSet
	count         flagCount
}

// Flags read by each condition code (Intel SDM Vol. 1, Appendix B).
const (
	ccO  = fOF
	ccB  = fCF
	ccE  = fZF
	ccBE = fCF | fZF
	ccS  = fSF
	ccP  = fPF
	ccL  = fSF | fOF
	ccLE = fZF | fSF | fOF
)

// flagTable classifies every op the walk understands; any op not in it ends
// the walk (not dead). Checked against the Flags Affected section of each
// instruction in the Intel SDM Vol. 2. Control transfers are not here: the
// walk stops at every one (x86dec.Kind) before looking at the table.
var flagTable = map[x86asm.Op]flagEffect{
	// Full writers. and/or/xor/test clear OF CF and leave AF undefined;
	// mul/imul define CF OF and leave SF ZF AF PF undefined; bsf/bsr define
	// ZF only, lzcnt/tzcnt ZF CF, the rest undefined; popcnt clears all but
	// ZF; (u)comis* set ZF PF CF and clear OF SF AF; ptest sets ZF CF and
	// clears the rest; pcmp[ei]str[im] set CF ZF SF OF and clear AF PF;
	// the BMI ops define ZF (SF, CF), clear OF, leave AF PF undefined;
	// xadd writes like add, cmpxchg like cmp.
	x86asm.ADD: {writes: fAll}, x86asm.SUB: {writes: fAll}, x86asm.CMP: {writes: fAll},
	x86asm.TEST: {writes: fAll}, x86asm.AND: {writes: fAll}, x86asm.OR: {writes: fAll},
	x86asm.XOR: {writes: fAll}, x86asm.NEG: {writes: fAll},
	x86asm.MUL: {writes: fAll}, x86asm.IMUL: {writes: fAll},
	x86asm.BSF: {writes: fAll}, x86asm.BSR: {writes: fAll},
	x86asm.POPCNT: {writes: fAll}, x86asm.LZCNT: {writes: fAll}, x86asm.TZCNT: {writes: fAll},
	x86asm.COMISS: {writes: fAll}, x86asm.COMISD: {writes: fAll},
	x86asm.UCOMISS: {writes: fAll}, x86asm.UCOMISD: {writes: fAll},
	x86asm.VCOMISS: {writes: fAll}, x86asm.VCOMISD: {writes: fAll},
	x86asm.VUCOMISS: {writes: fAll}, x86asm.VUCOMISD: {writes: fAll},
	x86asm.PTEST: {writes: fAll}, x86asm.VPTEST: {writes: fAll},
	x86asm.VTESTPS: {writes: fAll}, x86asm.VTESTPD: {writes: fAll},
	x86asm.PCMPESTRI: {writes: fAll}, x86asm.PCMPESTRM: {writes: fAll},
	x86asm.PCMPISTRI: {writes: fAll}, x86asm.PCMPISTRM: {writes: fAll},
	x86asm.ANDN: {writes: fAll}, x86asm.BEXTR: {writes: fAll}, x86asm.BZHI: {writes: fAll},
	x86asm.BLSI: {writes: fAll}, x86asm.BLSR: {writes: fAll}, x86asm.BLSMSK: {writes: fAll},
	x86asm.XADD: {writes: fAll}, x86asm.CMPXCHG: {writes: fAll},

	// Readers that also write everything.
	x86asm.ADC: {reads: fCF, writes: fAll}, x86asm.SBB: {reads: fCF, writes: fAll},

	// Partial writers. inc/dec leave CF alone. bt* set CF and leave OF SF
	// AF PF undefined, but ZF is unaffected. cmpxchg8b/16b write ZF only.
	x86asm.INC: {writes: fAll &^ fCF}, x86asm.DEC: {writes: fAll &^ fCF},
	x86asm.BT: {writes: fAll &^ fZF}, x86asm.BTS: {writes: fAll &^ fZF},
	x86asm.BTR: {writes: fAll &^ fZF}, x86asm.BTC: {writes: fAll &^ fZF},
	x86asm.CMPXCHG8B: {writes: fZF}, x86asm.CMPXCHG16B: {writes: fZF},
	x86asm.CLC: {writes: fCF}, x86asm.STC: {writes: fCF},
	x86asm.CMC: {reads: fCF, writes: fCF},

	// Shifts and rotates: nothing at all when the masked count is 0. With
	// a non-zero count, shl/shr/sar/shld/shrd write CF SF ZF PF and leave
	// OF (multi-bit) and AF undefined; rol/ror write CF and OF only;
	// rcl/rcr also read CF (counted as read even when an 8- or 16-bit
	// rotate's count is a multiple of 9 or 17). x86asm does not decode
	// the d0-d3 /6 alias of shl, so x86dec does not trust it: the walk stops.
	x86asm.SHL: {writes: fAll, count: countArg1}, x86asm.SHR: {writes: fAll, count: countArg1},
	x86asm.SAR:  {writes: fAll, count: countArg1},
	x86asm.SHLD: {writes: fAll, count: countArg2}, x86asm.SHRD: {writes: fAll, count: countArg2},
	x86asm.ROL: {writes: fCF | fOF, count: countArg1}, x86asm.ROR: {writes: fCF | fOF, count: countArg1},
	x86asm.RCL: {reads: fCF, writes: fCF | fOF, count: countArg1},
	x86asm.RCR: {reads: fCF, writes: fCF | fOF, count: countArg1},

	// Pure readers (setcc, cmovcc by condition; lahf reads SF ZF AF PF CF,
	// pushf everything). Jcc, loope/loopne and into are control transfers.
	x86asm.SETO: {reads: ccO}, x86asm.SETNO: {reads: ccO},
	x86asm.SETB: {reads: ccB}, x86asm.SETAE: {reads: ccB},
	x86asm.SETE: {reads: ccE}, x86asm.SETNE: {reads: ccE},
	x86asm.SETBE: {reads: ccBE}, x86asm.SETA: {reads: ccBE},
	x86asm.SETS: {reads: ccS}, x86asm.SETNS: {reads: ccS},
	x86asm.SETP: {reads: ccP}, x86asm.SETNP: {reads: ccP},
	x86asm.SETL: {reads: ccL}, x86asm.SETGE: {reads: ccL},
	x86asm.SETLE: {reads: ccLE}, x86asm.SETG: {reads: ccLE},
	x86asm.CMOVO: {reads: ccO}, x86asm.CMOVNO: {reads: ccO},
	x86asm.CMOVB: {reads: ccB}, x86asm.CMOVAE: {reads: ccB},
	x86asm.CMOVE: {reads: ccE}, x86asm.CMOVNE: {reads: ccE},
	x86asm.CMOVBE: {reads: ccBE}, x86asm.CMOVA: {reads: ccBE},
	x86asm.CMOVS: {reads: ccS}, x86asm.CMOVNS: {reads: ccS},
	x86asm.CMOVP: {reads: ccP}, x86asm.CMOVNP: {reads: ccP},
	x86asm.CMOVL: {reads: ccL}, x86asm.CMOVGE: {reads: ccL},
	x86asm.CMOVLE: {reads: ccLE}, x86asm.CMOVG: {reads: ccLE},
	x86asm.FCMOVB: {reads: fCF}, x86asm.FCMOVNB: {reads: fCF},
	x86asm.FCMOVE: {reads: fZF}, x86asm.FCMOVNE: {reads: fZF},
	x86asm.FCMOVBE: {reads: fCF | fZF}, x86asm.FCMOVNBE: {reads: fCF | fZF},
	x86asm.FCMOVU: {reads: fPF}, x86asm.FCMOVNU: {reads: fPF},
	x86asm.LAHF:  {reads: fAll &^ fOF},
	x86asm.PUSHF: {reads: fAll}, x86asm.PUSHFD: {reads: fAll}, x86asm.PUSHFQ: {reads: fAll},

	// Neutral: neither read nor write CF PF AF ZF SF OF. (String moves
	// read DF only; rep without cmps/scas does not test ZF.)
	x86asm.MOV: {}, x86asm.MOVZX: {}, x86asm.MOVSX: {}, x86asm.MOVSXD: {}, x86asm.MOVBE: {},
	x86asm.LEA: {}, x86asm.PUSH: {}, x86asm.POP: {}, x86asm.LEAVE: {},
	x86asm.NOP: {}, x86asm.PAUSE: {}, x86asm.XCHG: {}, x86asm.BSWAP: {}, x86asm.NOT: {},
	x86asm.CBW: {}, x86asm.CWDE: {}, x86asm.CDQE: {}, x86asm.CWD: {}, x86asm.CDQ: {}, x86asm.CQO: {},
	x86asm.MOVSB: {}, x86asm.MOVSW: {}, x86asm.MOVSD: {}, x86asm.MOVSQ: {},
	x86asm.STOSB: {}, x86asm.STOSW: {}, x86asm.STOSD: {}, x86asm.STOSQ: {},
	x86asm.PREFETCHNTA: {}, x86asm.PREFETCHT0: {}, x86asm.PREFETCHT1: {}, x86asm.PREFETCHT2: {},
	x86asm.PREFETCHW: {}, x86asm.MFENCE: {}, x86asm.LFENCE: {}, x86asm.SFENCE: {},
	x86asm.CRC32: {},
	// BMI2 ops that leave rflags alone.
	x86asm.SARX: {}, x86asm.SHLX: {}, x86asm.SHRX: {}, x86asm.RORX: {},
	x86asm.MULX: {}, x86asm.PDEP: {}, x86asm.PEXT: {},
	// SSE moves, logic, integer and floating-point arithmetic and
	// conversions: they touch MXCSR, never rflags. (CMPSD is the string
	// compare and writes flags; the SSE one is CMPSD_XMM.)
	x86asm.MOVAPS: {}, x86asm.MOVAPD: {}, x86asm.MOVUPS: {}, x86asm.MOVUPD: {},
	x86asm.MOVDQA: {}, x86asm.MOVDQU: {}, x86asm.MOVD: {}, x86asm.MOVQ: {},
	x86asm.MOVSS: {}, x86asm.MOVSD_XMM: {}, x86asm.MOVHPS: {}, x86asm.MOVHPD: {},
	x86asm.MOVLPS: {}, x86asm.MOVLPD: {}, x86asm.MOVHLPS: {}, x86asm.MOVLHPS: {},
	x86asm.MOVDDUP: {}, x86asm.MOVSHDUP: {}, x86asm.MOVSLDUP: {}, x86asm.LDDQU: {},
	x86asm.MOVMSKPS: {}, x86asm.MOVMSKPD: {}, x86asm.PMOVMSKB: {},
	x86asm.MOVNTDQ: {}, x86asm.MOVNTI: {}, x86asm.MOVNTPS: {}, x86asm.MOVNTPD: {},
	x86asm.PXOR: {}, x86asm.POR: {}, x86asm.PAND: {}, x86asm.PANDN: {},
	x86asm.XORPS: {}, x86asm.XORPD: {}, x86asm.ORPS: {}, x86asm.ORPD: {},
	x86asm.ANDPS: {}, x86asm.ANDPD: {}, x86asm.ANDNPS: {}, x86asm.ANDNPD: {},
	x86asm.ADDSS: {}, x86asm.ADDSD: {}, x86asm.ADDPS: {}, x86asm.ADDPD: {},
	x86asm.SUBSS: {}, x86asm.SUBSD: {}, x86asm.SUBPS: {}, x86asm.SUBPD: {},
	x86asm.MULSS: {}, x86asm.MULSD: {}, x86asm.MULPS: {}, x86asm.MULPD: {},
	x86asm.DIVSS: {}, x86asm.DIVSD: {}, x86asm.DIVPS: {}, x86asm.DIVPD: {},
	x86asm.SQRTSS: {}, x86asm.SQRTSD: {}, x86asm.MINSS: {}, x86asm.MINSD: {},
	x86asm.MAXSS: {}, x86asm.MAXSD: {},
	x86asm.CMPSS: {}, x86asm.CMPSD_XMM: {}, x86asm.CMPPS: {}, x86asm.CMPPD: {},
	x86asm.CVTSI2SD: {}, x86asm.CVTSI2SS: {}, x86asm.CVTSD2SS: {}, x86asm.CVTSS2SD: {},
	x86asm.CVTTSD2SI: {}, x86asm.CVTTSS2SI: {}, x86asm.CVTSD2SI: {}, x86asm.CVTSS2SI: {},
	x86asm.CVTDQ2PD: {}, x86asm.CVTDQ2PS: {}, x86asm.CVTPS2PD: {}, x86asm.CVTPD2PS: {},
	x86asm.UNPCKLPS: {}, x86asm.UNPCKLPD: {}, x86asm.UNPCKHPS: {}, x86asm.UNPCKHPD: {},
	x86asm.SHUFPS: {}, x86asm.SHUFPD: {},
	x86asm.PUNPCKLBW: {}, x86asm.PUNPCKLWD: {}, x86asm.PUNPCKLDQ: {}, x86asm.PUNPCKLQDQ: {},
	x86asm.PUNPCKHBW: {}, x86asm.PUNPCKHWD: {}, x86asm.PUNPCKHDQ: {}, x86asm.PUNPCKHQDQ: {},
	x86asm.PSHUFD: {}, x86asm.PSHUFB: {}, x86asm.PSHUFLW: {}, x86asm.PSHUFHW: {},
	x86asm.PADDB: {}, x86asm.PADDW: {}, x86asm.PADDD: {}, x86asm.PADDQ: {},
	x86asm.PSUBB: {}, x86asm.PSUBW: {}, x86asm.PSUBD: {}, x86asm.PSUBQ: {},
	x86asm.PCMPEQB: {}, x86asm.PCMPEQW: {}, x86asm.PCMPEQD: {}, x86asm.PCMPEQQ: {},
	x86asm.PCMPGTB: {}, x86asm.PCMPGTW: {}, x86asm.PCMPGTD: {}, x86asm.PCMPGTQ: {},
	x86asm.PSLLW: {}, x86asm.PSLLD: {}, x86asm.PSLLQ: {}, x86asm.PSLLDQ: {},
	x86asm.PSRLW: {}, x86asm.PSRLD: {}, x86asm.PSRLQ: {}, x86asm.PSRLDQ: {},
	x86asm.PSRAW: {}, x86asm.PSRAD: {},
	x86asm.PINSRB: {}, x86asm.PINSRW: {}, x86asm.PINSRD: {}, x86asm.PINSRQ: {},
	x86asm.PEXTRB: {}, x86asm.PEXTRW: {}, x86asm.PEXTRD: {}, x86asm.PEXTRQ: {},
	x86asm.PMINUB: {}, x86asm.PMAXUB: {},
	// Their AVX forms (VEX and EVEX).
	x86asm.VMOVAPS: {}, x86asm.VMOVAPD: {}, x86asm.VMOVUPS: {}, x86asm.VMOVUPD: {},
	x86asm.VMOVDQA: {}, x86asm.VMOVDQU: {}, x86asm.VMOVDQA32: {}, x86asm.VMOVDQA64: {},
	x86asm.VMOVDQU8: {}, x86asm.VMOVDQU16: {}, x86asm.VMOVDQU32: {}, x86asm.VMOVDQU64: {},
	x86asm.VMOVD: {}, x86asm.VMOVQ: {}, x86asm.VMOVSS: {}, x86asm.VMOVSD: {},
	x86asm.VPXOR: {}, x86asm.VPXORD: {}, x86asm.VPXORQ: {}, x86asm.VPOR: {}, x86asm.VPAND: {},
	x86asm.VPANDN: {}, x86asm.VXORPS: {}, x86asm.VXORPD: {},
	x86asm.VPCMPEQB: {}, x86asm.VPMOVMSKB: {}, x86asm.VPMINUB: {},
	x86asm.VPBROADCASTB: {}, x86asm.VPBROADCASTD: {}, x86asm.VPBROADCASTQ: {},
	x86asm.VZEROUPPER: {}, x86asm.VZEROALL: {},
}

// FlagsDead reports whether the arithmetic flags (CF PF AF ZF SF OF) are dead
// at the instruction at addr: every one of them is written, on the
// straight-line code from addr, before anything reads any of them.
// Conservative: false whenever unsure.
func (b *Binary) FlagsDead(addr uint64) bool {
	code := b.codeFrom(addr)
	if code == nil {
		return false
	}
	return FlagsDeadIn(code, addr)
}

// FlagsDeadIn is FlagsDead on raw bytes: code holds the instructions from pc
// on (at most to the end of their code section).
func FlagsDeadIn(code []byte, pc uint64) bool {
	dead, _ := flagsWalk(code, pc)
	return dead
}

// maxFlagsWalk bounds the walk: a site whose flags are still live after so
// many instructions is not worth proving dead.
const maxFlagsWalk = 32

// flagsWalk walks forward from pc keeping the flags not yet written. It
// returns true once all are written; otherwise false and why it stopped.
func flagsWalk(code []byte, pc uint64) (bool, string) {
	live := fAll
	off := 0
	for n := 0; n < maxFlagsWalk; n++ {
		if off >= len(code) {
			return false, "end of code"
		}
		at := pc + uint64(off)
		in, err := x86dec.Decode(code[off:], at)
		if err != nil || in.Len <= 0 || in.Len > len(code)-off {
			return false, fmt.Sprintf("decode error at %#x", at)
		}
		raw := code[off : off+in.Len]
		if !in.Trusted {
			return false, fmt.Sprintf("untrusted decoding at %#x", at)
		}
		if in.Kind != x86dec.KindOther || !in.FallsThrough() {
			return false, fmt.Sprintf("control transfer (%s) at %#x", in.Kind, at)
		}
		eff, ok := flagEffectOf(raw, &in)
		if !ok {
			return false, "unclassified " + mnemonic(&in)
		}
		if eff.reads&live != 0 {
			return false, fmt.Sprintf("%s at %#x reads %s", mnemonic(&in), at, eff.reads&live)
		}
		live &^= eff.writes
		if live == 0 {
			return true, ""
		}
		off += in.Len
	}
	return false, "walk limit"
}

// flagEffectOf classifies one decoded, trusted instruction; false when the
// walk must stop.
func flagEffectOf(raw []byte, in *x86dec.Inst) (flagEffect, bool) {
	if in.Op == 0 {
		// Of x86dec's known x86asm gaps only endbr64 is classified (it
		// touches no flag); adcx/adox read CF/OF and the rest are rare.
		return flagEffect{}, in.Endbr
	}
	eff, ok := flagTable[in.Op]
	if !ok {
		return flagEffect{}, false
	}
	if eff.count == countNone {
		return eff, true
	}
	count, known := shiftCount(raw, eff.count)
	switch {
	case !known:
		// A count in %cl: the flags are written or, with a zero count,
		// left alone -- never read (except rcl/rcr's CF), so the walk goes
		// on without crossing any flag off.
		eff.writes = 0
	case count == 0:
		return flagEffect{}, true
	}
	return eff, true
}

// shiftCount returns the masked count of a shift or rotate, and false when
// the count is in a register.
func shiftCount(raw []byte, c flagCount) (uint64, bool) {
	x, err := x86dec.Operands(raw)
	if err != nil {
		return 0, false
	}
	arg := 1
	if c == countArg2 {
		arg = 2
	}
	imm, ok := x.Args[arg].(x86asm.Imm)
	if !ok {
		return 0, false
	}
	// The count is masked to 5 bits, 6 with a 64-bit operand (8- and
	// 16-bit operands too are masked to 5 bits: the count may exceed the
	// width, and the flags are then undefined, i.e. written).
	mask := uint64(0x1f)
	if x.DataSize == 64 {
		mask = 0x3f
	}
	return uint64(imm) & mask, true
}
