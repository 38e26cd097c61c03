package trampolines

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// ErrRelocate is wrapped by every error about an instruction that cannot be relocated.
var ErrRelocate = errors.New("cannot relocate instruction")

// Form says how an instruction was re-encoded.
type Form uint8

const (
	FormCopy        Form = iota // copied as it is
	FormRIPRel                  // copied with a new RIP-relative disp32
	FormBranch32                // jmp/jcc/call rel32 to the original target (rel8 widened)
	FormSandwich                // loop/jrcxz rel8 2; jmp rel8 5; jmp rel32 target
	FormCallPushJmp             // push original return address; jmp rel32 target
)

var formNames = [...]string{"copy", "rip-relative", "branch32", "sandwich", "push-jmp"}

func (f Form) String() string {
	if int(f) < len(formNames) {
		return formNames[f]
	}
	return fmt.Sprintf("form(%d)", f)
}

// Options tune Relocate.
type Options struct {
	// CallPushJmp relocates a call as "push the original return address; jmp target"
	// instead of a call rel32 (which would push an address inside the copy); an
	// indirect call becomes the push and the same operand's jmp *. Operands that read
	// %rsp are refused (the push would move them).
	CallPushJmp bool
	// PIC: the code moves at load time (a PIE), so a pushed return address is
	// computed RIP-relatively (lea/xchg), never pushed as an immediate.
	PIC bool
}

// Relocated is one instruction re-encoded for a new address.
type Relocated struct {
	Code []byte
	Form Form
	Inst x86dec.Inst // the original instruction, decoded at its original address
	// Single reports that Code is one instruction, so a single-step of it ends at
	// the end of Code unless it branches (not so for sandwiches and push-jmp).
	Single bool
}

// Relocate re-encodes the instruction at the start of code, which sits at address pc,
// to run at address at. code may hold more bytes than the instruction.
func Relocate(code []byte, pc, at uint64, opt Options) (Relocated, error) {
	in, err := x86dec.Decode(code, pc)
	if err != nil {
		return Relocated{}, fmt.Errorf("%w at %#x: %w", ErrRelocate, pc, err)
	}
	return relocate(code[:in.Len], in, pc, at, opt)
}

// RelocatedLen is the length of the code Relocate makes for the instruction at the
// start of code (address pc). It does not depend on the new address.
func RelocatedLen(code []byte, pc uint64, opt Options) (int, error) {
	in, err := x86dec.Decode(code, pc)
	if err != nil {
		return 0, fmt.Errorf("%w at %#x: %w", ErrRelocate, pc, err)
	}
	n, _, err := plan(code[:in.Len], in, pc, opt)
	return n, err
}

// plan returns the output length and form of an instruction.
func plan(raw []byte, in x86dec.Inst, pc uint64, opt Options) (int, Form, error) {
	if in.NoOutOfLine != "" {
		return 0, 0, fmt.Errorf("%w at %#x: %s", ErrRelocate, pc, in.NoOutOfLine)
	}
	if in.Kind.IsDirectBranch() && in.RelSize != 1 && in.RelSize != 4 {
		return 0, 0, fmt.Errorf("%w at %#x: %d-byte branch displacement", ErrRelocate, pc, in.RelSize)
	}
	switch in.Kind {
	case x86dec.KindJmp, x86dec.KindCall:
		if in.Kind == x86dec.KindCall && opt.CallPushJmp {
			return pushLen(pc+uint64(in.Len), opt.PIC) + 5, FormCallPushJmp, nil
		}
		return 5, FormBranch32, nil
	case x86dec.KindCallIndirect:
		if opt.CallPushJmp {
			if why := indirectCallProblem(raw); why != "" {
				return 0, 0, fmt.Errorf("%w at %#x: %s", ErrRelocate, pc, why)
			}
			if in.ModRMOff < 0 || (in.RIPRel && (in.DispOff < 0 || in.DispOff+4 > len(raw))) {
				return 0, 0, fmt.Errorf("%w at %#x: indirect call without a readable operand", ErrRelocate, pc)
			}
			return pushLen(pc+uint64(in.Len), opt.PIC) + len(raw), FormCallPushJmp, nil
		}
	case x86dec.KindJcc:
		return 6, FormBranch32, nil
	case x86dec.KindLoop:
		return in.OpcodeOff + 2 + 2 + 5, FormSandwich, nil
	case x86dec.KindXbegin:
		return 0, 0, fmt.Errorf("%w at %#x: xbegin", ErrRelocate, pc)
	}
	if in.RIPRel {
		if in.DispOff < 0 || in.DispOff+4 > len(raw) {
			return 0, 0, fmt.Errorf("%w at %#x: RIP-relative displacement at offset %d of a %d-byte instruction", ErrRelocate, pc, in.DispOff, len(raw))
		}
		return len(raw), FormRIPRel, nil
	}
	return len(raw), FormCopy, nil
}

// indirectCallProblem says why an indirect call cannot become "push the return
// address; jmp *operand": an operand that reads %rsp would see it moved by the push.
func indirectCallProblem(raw []byte) string { return x86dec.IndirectCallSP(raw) }

