package rewriter

import (
	"debug/elf"
	"fmt"
	"math"
	"sort"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/ehframe"
	"github.com/kprewrite/kprewrite/internal/objlink"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Return probes make the return trampoline every probed frame's return address, so an
// unwinder (a C++ exception, pthread_cancel, backtrace) must find unwind information
// for it. The runtime has it (kprt.SymEHFrame: a CIE naming the runtime's
// personality routine and the trampoline's FDE); the unwinder finds an executable's
// FDEs through PT_GNU_EH_FRAME, one .eh_frame_hdr whose sorted table covers the whole
// executable. The rewrite writes a new .eh_frame_hdr in the read-only segment: every
// entry of the original table (or, for a header without one, every FDE of .eh_frame)
// plus the runtime's, sorted; PT_GNU_EH_FRAME and the .eh_frame_hdr section header
// point at it. Both are added when the input has none, as static programs do: their
// own FDEs are still found through crtbeginT's __register_frame_info, the runtime's
// through the new header, which static glibc reports with _dl_find_object and
// dl_iterate_phdr.

// ehHdrPlan is the new .eh_frame_hdr before the runtime is placed.
type ehHdrPlan struct {
	orig    []ehframe.HdrEntry
	ehFrame uint64 // eh_frame_ptr; 0: the runtime's own (the input has no .eh_frame)
	size    uint64
}

// planEHHdr collects the input's table entries. An input without PT_GNU_EH_FRAME gets
// a header with the trampoline's FDE alone: its own FDEs were not found through one
// before (a static program registers them with crtbeginT's __register_frame_info, which
// the unwinder searches first), and listing them could make an unwind succeed that
// failed in the original.
func planEHHdr(f *elfio.File) *ehHdrPlan {
	p := &ehHdrPlan{}
	have := false
	for _, ph := range f.Progs {
		if ph.Type != elf.PT_GNU_EH_FRAME {
			continue
		}
		have = true
		b, err := f.Bytes(ph.Vaddr, ph.Filesz)
		if err != nil {
			break
		}
		h, err := ehframe.ParseHdr(b, ph.Vaddr)
		if err != nil {
			break
		}
		p.ehFrame = h.EhFrame
		p.orig = h.Table
		break
	}
	if have && p.orig == nil {
		// a header without a table (the unwinder searched .eh_frame linearly) or one
		// we cannot read: index every FDE we can decode
		fdes, _ := f.FDEs()
		if s := f.Section(".eh_frame"); s != nil && len(fdes) > 0 {
			if p.ehFrame == 0 {
				p.ehFrame = s.Addr
			}
			for _, fd := range fdes {
				if fd.End > fd.Start {
					p.orig = append(p.orig, ehframe.HdrEntry{Loc: fd.Start, FDE: s.Addr + fd.Offset})
				}
			}
		}
	}
	// one entry per start address (a binary search could find either of two): the
	// first, as a linear search finds it
	sort.SliceStable(p.orig, func(i, j int) bool { return p.orig[i].Loc < p.orig[j].Loc })
	kept := p.orig[:0]
	for i, e := range p.orig {
		if i == 0 || e.Loc != p.orig[i-1].Loc {
			kept = append(kept, e)
		}
	}
	p.orig = kept
	p.size = ehframe.HdrSize(len(p.orig) + kprt.EHFrameFDEs)
	return p
}

// build encodes the header at addr once the runtime is linked.
func (p *ehHdrPlan) build(addr uint64, out *objlink.Output, dataAddr uint64) ([]byte, error) {
	at, ok := out.Addr(kprt.SymEHFrame)
	if !ok {
		return nil, fmt.Errorf("runtime object has no %s", kprt.SymEHFrame)
	}
	tramp, ok := out.Addr(kprt.SymRetTramp)
	if !ok {
		return nil, fmt.Errorf("runtime object has no %s", kprt.SymRetTramp)
	}
	var size uint64
	for _, s := range out.Symbols {
		if s.Name == kprt.SymEHFrame {
			size = s.Size
		}
	}
	if at < dataAddr || at-dataAddr > uint64(len(out.Data)) || size > uint64(len(out.Data))-(at-dataAddr) {
		return nil, fmt.Errorf("runtime %s at %#x+%d is not in its data", kprt.SymEHFrame, at, size)
	}
	fdes, err := ehframe.Parse(out.Data[at-dataAddr:][:size], at, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", kprt.SymEHFrame, err)
	}
	if len(fdes) != kprt.EHFrameFDEs || fdes[0].Start != tramp-1 {
		return nil, fmt.Errorf("runtime %s: %d FDEs, want %d starting at the trampoline's pad byte %#x", kprt.SymEHFrame, len(fdes), kprt.EHFrameFDEs, tramp-1)
	}
	entries := append([]ehframe.HdrEntry(nil), p.orig...)
	for _, fd := range fdes {
		entries = append(entries, ehframe.HdrEntry{Loc: fd.Start, FDE: at + fd.Offset})
	}
	eh := p.ehFrame
	if eh == 0 {
		eh = at
	}
	b, err := ehframe.EncodeHdr(addr, eh, entries)
	if err != nil {
		return nil, fmt.Errorf("new .eh_frame_hdr: %w", err)
	}
	if uint64(len(b)) != p.size {
		return nil, fmt.Errorf("internal error: new .eh_frame_hdr is %d bytes, planned %d", len(b), p.size)
	}
	return b, nil
}

// unwindTable makes the runtime's unwind table from the input's .eh_frame, for
// stacktrace triggers: rows relative to the first one's pc. A rule the table cannot
// hold (an offset out of its range) ends walks there, as an undefined rule does.
func unwindTable(f *elfio.File) ([]kprt.RawUnwind, uint64, error) {
	rows, err := f.UnwindRows()
	if len(rows) == 0 {
		if err == nil {
			err = fmt.Errorf("%s: no .eh_frame to walk stacks with", f.Path)
		}
		return nil, 0, err
	}
	base := rows[0].PC
	out := make([]kprt.RawUnwind, 0, len(rows))
	for _, r := range rows {
		if r.PC-base > math.MaxUint32 {
			break // code beyond 4 GiB of the first FDE: walks stop there
		}
		u := kprt.RawUnwind{PC: uint32(r.PC - base)}
		if !r.Undefined && r.CFAOffset >= math.MinInt16 && r.CFAOffset <= math.MaxInt16 {
			u.CFAOff, u.CFAReg = int16(r.CFAOffset), kprt.UWSP
			if r.CFABP {
				u.CFAReg = kprt.UWBP
			}
			switch {
			case r.BP == ehframe.BPSaved && r.BPOffset%8 == 0 && r.BPOffset/8 >= math.MinInt8 && r.BPOffset/8 <= math.MaxInt8 && r.BPOffset != 0:
				u.BPOff = int8(r.BPOffset / 8)
			case r.BP != ehframe.BPSame:
				u.CFAReg |= kprt.UWBPLost
			}
		}
		if n := len(out); n > 0 && out[n-1].CFAOff == u.CFAOff && out[n-1].CFAReg == u.CFAReg && out[n-1].BPOff == u.BPOff {
			continue
		}
		out = append(out, u)
	}
	return out, base, nil
}
