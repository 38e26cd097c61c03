package debuginfo

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/internal/ehframe"
)

// ExprKind says what an Expr computes.
type ExprKind uint8

// Expr kinds.
const (
	ExprReg   ExprKind = iota + 1 // the value of DWARF register Reg, plus Offset
	ExprMem                       // the 8-byte word at the address Mem computes, plus Offset
	ExprAddr                      // the link-time address Addr (the load bias is added at run time), plus Offset
	ExprConst                     // the constant Offset
)

// Expr is a value a fetch program can compute at the probe: from registers, memory
// words, link-time addresses and constants, with an offset added.
type Expr struct {
	Kind   ExprKind
	Reg    uint64
	Mem    *Expr
	Addr   uint64
	Offset int64
}

// Loc is where a variable is at one address: in a register (Reg), as a computed
// value (Value: DW_OP_stack_value and constants), or in memory at an address
// (Addr).
type Loc struct {
	Reg   *uint64
	Value *Expr
	Addr  *Expr
	// Piece is the size in bytes of the one piece the location describes
	// (DW_OP_piece), 0 if the expression describes the whole variable.
	Piece int
	// Pieces, when the value is split in several (DW_OP_piece: Go's register ABI
	// passes a string as two registers, a struct as one per field), are its parts
	// in order, each with its Piece size; a part with no Reg, Value or Addr is not
	// available there.
	Pieces []Loc
}

// Empty says whether l locates nothing (a piece the program no longer keeps).
func (l Loc) Empty() bool { return l.Reg == nil && l.Value == nil && l.Addr == nil && l.Pieces == nil }

// ErrUnavailable is wrapped by every error that says a variable cannot be read at
// an address (optimized out, not live there, or kept where no fetch reaches).
var ErrUnavailable = errors.New("not available")

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnavailable}, args...)...)
}

// DWARF expression opcodes.
const (
	opAddr            = 0x03
	opDeref           = 0x06
	opConst1u         = 0x08
	opConst1s         = 0x09
	opConst2u         = 0x0a
	opConst2s         = 0x0b
	opConst4u         = 0x0c
	opConst4s         = 0x0d
	opConst8u         = 0x0e
	opConst8s         = 0x0f
	opConstu          = 0x10
	opConsts          = 0x11
	opMinus           = 0x1c
	opPlus            = 0x22
	opPlusUconst      = 0x23
	opLit0            = 0x30
	opLit31           = 0x4f
	opReg0            = 0x50
	opReg31           = 0x6f
	opBreg0           = 0x70
	opBreg31          = 0x8f
	opRegx            = 0x90
	opFbreg           = 0x91
	opBregx           = 0x92
	opPiece           = 0x93
	opCallFrameCFA    = 0x9c
	opImplicitValue   = 0x9e
	opStackValue      = 0x9f
	opImplicitPointer = 0xa0
	opEntryValue      = 0xa3
	opGNUEntryValue   = 0xf3
)

// maxReg is the highest DWARF register a fetch program can read: the general
// registers (0-15); 16 is the return address column, 17 and up the SSE registers.
const maxReg = 15

// xmm0 and xmm15 are the DWARF numbers of the SSE registers, whose low 64 bits a
// fetch reads as %xmmN (a value in one; never an address base).
const (
	xmm0  = 17
	xmm15 = 32
)

// exprCtx is what evaluating an expression at one pc needs.
type exprCtx struct {
	in      *Info
	pc      uint64
	atEntry bool                  // pc is the entry of the function the expression is in
	frame   func() (*Expr, error) // the frame base (DW_AT_frame_base) at pc
}

