package ehframe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// CFARule says how the canonical frame address (CFA) is computed at one pc: the
// value of DWARF register Reg plus Offset. Source-level probes need it because
// DW_OP_fbreg locations are relative to a frame base that compilers define as
// DW_OP_call_frame_cfa.
type CFARule struct {
	Reg    uint64
	Offset int64
}

// ErrCFAExpression says the CFA at the pc is a DWARF expression (DW_CFA_def_cfa_expression),
// which no fetch program can compute.
var ErrCFAExpression = errors.New("the CFA is a DWARF expression there")

// CFAAt runs the call frame instructions of f's CIE and of f up to pc and returns
// the CFA rule in force at pc. ehFrame, ehAddr, textAddr and dataAddr are what Parse
// was given for the section f came from.
func CFAAt(ehFrame []byte, ehAddr, textAddr, dataAddr uint64, f FDE, pc uint64) (CFARule, error) {
	if pc < f.Start || pc >= f.End {
		return CFARule{}, fmt.Errorf("pc %#x is outside the FDE [%#x, %#x)", pc, f.Start, f.End)
	}
	p := parser{debug: f.Debug, eh: ehFrame, bs: bases{sect: ehAddr, text: textAddr, data: dataAddr}, cies: map[int]*cie{}, lastAt: -1}
	c := p.cie(int(f.CIE))
	if c.err != nil {
		return CFARule{}, fmt.Errorf("CIE at offset %#x: %w", f.CIE, c.err)
	}
	insns, err := p.fdeInsns(f)
	if err != nil {
		return CFARule{}, fmt.Errorf("FDE at offset %#x: %w", f.Offset, err)
	}
	if !validRange(c.insns, len(ehFrame)) || !validRange(insns, len(ehFrame)) {
		return CFARule{}, fmt.Errorf("FDE at offset %#x: no call frame instructions: %w", f.Offset, ErrBadEntry)
	}
	m := cfaMachine{c: c, p: &p, loc: f.Start}
	// the CIE's initial instructions never advance the location
	if _, err := m.run(c.insns, ^uint64(0)); err != nil {
		return CFARule{}, err
	}
	if _, err := m.run(insns, pc); err != nil {
		return CFARule{}, err
	}
	if m.expr {
		return CFARule{}, ErrCFAExpression
	}
	if !m.set {
		return CFARule{}, fmt.Errorf("FDE at offset %#x defines no CFA: %w", f.Offset, ErrBadEntry)
	}
	return m.cfa, nil
}

// fdeInsns decodes f again for the range of its instructions.
func (p *parser) fdeInsns(f FDE) ([2]int, error) {
	off := int(f.Offset)
	if off < 0 || off >= len(p.eh) {
		return [2]int{}, fmt.Errorf("offset outside .eh_frame: %w", ErrBadEntry)
	}
	length, hdr, err := entryLength(p.eh, off)
	if err != nil {
		return [2]int{}, err
	}
	if length < 4 {
		return [2]int{}, fmt.Errorf("length %d too short: %w", length, ErrBadEntry)
	}
	idPos := off + hdr
	id := binary.LittleEndian.Uint32(p.eh[idPos:])
	if p.isCIE(id) {
		return [2]int{}, fmt.Errorf("a CIE, not an FDE: %w", ErrBadEntry)
	}
	_, insns, err := p.fde(off, idPos, int(id), off+hdr+length)
	return insns, err
}

func validRange(r [2]int, n int) bool { return r[0] > 0 && r[0] <= r[1] && r[1] <= n }

// cfaMachine is the part of the DWARF call frame state machine that tracks the CFA,
// and the rules of the two registers a user-stack walk needs besides it: rbp (the
// frame pointer, DWARF register 6) and the return address column (16).
type cfaMachine struct {
	c     *cie
	p     *parser
	loc   uint64
	cfa   CFARule
	set   bool // a CFA rule was defined
	expr  bool // the rule in force is an expression
	regs  regRules
	init  regRules // after the CIE's initial instructions (DW_CFA_restore)
	stack []cfaState
	// emit, when set, is called with the location before every advance: the state
	// then in force holds from that location up to the next one (UnwindRows).
	emit func(loc uint64)
}

