package ehframe

import (
	"fmt"
	"sort"
)

// UnwindRow is how to find the caller's frame from the pc range [PC, next row's PC):
// the kernel's ORC entries, made from .eh_frame at rewrite time so that the runtime
// walks a user stack with one binary search and three reads per frame, without a call
// frame interpreter. The return address is at CFA-8 (x86-64's rule; a row whose FDE
// says otherwise is Undefined).
type UnwindRow struct {
	PC uint64
	// Undefined: no frame can be found from here (no FDE covers the range, the CFA is
	// an expression or another register than rsp and rbp, the return address is not
	// at CFA-8): the walk stops.
	Undefined bool
	// CFABP: the CFA is rbp + CFAOffset, else rsp + CFAOffset.
	CFABP     bool
	CFAOffset int64
	// BP is the caller's rbp: BPSame (unchanged), BPSaved (at CFA + BPOffset) or
	// BPLost (a rule the walk does not follow; a caller whose CFA is rbp-based stops).
	BP       uint8
	BPOffset int64
}

// The rules for the caller's rbp.
const (
	BPSame uint8 = iota
	BPSaved
	BPLost
)

// UnwindRows runs the call frame instructions of every FDE and returns the rows in pc
// order: one per location where the rule changes, and an Undefined row where an FDE
// ends and no other begins. ehFrame, ehAddr, textAddr and dataAddr are what Parse was
// given. An FDE whose instructions cannot be run gives one Undefined row for its range
// and is reported in the error (*Errors), which does not stop the others.
func UnwindRows(ehFrame []byte, ehAddr, textAddr, dataAddr uint64, fdes []FDE) ([]UnwindRow, error) {
	p := parser{eh: ehFrame, bs: bases{sect: ehAddr, text: textAddr, data: dataAddr}, cies: map[int]*cie{}, lastAt: -1}
	sorted := append([]FDE(nil), fdes...)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].Start < sorted[b].Start })
	var rows []UnwindRow
	var errs Errors
	add := func(r UnwindRow) {
		if n := len(rows); n > 0 && rows[n-1].PC == r.PC {
			rows = rows[:n-1] // a later rule at the same location replaces it
		}
		if n := len(rows); n > 0 && sameRule(rows[n-1], r) {
			return
		}
		rows = append(rows, r)
	}
	var end uint64 // where the last FDE ended
	for _, f := range sorted {
		if f.End <= f.Start || f.Start < end {
			continue // empty, or overlapping the previous FDE: the first one wins
		}
		if len(rows) > 0 && f.Start != end {
			add(UnwindRow{PC: end, Undefined: true})
		}
		frows, err := p.fdeRows(f)
		if err != nil {
			errs.add(&EntryError{Section: sectEhFrame, Kind: "FDE", Offset: f.Offset, Addr: ehAddr + f.Offset, Err: err})
			frows = []UnwindRow{{PC: f.Start, Undefined: true}}
		}
		for _, r := range frows {
			add(r)
		}
		end = f.End
	}
	if len(rows) > 0 {
		add(UnwindRow{PC: end, Undefined: true})
	}
	if len(errs.List) > 0 || errs.Dropped > 0 {
		return rows, &errs
	}
	return rows, nil
}

func sameRule(a, b UnwindRow) bool {
	a.PC, b.PC = 0, 0
	return a == b
}

// fdeRows runs f's CIE's and f's instructions and returns a row per location.
func (p *parser) fdeRows(f FDE) ([]UnwindRow, error) {
	c := p.cie(int(f.CIE))
	if c.err != nil {
		return nil, fmt.Errorf("CIE at offset %#x: %w", f.CIE, c.err)
	}
	insns, err := p.fdeInsns(f)
	if err != nil {
		return nil, err
	}
	if !validRange(c.insns, len(p.eh)) || !validRange(insns, len(p.eh)) {
		return nil, fmt.Errorf("no call frame instructions: %w", ErrBadEntry)
	}
	m := cfaMachine{c: c, p: p, loc: f.Start}
	if _, err := m.run(c.insns, ^uint64(0)); err != nil {
		return nil, err
	}
	m.init = m.regs
	var rows []UnwindRow
	m.emit = func(loc uint64) {
		if loc >= f.End {
			return
		}
		r := m.row(loc)
		if n := len(rows); n > 0 && rows[n-1].PC >= loc {
			rows[n-1] = r // no advance since: the later rule holds
			return
		}
		rows = append(rows, r)
	}
	if _, err := m.run(insns, ^uint64(0)); err != nil {
		return nil, err
	}
	m.emit(m.loc)
	return rows, nil
}

// row is the state in force as an UnwindRow at loc.
func (m *cfaMachine) row(loc uint64) UnwindRow {
	r := UnwindRow{PC: loc}
	switch {
	case !m.set || m.expr || (m.cfa.Reg != dwarfRSP && m.cfa.Reg != dwarfRBP),
		m.regs.ra.Kind != ruleOffset || m.regs.ra.Offset != -8:
		r.Undefined = true
		return r
	}
	r.CFABP, r.CFAOffset = m.cfa.Reg == dwarfRBP, m.cfa.Offset
	switch m.regs.bp.Kind {
	case ruleSame:
		r.BP = BPSame
	case ruleOffset:
		r.BP, r.BPOffset = BPSaved, m.regs.bp.Offset
	default:
		r.BP = BPLost
	}
	return r
}
