package ehframe

import (
	"encoding/binary"
	"fmt"
)

const sectEhFrame = ".eh_frame"

// FDE is one Frame Description Entry: the code range it describes and its
// language-specific data area (the C++ call-site table), if any.
type FDE struct {
	Start, End uint64 // pc_begin, pc_begin+pc_range (virtual addresses)
	LSDA       uint64 // 0 when none
	Offset     uint64 // offset of the FDE inside .eh_frame (for error messages)

	CIE          uint64 // offset of the FDE's CIE inside .eh_frame
	LSDAIndirect bool   // LSDA is the address of a pointer to the LSDA (DW_EH_PE_indirect)
	SignalFrame  bool   // the CIE has the 'S' augmentation (signal trampoline)
	// Debug marks an FDE of .debug_frame (ParseDebugFrame): CIE ids are all ones and
	// FDEs name their CIE by its offset in the section.
	Debug bool
}

// cie holds what FDE decoding needs from a Common Information Entry.
type cie struct {
	fdeEnc  byte // 'R' (default absptr)
	lsdaEnc byte // 'L' (default omit)
	augData bool // 'z': FDEs carry an augmentation data length
	signal  bool // 'S'
	err     error

	codeAlign uint64 // code alignment factor
	dataAlign int64  // data alignment factor
	insns     [2]int // the initial instructions, [start, end) in .eh_frame
}

type parser struct {
	debug  bool   // .debug_frame's format
	sect   string // the section's name, for errors
	eh     []byte
	bs     bases
	cies   map[int]*cie
	last   *cie
	errs   Errors
	lastAt int
}

// Parse reads every CIE/FDE of an .eh_frame section located at vaddr ehAddr.
// textAddr and dataAddr are the bases of DW_EH_PE_textrel and DW_EH_PE_datarel
// pointers (pass 0 if unknown). It returns every FDE it could decode, in
// section order, and an *Errors describing the entries it skipped (nil if
// none); see the package documentation for the policy.
func Parse(ehFrame []byte, ehAddr uint64, textAddr, dataAddr uint64) ([]FDE, error) {
	p := parser{
		sect:   sectEhFrame,
		eh:     ehFrame,
		bs:     bases{sect: ehAddr, text: textAddr, data: dataAddr},
		cies:   make(map[int]*cie, 4),
		lastAt: -1,
	}
	return p.all()
}

// ParseDebugFrame reads every CIE/FDE of a .debug_frame section (the DWARF format:
// all-ones CIE ids, CIE pointers that are section offsets, absolute addresses), for
// programs built without .eh_frame. Its FDEs have Debug set; CFAAt takes them with the
// section's bytes (the address arguments are not used).
func ParseDebugFrame(debugFrame []byte) ([]FDE, error) {
	p := parser{debug: true, sect: ".debug_frame", eh: debugFrame, cies: make(map[int]*cie, 4), lastAt: -1}
	return p.all()
}

// isCIE says whether an entry's id word makes it a CIE.
func (p *parser) isCIE(id uint32) bool {
	if p.debug {
		return id == 0xffffffff
	}
	return id == 0
}

func (p *parser) all() ([]FDE, error) {
	ehFrame, ehAddr, sect := p.eh, p.bs.sect, p.sect
	// Real sections average more than 28 bytes per FDE (node: 36), so
	// this is one allocation in practice.
	fdes := make([]FDE, 0, len(ehFrame)/28+1)
	off := 0
	for off < len(ehFrame) {
		length, hdr, err := entryLength(ehFrame, off)
		if err != nil {
			p.errs.add(&EntryError{Section: sect, Kind: "entry", Offset: uint64(off), Addr: ehAddr + uint64(off), Err: err})
			break
		}
		if length == 0 { // zero terminator, or an empty padding entry
			off += hdr
			continue
		}
		end := off + hdr + length
		idPos := off + hdr
		if length < 4 || p.debug && hdr != 4 {
			p.errs.add(&EntryError{Section: sect, Kind: "entry", Offset: uint64(off), Addr: ehAddr + uint64(off),
				Err: fmt.Errorf("length %d (a %d-byte length field) without a 32-bit CIE id: %w", length, hdr, ErrBadEntry)})
			off = end
			continue
		}
		id := binary.LittleEndian.Uint32(ehFrame[idPos:])
		if p.isCIE(id) {
			if c := p.cie(off); c.err != nil {
				p.errs.add(&EntryError{Section: sect, Kind: "CIE", Offset: uint64(off), Addr: ehAddr + uint64(off), Err: c.err})
			}
		} else if f, _, err := p.fde(off, idPos, int(id), end); err != nil {
			p.errs.add(&EntryError{Section: sect, Kind: "FDE", Offset: uint64(off), Addr: ehAddr + uint64(off), Err: err})
		} else {
			fdes = append(fdes, f)
		}
		off = end
	}
	return fdes, p.errs.err()
}

