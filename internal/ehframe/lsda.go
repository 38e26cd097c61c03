package ehframe

import (
	"fmt"
	"slices"
)

const sectExceptTable = ".gcc_except_table"

// CallSite is one entry of an LSDA call-site table: a code region whose calls
// may throw, and where the unwinder resumes when they do.
type CallSite struct {
	Start, End uint64 // region covered (absolute vaddrs)
	LandingPad uint64 // 0 = no landing pad
	Action     uint64 // 0 = cleanup only, else 1 + offset into the action table
}

// LSDA is a decoded language-specific data area (the GCC C++ format, also
// used by clang and by GCC's C cleanup attribute).
type LSDA struct {
	Addr             uint64 // vaddr of the LSDA
	LPStart          uint64 // base of landing pad offsets (function start when omitted)
	TTypeEncoding    byte   // 0xff when there is no type table
	TTypeBase        uint64 // vaddr just past the type table (0 when omitted)
	CallSiteEncoding byte
	ActionTable      uint64 // vaddr of the action table (end of the call-site table)
	CallSites        []CallSite
}

// ParseLSDA parses the LSDA (in .gcc_except_table) at vaddr lsda for the
// function starting at funcStart, and returns its call-site table.
func ParseLSDA(table []byte, tableAddr uint64, lsda uint64, funcStart uint64) ([]CallSite, error) {
	l, err := DecodeLSDA(table, tableAddr, lsda, funcStart)
	if err != nil {
		return nil, err
	}
	return l.CallSites, nil
}

// DecodeLSDA is ParseLSDA returning the whole header as well. It follows
// libgcc's parse_lsda_header and __gxx_personality_v0: call-site regions are
// relative to funcStart, landing pads to LPStart, and a landing pad offset of
// 0 means none.
func DecodeLSDA(table []byte, tableAddr uint64, lsda uint64, funcStart uint64) (*LSDA, error) {
	if lsda < tableAddr || lsda-tableAddr >= uint64(len(table)) {
		return nil, &EntryError{Section: sectExceptTable, Kind: "LSDA", Offset: NoOffset, Addr: lsda,
			Err: fmt.Errorf("not inside the table [%#x, %#x): %w",
				tableAddr, tableAddr+uint64(len(table)), ErrOutOfRange)}
	}
	off := int(lsda - tableAddr)
	l, err := decodeLSDA(table, tableAddr, off, funcStart)
	if err != nil {
		return nil, &EntryError{Section: sectExceptTable, Kind: "LSDA", Offset: uint64(off), Addr: lsda, Err: err}
	}
	return l, nil
}

