package evfilter

import "encoding/binary"

// Entry is one entry of a compiled program, decoded for code that compiles the program
// further (the inline filter of a detour, trampolines.Prefilter). Match is its meaning.
type Entry struct {
	Fn     uint8  // FnNop, FnEq, FnCmp, ...
	Src    Source // where the field is
	Op     uint8  // OpEQ, OpLT, ... (FnCmp, FnCPU, FnFunc)
	Size   int    // the field's bytes
	Signed bool   // compare as signed numbers of Size bytes
	Not    bool   // FnEq, FnString: the result is inverted
	When   bool   // the branch is taken when the entry's result equals When
	Target int    // to this entry; Len(entries) is a match, Len+1 is not
	Off    int    // SrcData: the field's offset in the record's data
	Val    uint64 // the constant compared with
}

// The comparison operators of Entry.Op.
const (
	OpNE   = opNE
	OpEQ   = opEQ
	OpLE   = opLE
	OpLT   = opLT
	OpGE   = opGE
	OpGT   = opGT
	OpBand = opBand
)

// Entries decodes a program that passes Check.
func Entries(prog []byte) ([]Entry, error) {
	if err := Check(prog); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	n := int(le.Uint16(prog[2:]))
	out := make([]Entry, n)
	for i := range out {
		b := prog[HeaderSize+i*EntrySize:]
		out[i] = Entry{
			Fn: b[0], Src: Source(b[1]), Op: b[2], Size: int(b[3]), Signed: b[4]&1 != 0,
			Not: b[5] != 0, When: b[6] != 0, Target: int(le.Uint16(b[8:])), Off: int(le.Uint16(b[10:])),
			Val: le.Uint64(b[16:]),
		}
	}
	return out, nil
}
