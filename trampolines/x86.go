package trampolines

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// The x86 encodings every piece of new code is made of. Nothing else in kprewrite
// writes a branch: patch, the rewriter and the signal guard call these.

// Int3 is the breakpoint opcode, and the filler of every gap in new code (a jump into
// a gap dies by SIGTRAP instead of running garbage).
const Int3 = 0xcc

// JmpRel32Len is the length of a jmp rel32, the 5 bytes a jump-optimized probe's site
// needs at least.
const JmpRel32Len = 5

const (
	opJmp32  = 0xe9
	opJmp8   = 0xeb
	opCall32 = 0xe8
)

// Rel32 returns target - next (next: the end of the instruction whose 4-byte field it
// is) as an int32, or an error when it does not fit.
func Rel32(next, target uint64) (int32, error) {
	d := int64(target - next)
	if d < math.MinInt32 || d > math.MaxInt32 {
		return 0, fmt.Errorf("%#x is out of rel32 reach of %#x", target, next)
	}
	return int32(d), nil
}

// rel32 is Rel32 as the 32-bit word the instruction stores.
func rel32(next, target uint64) (uint32, error) {
	d, err := Rel32(next, target)
	return uint32(d), err
}

// JmpRel32 returns the 5-byte jmp rel32 placed at from that jumps to to.
func JmpRel32(from, to uint64) ([]byte, error) {
	d, err := rel32(from+JmpRel32Len, to)
	if err != nil {
		return nil, fmt.Errorf("jmp at %#x: %w", from, err)
	}
	return binary.LittleEndian.AppendUint32([]byte{opJmp32}, d), nil
}

// JmpIndirectRIPLen is the length of jmp *rel32(%rip).
const JmpIndirectRIPLen = 6

// JmpIndirectRIP returns jmp *rel32(%rip) placed at from, through the 8-byte word at
// word.
func JmpIndirectRIP(from, word uint64) ([]byte, error) {
	d, err := rel32(from+JmpIndirectRIPLen, word)
	if err != nil {
		return nil, fmt.Errorf("jmp *word at %#x: %w", from, err)
	}
	return binary.LittleEndian.AppendUint32([]byte{0xff, 0x25}, d), nil
}

// Filled returns n bytes of int3 with code at their start.
func Filled(code []byte, n int) []byte {
	b := bytes.Repeat([]byte{Int3}, n)
	copy(b, code)
	return b
}

// Redirected returns the n bytes that replace the jump orig at from so that it goes to
// to instead: a jmp rel8 or rel32 becomes a jmp rel32 (n is 5; a jmp rel8 grows into
// the padding after it), a jcc rel32 stays a jcc rel32 with the same condition (n 6).
func Redirected(orig []byte, from uint64, n int, to uint64) ([]byte, error) {
	switch {
	case n == JmpRel32Len && len(orig) == 2 && orig[0] == 0xeb, n == JmpRel32Len && len(orig) == 5 && orig[0] == opJmp32:
		return JmpRel32(from, to)
	case n == 6 && len(orig) == 6 && orig[0] == 0x0f && orig[1]&0xf0 == 0x80:
		d, err := rel32(from+6, to)
		if err != nil {
			return nil, fmt.Errorf("jcc at %#x: %w", from, err)
		}
		return binary.LittleEndian.AppendUint32([]byte{0x0f, orig[1]}, d), nil
	}
	return nil, fmt.Errorf("the %d-byte jump % x at %#x cannot be redirected in %d bytes", len(orig), orig, from, n)
}

// SitePlaceholder returns the dcrLen bytes a jump-optimized site holds while its
// target is not known: a jmp to itself, then int3 filler. It is never run; the plan
// replaces it with the real jmp (SiteJmpTo) before the edits are committed.
func SitePlaceholder(dcrLen int) []byte {
	return Filled([]byte{opJmp32, 0xfb, 0xff, 0xff, 0xff}, dcrLen)
}

// SiteJmpTo returns the dcrLen bytes that replace a DCR at site: jmp rel32 to entry,
// then int3 filler.
func SiteJmpTo(site uint64, dcrLen int, entry uint64) ([]byte, error) {
	if dcrLen < JmpRel32Len {
		return nil, fmt.Errorf("site %#x: DCR of %d bytes, a jmp rel32 needs %d", site, dcrLen, JmpRel32Len)
	}
	j, err := JmpRel32(site, entry)
	if err != nil {
		return nil, fmt.Errorf("site %#x: %w", site, err)
	}
	return Filled(j, dcrLen), nil
}