// entryLength reads the initial length at off: the content length and the
// size of the length field itself (4, or 12 for the 64-bit escape).
func entryLength(b []byte, off int) (length, hdr int, err error) {
	if len(b)-off < 4 {
		return 0, 0, fmt.Errorf("length at offset %#x: %d bytes left: %w", off, len(b)-off, ErrTruncated)
	}
	l := uint64(binary.LittleEndian.Uint32(b[off:]))
	hdr = 4
	if l == 0xffffffff {
		if len(b)-off < 12 {
			return 0, 0, fmt.Errorf("64-bit length at offset %#x: %w", off, ErrTruncated)
		}
		l = binary.LittleEndian.Uint64(b[off+4:])
		hdr = 12
	}
	if left := uint64(len(b) - off - hdr); l > left {
		return 0, 0, fmt.Errorf("length %#x at offset %#x runs past the end of the section (%#x bytes left): %w",
			l, off, left, ErrTruncated)
	}
	return int(l), hdr, nil
}

// cie returns the decoded CIE at off, parsing it once.
func (p *parser) cie(off int) *cie {
	if p.lastAt == off {
		return p.last
	}
	c, ok := p.cies[off]
	if !ok {
		c = p.parseCIE(off)
		p.cies[off] = c
	}
	p.last, p.lastAt = c, off
	return c
}

func (p *parser) parseCIE(off int) *cie {
	c := &cie{fdeEnc: peAbsptr, lsdaEnc: peOmit}
	c.err = p.decodeCIE(c, off)
	return c
}

func (p *parser) decodeCIE(c *cie, off int) error {
	length, hdr, err := entryLength(p.eh, off)
	if err != nil {
		return err
	}
	if length < 4 {
		return fmt.Errorf("CIE length %d too short: %w", length, ErrBadEntry)
	}
	r := reader{b: p.eh[:off+hdr+length], pos: off + hdr}
	if id, _ := r.fixed(4, "CIE id"); !p.isCIE(uint32(id)) {
		return fmt.Errorf("entry has CIE id %#x, not a CIE's: %w", id, ErrBadEntry)
	}
	version, err := r.u8("CIE version")
	if err != nil {
		return err
	}
	if version != 1 && version != 3 && version != 4 {
		return fmt.Errorf("CIE version %d: %w", version, ErrUnsupported)
	}
	aug, err := r.cstring("augmentation string")
	if err != nil {
		return err
	}
	if len(aug) >= 2 && aug[0] == 'e' && aug[1] == 'h' { // pre-2.95 GCC: an EH data pointer follows
		if _, err := r.fixed(ptrSize, "eh pointer"); err != nil {
			return err
		}
		aug = aug[2:]
	}
	if version == 4 {
		as, err := r.u8("address size")
		if err != nil {
			return err
		}
		ss, err := r.u8("segment selector size")
		if err != nil {
			return err
		}
		if as != ptrSize || ss != 0 {
			return fmt.Errorf("address size %d, segment selector size %d: %w", as, ss, ErrUnsupported)
		}
	}
	if c.codeAlign, err = r.uleb("code alignment factor"); err != nil {
		return err
	}
	if c.dataAlign, err = r.sleb("data alignment factor"); err != nil {
		return err
	}
	if version == 1 {
		_, err = r.u8("return address register")
	} else {
		_, err = r.uleb("return address register")
	}
	if err != nil {
		return err
	}
	c.insns = [2]int{r.pos, len(r.b)}
	if len(aug) == 0 {
		return nil
	}
	if aug[0] != 'z' {
		return fmt.Errorf("augmentation %q without 'z': %w", aug, ErrUnsupported)
	}
	c.augData = true
	n, err := r.uleb("augmentation data length")
	if err != nil {
		return err
	}
	if n > uint64(len(r.b)-r.pos) {
		return fmt.Errorf("augmentation data length %d at offset %#x runs past the CIE: %w", n, r.pos, ErrTruncated)
	}
	c.insns[0] = r.pos + int(n)
	ar := reader{b: r.b[:r.pos+int(n)], pos: r.pos}
	for _, a := range aug[1:] {
		switch a {
		case 'L':
			if c.lsdaEnc, err = ar.u8("LSDA encoding"); err != nil {
				return err
			}
			if !validEncoding(c.lsdaEnc) {
				return fmt.Errorf("LSDA encoding %#02x: %w", c.lsdaEnc, ErrBadEncoding)
			}
		case 'R':
			if c.fdeEnc, err = ar.u8("FDE pointer encoding"); err != nil {
				return err
			}
			if !validEncoding(c.fdeEnc) || c.fdeEnc == peOmit {
				return fmt.Errorf("FDE pointer encoding %#02x: %w", c.fdeEnc, ErrBadEncoding)
			}
		case 'P':
			enc, err := ar.u8("personality encoding")
			if err != nil {
				return err
			}
			// The personality routine is not needed; read it only to
			// skip it. funcrel makes no sense here: read it raw.
			bs := p.bs
			bs.haveFn = true
			if _, err := ar.pointer(enc, &bs, false, "personality pointer"); err != nil {
				return err
			}
		case 'S':
			c.signal = true
		case 'B', 'G': // AArch64 BTI / MTE markers: no data
		default:
			// Unknown letter: 'z' lets us skip the rest of the data,
			// as libgcc does.
			return nil
		}
	}
	return nil
}

