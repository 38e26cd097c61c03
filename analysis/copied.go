package analysis

import (
	"encoding/binary"
	"fmt"
)

// copiedCode finds the code a program copies and runs elsewhere, where a probe would
// never fire (the copy runs) or, worse, a return probe's entry would fire in the
// original while the copy returns: V8's embedded builtins (node, Chrome, anything
// embedding V8): the blob from v8_Default_embedded_blob_code_, of the u32 size at
// v8_Default_embedded_blob_code_size_, which V8 remaps or copies at start-up and runs
// from there (its Builtins_* functions). It returns [lo, hi) and what the code is;
// hi 0 when the program has none.
func (b *Binary) copiedCode() (lo, hi uint64, what string) {
	var code, size uint64
	for _, s := range b.File.Symbols {
		switch s.Name {
		case "v8_Default_embedded_blob_code_":
			code = s.Value
		case "v8_Default_embedded_blob_code_size_":
			size = s.Value
		}
	}
	if code == 0 || size == 0 {
		return 0, 0, ""
	}
	raw, err := b.File.Bytes(size, 4)
	if err != nil || len(raw) < 4 {
		return 0, 0, ""
	}
	n := uint64(binary.LittleEndian.Uint32(raw))
	if n == 0 {
		return 0, 0, ""
	}
	return code, code + n, fmt.Sprintf("V8's embedded builtins (v8_Default_embedded_blob_code_, %d bytes at %#x), which the program copies and runs from the copy", n, code)
}
