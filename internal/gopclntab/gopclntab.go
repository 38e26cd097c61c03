// Package gopclntab reads the function table of a Go program from its .gopclntab
// section: every function's name, entry and end, which a stripped Go binary
// (go build -ldflags='-s -w') keeps for its own runtime (tracebacks, stack growth,
// the garbage collector) after its ELF symbol table and DWARF are gone.
//
// The format is the one of Go 1.18 and later (runtime/symtab.go's pcHeader and
// _func, cmd/link/internal/ld/pcln.go): a header (magic, instruction size, pointer
// size, the number of functions, offsets of the tables), the function name table
// (NUL-terminated names), and the functab: nfunc+1 pairs of uint32 (entry offset
// from the text base, offset of the function's _func record), the last pair's entry
// the end of the text. debug/gosym reads the same table, but it swallows malformed
// input (a panic recovered, an empty table, no reason given) and allocates what a
// corrupt count asks for; this reader checks every offset against the data and
// says where and why a table is bad.
package gopclntab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrFormat is wrapped by every error about a malformed or unsupported table.
var ErrFormat = errors.New("bad Go function table")

// The magic numbers of internal/abi: 1.18-1.19 store the text base in the header,
// 1.20 and later do not (the runtime's moduledata holds it).
const (
	magic118 = 0xfffffff0
	magic120 = 0xfffffff1
	magic116 = 0xfffffffa
	magic12  = 0xfffffffb
)

// Header is what a table's header says.
type Header struct {
	NFunc uint64
	// TextStart is the text base the function entries are offsets from, as stored
	// (Go 1.18 and 1.19); 0 from Go 1.20 on, where only the runtime's moduledata has it.
	TextStart   uint64
	FuncnameOff uint64 // offset of the function name table from the header
	PclnOff     uint64 // offset of the functab (and _func records) from the header
}

// Func is one function of the table: [Entry, End) in the program's addresses.
type Func struct {
	Name  string
	Entry uint64
	End   uint64
	ID    uint8 // abi.FuncID: the runtime's special functions (numbering changes between Go versions)
	Flag  uint8 // abi.FuncFlag: 1 top frame, 2 writes SP, 4 assembly
}

const (
	headerSize = 8 + 8*8 // magic, pads, minLC, ptrSize, then 8 words
	funcSize   = 44      // _func up to nfuncdata
)

func formatErr(off uint64, format string, args ...any) error {
	return fmt.Errorf("%w: at offset %#x: %s", ErrFormat, off, fmt.Sprintf(format, args...))
}

// ParseHeader checks the magic and reads the header of the table in data.
func ParseHeader(data []byte) (Header, error) {
	if len(data) < headerSize {
		return Header{}, formatErr(0, "%d bytes, shorter than a header (%d)", len(data), headerSize)
	}
	le := binary.LittleEndian
	switch m := le.Uint32(data); m {
	case magic118, magic120:
	case magic116, magic12:
		return Header{}, formatErr(0, "magic %#x: a Go 1.2-1.17 table, not supported (Go 1.18 or later)", m)
	default:
		return Header{}, formatErr(0, "magic %#x is not a Go function table's", m)
	}
	if data[4] != 0 || data[5] != 0 || data[6] != 1 || data[7] != 8 {
		return Header{}, formatErr(4, "pads %d %d, instruction size %d, pointer size %d: want 0 0 1 8 (x86-64)",
			data[4], data[5], data[6], data[7])
	}
	w := func(i int) uint64 { return le.Uint64(data[8+8*i:]) }
	h := Header{NFunc: w(0), FuncnameOff: w(3), PclnOff: w(7)}
	if le.Uint32(data) == magic118 {
		h.TextStart = w(2)
	}
	return h, nil
}

// Parse reads every function of the table in data. text is the text base the entries
// are offsets from (the runtime's moduledata.text; Header.TextStart where stored).
// The functions come in the table's order, which the runtime needs sorted by entry;
// each ends where the next begins, the last at the end of the text.
func Parse(data []byte, text uint64) ([]Func, error) {
	h, err := ParseHeader(data)
	if err != nil {
		return nil, err
	}
	n := uint64(len(data))
	if h.PclnOff > n || h.FuncnameOff > n {
		return nil, formatErr(8, "table offsets (names %#x, functab %#x) past the end (%#x)", h.FuncnameOff, h.PclnOff, n)
	}
	pcln, names := data[h.PclnOff:], data[h.FuncnameOff:]
	// nfunc+1 pairs must fit before anything is allocated for them.
	if h.NFunc == 0 || h.NFunc >= uint64(len(pcln))/8 {
		return nil, formatErr(8, "%d functions: the functab at %#x holds at most %d", h.NFunc, h.PclnOff, max(uint64(len(pcln))/8, 1)-1)
	}
	funcs := make([]Func, h.NFunc)
	le := binary.LittleEndian
	end := uint64(le.Uint32(pcln[8*h.NFunc:]))
	for i := range funcs {
		at := h.PclnOff + 8*uint64(i)
		entry, foff := uint64(le.Uint32(pcln[8*i:])), uint64(le.Uint32(pcln[8*i+4:]))
		next := end
		if i+1 < len(funcs) {
			next = uint64(le.Uint32(pcln[8*i+8:]))
		}
		if next < entry {
			return nil, formatErr(at, "function %d's entry %#x is past the next one's (%#x): the table is not sorted", i, entry, next)
		}
		fn, err := readFunc(pcln, names, foff, entry)
		if err != nil {
			return nil, fmt.Errorf("function %d (functab at %#x): %w", i, at, err)
		}
		fn.Entry, fn.End = text+entry, text+next
		funcs[i] = fn
	}
	return funcs, nil
}

// readFunc reads the _func record at off in pcln: its entry must be the functab's
// (a check that the record is where the table says), its name in names.
func readFunc(pcln, names []byte, off, entry uint64) (Func, error) {
	if off > uint64(len(pcln)) || uint64(len(pcln))-off < funcSize {
		return Func{}, formatErr(off, "_func record past the end of the functab area (%#x bytes)", len(pcln))
	}
	r := pcln[off:]
	le := binary.LittleEndian
	if e := uint64(le.Uint32(r)); e != entry {
		return Func{}, formatErr(off, "_func entry %#x, the functab says %#x", e, entry)
	}
	nameOff := int64(int32(le.Uint32(r[4:])))
	if nameOff < 0 || nameOff >= int64(len(names)) {
		return Func{}, formatErr(off+4, "name offset %d outside the name table (%d bytes)", nameOff, len(names))
	}
	name := names[nameOff:]
	nul := bytes.IndexByte(name, 0)
	if nul <= 0 {
		return Func{}, formatErr(off+4, "name at %d is empty or not NUL-terminated", nameOff)
	}
	return Func{Name: string(name[:nul]), ID: r[40], Flag: r[41]}, nil
}