// fde decodes the FDE at off and returns it with its call frame instructions,
// [start, end) in the section.
func (p *parser) fde(off, idPos, id, end int) (FDE, [2]int, error) {
	cieOff := idPos - id
	if p.debug { // a section offset, before or after the FDE
		cieOff = id
		if cieOff >= len(p.eh) || cieOff >= off && cieOff < end {
			return FDE{}, [2]int{}, fmt.Errorf("CIE pointer %#x is outside the section or inside the FDE: %w", id, ErrBadEntry)
		}
	} else if id > idPos {
		return FDE{}, [2]int{}, fmt.Errorf("CIE pointer %#x points before the section start: %w", id, ErrBadEntry)
	} else if cieOff >= off {
		return FDE{}, [2]int{}, fmt.Errorf("CIE pointer %#x points into the FDE itself: %w", id, ErrBadEntry)
	}
	c := p.cie(cieOff)
	if c.err != nil {
		return FDE{}, [2]int{}, fmt.Errorf("CIE at offset %#x: %w", cieOff, c.err)
	}
	r := reader{b: p.eh[:end], pos: idPos + 4}
	if c.fdeEnc&peIndirect != 0 {
		return FDE{}, [2]int{}, fmt.Errorf("indirect pc_begin encoding %#02x: %w", c.fdeEnc, ErrUnsupported)
	}
	start, err := r.pointer(c.fdeEnc, &p.bs, false, "pc_begin")
	if err != nil {
		return FDE{}, [2]int{}, err
	}
	rng, err := r.value(c.fdeEnc, "pc_range")
	if err != nil {
		return FDE{}, [2]int{}, err
	}
	f := FDE{Start: start, End: start + rng, Offset: uint64(off), CIE: uint64(cieOff), SignalFrame: c.signal, Debug: p.debug}
	if f.End < f.Start {
		return FDE{}, [2]int{}, fmt.Errorf("pc range %#x+%#x wraps around: %w", start, rng, ErrBadEntry)
	}
	insns := [2]int{r.pos, end}
	if !c.augData {
		return f, insns, nil
	}
	n, err := r.uleb("augmentation data length")
	if err != nil {
		return FDE{}, [2]int{}, err
	}
	if n > uint64(len(r.b)-r.pos) {
		return FDE{}, [2]int{}, fmt.Errorf("augmentation data length %d at offset %#x runs past the FDE: %w", n, r.pos, ErrTruncated)
	}
	insns[0] = r.pos + int(n)
	if c.lsdaEnc == peOmit {
		return f, insns, nil
	}
	ar := reader{b: r.b[:r.pos+int(n)], pos: r.pos}
	bs := p.bs
	bs.fn, bs.haveFn = start, true
	lsda, err := ar.pointer(c.lsdaEnc, &bs, true, "LSDA pointer")
	if err != nil {
		return FDE{}, [2]int{}, err
	}
	f.LSDA = lsda
	f.LSDAIndirect = lsda != 0 && c.lsdaEnc&peIndirect != 0
	return f, insns, nil
}
