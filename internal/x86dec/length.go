package x86dec

import (
	"encoding/binary"
	"errors"
)

// MaxLen is the architectural limit on an x86 instruction's length.
const MaxLen = 15

// Errors returned by the decoders; wrapped with context, test with errors.Is.
var (
	// ErrTruncated: the bytes end before the instruction does.
	ErrTruncated = errors.New("truncated instruction")
	// ErrTooLong: the encoding would exceed 15 bytes (#GP on hardware).
	ErrTooLong = errors.New("instruction longer than 15 bytes")
	// ErrInvalid: the encoding raises #UD in 64-bit mode (or is one the CPU
	// vendors decode differently). The returned Inst still carries the
	// structural length when it is known.
	ErrInvalid = errors.New("invalid instruction in 64-bit mode")
)

// Encoding is the encoding family of an instruction.
type Encoding uint8

const (
	EncLegacy Encoding = iota
	EncVEX
	EncEVEX
	EncXOP
)

// Opcode maps. Legacy and VEX/EVEX share 1-3; EVEX adds 5 and 6; XOP uses 8-10.
const (
	map1Byte = 0
	map0F    = 1
	map0F38  = 2
	map0F3A  = 3
	mapXOP8  = 8
	mapXOP9  = 9
	mapXOPA  = 10
)

// Prefix bits recorded by the structural decoder.
const (
	pfx66 uint16 = 1 << iota
	pfx67
	pfxF2
	pfxF3
	pfxLock
	pfxSegLegacy  // es/cs/ss/ds: ignored in 64-bit mode except as hints/notrack
	pfxFSGS       // fs/gs
	pfxRexIgnored // a REX byte followed by a legacy prefix (ignored by the CPU), or two REX bytes
	pfxREX        // marks REX bytes in prefixTab only
)

// encoding is what the structural decoder learns about one instruction.
// Offsets are from the first byte of the instruction; -1 means absent. The
// fields are small so that the sweep over a whole binary stays cheap.
type encoding struct {
	invalid  string // why the encoding is invalid (with ErrInvalid)
	pfx      uint16
	n        int8 // total length
	opOff    int8
	vexOff   int8 // offset of the c4/c5/62/8f byte
	modrmOff int8
	sibOff   int8
	dispOff  int8
	dispSize int8
	immOff   int8
	immSize  int8
	lastRep  byte // 0xf2 or 0xf3, whichever came last
	seg      byte // last segment override byte, 0 if none
	rex      byte // effective REX byte, 0 if none
	class    Encoding
	m        uint8 // opcode map
	op       byte  // opcode byte within its map
	modrm    byte
	vexW     bool
	vexL     uint8 // VEX.L, or EVEX L'L
	vexPP    uint8 // implied mandatory prefix: 0 none, 1 66, 2 f3, 3 f2
	vexV     uint8 // inverted vvvv (register number bits 0-3)
}

func (e *encoding) hasModRM() bool { return e.modrmOff >= 0 }
func (e *encoding) reg() byte      { return e.modrm >> 3 & 7 }
func (e *encoding) mod() byte      { return e.modrm >> 6 }
func (e *encoding) rexW() bool     { return e.rex&8 != 0 }

// ripRel reports a RIP-relative memory operand: ModRM mod=00 rm=101 without
// SIB is disp32(%rip) in 64-bit mode in every encoding family.
func (e *encoding) ripRel() bool {
	return e.modrmOff >= 0 && e.modrm&0xc7 == 0x05 && !(e.class == EncLegacy && e.m == map0F && e.op >= 0x20 && e.op <= 0x23)
}

// Table flags: bit 0 ModRM present, bit 1 invalid in 64-bit mode, bits 4-7
// immediate kind.
const (
	fModRM   uint8 = 1
	fInvalid uint8 = 2
	immShift       = 4
)

const (
	immNone  = iota
	imm8     // ib
	imm16    // iw
	immZ     // iz: 16 with 66 unless REX.W, else 32
	immV     // iv: 64 with REX.W, 16 with 66, else 32
	immMoffs // 64-bit moffs, 32-bit with 67
	immEnter // iw ib
	immGrp3  // f6/f7: ib/iz only for /0 and /1
	imm32    // always 32 bits
	immRelZ  // jz/call/jmp rel32 (operand size forced to 64 on Intel)
	imm8x2   // ib ib (SSE4a extrq/insertq immediate forms)
)

var (
	table1  [256]uint8 // one-byte map
	table0F [256]uint8 // 0F map (legacy)
)