// eval reduces a DWARF location expression to a Loc.
func (c *exprCtx) eval(b []byte) (Loc, error) {
	r := exprReader{b: b}
	var stack []*Expr
	push := func(e *Expr) { stack = append(stack, e) }
	pop := func() (*Expr, error) {
		if len(stack) == 0 {
			return nil, fmt.Errorf("DWARF expression pops an empty stack")
		}
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return e, nil
	}
	var pieces []Loc
	var pending *Loc // a register or a value, which only DW_OP_piece or the end may follow
	for !r.done() {
		op := r.u8()
		if pending != nil && op != opPiece {
			return Loc{}, unavailable("a register location followed by more operations")
		}
		switch {
		case op >= opReg0 && op <= opReg31 || op == opRegx:
			reg := uint64(op - opReg0)
			if op == opRegx {
				reg = r.uleb()
			}
			if reg > maxReg && (reg < xmm0 || reg > xmm15) {
				return Loc{}, unavailable("in DWARF register %d, which is neither a general nor an SSE register", reg)
			}
			pending = &Loc{Reg: &reg}
		case op >= opBreg0 && op <= opBreg31 || op == opBregx:
			reg := uint64(op - opBreg0)
			if op == opBregx {
				reg = r.uleb()
			}
			if reg > maxReg {
				return Loc{}, unavailable("relative to DWARF register %d, which is not a general register", reg)
			}
			push(&Expr{Kind: ExprReg, Reg: reg, Offset: r.sleb()})
		case op == opFbreg:
			off := r.sleb()
			fb, err := c.frame()
			if err != nil {
				return Loc{}, err
			}
			e := *fb
			e.Offset += off
			push(&e)
		case op == opCallFrameCFA:
			e, err := c.in.cfa(c.pc)
			if err != nil {
				return Loc{}, err
			}
			push(e)
		case op == opAddr:
			push(&Expr{Kind: ExprAddr, Addr: r.u64()})
		case op >= opLit0 && op <= opLit31:
			push(&Expr{Kind: ExprConst, Offset: int64(op - opLit0)})
		case op >= opConst1u && op <= opConsts:
			push(&Expr{Kind: ExprConst, Offset: r.constant(op)})
		case op == opDeref:
			a, err := pop()
			if err != nil {
				return Loc{}, err
			}
			if a.Kind == ExprConst {
				return Loc{}, unavailable("dereferences a constant")
			}
			push(&Expr{Kind: ExprMem, Mem: a})
		case op == opPlusUconst:
			a, err := pop()
			if err != nil {
				return Loc{}, err
			}
			n := *a
			n.Offset += int64(r.uleb())
			push(&n)
		case op == opPlus || op == opMinus:
			b, err := pop()
			if err != nil {
				return Loc{}, err
			}
			a, err := pop()
			if err != nil {
				return Loc{}, err
			}
			if b.Kind != ExprConst {
				return Loc{}, unavailable("computed from two values (DW_OP_plus/minus)")
			}
			n := *a
			if op == opPlus {
				n.Offset += b.Offset
			} else {
				n.Offset -= b.Offset
			}
			push(&n)
		case op == opStackValue:
			v, err := pop()
			if err != nil {
				return Loc{}, err
			}
			pending, stack = &Loc{Value: v}, nil
		case op == opImplicitValue:
			n := r.uleb()
			if n == 0 || n > 8 || uint64(len(r.b)-r.pos) < n {
				return Loc{}, unavailable("an implicit value of %d bytes", n)
			}
			var buf [8]byte
			copy(buf[:], r.b[r.pos:r.pos+int(n)])
			r.pos += int(n)
			pending = &Loc{Value: &Expr{Kind: ExprConst, Offset: int64(binary.LittleEndian.Uint64(buf[:]))}}
		case op == opEntryValue || op == opGNUEntryValue:
			n := r.uleb()
			if uint64(len(r.b)-r.pos) < n {
				return Loc{}, fmt.Errorf("DW_OP_entry_value runs past its expression")
			}
			sub := r.b[r.pos : r.pos+int(n)]
			r.pos += int(n)
			reg, ok := singleReg(sub)
			if !ok || reg > maxReg && (reg < xmm0 || reg > xmm15) {
				return Loc{}, unavailable("the value at the function's entry of a place other than a register (DW_OP_entry_value)")
			}
			if !c.atEntry {
				return Loc{}, unavailable("only the value it had at the function's entry is known (DW_OP_entry_value of %s)", RegName(reg))
			}
			push(&Expr{Kind: ExprReg, Reg: reg})
		case op == opPiece:
			l, err := pieceLoc(pending, stack)
			if err != nil {
				return Loc{}, err
			}
			l.Piece = int(r.uleb())
			pieces, pending, stack = append(pieces, l), nil, nil
		case op == opImplicitPointer || op == 0xf2:
			return Loc{}, unavailable("a pointer to a value that is not in memory (DW_OP_implicit_pointer)")
		default:
			return Loc{}, unavailable("a value computed by the program (DWARF operation %#x)", op)
		}
		if r.err != nil {
			return Loc{}, r.err
		}
	}
	if r.err != nil {
		return Loc{}, r.err
	}
	if len(pieces) > 0 {
		return whole(pieces, pending != nil || len(stack) > 0)
	}
	if pending != nil {
		return *pending, nil
	}
	if len(stack) == 0 {
		return Loc{}, unavailable("empty location (optimized out)")
	}
	a := stack[len(stack)-1]
	if a.Kind == ExprConst {
		return Loc{}, unavailable("at a constant address")
	}
	return Loc{Addr: a}, nil
}

// pieceLoc is the location of one piece: the register or value before its
// DW_OP_piece, else the address on the stack, else nothing (not available).
func pieceLoc(pending *Loc, stack []*Expr) (Loc, error) {
	switch {
	case pending != nil:
		return *pending, nil
	case len(stack) == 0:
		return Loc{}, nil
	}
	a := stack[len(stack)-1]
	if a.Kind == ExprConst {
		return Loc{}, unavailable("a piece at a constant address")
	}
	return Loc{Addr: a}, nil
}

