package trampolines

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/kprewrite/kprewrite/internal/evfilter"
)

// Inline filters ("Inline filters" in include/kprewrite_abi.h): an event's filter
// compiled into x86 that tests the live registers and the stack before the detour saves
// anything, so that a hit the filter refuses costs a few compares and a per-CPU count
// instead of the whole optprobe path. A match (or anything the code cannot decide)
// goes on to the full detour, which runs the filter again on the fetched data: the
// inline code only ever short-cuts a refusal the runtime's filter would make too.

// PrefilterField is where a filter field's value is at the probe point.
type PrefilterField struct {
	Reg   int // x86 register number (0 ax .. 15 r15, never 4, %rsp); -1: the stack
	SPOff int // with Reg -1: the value is the field's bytes at the probe's %sp + SPOff
}

// ErrNoPrefilter says a filter reads something the detour cannot read itself (a
// string, the thread's name or CPU, memory a read could fault on): the point keeps the
// plain detour.
var ErrNoPrefilter = errors.New("the filter cannot be tested inline")

// PrefilterSpec is what an inline filter is made of.
type PrefilterSpec struct {
	Prog []byte // the event's filter program (internal/evfilter)
	// Field says where the size bytes at off of the record's data are at the probe;
	// false when the detour cannot read them.
	Field     func(off, size int) (PrefilterField, bool)
	FlagsDead bool   // the analysis proved the arithmetic flags dead at the site
	CtlGen    uint64 // vaddr of the runtime's u64 SymPFCtlGen
	PFGen     uint64 // vaddr of the probe's u32 PFGen (Encoded.PFGenAddr)
}

const redZone = 128

// PrefilterSave is the code that starts an inline filter, and a count-only detour made
// with the same flagsDead: the step over the red zone and, where the flags are live,
// their save into %al and %ah (%rax pushed).
func PrefilterSave(flagsDead bool) []byte {
	b := []byte{0x48, 0x8d, 0x64, 0x24, 0x80} // lea -128(%rsp),%rsp
	if !flagsDead {
		b = append(b, 0x50, 0x9f, 0x0f, 0x90, 0xc0) // push %rax; lahf; seto %al
	}
	return b
}

// Prefilter returns the inline filter placed at at: it jumps to accept (the full
// detour's entry) with every register, the flags and %rsp as at its own entry, or to
// refuse with the stack and the flags as PrefilterSave leaves them (a count-only
// detour of the probe, after its own identical save). Its length does not depend on
// the addresses. ErrNoPrefilter when the program reads what it cannot.
func Prefilter(at uint64, s PrefilterSpec, accept, refuse uint64) ([]byte, error) {
	entries, err := evfilter.Entries(s.Prog)
	if err != nil {
		return nil, fmt.Errorf("inline filter: %w", err)
	}
	n := len(entries)
	lAccept, lRefuse, lFull := n, n+1, n+2
	// a refusal jumps straight to the count-only detour: no jmp to a jmp on the hot path
	a := &asm{at: at, labels: map[int]int{}, abs: map[int]uint64{lRefuse: refuse}}
	base := redZone
	a.emit(PrefilterSave(s.FlagsDead)...)
	if !s.FlagsDead {
		base += 8
	}
	a.genCheck(s.CtlGen, s.PFGen, lFull)
	a.emit(0x59) // pop %rcx
	for i, e := range entries {
		a.labels[i] = a.len()
		if err := a.entry(e, s, base); err != nil {
			return nil, err
		}
	}
	a.labels[lAccept] = a.len() // restore what the save did, then the full detour
	if !s.FlagsDead {
		a.emit(0x04, 0x7f, 0x9e, 0x58) // add $0x7f,%al; sahf; pop %rax
	}
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	a.jmpAbs(accept)
	a.labels[lFull] = a.len()
	a.emit(0x59) // pop %rcx
	a.jmp(lAccept)
	if err := a.resolve(); err != nil {
		return nil, fmt.Errorf("inline filter at %#x: %w", at, err)
	}
	return a.b, nil
}

