package trampolines

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Inline histogram updates ("Inline histograms" in include/kprewrite_abi.h): the hit of
// a switched-off event whose one trigger is a plain histogram (one key, values, no
// variable, action or condition) adds itself to an entry the table already has,
// inside the detour, before anything is saved: the key read from a live register or
// the stack (its .log2 bucket computed), hashed as the runtime hashes it, the entry at
// its bucket compared, the hitcount and each value added with lock add, then the
// count-only detour of the probe counts the hit. Anything else (no table yet, controls
// changed since the runtime checked, the event switched on, the table paused, the
// key's first hit, a key not in its own bucket) goes to the full detour, which does
// what the runtime always does.

// InlineHistField is one key or value of an inline histogram: where it is at the
// probe point and how its bytes make the number.
type InlineHistField struct {
	PrefilterField
	Size   int  // 1, 2, 4 or 8 bytes
	Signed bool // sign-extended from Size
	Log2   bool // the key's .log2: ilog2(roundup_pow_of_two(x))
}

// InlineHistSpec is what an inline histogram update is made of.
type InlineHistSpec struct {
	Key       InlineHistField
	Vals      []InlineHistField
	FlagsDead bool   // the analysis proved the arithmetic flags dead at the site
	CtlGen    uint64 // vaddr of the runtime's u64 SymPFCtlGen
	PFGen     uint64 // vaddr of the probe's u32 PFGen
	TrigBase  uint64 // vaddr of the runtime's u64 SymTrigBase: the control area's slot 0
	CtlOff    int32  // the event's switch word, from slot 0
	SoftBit   uint32 // its soft-disabled bit
	TabOff    int32  // the table's first word, from slot 0
	Mask      uint32 // buckets - 1
	EntBytes  uint32 // bytes of an entry
	KeyWords  int    // words of the key in an entry (1)
	Seed, Mul uint64 // the runtime's hash: h = Seed; h = (h ^ key) * Mul; h ^= h >> 29
	TagBit    uint64 // or'ed into a hash to make an entry's tag (bit 63)
	HdrBytes  uint32 // the table's header
}

// ErrNoInlineHist says the histogram cannot be updated inline (a field the detour
// cannot read, or too many values).
var ErrNoInlineHist = errors.New("the histogram cannot be updated inline")

// maxInlineVals bounds the values an inline update adds (each is a locked add).
const maxInlineVals = 4

// scratch registers of the update (pushed after %rcx, in this order): %rdx, %rsi, %rdi
const (
	rCX, rDX, rSI, rDI = 1, 2, 6, 7
)

