package analysis

import (
	"cmp"
	"slices"
	"sort"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// A function decoded for the indirect-jump analyses: its instructions, their
// control flow and x86asm's operand view, loaded on demand and cached.

// finst is one instruction of a function being re-read for its indirect jumps.
type finst struct {
	addr uint64
	off  int
	in   cinst
	xi   *x86asm.Inst // operands, decoded on demand
	xerr bool
}

// cinst is the part of x86dec.Inst the backward analyses need (x86dec.Inst
// is large and huge functions have hundreds of thousands of instructions).
type cinst struct {
	Len       int
	Target    uint64
	RIPTarget uint64
	Kind      x86dec.Kind
	RIPRel    bool
	Endbr     bool
	fall      bool
	pad       bool // nop or int3: alignment padding when nothing reaches it
}

func (c *cinst) FallsThrough() bool { return c.fall }

// fcode is a decoded function.
type fcode struct {
	idx    int
	fn     *elfio.Func
	code   []byte
	insts  []finst
	ijs    []int             // indices of the indirect jmps
	others map[int]*fcode    // other functions the backward walks entered
	good   map[walkItem]bool // (instruction, register) pairs already shown to hold only code pointers
}

// isInsn says whether an instruction of fc starts at addr.
func (fc *fcode) isInsn(addr uint64) bool {
	_, ok := slices.BinarySearchFunc(fc.insts, addr, func(x finst, a uint64) int { return cmp.Compare(x.addr, a) })
	return ok
}

func (b *Binary) loadFunc(i int) *fcode {
	fn := &b.Funcs.List[i]
	fc := &fcode{idx: i, fn: fn, code: b.code(fn.Addr, fn.Size)}
	fc.insts = make([]finst, 0, len(fc.code)/4+1)
	for off := 0; off < len(fc.code); {
		pc := fn.Addr + uint64(off)
		in, err := x86dec.DecodeFast(fc.code[off:], pc)
		if err != nil || in.Len <= 0 || off+in.Len > len(fc.code) {
			off++
			continue
		}
		if in.Kind == x86dec.KindJmpIndirect {
			fc.ijs = append(fc.ijs, len(fc.insts))
		}
		fc.insts = append(fc.insts, finst{addr: pc, off: off, in: cinst{
			Len: in.Len, Target: in.Target, RIPTarget: in.RIPTarget, Kind: in.Kind, RIPRel: in.RIPRel, Endbr: in.Endbr,
			fall: in.FallsThrough(), pad: in.Kind == x86dec.KindInt3 || isNop(fc.code[off:off+in.Len], &in),
		}})
		off += in.Len
	}
	return fc
}

// find returns the index of the instruction starting at addr, or -1.
func (fc *fcode) find(addr uint64) int {
	i := sort.Search(len(fc.insts), func(i int) bool { return fc.insts[i].addr >= addr })
	if i < len(fc.insts) && fc.insts[i].addr == addr {
		return i
	}
	return -1
}

// x returns x86asm's reading of instruction k (nil if it has none with our
// length): the operand view the jump-table and pointer analyses need.
func (fc *fcode) x(k int) *x86asm.Inst {
	fi := &fc.insts[k]
	if fi.xi == nil && !fi.xerr {
		xi, err := x86dec.Operands(fc.code[fi.off : fi.off+fi.in.Len])
		if err != nil {
			fi.xerr = true
			return nil
		}
		fi.xi = &xi
	}
	return fi.xi
}