// genCheck pushes %rcx and goes to label full (%rcx still pushed) unless the runtime
// has published the controls' generation (the u64 at ctlGen: its address) and the
// probe's pfgen (the u32 at pfGen) equals it: the inline code decides as the runtime
// would.
func (a *asm) genCheck(ctlGen, pfGen uint64, full int) {
	a.emit(0x51)               // push %rcx
	a.ripRel(0x48, 0x8b, 0x0d) // mov ctlgen(%rip),%rcx
	a.fix = append(a.fix, fixup{pos: a.len() - 4, abs: ctlGen})
	a.emit(0x48, 0x85, 0xc9) // test %rcx,%rcx
	a.jcc(ccE, full)
	a.emit(0x8b, 0x09)   // mov (%rcx),%ecx
	a.ripRel(0x3b, 0x0d) // cmp pfgen(%rip),%ecx
	a.fix = append(a.fix, fixup{pos: a.len() - 4, abs: pfGen})
	a.jcc(ccNE, full)
}

// condition codes (the low nibble of jcc)
const (
	ccB  = 0x2
	ccAE = 0x3
	ccE  = 0x4
	ccNE = 0x5
	ccBE = 0x6
	ccA  = 0x7
	ccL  = 0xc
	ccGE = 0xd
	ccLE = 0xe
	ccG  = 0xf
)

// entry compiles one program entry: flags from a cmp or test of the field, then a
// jcc to the entry's target when its result equals When.
func (a *asm) entry(e evfilter.Entry, s PrefilterSpec, base int) error {
	if e.Fn == evfilter.FnNop { // never matches
		if !e.When {
			a.jmp(e.Target)
		}
		return nil
	}
	if (e.Fn != evfilter.FnEq && e.Fn != evfilter.FnCmp) || e.Src != evfilter.SrcData {
		return ErrNoPrefilter
	}
	if e.Size != 1 && e.Size != 2 && e.Size != 4 && e.Size != 8 {
		return ErrNoPrefilter
	}
	f, ok := s.Field(e.Off, e.Size)
	if !ok || f.Reg == 4 || f.Reg > 15 {
		return ErrNoPrefilter
	}
	var cc byte
	test := false
	switch {
	case e.Fn == evfilter.FnEq:
		cc = ccE
		if e.Not {
			cc = ccNE
		}
	case e.Op == evfilter.OpBand:
		cc, test = ccNE, true
	default:
		var ok bool
		if cc, ok = cmpCC(e.Op, e.Signed); !ok {
			return ErrNoPrefilter
		}
	}
	val := e.Val
	if e.Size < 8 {
		val &= 1<<(8*e.Size) - 1
	}
	o := operand{reg: f.Reg, disp: int32(base + f.SPOff)}
	if f.Reg < 0 {
		o.mem = true
	} else if f.Reg == 0 && !s.FlagsDead {
		o = operand{mem: true, disp: 0} // %rax is saved at the top of the stack
	}
	if e.Size == 8 && int64(val) != int64(int32(val)) {
		// no imm64 form: the constant in a scratch register pushed around the compare
		sc := 1 // rcx
		if !o.mem && o.reg == 1 {
			sc = 2 // rdx
		}
		if o.mem {
			o.disp += 8
		}
		a.emit(0x50 + byte(sc))     // push
		a.emit(0x48, 0xb8+byte(sc)) // movabs $val,%sc
		a.b = binary.LittleEndian.AppendUint64(a.b, val)
		if test {
			a.modrm(8, []byte{0x85}, sc, o, nil) // test %sc,o
		} else {
			a.modrm(8, []byte{0x39}, sc, o, nil) // cmp %sc,o: flags of o - %sc
		}
		a.emit(0x58 + byte(sc)) // pop: no flags touched
	} else {
		imm := binary.LittleEndian.AppendUint64(nil, val)[:min(e.Size, 4)]
		switch {
		case test && e.Size == 1:
			a.modrm(1, []byte{0xf6}, 0, o, imm)
		case test:
			a.modrm(e.Size, []byte{0xf7}, 0, o, imm)
		case e.Size == 1:
			a.modrm(1, []byte{0x80}, 7, o, imm)
		default:
			a.modrm(e.Size, []byte{0x81}, 7, o, imm)
		}
	}
	if !e.When {
		cc ^= 1
	}
	a.jcc(cc, e.Target)
	return nil
}