func init() {
	set := func(t *[256]uint8, lo, hi int, v uint8) {
		for i := lo; i <= hi; i++ {
			t[i] = v
		}
	}
	m := fModRM
	ib := uint8(imm8 << immShift)
	iz := uint8(immZ << immShift)

	// One-byte map.
	for row := 0; row < 0x40; row += 8 {
		set(&table1, row, row+3, m)
		table1[row+4] = ib
		table1[row+5] = iz
	}
	for _, op := range []int{0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f,
		0x60, 0x61, 0x82, 0x9a, 0xce, 0xd4, 0xd5, 0xd6, 0xea} {
		table1[op] = fInvalid
	}
	// 0x0f escape, prefixes and REX are handled before the table is consulted.
	table1[0x63] = m
	table1[0x68] = iz
	table1[0x69] = m | iz
	table1[0x6a] = ib
	table1[0x6b] = m | ib
	set(&table1, 0x70, 0x7f, ib) // jcc rel8
	table1[0x80] = m | ib
	table1[0x81] = m | iz
	table1[0x83] = m | ib
	set(&table1, 0x84, 0x8f, m)
	set(&table1, 0xa0, 0xa3, immMoffs<<immShift)
	table1[0xa8] = ib
	table1[0xa9] = iz
	set(&table1, 0xb0, 0xb7, ib)
	set(&table1, 0xb8, 0xbf, immV<<immShift)
	table1[0xc0] = m | ib
	table1[0xc1] = m | ib
	table1[0xc2] = imm16 << immShift
	table1[0xc6] = m | ib
	table1[0xc7] = m | iz
	table1[0xc8] = immEnter << immShift
	table1[0xca] = imm16 << immShift
	table1[0xcd] = ib
	set(&table1, 0xd0, 0xd3, m)
	set(&table1, 0xd8, 0xdf, m)
	set(&table1, 0xe0, 0xe7, ib) // loop*/jrcxz rel8, in/out imm8
	table1[0xe8] = immRelZ << immShift
	table1[0xe9] = immRelZ << immShift
	table1[0xeb] = ib
	table1[0xf6] = m | immGrp3<<immShift
	table1[0xf7] = m | immGrp3<<immShift
	table1[0xfe] = m
	table1[0xff] = m

	// 0F map.
	set(&table0F, 0x00, 0xff, m)
	for _, op := range []int{0x05, 0x06, 0x07, 0x08, 0x09, 0x0b, 0x0e, 0x30, 0x31, 0x32, 0x33,
		0x34, 0x35, 0x37, 0x77, 0xa0, 0xa1, 0xa2, 0xa8, 0xa9, 0xaa} {
		table0F[op] = 0
	}
	for _, op := range []int{0x04, 0x0a, 0x0c, 0x24, 0x25, 0x26, 0x27, 0x36, 0x39, 0x3b, 0x3c,
		0x3d, 0x3e, 0x3f, 0x7a, 0x7b} {
		table0F[op] = fInvalid
	}
	// 0f a6/a7 stay ModRM: VIA PadLock (montmul, xsha*, xstore, xcrypt*).
	table0F[0x0f] = m | ib // 3DNow!: the opcode is an imm8 suffix
	set(&table0F, 0x70, 0x73, m|ib)
	set(&table0F, 0x80, 0x8f, immRelZ<<immShift)
	table0F[0xa4] = m | ib
	table0F[0xac] = m | ib
	table0F[0xba] = m | ib
	table0F[0xc2] = m | ib
	set(&table0F, 0xc4, 0xc6, m|ib)
	set(&table0F, 0xc8, 0xcf, 0)
}

// prefixTab maps each legacy prefix byte to its pfx bit, REX bytes to
// pfxREX, and other bytes to 0.
var prefixTab = [256]uint16{
	0x26: pfxSegLegacy, 0x2e: pfxSegLegacy, 0x36: pfxSegLegacy, 0x3e: pfxSegLegacy,
	0x64: pfxFSGS, 0x65: pfxFSGS,
	0x66: pfx66, 0x67: pfx67, 0xf0: pfxLock, 0xf2: pfxF2, 0xf3: pfxF3,
	0x40: pfxREX, 0x41: pfxREX, 0x42: pfxREX, 0x43: pfxREX, 0x44: pfxREX, 0x45: pfxREX, 0x46: pfxREX, 0x47: pfxREX,
	0x48: pfxREX, 0x49: pfxREX, 0x4a: pfxREX, 0x4b: pfxREX, 0x4c: pfxREX, 0x4d: pfxREX, 0x4e: pfxREX, 0x4f: pfxREX,
}