// whole is the location of a value described in pieces: the one piece itself (as
// before pieces were read), or the pieces.
func whole(pieces []Loc, trailing bool) (Loc, error) {
	if trailing {
		return Loc{}, unavailable("operations after the last piece (DW_OP_piece)")
	}
	if len(pieces) == 1 {
		if pieces[0].Empty() {
			return Loc{}, unavailable("empty location (optimized out)")
		}
		return pieces[0], nil
	}
	return Loc{Pieces: pieces}, nil
}

// singleReg reads an expression that is one DW_OP_reg.
func singleReg(b []byte) (uint64, bool) {
	r := exprReader{b: b}
	op := r.u8()
	var reg uint64
	switch {
	case op >= opReg0 && op <= opReg31:
		reg = uint64(op - opReg0)
	case op == opRegx:
		reg = r.uleb()
	default:
		return 0, false
	}
	return reg, r.done() && r.err == nil
}

// cfa is the canonical frame address at pc, from .eh_frame, else .debug_frame.
func (in *Info) cfa(pc uint64) (*Expr, error) {
	for _, f := range in.fdes {
		if pc >= f.Start && pc < f.End {
			rule, err := ehframe.CFAAt(in.eh, in.ehAddr, in.ehText, in.ehData, f, pc)
			return cfaExpr(pc, rule, err)
		}
	}
	for _, f := range in.dfdes {
		if pc >= f.Start && pc < f.End {
			rule, err := ehframe.CFAAt(in.dframe, 0, 0, 0, f, pc)
			return cfaExpr(pc, rule, err)
		}
	}
	return nil, unavailable("neither .eh_frame nor .debug_frame describes the frame at %#x", pc)
}

// cfaExpr turns the CFA rule at pc (or CFAAt's error) into the frame address.
func cfaExpr(pc uint64, rule ehframe.CFARule, err error) (*Expr, error) {
	if err != nil {
		return nil, unavailable("the frame address at %#x: %v", pc, err)
	}
	if rule.Reg > maxReg {
		return nil, unavailable("the frame address at %#x is relative to DWARF register %d", pc, rule.Reg)
	}
	return &Expr{Kind: ExprReg, Reg: rule.Reg, Offset: rule.Offset}, nil
}

// exprReader reads a DWARF expression; a read past the end sets err.
type exprReader struct {
	b   []byte
	pos int
	err error
}

func (r *exprReader) done() bool { return r.pos >= len(r.b) || r.err != nil }

func (r *exprReader) short() {
	if r.err == nil {
		r.err = fmt.Errorf("DWARF expression truncated at byte %d", r.pos)
	}
	r.pos = len(r.b)
}

func (r *exprReader) u8() byte {
	if r.pos >= len(r.b) {
		r.short()
		return 0
	}
	v := r.b[r.pos]
	r.pos++
	return v
}

func (r *exprReader) fixed(n int) uint64 {
	if len(r.b)-r.pos < n {
		r.short()
		return 0
	}
	var buf [8]byte
	copy(buf[:], r.b[r.pos:r.pos+n])
	r.pos += n
	return binary.LittleEndian.Uint64(buf[:])
}

func (r *exprReader) u64() uint64 { return r.fixed(8) }

func (r *exprReader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v
		}
	}
}

func (r *exprReader) sleb() int64 {
	var v int64
	var shift uint
	for {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *exprReader) constant(op byte) int64 {
	switch op {
	case opConst1u:
		return int64(r.fixed(1))
	case opConst1s:
		return int64(int8(r.fixed(1)))
	case opConst2u:
		return int64(r.fixed(2))
	case opConst2s:
		return int64(int16(r.fixed(2)))
	case opConst4u:
		return int64(r.fixed(4))
	case opConst4s:
		return int64(int32(r.fixed(4)))
	case opConst8u, opConst8s:
		return int64(r.fixed(8))
	case opConstu:
		return int64(r.uleb())
	}
	return r.sleb()
}

// regNames are the kernel's pt_regs names of the x86-64 DWARF registers 0-15.
var regNames = [...]string{"ax", "dx", "cx", "bx", "si", "di", "bp", "sp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"}

// RegName is the kernel's name (as in %NAME fetchargs) of DWARF register reg.
func RegName(reg uint64) string {
	if reg < uint64(len(regNames)) {
		return regNames[reg]
	}
	if reg >= xmm0 && reg <= xmm15 {
		return fmt.Sprintf("xmm%d", reg-xmm0)
	}
	return fmt.Sprintf("dwarf-reg%d", reg)
}
