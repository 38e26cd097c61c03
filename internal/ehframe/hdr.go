package ehframe

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

const sectEhFrameHdr = ".eh_frame_hdr"

// HdrEntry is one row of an .eh_frame_hdr search table: the start of the code an FDE
// describes and the FDE's address.
type HdrEntry struct {
	Loc, FDE uint64
}

// Hdr is a decoded .eh_frame_hdr (the section PT_GNU_EH_FRAME names).
type Hdr struct {
	EhFrame uint64 // eh_frame_ptr: the .eh_frame the unwinder searches linearly without a table
	// Table is the binary-search table, sorted by Loc as the linker wrote it; nil
	// when the header has none or one libgcc would not binary-search (its table
	// encoding is not datarel|sdata4): the unwinder then searches EhFrame linearly.
	Table []HdrEntry
}

// the encodings libgcc binary-searches (unwind-dw2-fde-dip.c) and ld writes
const (
	hdrVersion    = 1
	hdrFramePtr   = pePcrel | peSdata4
	hdrCountEnc   = peUdata4
	hdrTableEnc   = peDatarel | peSdata4
	hdrFixedBytes = 12 // version, three encodings, eh_frame_ptr, fde_count
)

// ParseHdr decodes the .eh_frame_hdr b located at vaddr addr.
func ParseHdr(b []byte, addr uint64) (Hdr, error) {
	var h Hdr
	if len(b) < 4 {
		return h, &EntryError{Section: sectEhFrameHdr, Kind: "header", Addr: addr, Err: fmt.Errorf("%d bytes: %w", len(b), ErrTruncated)}
	}
	if b[0] != hdrVersion {
		return h, &EntryError{Section: sectEhFrameHdr, Kind: "header", Addr: addr, Err: fmt.Errorf("version %d: %w", b[0], ErrUnsupported)}
	}
	ptrEnc, countEnc, tableEnc := b[1], b[2], b[3]
	r := reader{b: b, pos: 4}
	bs := bases{sect: addr, data: addr}
	wrap := func(err error) error {
		return &EntryError{Section: sectEhFrameHdr, Kind: "header", Addr: addr, Err: err}
	}
	if ptrEnc&peIndirect != 0 || ptrEnc == peOmit {
		return h, wrap(fmt.Errorf("eh_frame_ptr encoding %#02x: %w", ptrEnc, ErrUnsupported))
	}
	p, err := r.pointer(ptrEnc, &bs, false, "eh_frame_ptr")
	if err != nil {
		return h, wrap(err)
	}
	h.EhFrame = p
	if countEnc == peOmit || tableEnc != hdrTableEnc {
		return h, nil
	}
	if countEnc&peIndirect != 0 {
		return h, wrap(fmt.Errorf("fde_count encoding %#02x: %w", countEnc, ErrUnsupported))
	}
	n, err := r.pointer(countEnc, &bs, false, "fde_count")
	if err != nil {
		return h, wrap(err)
	}
	if n > uint64(len(b)-r.pos)/8 {
		return h, wrap(fmt.Errorf("%d table entries in %d bytes: %w", n, len(b)-r.pos, ErrTruncated))
	}
	h.Table = make([]HdrEntry, n)
	for i := range h.Table {
		loc := int32(binary.LittleEndian.Uint32(b[r.pos:]))
		fde := int32(binary.LittleEndian.Uint32(b[r.pos+4:]))
		h.Table[i] = HdrEntry{Loc: addr + uint64(int64(loc)), FDE: addr + uint64(int64(fde))}
		r.pos += 8
	}
	return h, nil
}

// HdrSize is the size of an .eh_frame_hdr with a table of n entries.
func HdrSize(n int) uint64 { return hdrFixedBytes + 8*uint64(n) }

// EncodeHdr writes an .eh_frame_hdr for vaddr addr in the form ld writes and libgcc
// binary-searches (eh_frame_ptr pcrel|sdata4, fde_count udata4, table datarel|sdata4):
// ehFrame is eh_frame_ptr, and entries, sorted here by Loc (stable), are the table.
// Every address must be within ±2 GiB of addr. Two entries with the same Loc are an
// error: a binary search could find either.
func EncodeHdr(addr, ehFrame uint64, entries []HdrEntry) ([]byte, error) {
	es := append([]HdrEntry(nil), entries...)
	sort.SliceStable(es, func(i, j int) bool { return es[i].Loc < es[j].Loc })
	if uint64(len(es)) > math.MaxUint32 {
		return nil, fmt.Errorf("%d table entries: %w", len(es), ErrOutOfRange)
	}
	rel := func(v uint64, what string) (uint32, error) {
		d := int64(v - addr)
		if d < math.MinInt32 || d > math.MaxInt32 {
			return 0, fmt.Errorf("%s %#x is more than 2 GiB from the header at %#x: %w", what, v, addr, ErrOutOfRange)
		}
		return uint32(int32(d)), nil
	}
	out := make([]byte, HdrSize(len(es)))
	le := binary.LittleEndian
	out[0], out[1], out[2], out[3] = hdrVersion, hdrFramePtr, hdrCountEnc, hdrTableEnc
	p, err := rel(ehFrame-4, "eh_frame_ptr") // pcrel: from the field at addr+4
	if err != nil {
		return nil, err
	}
	le.PutUint32(out[4:], p)
	le.PutUint32(out[8:], uint32(len(es)))
	for i, e := range es {
		if i > 0 && es[i-1].Loc == e.Loc {
			return nil, fmt.Errorf("two FDEs for %#x (at %#x and %#x): %w", e.Loc, es[i-1].FDE, e.FDE, ErrBadEntry)
		}
		loc, err := rel(e.Loc, "code address")
		if err != nil {
			return nil, err
		}
		fde, err := rel(e.FDE, "FDE address")
		if err != nil {
			return nil, err
		}
		le.PutUint32(out[12+8*i:], loc)
		le.PutUint32(out[16+8*i:], fde)
	}
	return out, nil
}
