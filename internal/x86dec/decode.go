package x86dec

import (
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Inst is one decoded instruction. Offsets are from the instruction's first
// byte.
type Inst struct {
	Len       int       // authoritative length, from this package's length decoder
	Op        x86asm.Op // x86asm's opcode; 0 when x86asm could not name it with our length
	Kind      Kind
	Enc       Encoding // legacy, VEX, EVEX or XOP
	OpcodeOff int      // offset of the opcode byte (after prefixes, REX, VEX/EVEX/XOP and 0f/0f38/0f3a escapes)
	ModRMOff  int      // -1 when none
	ImmOff    int      // -1 when none; for direct branches this is the rel field
	ImmSize   int

	// Direct branches (Kind.IsDirectBranch): the rel8/rel16/rel32 field and
	// the target it encodes.
	Target  uint64
	RelOff  int
	RelSize int

	// RIP-relative memory operand, in any encoding (legacy, VEX, EVEX, XOP).
	RIPRel    bool
	DispOff   int    // offset of the disp32
	RIPTarget uint64 // pc + Len + int32(disp)

	Agree   bool // x86asm, given exactly our Len bytes, decoded them with Op != 0, no error and the same length
	Trusted bool // Agree (and x86asm's control-flow class matches ours), or a known x86asm gap our tables name exactly
	Endbr   bool // endbr64 / endbr32 (probe after it at a function entry)

	// NoOutOfLine is non-empty when the instruction must not be copied and
	// run out of line (uprobes' good_insns_64 / good_2byte_insns, plus
	// prefix combinations whose meaning is not portable); it says why.
	NoOutOfLine string

	noFall bool
}

// FallsThrough reports whether execution can continue at pc+Len after the
// instruction: false for jmp, ret, iret, far jmp/ret and ud0/ud1/ud2/hlt.
func (i *Inst) FallsThrough() bool { return !i.noFall }

// Decode decodes the instruction at the start of code, which sits at address
// pc. Its length comes from this package's tables; x86asm is consulted to
// name the instruction and to set Agree and Trusted. It never panics. On
// ErrInvalid the returned Inst still carries Len and NoOutOfLine when the
// structure was known.
func Decode(code []byte, pc uint64) (Inst, error) {
	var in Inst
	var e encoding
	err := decodeFast(code, pc, &in, &e)
	if err != nil {
		if e.invalid != "" {
			return in, fmt.Errorf("x86dec: decode at %#x: %s: %w", pc, e.invalid, err)
		}
		return in, fmt.Errorf("x86dec: decode at %#x: %w", pc, err)
	}
	crossCheck(&in, &e, code)
	return in, nil
}

// DecodeFast is Decode without x86asm: everything but Op, Agree and Trusted
// (always zero) comes from this package's tables. For whole-binary sweeps.
// Errors are the bare sentinels (ErrTruncated, ErrTooLong, ErrInvalid) so
// that the fast path does not allocate.
func DecodeFast(code []byte, pc uint64) (Inst, error) {
	var in Inst
	var e encoding
	err := decodeFast(code, pc, &in, &e)
	return in, err
}

// Length returns the length of the instruction at the start of code.
// Errors are the bare sentinels; on ErrInvalid n is the structural length
// when it is known (0 otherwise).
func Length(code []byte) (n int, err error) {
	var e encoding
	err = scan(code, &e)
	return int(e.n), err
}

func decodeFast(code []byte, pc uint64, in *Inst, e *encoding) error {
	err := scan(code, e)
	*in = Inst{
		Len:       int(e.n),
		Enc:       e.class,
		OpcodeOff: int(e.opOff),
		ModRMOff:  int(e.modrmOff),
		ImmOff:    int(e.immOff),
		ImmSize:   int(e.immSize),
		RelOff:    -1,
		DispOff:   -1,
	}
	if e.n == 0 {
		return err
	}
	in.NoOutOfLine = e.invalid
	classify(in, e, code, pc)
	if in.NoOutOfLine == "" {
		in.NoOutOfLine = outOfLineReason(in, e)
	}
	return err
}

// Control-flow tables for the legacy 1-byte and 0F maps: the kind, and
// whether execution does not fall through. ff and c7 depend on ModRM.
var (
	kind1, kind0F     [256]Kind
	noFall1, noFall0F [256]bool
)

func init() {
	for op := 0x70; op <= 0x7f; op++ {
		kind1[op] = KindJcc
	}
	for op := 0xe0; op <= 0xe3; op++ {
		kind1[op] = KindLoop
	}
	kind1[0xe8] = KindCall
	kind1[0xe9], kind1[0xeb] = KindJmp, KindJmp
	kind1[0xc2], kind1[0xc3] = KindRet, KindRet
	kind1[0xca], kind1[0xcb] = KindRetFar, KindRetFar
	kind1[0xcf] = KindIret
	kind1[0xcc] = KindInt3
	kind1[0xcd], kind1[0xf1], kind1[0xf4] = KindTrap, KindTrap, KindTrap
	for _, op := range []int{0xe9, 0xeb, 0xc2, 0xc3, 0xca, 0xcb, 0xcf, 0xf4} {
		noFall1[op] = true
	}
	for op := 0x80; op <= 0x8f; op++ {
		kind0F[op] = KindJcc
	}
	kind0F[0x05], kind0F[0x34] = KindSyscall, KindSyscall
	for _, op := range []int{0x07, 0x35, 0x0b, 0xb9, 0xff} { // sysret, sysexit, ud2, ud1, ud0
		kind0F[op] = KindTrap
		noFall0F[op] = true
	}
}

// flowOf returns the control-flow kind of a decoded encoding and whether it
// does not fall through.
func flowOf(e *encoding) (k Kind, noFall bool) {
	if e.class != EncLegacy {
		return KindOther, false
	}
	switch e.m {
	case map1Byte:
		switch e.op {
		case 0xff:
			switch e.reg() {
			case 2:
				return KindCallIndirect, false
			case 3:
				return KindCallFar, false
			case 4:
				return KindJmpIndirect, true
			case 5:
				return KindJmpFar, true
			}
			return KindOther, false
		case 0xc7:
			if e.modrm == 0xf8 {
				return KindXbegin, false
			}
		}
		return kind1[e.op], noFall1[e.op]
	case map0F:
		return kind0F[e.op], noFall0F[e.op]
	}
	return KindOther, false
}

// Flow is the cheapest decoder: the length, control-flow kind and, for
// direct branches (Kind.IsDirectBranch), the target of the instruction at
// code (address pc), from this package's tables only. It is what a
// branch-target index over a whole binary needs. Errors are the bare
// sentinels; on ErrInvalid n is the structural length when known.
func Flow(code []byte, pc uint64) (n int, kind Kind, target uint64, err error) {
	var e encoding
	err = scan(code, &e)
	n = int(e.n)
	if err != nil {
		return n, KindOther, 0, err
	}
	kind, _ = flowOf(&e)
	if kind.IsDirectBranch() {
		target = pc + uint64(n) + uint64(readRel(code, int(e.immOff), int(e.immSize)))
	}
	return n, kind, target, nil
}

// classify sets Kind, the direct-branch fields and the RIP-relative fields.
func classify(in *Inst, e *encoding, code []byte, pc uint64) {
	next := pc + uint64(e.n)
	if e.ripRel() {
		in.RIPRel = true
		in.DispOff = int(e.dispOff)
		t := next + uint64(int64(int32(binary.LittleEndian.Uint32(code[e.dispOff:]))))
		if e.pfx&pfx67 != 0 {
			t = uint64(uint32(t)) // EIP-relative
		}
		in.RIPTarget = t
	}
	in.Kind, in.noFall = flowOf(e)
	if in.Kind.IsDirectBranch() {
		in.RelOff, in.RelSize = int(e.immOff), int(e.immSize)
		in.Target = next + uint64(readRel(code, in.RelOff, in.RelSize))
	}
	if e.class == EncLegacy && e.m == map0F && e.op == 0x1e && e.lastRep == 0xf3 && (e.modrm == 0xfa || e.modrm == 0xfb) {
		in.Endbr = true
	}
}

// outOfLineReason applies the uprobes good_insns_64/good_2byte_insns rules
// and our prefix rules.
func outOfLineReason(in *Inst, e *encoding) string {
	switch {
	case e.pfx&pfxRexIgnored != 0:
		return "REX prefix not adjacent to the opcode"
	case e.pfx&pfxF2 != 0 && e.pfx&pfxF3 != 0:
		return "both f2 and f3 prefixes"
	case in.RIPRel && e.pfx&pfx67 != 0:
		return "EIP-relative operand (67 prefix)"
	}
	switch in.Kind {
	case KindJmp, KindJcc, KindLoop, KindCall, KindRet, KindJmpIndirect, KindCallIndirect:
		if e.pfx&pfx66 != 0 && !e.rexW() {
			return "operand-size prefix on a near branch (Intel and AMD differ)"
		}
	case KindInt3:
		return "int3"
	case KindTrap:
		return "traps by design (ud0/ud1/ud2, int n, int1, hlt, sysret/sysexit)"
	case KindSyscall:
		return "syscall/sysenter (refused by uprobes good_2byte_insns)"
	case KindJmpFar, KindCallFar, KindRetFar:
		return "far branch"
	case KindIret:
		return "iret"
	case KindXbegin:
		return "xbegin: relative abort target"
	}
	if e.class != EncLegacy {
		return ""
	}
	switch e.m {
	case map1Byte:
		switch op := e.op; {
		case op >= 0x6c && op <= 0x6f, op >= 0xe4 && op <= 0xe7, op >= 0xec && op <= 0xef:
			return "port I/O (in/out/ins/outs)"
		case op == 0xfa || op == 0xfb:
			return "cli/sti: privileged"
		case op == 0x8e && e.reg() == 2:
			return "mov ss inhibits the single-step trap"
		}
	case map0F:
		switch op := e.op; {
		case op == 0x06 || op == 0x08 || op == 0x09 || op >= 0x20 && op <= 0x23 ||
			op == 0x30 || op == 0x32 || op == 0x37 || op == 0xaa:
			return "privileged instruction"
		case (op == 0x78 || op == 0x79) && e.pfx&(pfx66|pfxF2) == 0:
			return "privileged instruction (vmread/vmwrite)"
		case op == 0x00 && (e.reg() == 2 || e.reg() == 3):
			return "privileged instruction (lldt/ltr)"
		case op == 0x01:
			if e.lastRep == 0xf3 && e.modrm == 0xec {
				return "uiret"
			}
			if e.lastRep == 0xf3 && e.modrm == 0xe8 {
				return "privileged instruction (setssbsy)"
			}
			if privileged0F01(e) {
				return "privileged instruction (0f 01 group)"
			}
		case op == 0xc7 && e.mod() != 3 && e.reg() >= 6:
			return "privileged instruction (vmptrld/vmclear/vmxon/vmptrst)"
		case op == 0xae && e.lastRep == 0xf3 && e.mod() != 3 && e.reg() == 6:
			return "privileged instruction (clrssbsy)"
		case op == 0x0e || op == 0x0f:
			return "3DNow! (not implemented by current CPUs)"
		}
	case map0F38:
		if e.op >= 0x80 && e.op <= 0x82 && e.pfx&pfx66 != 0 {
			return "privileged instruction (invept/invvpid/invpcid)"
		}
		if e.op == 0xf8 && e.lastRep == 0xf3 {
			return "privileged instruction (enqcmds)"
		}
	case map0F3A:
		if e.op == 0xf0 && e.lastRep == 0xf3 {
			return "privileged instruction (hreset)"
		}
	}
	return ""
}

// privileged0F01 reports the 0f 01 group members that fault at CPL 3.
func privileged0F01(e *encoding) bool {
	if e.mod() != 3 {
		switch e.reg() {
		case 2, 3, 6, 7: // lgdt, lidt, lmsw, invlpg
			return true
		}
		return false
	}
	switch m := e.modrm; {
	case m >= 0xc0 && m <= 0xc4, // vmcall, vmlaunch, vmresume, vmxoff, pconfig
		m == 0xc8 || m == 0xc9, // monitor, mwait
		m == 0xca || m == 0xcb, // clac, stac
		m == 0xcf,              // encls
		m == 0xd1,              // xsetbv
		m >= 0xd8 && m <= 0xdf, // svm
		m == 0xf8:              // swapgs
		return e.lastRep == 0
	}
	return false
}

// crossCheck runs x86asm on the same bytes and records whether it agrees.
func crossCheck(in *Inst, e *encoding, code []byte) {
	if e.class == EncEVEX && (e.m == 5 || e.m == 6) {
		in.Trusted = knownGap(in, e, code) != ""
		return
	}
	// Only our bytes: x86asm must not see (or depend on) what follows, so
	// its verdict is a function of the instruction alone.
	xi, err := x86asm.Decode(code[:in.Len], 64)
	if err == nil && xi.Op != 0 && xi.Len == in.Len {
		in.Agree = true
		in.Op = xi.Op
		in.Trusted = kindMatches(in, &xi)
		return
	}
	in.Trusted = knownGap(in, e, code) != ""
}

// kindMatches checks x86asm's control-flow reading against ours.
func kindMatches(in *Inst, xi *x86asm.Inst) bool {
	k := KindOther
	switch xi.Op {
	case x86asm.JMP:
		k = KindJmpIndirect
		if _, ok := xi.Args[0].(x86asm.Rel); ok {
			k = KindJmp
		}
	case x86asm.CALL:
		k = KindCallIndirect
		if _, ok := xi.Args[0].(x86asm.Rel); ok {
			k = KindCall
		}
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL,
		x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS:
		k = KindJcc
	case x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE, x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ:
		k = KindLoop
	case x86asm.RET:
		k = KindRet
	case x86asm.LRET:
		k = KindRetFar
	case x86asm.LJMP:
		k = KindJmpFar
	case x86asm.LCALL:
		k = KindCallFar
	case x86asm.IRET, x86asm.IRETD, x86asm.IRETQ:
		k = KindIret
	case x86asm.XBEGIN:
		k = KindXbegin
	case x86asm.SYSCALL, x86asm.SYSENTER:
		k = KindSyscall
	}
	switch in.Kind {
	case KindOther, KindInt3, KindTrap:
		return k == KindOther
	}
	if k != in.Kind {
		return false
	}
	if in.Kind.IsDirectBranch() {
		return xi.PCRel == in.RelSize && xi.PCRelOff == in.RelOff
	}
	return true
}

// knownGap recognises the encodings x86asm v0.32.0 gets wrong or cannot
// name but our tables decode exactly (each checked against objdump in the
// tests) and returns their mnemonic, or "" when the instruction is not one
// of them. It may set in.Op from a re-decode without the leading prefixes.
func knownGap(in *Inst, e *encoding, code []byte) string {
	switch e.class {
	case EncLegacy:
		if e.pfx&(pfxLock|pfxRexIgnored) != 0 || e.pfx&(pfxF2|pfxF3) == pfxF2|pfxF3 {
			return ""
		}
		// The mandatory prefix selecting the instruction: 0, 0x66, 0xf2, 0xf3.
		mp := byte(0)
		switch {
		case e.lastRep != 0 && e.pfx&pfx66 == 0:
			mp = e.lastRep
		case e.lastRep == 0 && e.pfx&pfx66 != 0:
			mp = 0x66
		case e.lastRep != 0:
			return ""
		}
		mem, reg := e.mod() != 3, e.reg()
		switch e.m {
		case map0F:
			switch op, m := e.op, e.modrm; {
			case in.Endbr && mp == 0xf3 && e.rex == 0:
				if m == 0xfa {
					return "endbr64"
				}
				return "endbr32"
			case op == 0x1e && mp == 0xf3 && !mem && reg == 1:
				return "rdssp"
			case op == 0x01 && mp == 0:
				return gap0F01[m]
			case op == 0x01 && mp == 0xf3 && m == 0xea:
				return "saveprevssp"
			case op == 0x01 && mp == 0xf3 && mem && reg == 5:
				return "rstorssp"
			case op == 0xc7 && !mem && reg == 7 && (mp == 0 || mp == 0x66):
				return "rdseed"
			case op == 0xc7 && !mem && reg == 7 && mp == 0xf3:
				return "rdpid"
			case op == 0x0d && mem && mp == 0:
				return "prefetch"
			case op == 0x1c && mem && reg == 0 && mp == 0:
				return "cldemote"
			case op == 0xae && mp == 0xf3 && reg == 4:
				return "ptwrite"
			}
		case map0F38:
			switch op := e.op; {
			case op == 0xf6 && mp == 0x66:
				return "adcx"
			case op == 0xf6 && mp == 0xf3:
				return "adox"
			case op == 0xf6 && mp == 0 && mem:
				return "wrss"
			case op == 0xf5 && mp == 0x66 && mem:
				return "wruss"
			case op == 0xf9 && mp == 0 && mem:
				return "movdiri"
			case op == 0xf8 && mp == 0x66 && mem:
				return "movdir64b"
			case op == 0xf8 && mp == 0xf2 && mem:
				return "enqcmd"
			case op == 0xcf && mp == 0x66:
				return "gf2p8mulb"
			}
		case map0F3A:
			if e.op == 0xce && mp == 0x66 {
				return "gf2p8affineqb"
			}
			if e.op == 0xcf && mp == 0x66 {
				return "gf2p8affineinvqb"
			}
		}
	case EncVEX:
		if e.m == map0F && e.op == 0x77 && e.vexV == 0 && e.vexPP == 0 {
			if e.vexL == 0 {
				return "vzeroupper"
			}
			return "vzeroall"
		}
		if e.m == map0F38 && e.vexL == 0 && (e.op == 0x49 || e.op == 0x4b || e.op == 0x5c || e.op == 0x5e) {
			return "(amx)" // ldtilecfg/sttilecfg/tilerelease/tilezero, tileload/tilestore, tdp*
		}
		return redecodeWithoutPrefixes(in, e, code)
	case EncEVEX:
		if e.m == 5 || e.m == 6 {
			// x86asm v0.32.0 reads EVEX maps 5 and 6 (AVX512-FP16) as maps
			// 1 and 2, so its Op would name another instruction. These maps
			// have no immediates: our length stands on its own.
			return "(avx512-fp16)"
		}
		return redecodeWithoutPrefixes(in, e, code)
	case EncXOP:
		if xopDefined(e) {
			return "(xop)"
		}
	}
	return ""
}

// gap0F01 names the 0f 01 /mod=3 forms x86asm does not know.
var gap0F01 = [256]string{
	0xe8: "serialize",
	0xee: "rdpkru",
	0xef: "wrpkru",
	0xfa: "monitorx",
	0xfb: "mwaitx",
	0xfc: "clzero",
	0xfd: "rdpru",
}

// redecodeWithoutPrefixes handles VEX/EVEX behind segment prefixes, which
// x86asm turns into a 1-byte Op == 0 "instruction".
func redecodeWithoutPrefixes(in *Inst, e *encoding, code []byte) string {
	lead := int(e.vexOff)
	if lead <= 0 || e.pfx&pfx67 != 0 {
		// No prefix to strip (a genuine disagreement), or 67 which changes
		// the operand x86asm would decode.
		return ""
	}
	xi, err := x86asm.Decode(code[lead:in.Len], 64)
	if err != nil || xi.Op == 0 || xi.Len != in.Len-lead {
		return ""
	}
	in.Op = xi.Op
	return strings.ToLower(xi.Op.String())
}

// xopDefined lists the AMD XOP, TBM and LWP opcodes (maps 8, 9, 0A).
func xopDefined(e *encoding) bool {
	op := e.op
	switch e.m {
	case mapXOP8:
		switch {
		case op >= 0x85 && op <= 0x87, op == 0x8e || op == 0x8f, op >= 0x95 && op <= 0x97,
			op == 0x9e || op == 0x9f, op == 0xa2 || op == 0xa3, op == 0xa6, op == 0xb6,
			op >= 0xc0 && op <= 0xc3, op >= 0xcc && op <= 0xcf, op >= 0xec && op <= 0xef:
			return true
		}
	case mapXOP9:
		switch {
		case op == 0x01 || op == 0x02 || op == 0x12, op >= 0x80 && op <= 0x83, op >= 0x90 && op <= 0x9b,
			op >= 0xc1 && op <= 0xc3, op == 0xc6 || op == 0xc7 || op == 0xcb,
			op >= 0xd1 && op <= 0xd3, op == 0xd6 || op == 0xd7 || op == 0xdb, op >= 0xe1 && op <= 0xe3:
			return true
		}
	case mapXOPA:
		return op == 0x10 || op == 0x12
	}
	return false
}
