package eventdef

import (
	"encoding/binary"
	"fmt"
)

// StMemSafe is OpStMem's last byte (after the user flag's 0 and 1) for a read of
// memory that cannot fault: a plain load, neither the fault-catching copy nor the
// system call a read of a fetch argument's pointer needs. The rewrite uses it for the
// goroutine id of a Go function's records, read through the g that R14 holds at every
// instruction of Go code (internal/rewriter, goid.go).
const StMemSafe = 2

// AppendSafeLoad returns prog, a compiled program, with one more argument after its
// fixed fields: the u64 at OFF(%REG), read with StMemSafe, and that argument's offset
// in the records' data. The other arguments keep their offsets, and the strings' data,
// placed after the fixed area at run time, is found by its offsets as before.
func AppendSafeLoad(prog []byte, reg string, off int32) ([]byte, int, error) {
	h, err := readHeader(prog)
	if err != nil {
		return nil, 0, err
	}
	ro, ok := RegOffset(reg)
	if !ok || h.nargs >= MaxArgs {
		return nil, 0, fmt.Errorf("append a load of %%%s: %w", reg, ErrUnsupported)
	}
	le := binary.LittleEndian
	fixed, max := h.fixed, h.recmax
	code := le.AppendUint32([]byte{OpReg, byte(ro), OpStMem}, uint32(off))
	code = append(code, 8, 1, StMemSafe)
	out := append(append([]byte(nil), prog...), block(uint32(fixed), code)...)
	if max < fixed+8 { // no strings (the record is the fixed area), or no room left for them
		max = fixed + 8
	}
	le.PutUint16(out[4:], uint16(h.nargs+1))
	le.PutUint32(out[8:], uint32(fixed+8))
	le.PutUint32(out[12:], uint32(max))
	le.PutUint32(out[20:], uint32(len(out)))
	return out, fixed, nil
}
