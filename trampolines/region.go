package trampolines

import (
	"fmt"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Region is a run of whole instructions (the DCR a jump-optimized probe replaces)
// relocated as one block: each instruction re-encoded by Relocate, back to back.
// Relocated lengths do not depend on the new address, so Offsets can be planned
// before any address is known (RegionLen) and a suffix of the block (from any
// instruction on) is itself the relocation of the suffix of the original.
type Region struct {
	Site  uint64 // address of the first original instruction
	Addr  uint64 // where Code is placed
	Code  []byte
	Insns []Relocated
	// Offsets[i] is where instruction i's copy starts in Code; OrigOffsets[i] where
	// it starts in the original (from Site).
	Offsets     []int
	OrigOffsets []int
	OrigLen     int // bytes of original instructions covered
}

// OffsetOf returns the offset in Code of the copy of the original instruction at
// site+origOff, and whether an instruction starts there.
func (r *Region) OffsetOf(origOff int) (int, bool) {
	for i, o := range r.OrigOffsets {
		if o == origOff {
			return r.Offsets[i], true
		}
	}
	return 0, false
}

// RegionLen returns the length of the relocated copy of the instructions in code
// (address pc), which must hold whole instructions only.
func RegionLen(code []byte, pc uint64, opt Options) (int, error) {
	n := 0
	err := eachInsn(code, pc, opt, func(raw []byte, in x86dec.Inst, off int) error {
		m, _, err := plan(raw, in, pc+uint64(off), opt)
		n += m
		return err
	})
	return n, err
}

// RelocateRegion relocates the instructions in code (address pc), which must hold
// whole instructions only, to run back to back from at. With Options.CallPushJmp a
// call may only end the region: its original return address, the first byte after
// the region, is where the callee comes back to.
func RelocateRegion(code []byte, pc, at uint64, opt Options) (*Region, error) {
	r := &Region{Site: pc, Addr: at, OrigLen: len(code)}
	// A jmp, jcc or loop to an instruction of the region after its first (a loop the
	// region was grown to hold: analysis.RuleDCRGrown) goes to that instruction's
	// copy; the copies' lengths do not depend on their targets. One to the first is
	// left going to the site, so that a probe there is hit again.
	copyAt := map[uint64]uint64{}
	n := 0
	if err := eachInsn(code, pc, opt, func(raw []byte, in x86dec.Inst, off int) error {
		copyAt[pc+uint64(off)] = at + uint64(n)
		m, _, err := plan(raw, in, pc+uint64(off), opt)
		n += m
		return err
	}); err != nil {
		return nil, err
	}
	err := eachInsn(code, pc, opt, func(raw []byte, in x86dec.Inst, off int) error {
		switch in.Kind {
		case x86dec.KindJmp, x86dec.KindJcc, x86dec.KindLoop:
			if in.Target > pc && in.Target < pc+uint64(len(code)) {
				c, ok := copyAt[in.Target]
				if !ok {
					return fmt.Errorf("%w at %#x: branch into the middle of the instruction holding %#x", ErrRelocate, pc+uint64(off), in.Target)
				}
				in.Target = c
			}
		}
		rl, err := relocate(raw, in, pc+uint64(off), at+uint64(len(r.Code)), opt)
		if err != nil {
			return err
		}
		r.Offsets = append(r.Offsets, len(r.Code))
		r.OrigOffsets = append(r.OrigOffsets, off)
		r.Insns = append(r.Insns, rl)
		r.Code = append(r.Code, rl.Code...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// eachInsn decodes the whole instructions of code and calls fn for each.
func eachInsn(code []byte, pc uint64, opt Options, fn func(raw []byte, in x86dec.Inst, off int) error) error {
	if len(code) == 0 {
		return fmt.Errorf("%w at %#x: empty region", ErrRelocate, pc)
	}
	for off := 0; off < len(code); {
		in, err := x86dec.Decode(code[off:], pc+uint64(off))
		if err != nil {
			return fmt.Errorf("%w at %#x: %w", ErrRelocate, pc+uint64(off), err)
		}
		if in.Len <= 0 || off+in.Len > len(code) {
			return fmt.Errorf("%w at %#x: the instruction runs past the region's end %#x", ErrRelocate, pc+uint64(off), pc+uint64(len(code)))
		}
		last := off+in.Len == len(code)
		if opt.CallPushJmp && !last && (in.Kind == x86dec.KindCall || in.Kind == x86dec.KindCallIndirect) {
			return fmt.Errorf("%w at %#x: a call inside the region would return into it", ErrRelocate, pc+uint64(off))
		}
		if err := fn(code[off:off+in.Len], in, off); err != nil {
			return err
		}
		off += in.Len
	}
	return nil
}