type cfaState struct {
	cfa       CFARule
	set, expr bool
	regs      regRules
}

// regRule is how a register of the caller is recovered: unchanged (the DWARF
// same-value rule, and what a register without a rule keeps on x86-64 for rbp), saved
// at CFA+Offset, or in some other way a stack walk does not follow.
type regRule struct {
	Kind   uint8 // ruleSame, ruleOffset, ruleOther
	Offset int64
}

const (
	ruleSame uint8 = iota
	ruleOffset
	ruleOther
)

// regRules are the rules of rbp and of the return address.
type regRules struct{ bp, ra regRule }

// DWARF register numbers of x86-64 that the walk follows.
const (
	dwarfRBP = 6
	dwarfRSP = 7
	dwarfRA  = 16
)

// rule returns the rule slot of DWARF register reg, nil for the registers not tracked.
func (r *regRules) rule(reg uint64) *regRule {
	switch reg {
	case dwarfRBP:
		return &r.bp
	case dwarfRA:
		return &r.ra
	}
	return nil
}

func (m *cfaMachine) setRule(reg uint64, kind uint8, off int64) {
	if r := m.regs.rule(reg); r != nil {
		*r = regRule{Kind: kind, Offset: off}
	}
}

func (m *cfaMachine) restoreRule(reg uint64) {
	if r := m.regs.rule(reg); r != nil {
		*r = *m.init.rule(reg)
	}
}

// Call frame instruction opcodes (DWARF 5 section 6.4.2, and the GNU ones GCC emits).
const (
	cfaAdvanceLoc        = 0x40 // high two bits
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

// run executes the instructions in rng until one would advance the location past
// pc; it reports whether it stopped there.
func (m *cfaMachine) run(rng [2]int, pc uint64) (bool, error) {
	r := reader{b: m.p.eh[:rng[1]], pos: rng[0]}
	advance := func(delta uint64) bool {
		if m.emit != nil {
			m.emit(m.loc)
		}
		m.loc += delta * m.c.codeAlign
		return m.loc > pc
	}
	for r.pos < len(r.b) {
		op, err := r.u8("call frame instruction")
		if err != nil {
			return false, err
		}
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if advance(uint64(op & 0x3f)) {
				return true, nil
			}
			continue
		case cfaOffset:
			u, err := r.uleb("DW_CFA_offset")
			if err != nil {
				return false, err
			}
			m.setRule(uint64(op&0x3f), ruleOffset, int64(u)*m.c.dataAlign)
			continue
		case cfaRestore:
			m.restoreRule(uint64(op & 0x3f))
			continue
		}
		var delta uint64
		switch op {
		case cfaNop, cfaRememberState, cfaRestoreState:
			if op == cfaRememberState {
				m.stack = append(m.stack, cfaState{m.cfa, m.set, m.expr, m.regs})
			} else if op == cfaRestoreState {
				if len(m.stack) == 0 {
					return false, fmt.Errorf("DW_CFA_restore_state at offset %#x with no remembered state: %w", r.pos-1, ErrBadEntry)
				}
				s := m.stack[len(m.stack)-1]
				m.stack = m.stack[:len(m.stack)-1]
				m.cfa, m.set, m.expr, m.regs = s.cfa, s.set, s.expr, s.regs
			}
			continue
		case cfaSetLoc:
			bs := m.p.bs
			loc, err := r.pointer(m.c.fdeEnc, &bs, false, "DW_CFA_set_loc")
			if err != nil {
				return false, err
			}
			if m.emit != nil {
				m.emit(m.loc)
			}
			if loc > pc {
				return true, nil
			}
			m.loc = loc
			continue
		case cfaAdvanceLoc1:
			delta, err = r.fixed(1, "DW_CFA_advance_loc1")
		case cfaAdvanceLoc2:
			delta, err = r.fixed(2, "DW_CFA_advance_loc2")
		case cfaAdvanceLoc4:
			delta, err = r.fixed(4, "DW_CFA_advance_loc4")
		default:
			if err := m.other(op, &r); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			return false, err
		}
		if advance(delta) {
			return true, nil
		}
	}
	return false, nil
}