// pushLen is the length of the code that pushes the address ret without changing any
// register or flag: push imm32 when the code does not move and ret sign-extends from
// 32 bits, else a lea/xchg sequence through rax (see pushAddr).
func pushLen(ret uint64, pic bool) int {
	if ret < 1<<31 && !pic {
		return 5
	}
	return 12
}

func relocate(raw []byte, in x86dec.Inst, pc, at uint64, opt Options) (Relocated, error) {
	n, form, err := plan(raw, in, pc, opt)
	if err != nil {
		return Relocated{}, err
	}
	r := Relocated{Form: form, Inst: in, Single: true, Code: make([]byte, 0, n)}
	switch form {
	case FormCopy:
		r.Code = append(r.Code, raw...)
	case FormRIPRel:
		r.Code = append(r.Code, raw...)
		d, err := rel32(at+uint64(len(raw)), in.RIPTarget)
		if err != nil {
			return Relocated{}, fmt.Errorf("%w at %#x: RIP-relative operand %#x: %w", ErrRelocate, pc, in.RIPTarget, err)
		}
		binary.LittleEndian.PutUint32(r.Code[in.DispOff:], uint32(d))
	case FormBranch32:
		var op []byte
		switch in.Kind {
		case x86dec.KindJmp:
			op = []byte{opJmp32}
		case x86dec.KindCall:
			op = []byte{opCall32}
		case x86dec.KindJcc:
			op = []byte{0x0f, 0x80 | raw[in.OpcodeOff]&0x0f}
		}
		r.Code = append(r.Code, op...)
		d, err := rel32(at+uint64(n), in.Target)
		if err != nil {
			return Relocated{}, fmt.Errorf("%w at %#x: branch target %#x: %w", ErrRelocate, pc, in.Target, err)
		}
		r.Code = binary.LittleEndian.AppendUint32(r.Code, uint32(d))
	case FormSandwich:
		// [prefixes] op 02 ; eb 05 ; e9 rel32 -- taken: to the jmp rel32; not taken:
		// over it, to the end of the sandwich.
		r.Single = false
		r.Code = append(r.Code, raw[:in.OpcodeOff+1]...)
		r.Code = append(r.Code, 2, opJmp8, 5, opJmp32)
		d, err := rel32(at+uint64(n), in.Target)
		if err != nil {
			return Relocated{}, fmt.Errorf("%w at %#x: branch target %#x: %w", ErrRelocate, pc, in.Target, err)
		}
		r.Code = binary.LittleEndian.AppendUint32(r.Code, uint32(d))
	case FormCallPushJmp:
		r.Single = false
		ret := pc + uint64(in.Len)
		push, err := pushAddr(at, ret, opt.PIC)
		if err != nil {
			return Relocated{}, fmt.Errorf("%w at %#x: return address: %w", ErrRelocate, pc, err)
		}
		r.Code = append(r.Code, push...)
		if in.Kind == x86dec.KindCallIndirect {
			// the same instruction with ModRM.reg 2 (call) turned into 4 (jmp): the
			// operand, prefixes (notrack included) and REX stay as they are
			j := append([]byte(nil), raw...)
			j[in.ModRMOff] = j[in.ModRMOff]&^0x38 | 4<<3
			if in.RIPRel {
				d, err := rel32(at+uint64(len(push)+len(raw)), in.RIPTarget)
				if err != nil {
					return Relocated{}, fmt.Errorf("%w at %#x: RIP-relative operand %#x: %w", ErrRelocate, pc, in.RIPTarget, err)
				}
				binary.LittleEndian.PutUint32(j[in.DispOff:], uint32(d))
			}
			r.Code = append(r.Code, j...)
			break
		}
		j, err := JmpRel32(at+uint64(len(push)), in.Target)
		if err != nil {
			return Relocated{}, fmt.Errorf("%w at %#x: call target: %w", ErrRelocate, pc, err)
		}
		r.Code = append(r.Code, j...)
	}
	if len(r.Code) != n {
		return Relocated{}, fmt.Errorf("%w at %#x: internal error: %d bytes made, %d planned", ErrRelocate, pc, len(r.Code), n)
	}
	return r, nil
}

// pushAddr returns code placed at at that pushes the address v, leaving every
// register (but rsp) and the flags as they were:
//
//	push $v                      (v < 2^31, and the code does not move: !pic)
//
// or
//
//	push %rax                    50
//	lea v(%rip), %rax            48 8d 05 rel32
//	xchg %rax, (%rsp)            48 87 04 24
//	                             (rax restored, v on the stack)
func pushAddr(at, v uint64, pic bool) ([]byte, error) {
	if v < 1<<31 && !pic {
		return binary.LittleEndian.AppendUint32([]byte{0x68}, uint32(v)), nil
	}
	code := []byte{0x50, 0x48, 0x8d, 0x05}
	d, err := rel32(at+8, v)
	if err != nil {
		return nil, err
	}
	code = binary.LittleEndian.AppendUint32(code, uint32(d))
	return append(code, 0x48, 0x87, 0x04, 0x24), nil
}