// InlineHist returns the inline update placed at at: it jumps to full (the full
// detour's entry) with every register, the flags and %rsp as at its own entry, or to
// count with the stack and the flags as PrefilterSave leaves them (a count-only detour
// of the probe, after its own identical save). Its length does not depend on the
// addresses.
func InlineHist(at uint64, s InlineHistSpec, full, count uint64) ([]byte, error) {
	if len(s.Vals) > maxInlineVals || s.KeyWords != 1 || s.TagBit != 1<<63 || s.Mask == 0 {
		return nil, ErrNoInlineHist
	}
	for _, f := range append([]InlineHistField{s.Key}, s.Vals...) {
		if !f.readable() {
			return nil, ErrNoInlineHist
		}
	}
	a := &asm{at: at, labels: map[int]int{}}
	const lAccept, lFull1, lFull4, lZero, lLogged = 0, 1, 2, 3, 4
	a.emit(PrefilterSave(s.FlagsDead)...)
	a.genCheck(s.CtlGen, s.PFGen, lFull1)
	a.ripRel(0x48, 0x8b, 0x0d) // mov trigbase(%rip),%rcx
	a.fix = append(a.fix, fixup{pos: a.len() - 4, abs: s.TrigBase})
	a.emit(0x48, 0x85, 0xc9) // test %rcx,%rcx
	a.jcc(ccE, lFull1)
	a.emit(0xf7, 0x81) // testl $soft,ctloff(%rcx): switched on, records are written
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(s.CtlOff))
	a.b = binary.LittleEndian.AppendUint32(a.b, s.SoftBit)
	a.jcc(ccE, lFull1)
	a.emit(0xf6, 0x81) // testb $1,taboff(%rcx): paused
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(s.TabOff))
	a.emit(1)
	a.jcc(ccNE, lFull1)
	a.emit(0x52, 0x56, 0x57) // push %rdx; push %rsi; push %rdi
	// the stack now: rdi, rsi, rdx, rcx, [rax], the red zone, then the probe's %sp
	saved := 32
	if !s.FlagsDead {
		saved += 8
	}
	a.load(s.Key, saved, s.FlagsDead)
	if s.Key.Log2 {
		a.emit(0x48, 0x83, 0xfa, 0x01) // cmp $1,%rdx
		a.jcc(ccBE, lZero)
		a.emit(0x48, 0xff, 0xca)       // dec %rdx
		a.emit(0x48, 0x0f, 0xbd, 0xd2) // bsr %rdx,%rdx
		a.emit(0x48, 0xff, 0xc2)       // inc %rdx
		a.jmp(lLogged)
		a.labels[lZero] = a.len()
		a.emit(0x31, 0xd2) // xor %edx,%edx
		a.labels[lLogged] = a.len()
	}
	a.emit(0x48, 0xbe) // movabs $seed,%rsi
	a.b = binary.LittleEndian.AppendUint64(a.b, s.Seed)
	a.emit(0x48, 0x31, 0xd6) // xor %rdx,%rsi
	a.emit(0x48, 0xbf)       // movabs $mul,%rdi
	a.b = binary.LittleEndian.AppendUint64(a.b, s.Mul)
	a.emit(0x48, 0x0f, 0xaf, 0xf7) // imul %rdi,%rsi
	a.emit(0x48, 0x89, 0xf7)       // mov %rsi,%rdi
	a.emit(0x48, 0xc1, 0xef, 0x1d) // shr $29,%rdi
	a.emit(0x48, 0x31, 0xfe)       // xor %rdi,%rsi: the hash
	a.emit(0x48, 0x89, 0xf7)       // mov %rsi,%rdi
	a.emit(0x48, 0x81, 0xe7)       // and $mask,%rdi
	a.b = binary.LittleEndian.AppendUint32(a.b, s.Mask)
	a.emit(0x48, 0x69, 0xff) // imul $entbytes,%rdi,%rdi
	a.b = binary.LittleEndian.AppendUint32(a.b, s.EntBytes)
	a.emit(0x48, 0x01, 0xcf)             // add %rcx,%rdi: the bucket, less the table's offset
	a.emit(0x48, 0x0f, 0xba, 0xee, 0x3f) // bts $63,%rsi: the tag
	ent := int64(s.TabOff) + int64(s.HdrBytes)
	if ent+int64(s.Mask+1)*int64(s.EntBytes) > 1<<31-1 || ent < -(1<<31) {
		return nil, ErrNoInlineHist
	}
	a.emit(0x48, 0x39, 0xb7) // cmp %rsi,ent(%rdi)
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(ent))
	a.jcc(ccNE, lFull4)
	a.emit(0x48, 0x39, 0x97) // cmp %rdx,ent+8(%rdi)
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(ent+8))
	a.jcc(ccNE, lFull4)
	cnt := ent + 8 + 8*int64(s.KeyWords)
	a.emit(0xf0, 0x48, 0xff, 0x87) // lock incq cnt(%rdi): the hitcount
	a.b = binary.LittleEndian.AppendUint32(a.b, uint32(cnt))
	for i, v := range s.Vals {
		a.load(v, saved, s.FlagsDead)
		a.emit(0xf0, 0x48, 0x01, 0x97) // lock add %rdx,cnt+8+8i(%rdi)
		a.b = binary.LittleEndian.AppendUint32(a.b, uint32(cnt+8+8*int64(i)))
	}
	a.emit(0x5f, 0x5e, 0x5a, 0x59) // pop %rdi; pop %rsi; pop %rdx; pop %rcx
	a.jmpAbs(count)
	a.labels[lFull4] = a.len()
	a.emit(0x5f, 0x5e, 0x5a) // pop %rdi; pop %rsi; pop %rdx
	a.labels[lFull1] = a.len()
	a.emit(0x59) // pop %rcx
	a.labels[lAccept] = a.len()
	if !s.FlagsDead {
		a.emit(0x04, 0x7f, 0x9e, 0x58) // add $0x7f,%al; sahf; pop %rax
	}
	a.emit(0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00) // lea 128(%rsp),%rsp
	a.jmpAbs(full)
	if err := a.resolve(); err != nil {
		return nil, fmt.Errorf("inline histogram at %#x: %w", at, err)
	}
	return a.b, nil
}

func (f InlineHistField) readable() bool {
	switch f.Size {
	case 1, 2, 4, 8:
	default:
		return false
	}
	return f.Reg != 4 && f.Reg <= 15
}

// load emits the field's number into %rdx. saved is the bytes pushed since the red
// zone was stepped over (the scratch registers, %rax when the flags were live): a
// register the update pushed is read from its slot, the stack at the probe's %sp from
// above them.
func (a *asm) load(f InlineHistField, saved int, flagsDead bool) {
	o := operand{reg: f.Reg}
	switch {
	case f.Reg < 0:
		o = operand{mem: true, disp: int32(redZone + saved + f.SPOff)}
	case f.Reg == rDI:
		o = operand{mem: true, disp: 0}
	case f.Reg == rSI:
		o = operand{mem: true, disp: 8}
	case f.Reg == rDX:
		o = operand{mem: true, disp: 16}
	case f.Reg == rCX:
		o = operand{mem: true, disp: 24}
	case f.Reg == 0 && !flagsDead:
		o = operand{mem: true, disp: 32}
	}
	var op []byte
	w := false
	switch {
	case f.Size == 8:
		op, w = []byte{0x8b}, true
	case f.Size == 4 && f.Signed:
		op, w = []byte{0x63}, true // movslq
	case f.Size == 4:
		op = []byte{0x8b} // a 32-bit move zero-extends
	case f.Size == 2 && f.Signed:
		op, w = []byte{0x0f, 0xbf}, true
	case f.Size == 2:
		op = []byte{0x0f, 0xb7}
	case f.Signed:
		op, w = []byte{0x0f, 0xbe}, true
	default:
		op = []byte{0x0f, 0xb6}
	}
	rex := byte(0)
	if w {
		rex |= 8
	}
	if !o.mem && o.reg >= 8 {
		rex |= 1
	}
	// spl bpl sil dil need a REX prefix to be named as bytes
	if rex != 0 || (f.Size == 1 && !o.mem && o.reg >= 4 && o.reg < 8) {
		a.emit(0x40 | rex)
	}
	a.emit(op...)
	if o.mem {
		a.emit(0x84|byte(rDX)<<3, 0x24) // mod 10, rm 100: SIB base %rsp, no index
		a.b = binary.LittleEndian.AppendUint32(a.b, uint32(o.disp))
	} else {
		a.emit(0xc0 | byte(rDX)<<3 | byte(o.reg&7))
	}
}
