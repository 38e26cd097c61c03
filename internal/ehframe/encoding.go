package ehframe

import (
	"encoding/binary"
	"fmt"
)

// DW_EH_PE pointer encodings (LSB "Exception Frames", DWARF Extensions).
const (
	peAbsptr  = 0x00
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSigned  = 0x08 // signed absptr: 8 bytes on x86-64
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePcrel   = 0x10
	peTextrel = 0x20
	peDatarel = 0x30
	peFuncrel = 0x40
	peAligned = 0x50

	peIndirect = 0x80
	peOmit     = 0xff

	ptrSize = 8 // x86-64
)

// reader is a cursor over a byte slice; positions are offsets into the whole
// section so that pcrel pointers and error messages use section offsets. b is
// cut at the end of the current entry, which bounds every read.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) errAt(pos int, what string, base error) error {
	return fmt.Errorf("%s at offset %#x: %w", what, pos, base)
}

func (r *reader) u8(what string) (byte, error) {
	if r.pos >= len(r.b) {
		return 0, r.errAt(r.pos, what, ErrTruncated)
	}
	v := r.b[r.pos]
	r.pos++
	return v, nil
}

func (r *reader) fixed(n int, what string) (uint64, error) {
	if r.pos < 0 || len(r.b)-r.pos < n {
		return 0, r.errAt(r.pos, what, ErrTruncated)
	}
	p := r.b[r.pos:]
	var v uint64
	switch n {
	case 1:
		v = uint64(p[0])
	case 2:
		v = uint64(binary.LittleEndian.Uint16(p))
	case 4:
		v = uint64(binary.LittleEndian.Uint32(p))
	case 8:
		v = binary.LittleEndian.Uint64(p)
	}
	r.pos += n
	return v, nil
}

func (r *reader) uleb(what string) (uint64, error) {
	start := r.pos
	var v uint64
	var shift uint
	for {
		if r.pos >= len(r.b) {
			return 0, r.errAt(start, what, ErrTruncated)
		}
		c := r.b[r.pos]
		r.pos++
		if shift >= 64 || (shift == 63 && c&0x7f > 1) {
			if c&0x7f != 0 {
				return 0, r.errAt(start, what+" (uleb128 overflows 64 bits)", ErrBadEncoding)
			}
		} else {
			v |= uint64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			return v, nil
		}
		if shift > 7*20 { // no sane producer pads this much
			return 0, r.errAt(start, what+" (uleb128 too long)", ErrBadEncoding)
		}
	}
}

func (r *reader) sleb(what string) (int64, error) {
	start := r.pos
	var v int64
	var shift uint
	for {
		if r.pos >= len(r.b) {
			return 0, r.errAt(start, what, ErrTruncated)
		}
		c := r.b[r.pos]
		r.pos++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
		if shift > 7*20 {
			return 0, r.errAt(start, what+" (sleb128 too long)", ErrBadEncoding)
		}
	}
}

// cstring reads a NUL-terminated string without allocating.
func (r *reader) cstring(what string) ([]byte, error) {
	for i := r.pos; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := r.b[r.pos:i]
			r.pos = i + 1
			return s, nil
		}
	}
	return nil, r.errAt(r.pos, what+" (no NUL terminator)", ErrTruncated)
}

// validEncoding reports whether enc is a pointer encoding we know how to read.
func validEncoding(enc byte) bool {
	if enc == peOmit {
		return true
	}
	switch enc & 0x0f {
	case peAbsptr, peULEB128, peUdata2, peUdata4, peUdata8,
		peSigned, peSLEB128, peSdata2, peSdata4, peSdata8:
	default:
		return false
	}
	switch enc & 0x70 {
	case peAbsptr, pePcrel, peTextrel, peDatarel, peFuncrel:
		return true
	case peAligned:
		return enc&0x0f == peAbsptr
	}
	return false
}

// value reads a value of the format in enc's low nibble, with no base applied.
func (r *reader) value(enc byte, what string) (uint64, error) {
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSigned, peSdata8:
		return r.fixed(8, what)
	case peULEB128:
		return r.uleb(what)
	case peSLEB128:
		v, err := r.sleb(what)
		return uint64(v), err
	case peUdata2:
		return r.fixed(2, what)
	case peSdata2:
		v, err := r.fixed(2, what)
		return uint64(int64(int16(v))), err
	case peUdata4:
		return r.fixed(4, what)
	case peSdata4:
		v, err := r.fixed(4, what)
		return uint64(int64(int32(v))), err
	}
	return 0, r.errAt(r.pos, fmt.Sprintf("%s (pointer encoding %#02x)", what, enc), ErrBadEncoding)
}

// bases are the addresses DW_EH_PE applications are relative to.
type bases struct {
	sect   uint64 // vaddr of offset 0 of the reader's section (pcrel, aligned)
	text   uint64 // textrel
	data   uint64 // datarel
	fn     uint64 // funcrel
	haveFn bool
}

// pointer reads an encoded pointer and applies its base (not the indirection,
// which is left to the caller: enc&peIndirect). When zeroIsNull is set a raw
// value of 0 stays 0, as libgcc's read_encoded_value_with_base does.
func (r *reader) pointer(enc byte, bs *bases, zeroIsNull bool, what string) (uint64, error) {
	if !validEncoding(enc) || enc == peOmit {
		return 0, r.errAt(r.pos, fmt.Sprintf("%s (pointer encoding %#02x)", what, enc), ErrBadEncoding)
	}
	if enc&0x70 == peAligned {
		addr := bs.sect + uint64(r.pos)
		pad := int((ptrSize - addr%ptrSize) % ptrSize)
		if len(r.b)-r.pos < pad {
			return 0, r.errAt(r.pos, what, ErrTruncated)
		}
		r.pos += pad
	}
	field := bs.sect + uint64(r.pos)
	v, err := r.value(enc, what)
	if err != nil {
		return 0, err
	}
	if zeroIsNull && v == 0 {
		return 0, nil
	}
	switch enc & 0x70 {
	case pePcrel:
		v += field
	case peTextrel:
		v += bs.text
	case peDatarel:
		v += bs.data
	case peFuncrel:
		if !bs.haveFn {
			return 0, fmt.Errorf("%s: funcrel encoding with no function start: %w", what, ErrUnsupported)
		}
		v += bs.fn
	}
	return v, nil
}
