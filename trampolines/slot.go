package trampolines

import (
	"fmt"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// SlotOptions say what an out-of-line slot must support.
type SlotOptions struct {
	// JmpBack ends the slot with a jmp rel32 to the instruction after the probed one,
	// so the copy can run without a single-step (a boosted probe).
	JmpBack bool
	// Step requires the copy to be one instruction, so that a single-step of it
	// ends at the end of the copy (or at a branch target): loop/jrcxz cannot be
	// stepped out of line (their sandwich is three instructions).
	Step bool
	// Int3End ends the copy with an int3 instead of a jmp back (JmpBack must be
	// false): the runtime single-steps the copy without the trap flag, its int3's trap
	// ending the step (runtime.PFInt3Step), as the kernel does since 5.15. Only for a
	// copy that falls through to its end.
	Int3End bool
}

// Slot is an out-of-line slot, the kernel's kprobe insn slot: the relocated copy of
// a probed instruction, then (with JmpBack) a jmp back to site + the instruction's
// length.
type Slot struct {
	Site    uint64 // the probed instruction
	Addr    uint64 // where the slot is
	Code    []byte
	CopyLen int  // bytes of the copy: where a single-step of it ends (the runtime's slot_len)
	InsnLen int  // length of the original instruction
	Form    Form // how the copy was made
	Inst    x86dec.Inst
	JmpBack bool
	Int3End bool
}

// End is the first address past the slot.
func (s *Slot) End() uint64 { return s.Addr + uint64(len(s.Code)) }

// SlotLen returns the size of the slot for the instruction at the start of code
// (address site), without placing it.
func SlotLen(code []byte, site uint64, opt SlotOptions) (int, error) {
	in, err := x86dec.Decode(code, site)
	if err != nil {
		return 0, fmt.Errorf("%w at %#x: %w", ErrRelocate, site, err)
	}
	n, form, err := plan(code[:in.Len], in, site, Options{})
	if err != nil {
		return 0, err
	}
	if opt.Step && (form == FormSandwich || form == FormCallPushJmp) {
		return 0, fmt.Errorf("%w at %#x: a %s copy cannot be single-stepped", ErrRelocate, site, form)
	}
	if opt.Int3End && (opt.JmpBack || form == FormSandwich || form == FormCallPushJmp ||
		(in.Kind != x86dec.KindOther && in.Kind != x86dec.KindSyscall)) {
		return 0, fmt.Errorf("%w at %#x: a %s %s copy does not fall through to an int3", ErrRelocate, site, in.Kind, form)
	}
	if opt.JmpBack {
		n += 5
	}
	if opt.Int3End {
		n++
	}
	return n, nil
}

// BuildSlot makes the slot at address at for the instruction at the start of code
// (address site).
func BuildSlot(code []byte, site, at uint64, opt SlotOptions) (*Slot, error) {
	if _, err := SlotLen(code, site, opt); err != nil {
		return nil, err
	}
	r, err := Relocate(code, site, at, Options{})
	if err != nil {
		return nil, err
	}
	s := &Slot{Site: site, Addr: at, Code: r.Code, CopyLen: len(r.Code), InsnLen: r.Inst.Len, Form: r.Form, Inst: r.Inst, JmpBack: opt.JmpBack, Int3End: opt.Int3End}
	if opt.Int3End {
		s.Code = append(s.Code, 0xcc)
	}
	if opt.JmpBack {
		j, err := JmpRel32(at+uint64(len(r.Code)), site+uint64(r.Inst.Len))
		if err != nil {
			return nil, fmt.Errorf("%w at %#x: jmp back: %w", ErrRelocate, site, err)
		}
		s.Code = append(s.Code, j...)
	}
	return s, nil
}

// SlotArea packs slots back to back in one stretch of the new text. Add them all,
// place the area with Place once its address is known, then take Bytes. The layout
// depends only on the order of Add calls, so the output is deterministic.
type SlotArea struct {
	reqs  []slotReq
	size  uint64
	base  uint64
	slots []*Slot
}

type slotReq struct {
	code []byte
	site uint64
	opt  SlotOptions
	off  uint64
}

// SlotAlign is the alignment of each slot: 16 keeps every slot in as few cache lines
// as its size allows, as the kernel's insn slots do.
const SlotAlign = 16

// Add reserves a slot for the instruction at the start of code (address site) and
// returns its index.
func (a *SlotArea) Add(code []byte, site uint64, opt SlotOptions) (int, error) {
	if a.slots != nil {
		return 0, fmt.Errorf("slot area: Add after Place")
	}
	n, err := SlotLen(code, site, opt)
	if err != nil {
		return 0, err
	}
	in, _ := x86dec.Decode(code, site) // SlotLen decoded it
	off := (a.size + SlotAlign - 1) &^ (SlotAlign - 1)
	a.reqs = append(a.reqs, slotReq{code: append([]byte(nil), code[:in.Len]...), site: site, opt: opt, off: off})
	a.size = off + uint64(n)
	return len(a.reqs) - 1, nil
}

// Size is the number of bytes the area needs.
func (a *SlotArea) Size() uint64 { return a.size }

// Place builds every slot for the area at address base (16-byte aligned).
func (a *SlotArea) Place(base uint64) error {
	if base%SlotAlign != 0 {
		return fmt.Errorf("slot area at %#x is not %d-byte aligned", base, SlotAlign)
	}
	slots := make([]*Slot, len(a.reqs))
	for i, r := range a.reqs {
		s, err := BuildSlot(r.code, r.site, base+r.off, r.opt)
		if err != nil {
			return err
		}
		slots[i] = s
	}
	a.base, a.slots = base, slots
	return nil
}

// Slot returns slot i (after Place).
func (a *SlotArea) Slot(i int) *Slot { return a.slots[i] }

// Offset returns where slot i starts, from the start of the area.
func (a *SlotArea) Offset(i int) uint64 { return a.reqs[i].off }

// Bytes returns the area's contents (after Place); the gaps between slots are int3.
func (a *SlotArea) Bytes() []byte {
	b := make([]byte, a.size)
	for i := range b {
		b[i] = 0xcc
	}
	for i, s := range a.slots {
		copy(b[a.reqs[i].off:], s.Code)
	}
	return b
}