// vexImm8 reports whether a VEX/EVEX instruction in map 0F carries an imm8:
// the same opcodes as their legacy SSE forms (pshuf*, shift groups, cmpps,
// pinsrw, pextrw, shufps).
func vexImm8(m uint8, op byte) bool {
	switch m {
	case map0F:
		return op >= 0x70 && op <= 0x73 || op == 0xc2 || op >= 0xc4 && op <= 0xc6
	case map0F3A:
		return true
	}
	return false
}

// truncOrLong is the error for running out of bytes at limit.
func truncOrLong(limit int) error {
	if limit >= MaxLen {
		return ErrTooLong
	}
	return ErrTruncated
}

// scan is the structural length decoder. It never reads past code and never
// panics. On ErrInvalid the encoding's length fields are still filled in when
// the structure could be followed; on other errors e.n is 0.
func scan(code []byte, e *encoding) error {
	*e = encoding{modrmOff: -1, sibOff: -1, dispOff: -1, immOff: -1, vexOff: -1}
	limit := len(code)
	if limit > MaxLen {
		limit = MaxLen
	}
	i := 0
	// Legacy prefixes and REX. A REX byte only counts when it is the last
	// byte before the opcode.
	for {
		if i >= limit {
			return truncOrLong(i)
		}
		b := code[i]
		p := prefixTab[b]
		if p == 0 {
			break
		}
		if p == pfxREX {
			if e.rex != 0 {
				e.pfx |= pfxRexIgnored
			}
			e.rex = b
			i++
			continue
		}
		e.pfx |= p
		switch b {
		case 0xf2, 0xf3:
			e.lastRep = b
		case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65:
			e.seg = b
		}
		if e.rex != 0 {
			e.rex = 0
			e.pfx |= pfxRexIgnored
		}
		i++
	}

	var flags uint8
	var err error
	b := code[i]
	switch {
	case b == 0x0f:
		if i+1 >= limit {
			return truncOrLong(limit)
		}
		switch code[i+1] {
		case 0x38, 0x3a:
			if i+2 >= limit {
				return truncOrLong(limit)
			}
			e.m = map0F38
			flags = fModRM
			if code[i+1] == 0x3a {
				e.m = map0F3A
				flags = fModRM | imm8<<immShift
			}
			e.op = code[i+2]
			e.opOff = int8(i + 2)
		default:
			e.m = map0F
			e.op = code[i+1]
			e.opOff = int8(i + 1)
			flags = table0F[e.op]
			if e.op == 0x78 && e.pfx&(pfx66|pfxF2) != 0 {
				flags = fModRM | imm8x2<<immShift // extrq/insertq xmm, ib, ib
			}
		}
	case b == 0xc4 || b == 0xc5 || b == 0x62 || b == 0x8f && i+1 < limit && code[i+1]&0x1f >= 8:
		err = scanVEX(code, i, limit, e)
		goto done
	default:
		e.m = map1Byte
		e.op = b
		e.opOff = int8(i)
		flags = table1[b]
	}
	if flags&fInvalid != 0 {
		e.invalid = "opcode undefined in 64-bit mode"
		e.n = e.opOff + 1
		return ErrInvalid
	}
	err = finishModRMImm(code, int(e.opOff)+1, limit, e, flags)
done:
	// A REX byte not adjacent to the opcode: the CPU ignores it, objdump
	// prints it as an instruction of its own, and no compiler emits it, so
	// such boundaries are not worth trusting.
	if err == nil && e.pfx&pfxRexIgnored != 0 {
		e.invalid = "REX prefix not adjacent to the opcode"
		err = ErrInvalid
	}
	return err
}

