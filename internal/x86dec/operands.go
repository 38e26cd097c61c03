package x86dec

import (
	"errors"

	"golang.org/x/arch/x86/x86asm"
)

// errOperands reports an instruction whose operands x86asm does not read as one whole
// instruction.
var errOperands = errors.New("x86asm cannot read the instruction's operands")

// Operands returns x86asm's reading of one instruction, for the analyses that look at
// operands (jump tables, pointer loads, shift counts, an indirect call's operand).
// code must hold exactly the instruction, as Decode measured it. It fails where the
// reading cannot be trusted (docs/design.md: an error, another length, Op == 0).
func Operands(code []byte) (x86asm.Inst, error) {
	xi, err := x86asm.Decode(code, 64)
	if err != nil || xi.Len != len(code) || xi.Op == 0 {
		return x86asm.Inst{}, errOperands
	}
	return xi, nil
}

// IndirectCallSP says why the indirect call in code cannot run out of line as "push
// the original return address; jmp *operand": its operand reads %rsp, which the push
// moves. It returns "" when it can.
func IndirectCallSP(code []byte) string {
	xi, err := Operands(code)
	if err != nil {
		return "x86asm cannot read the indirect call's operand"
	}
	isSP := func(r x86asm.Reg) bool {
		return r == x86asm.RSP || r == x86asm.ESP || r == x86asm.SP || r == x86asm.SPB
	}
	switch a := xi.Args[0].(type) {
	case x86asm.Reg:
		if isSP(a) {
			return "indirect call through %rsp"
		}
	case x86asm.Mem:
		if isSP(a.Base) || isSP(a.Index) {
			return "indirect call through a stack slot: the pushed return address would shift its operand"
		}
	default:
		return "indirect call with an unexpected operand"
	}
	return ""
}