// other executes an instruction that does not move the location.
func (m *cfaMachine) other(op byte, r *reader) error {
	uleb := func() (uint64, error) { return r.uleb("call frame operand") }
	sleb := func() (int64, error) { return r.sleb("call frame operand") }
	skipBlock := func() error {
		n, err := uleb()
		if err != nil {
			return err
		}
		if n > uint64(len(r.b)-r.pos) {
			return r.errAt(r.pos, "call frame expression", ErrTruncated)
		}
		r.pos += int(n)
		return nil
	}
	var err error
	switch op {
	case cfaOffsetExtended, cfaRegister, cfaValOffset:
		var reg, u uint64
		if reg, err = uleb(); err == nil {
			u, err = uleb()
		}
		if op == cfaOffsetExtended {
			m.setRule(reg, ruleOffset, int64(u)*m.c.dataAlign)
		} else {
			m.setRule(reg, ruleOther, 0)
		}
	case cfaRestoreExtended, cfaUndefined, cfaSameValue:
		var reg uint64
		reg, err = uleb()
		switch op {
		case cfaRestoreExtended:
			m.restoreRule(reg)
		case cfaSameValue:
			m.setRule(reg, ruleSame, 0)
		default:
			m.setRule(reg, ruleOther, 0)
		}
	case cfaGNUArgsSize:
		_, err = uleb()
	case cfaOffsetExtendedSF, cfaValOffsetSF, cfaGNUNegOffsetExtSF:
		var reg uint64
		var s int64
		if reg, err = uleb(); err == nil {
			s, err = sleb()
		}
		switch op {
		case cfaOffsetExtendedSF:
			m.setRule(reg, ruleOffset, s*m.c.dataAlign)
		case cfaGNUNegOffsetExtSF:
			m.setRule(reg, ruleOffset, -s*m.c.dataAlign)
		default:
			m.setRule(reg, ruleOther, 0)
		}
	case cfaExpression, cfaValExpression:
		var reg uint64
		if reg, err = uleb(); err == nil {
			err = skipBlock()
		}
		m.setRule(reg, ruleOther, 0)
	case cfaDefCFA, cfaDefCFASF:
		var reg uint64
		if reg, err = uleb(); err != nil {
			return err
		}
		var off int64
		if op == cfaDefCFA {
			var u uint64
			u, err = uleb()
			off = int64(u)
		} else {
			off, err = sleb()
			off *= m.c.dataAlign
		}
		m.cfa, m.set, m.expr = CFARule{Reg: reg, Offset: off}, true, false
	case cfaDefCFARegister:
		var reg uint64
		if reg, err = uleb(); err == nil {
			m.cfa.Reg, m.expr = reg, false
		}
	case cfaDefCFAOffset:
		var u uint64
		if u, err = uleb(); err == nil {
			m.cfa.Offset, m.expr = int64(u), false
		}
	case cfaDefCFAOffsetSF:
		var s int64
		if s, err = sleb(); err == nil {
			m.cfa.Offset, m.expr = s*m.c.dataAlign, false
		}
	case cfaDefCFAExpression:
		m.set, m.expr = true, true
		err = skipBlock()
	default:
		return fmt.Errorf("call frame instruction %#02x at offset %#x: %w", op, r.pos-1, ErrUnsupported)
	}
	return err
}