// scanVEX follows a VEX2 (c5), VEX3 (c4), EVEX (62) or XOP (8f) prefix at
// code[i]. All of them are followed by an opcode and a ModRM byte, except
// VEX 0F 77 (vzeroupper/vzeroall).
func scanVEX(code []byte, i, limit int, e *encoding) error {
	lead := code[i]
	var bad string
	if e.rex != 0 || e.pfx&(pfx66|pfxF2|pfxF3|pfxLock) != 0 {
		bad = "VEX/EVEX/XOP prefix after a 66/f2/f3/lock/REX prefix (#UD)"
	}
	e.rex = 0 // VEX carries its own R/X/B/W
	e.vexOff = int8(i)
	var size int
	switch lead {
	case 0xc5:
		size = 2
		e.class = EncVEX
	case 0xc4:
		size = 3
		e.class = EncVEX
	case 0x8f:
		size = 3
		e.class = EncXOP
	default:
		size = 4
		e.class = EncEVEX
	}
	if i+size >= limit { // prefix bytes plus the opcode
		return truncOrLong(limit)
	}
	p := code[i+1 : i+size]
	switch lead {
	case 0xc5:
		e.m = map0F
		e.vexL = p[0] >> 2 & 1
		e.vexPP = p[0] & 3
		e.vexV = ^p[0] >> 3 & 15
	case 0xc4, 0x8f:
		e.m = p[0] & 0x1f
		e.vexW = p[1]&0x80 != 0
		e.vexL = p[1] >> 2 & 1
		e.vexPP = p[1] & 3
		e.vexV = ^p[1] >> 3 & 15
		if lead == 0xc4 && (e.m < map0F || e.m > map0F3A) {
			bad = "VEX opcode map not defined"
		}
		if lead == 0x8f && e.m > mapXOPA {
			bad = "XOP opcode map not defined"
		}
		if lead == 0x8f && e.vexPP != 0 {
			bad = "XOP with a non-zero pp field"
		}
	default: // EVEX: P0 = R X B R' 0 m m m, P1 = W vvvv 1 pp, P2 = z L'L b V' aaa
		e.m = p[0] & 7
		e.vexW = p[1]&0x80 != 0
		e.vexPP = p[1] & 3
		e.vexV = ^p[1] >> 3 & 15
		e.vexL = p[2] >> 5 & 3
		switch {
		case p[0]&0x08 != 0 || p[1]&0x04 == 0:
			bad = "EVEX reserved bits (APX extended EVEX is not supported)"
		case e.m == 0 || e.m == 4 || e.m == 7:
			bad = "EVEX opcode map not supported"
		}
	}
	e.opOff = int8(i + size)
	e.op = code[i+size]
	flags := fModRM
	switch {
	case e.class == EncVEX && e.m == map0F && e.op == 0x77:
		flags = 0 // vzeroupper / vzeroall
	case e.class == EncXOP && e.m == mapXOP8:
		flags |= imm8 << immShift
	case e.class == EncXOP && e.m == mapXOPA:
		flags |= imm32 << immShift
	case e.class != EncXOP && vexImm8(e.m, e.op):
		flags |= imm8 << immShift
	}
	err := finishModRMImm(code, i+size+1, limit, e, flags)
	if err == nil && bad != "" {
		e.invalid = bad
		err = ErrInvalid
	}
	return err
}

// finishModRMImm reads ModRM, SIB, displacement and immediate from code[i:]
// and sets e.n.
func finishModRMImm(code []byte, i, limit int, e *encoding, flags uint8) error {
	if flags&fModRM != 0 {
		if i >= limit {
			return truncOrLong(limit)
		}
		e.modrmOff = int8(i)
		e.modrm = code[i]
		i++
		info := modrmInfo[e.modrm]
		// mov to/from control and debug registers ignore mod: always registers.
		if info != 0 && !(e.m == map0F && e.op&0xfc == 0x20 && e.class == EncLegacy) {
			disp := int(info & 7)
			if info&modrmSIB != 0 {
				if i >= limit {
					return truncOrLong(limit)
				}
				e.sibOff = int8(i)
				if e.modrm < 0x40 && code[i]&7 == 5 {
					disp = 4 // no base: disp32
				}
				i++
			}
			if disp > 0 {
				e.dispOff = int8(i)
				e.dispSize = int8(disp)
				i += disp
			}
		}
	}
	imm := 0
	switch k := flags >> immShift; k {
	case immNone:
	case imm8:
		imm = 1
	default:
		imm = immSize(e, k)
	}
	if imm > 0 {
		e.immOff = int8(i)
		e.immSize = int8(imm)
		i += imm
	}
	if i > limit {
		if i > MaxLen {
			return ErrTooLong
		}
		return ErrTruncated
	}
	e.n = int8(i)
	if flags>>immShift == immRelZ && e.pfx&pfx66 != 0 && !e.rexW() {
		// Intel ignores 66 on near call/jmp/jcc in 64-bit mode (rel32);
		// AMD and objdump read a rel16. The length is not knowable.
		e.invalid = "operand-size prefix on a rel32 branch (Intel and AMD disagree on the length)"
		return ErrInvalid
	}
	if e.pfx&pfxLock != 0 || e.class == EncLegacy && e.m == map1Byte && groupChecked[e.op] {
		if msg := groupInvalid(e); msg != "" {
			e.invalid = msg
			return ErrInvalid
		}
	}
	return nil
}

// modrmInfo gives, per ModRM byte, the displacement size (bits 0-2) and
// whether a SIB byte follows (modrmSIB); 0 for register operands and for
// plain (%reg).
var modrmInfo [256]uint8