// cmpCC is the condition of "field OP constant" after cmp field, constant.
func cmpCC(op uint8, signed bool) (byte, bool) {
	switch op {
	case evfilter.OpLT:
		return pick(signed, ccL, ccB), true
	case evfilter.OpLE:
		return pick(signed, ccLE, ccBE), true
	case evfilter.OpGT:
		return pick(signed, ccG, ccA), true
	case evfilter.OpGE:
		return pick(signed, ccGE, ccAE), true
	}
	return 0, false
}

func pick(signed bool, s, u byte) byte {
	if signed {
		return s
	}
	return u
}

// asm is a tiny assembler: bytes, labels (program entries and the exits) and rel32
// fields to resolve once every label is placed.
type asm struct {
	at     uint64
	b      []byte
	labels map[int]int    // label -> offset
	abs    map[int]uint64 // labels that are absolute addresses outside the code
	fix    []fixup
}

// fixup is a rel32 field that ends its instruction: to a label, or to abs.
type fixup struct {
	pos   int
	label int
	abs   uint64 // nonzero: an absolute target
}

func (a *asm) len() int          { return len(a.b) }
func (a *asm) emit(b ...byte)    { a.b = append(a.b, b...) }
func (a *asm) ripRel(op ...byte) { a.emit(op...); a.emit(0, 0, 0, 0) }

func (a *asm) jcc(cc byte, label int) {
	a.emit(0x0f, 0x80|cc, 0, 0, 0, 0)
	a.fix = append(a.fix, fixup{pos: a.len() - 4, label: label})
}

func (a *asm) jmp(label int) {
	a.emit(0xe9, 0, 0, 0, 0)
	a.fix = append(a.fix, fixup{pos: a.len() - 4, label: label})
}

func (a *asm) jmpAbs(to uint64) {
	a.emit(0xe9, 0, 0, 0, 0)
	a.fix = append(a.fix, fixup{pos: a.len() - 4, abs: to})
}

func (a *asm) resolve() error {
	for _, f := range a.fix {
		end := f.pos + 4
		to := f.abs
		if x, ok := a.abs[f.label]; ok && to == 0 {
			to = x
		} else if to == 0 {
			off, ok := a.labels[f.label]
			if !ok {
				return fmt.Errorf("internal error: no label %d", f.label)
			}
			to = a.at + uint64(off)
		}
		d := int64(to - (a.at + uint64(end)))
		if d < math.MinInt32 || d > math.MaxInt32 {
			return fmt.Errorf("%#x is out of rel32 reach", to)
		}
		binary.LittleEndian.PutUint32(a.b[f.pos:], uint32(int32(d)))
	}
	return nil
}

// operand is a register (mod 11) or [%rsp + disp32].
type operand struct {
	reg  int
	mem  bool
	disp int32
}

// modrm emits an instruction of size bytes: prefixes, opcode, ModRM (reg field r: a
// register or an opcode extension), SIB and displacement for memory, then imm.
func (a *asm) modrm(size int, opcode []byte, r int, o operand, imm []byte) {
	if size == 2 {
		a.emit(0x66)
	}
	rex := byte(0)
	if size == 8 {
		rex |= 8
	}
	if r >= 8 {
		rex |= 4
	}
	if !o.mem && o.reg >= 8 {
		rex |= 1
	}
	// spl bpl sil dil need a REX prefix to be named as bytes
	if rex != 0 || (size == 1 && !o.mem && o.reg >= 4 && o.reg < 8) {
		a.emit(0x40 | rex)
	}
	a.emit(opcode...)
	if o.mem {
		a.emit(0x84|byte(r&7)<<3, 0x24) // mod 10, rm 100: SIB base %rsp, no index
		a.b = binary.LittleEndian.AppendUint32(a.b, uint32(o.disp))
	} else {
		a.emit(0xc0 | byte(r&7)<<3 | byte(o.reg&7))
	}
	a.emit(imm...)
}

// PrefilterRegs maps the struct pt_regs offsets of the general registers to their x86
// numbers.
var PrefilterRegs = map[int]int{
	0: 15, 8: 14, 16: 13, 24: 12, 32: 5, 40: 3, 48: 11, 56: 10, 64: 9, 72: 8,
	80: 0, 88: 1, 96: 2, 104: 6, 112: 7,
}
