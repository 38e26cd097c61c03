package analysis

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/kprewrite/kprewrite/internal/ehframe"
)

// landingPad is one exception landing pad and the FDE whose LSDA names it.
type landingPad struct {
	addr     uint64
	fdeStart uint64
	lsda     uint64
}

// lsdaErr is an FDE range whose call-site table could not be read: any DCR
// inside it might cover a landing pad.
type lsdaErr struct {
	start, end uint64
	lsda       uint64
	err        string
}

type fdeRange struct{ start, end uint64 }

// readLandingPads reads the call-site table of every FDE that has an LSDA
// (the C++ and GCC-cleanup exception tables in .gcc_except_table).
func (b *Binary) readLandingPads() {
	f := b.File
	fdes := b.Funcs.FDEs
	hasLSDA := false
	for i := range fdes {
		fd := &fdes[i]
		b.fdes = append(b.fdes, fdeRange{fd.Start, fd.End})
		if fd.LSDA == 0 {
			continue
		}
		hasLSDA = true
		lsda := fd.LSDA
		if fd.LSDAIndirect {
			p, err := f.Bytes(lsda, 8)
			if err != nil {
				b.lsdaErrs = append(b.lsdaErrs, lsdaErr{fd.Start, fd.End, lsda, fmt.Sprintf("indirect LSDA pointer at %#x: %v", lsda, err)})
				continue
			}
			lsda = binary.LittleEndian.Uint64(p)
		}
		sec := sectionAt(f, lsda)
		if sec == nil {
			b.lsdaErrs = append(b.lsdaErrs, lsdaErr{fd.Start, fd.End, lsda, fmt.Sprintf("LSDA %#x is in no section", lsda)})
			continue
		}
		l, err := ehframe.DecodeLSDA(f.SectionData(sec), sec.Addr, lsda, fd.Start)
		if err != nil {
			b.lsdaErrs = append(b.lsdaErrs, lsdaErr{fd.Start, fd.End, lsda, err.Error()})
			continue
		}
		for _, cs := range l.CallSites {
			if cs.LandingPad != 0 {
				b.pads = append(b.pads, landingPad{addr: cs.LandingPad, fdeStart: fd.Start, lsda: lsda})
			}
		}
	}
	sort.Slice(b.pads, func(i, j int) bool { return b.pads[i].addr < b.pads[j].addr })
	sort.Slice(b.fdes, func(i, j int) bool { return b.fdes[i].start < b.fdes[j].start })
	if b.Funcs.FDEErr != nil && (hasLSDA || f.Section(".gcc_except_table") != nil) {
		b.ehBroken = b.Funcs.FDEErr
	}
	b.Stats.LandingPads = len(b.pads)
	b.Stats.LSDAErrors = len(b.lsdaErrs)
	b.Stats.EHFrameIncomplete = b.ehBroken != nil
}

// padsIn returns the landing pads with lo <= addr < hi.
func (b *Binary) padsIn(lo, hi uint64) []landingPad {
	i := sort.Search(len(b.pads), func(i int) bool { return b.pads[i].addr >= lo })
	j := i
	for j < len(b.pads) && b.pads[j].addr < hi {
		j++
	}
	return b.pads[i:j]
}

// isPad reports whether addr is a landing pad.
func (b *Binary) isPad(addr uint64) bool { return len(b.padsIn(addr, addr+1)) > 0 }

// coveredByFDE reports whether a parsed FDE covers addr.
func (b *Binary) coveredByFDE(addr uint64) bool {
	i := sort.Search(len(b.fdes), func(i int) bool { return b.fdes[i].start > addr }) - 1
	for k := i; k >= 0 && k > i-8; k-- {
		if addr < b.fdes[k].end {
			return true
		}
	}
	return false
}