const modrmSIB = 8

func init() {
	for m := 0; m < 256; m++ {
		mod, rm := m>>6, m&7
		var info uint8
		switch {
		case mod == 3:
			continue
		case mod == 1:
			info = 1
		case mod == 2 || mod == 0 && rm == 5:
			info = 4
		}
		if rm == 4 {
			info |= modrmSIB
		}
		modrmInfo[m] = info
	}
}

// groupChecked lists the 1-byte opcodes whose validity depends on ModRM.
var groupChecked = [256]bool{0x8c: true, 0x8d: true, 0x8e: true, 0x8f: true, 0xc6: true, 0xc7: true, 0xfe: true, 0xff: true}

// immSize is the immediate's size in bytes for immediate kind k.
func immSize(e *encoding, k uint8) int {
	op16 := e.pfx&pfx66 != 0 && !e.rexW()
	switch k {
	case imm8:
		return 1
	case imm16:
		return 2
	case immRelZ:
		return 4 // Intel; refused by the caller when a 66 prefix makes AMD read a rel16
	case immZ:
		if op16 {
			return 2
		}
		return 4
	case immV:
		switch {
		case e.rexW():
			return 8
		case op16:
			return 2
		}
		return 4
	case immMoffs:
		if e.pfx&pfx67 != 0 {
			return 4
		}
		return 8
	case immEnter:
		return 3
	case immGrp3:
		if e.reg() >= 2 {
			return 0
		}
		if e.op == 0xf6 {
			return 1
		}
		if op16 {
			return 2
		}
		return 4
	case imm32:
		return 4
	case imm8x2:
		return 2
	}
	return 0
}

// groupInvalid checks the ModRM-dependent #UD cases of the legacy maps that
// the opcode tables cannot express, and lock on a non-lockable instruction.
func groupInvalid(e *encoding) string {
	if e.class != EncLegacy {
		return ""
	}
	mem := e.hasModRM() && e.mod() != 3
	if e.m == map1Byte {
		switch e.op {
		case 0x8d: // lea
			if !mem {
				return "lea with a register operand"
			}
		case 0x8f: // pop r/m (XOP was taken earlier)
			if e.reg() != 0 {
				return "8f group: undefined /reg"
			}
		case 0xc6, 0xc7:
			if e.reg() != 0 && e.modrm != 0xf8 {
				return "c6/c7 group: undefined /reg"
			}
		case 0xfe:
			if e.reg() > 1 {
				return "fe group: undefined /reg"
			}
		case 0xff:
			if e.reg() == 7 {
				return "ff group: undefined /reg"
			}
			if (e.reg() == 3 || e.reg() == 5) && !mem {
				return "far call/jmp with a register operand"
			}
		case 0x8e:
			if e.reg() == 1 || e.reg() > 5 {
				return "mov to cs or to an undefined segment register"
			}
		case 0x8c:
			if e.reg() > 5 {
				return "mov from an undefined segment register"
			}
		}
	}
	if e.pfx&pfxLock != 0 && !lockable(e, mem) {
		return "lock prefix on a non-lockable instruction"
	}
	return ""
}

// lockable reports the instructions that accept a lock prefix (memory
// destination forms only). AMD's lock mov cr0 (cr8 alias) is accepted too.
func lockable(e *encoding, mem bool) bool {
	if e.m == map0F && (e.op == 0x20 || e.op == 0x22) {
		return true
	}
	if !mem {
		return false
	}
	switch e.m {
	case map1Byte:
		switch op := e.op; {
		case op < 0x40 && op&7 <= 1 && op&0x38 != 0x38: // add/or/adc/sbb/and/sub/xor r/m, r
			return true
		case op == 0x80 || op == 0x81 || op == 0x83:
			return e.reg() != 7 // not cmp
		case op == 0x86 || op == 0x87:
			return true
		case op == 0xf6 || op == 0xf7:
			return e.reg() == 2 || e.reg() == 3 // not, neg
		case op == 0xfe || op == 0xff:
			return e.reg() <= 1
		}
	case map0F:
		switch e.op {
		case 0xab, 0xb3, 0xbb, 0xb0, 0xb1, 0xc0, 0xc1:
			return true
		case 0xba:
			return e.reg() >= 5
		case 0xc7:
			return e.reg() == 1
		}
	}
	return false
}

// readRel returns the sign-extended value of the rel8/rel16/rel32 field.
func readRel(code []byte, off, size int) int64 {
	switch size {
	case 1:
		return int64(int8(code[off]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(code[off:])))
	default:
		return int64(int32(binary.LittleEndian.Uint32(code[off:])))
	}
}