func decodeLSDA(table []byte, tableAddr uint64, off int, funcStart uint64) (*LSDA, error) {
	r := reader{b: table, pos: off}
	bs := bases{sect: tableAddr, fn: funcStart, haveFn: true}
	l := &LSDA{Addr: tableAddr + uint64(off), LPStart: funcStart}

	enc, err := r.u8("LPStart encoding")
	if err != nil {
		return nil, err
	}
	if enc != peOmit {
		if a := enc & 0x70; a == peTextrel || a == peDatarel {
			return nil, fmt.Errorf("LPStart encoding %#02x needs a text/data base: %w", enc, ErrUnsupported)
		}
		if enc&peIndirect != 0 {
			return nil, fmt.Errorf("indirect LPStart encoding %#02x: %w", enc, ErrUnsupported)
		}
		if l.LPStart, err = r.pointer(enc, &bs, true, "LPStart"); err != nil {
			return nil, err
		}
	}

	if l.TTypeEncoding, err = r.u8("TType encoding"); err != nil {
		return nil, err
	}
	if !validEncoding(l.TTypeEncoding) {
		return nil, fmt.Errorf("TType encoding %#02x at offset %#x: %w", l.TTypeEncoding, r.pos-1, ErrBadEncoding)
	}
	if l.TTypeEncoding != peOmit {
		n, err := r.uleb("TType base offset")
		if err != nil {
			return nil, err
		}
		if n > uint64(len(table)-r.pos) {
			return nil, fmt.Errorf("TType base offset %#x at offset %#x runs past the table: %w", n, r.pos, ErrOutOfRange)
		}
		l.TTypeBase = tableAddr + uint64(r.pos) + n
	}

	if l.CallSiteEncoding, err = r.u8("call-site encoding"); err != nil {
		return nil, err
	}
	cse := l.CallSiteEncoding
	// libgcc reads call-site fields with no context: only absptr and
	// pcrel applications are meaningful (others would crash it).
	if !validEncoding(cse) || cse == peOmit || cse&peIndirect != 0 ||
		(cse&0x70 != peAbsptr && cse&0x70 != pePcrel) {
		return nil, fmt.Errorf("call-site encoding %#02x at offset %#x: %w", cse, r.pos-1, ErrBadEncoding)
	}
	n, err := r.uleb("call-site table length")
	if err != nil {
		return nil, err
	}
	if n > uint64(len(table)-r.pos) {
		return nil, fmt.Errorf("call-site table length %#x at offset %#x runs past the table: %w", n, r.pos, ErrTruncated)
	}
	end := r.pos + int(n)
	l.ActionTable = tableAddr + uint64(end)
	cr := reader{b: table[:end], pos: r.pos}
	// Each record takes at least 4 bytes; cap the guess so that many FDEs
	// sharing one bogus length cannot make us allocate much.
	l.CallSites = make([]CallSite, 0, min(n/4, 64))
	for cr.pos < end {
		recPos := cr.pos
		start, err := cr.pointer(cse, &bs, true, "call-site start")
		if err != nil {
			return nil, err
		}
		length, err := cr.pointer(cse, &bs, true, "call-site length")
		if err != nil {
			return nil, err
		}
		lp, err := cr.pointer(cse, &bs, true, "landing pad")
		if err != nil {
			return nil, err
		}
		action, err := cr.uleb("call-site action")
		if err != nil {
			return nil, err
		}
		cs := CallSite{Start: funcStart + start, Action: action}
		cs.End = cs.Start + length
		if cs.Start < funcStart || cs.End < cs.Start {
			return nil, fmt.Errorf("call site at offset %#x: region %#x+%#x wraps around: %w", recPos, start, length, ErrBadEntry)
		}
		if lp != 0 {
			cs.LandingPad = l.LPStart + lp
		}
		l.CallSites = append(l.CallSites, cs)
	}
	return l, nil
}

// LandingPads returns every landing pad of the FDEs' LSDAs, sorted and
// deduplicated. table is .gcc_except_table at vaddr tableAddr. Like Parse,
// it keeps going past bad LSDAs and returns the pads it found together with an
// *Errors naming each LSDA it could not decode (with its FDE); an FDE whose
// LSDA is indirect is reported as ErrUnsupported.
func LandingPads(fdes []FDE, table []byte, tableAddr uint64) (pads []uint64, err error) {
	var errs Errors
	for i := range fdes {
		f := &fdes[i]
		if f.LSDA == 0 {
			continue
		}
		if f.LSDAIndirect {
			errs.add(&EntryError{Section: sectEhFrame, Kind: "FDE", Offset: f.Offset,
				Err: fmt.Errorf("function %#x: indirect LSDA pointer at %#x: %w", f.Start, f.LSDA, ErrUnsupported)})
			continue
		}
		l, err := DecodeLSDA(table, tableAddr, f.LSDA, f.Start)
		if err != nil {
			errs.add(&EntryError{Section: sectEhFrame, Kind: "FDE", Offset: f.Offset,
				Err: fmt.Errorf("function %#x: %w", f.Start, err)})
			continue
		}
		for _, cs := range l.CallSites {
			if cs.LandingPad != 0 {
				pads = append(pads, cs.LandingPad)
			}
		}
	}
	slices.Sort(pads)
	return slices.Compact(pads), errs.err()
}
