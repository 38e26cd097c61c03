package evfilter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Program layout; see the package documentation.
const (
	ProgMagic   = 'F'
	ProgVersion = 1
	HeaderSize  = 8
	EntrySize   = 32

	NeedCPU  = 1 << 0 // some entry reads the CPU
	NeedComm = 1 << 1 // some entry reads the thread's name
)

// MaxProgram is the most bytes a program may have: the header's length, the branch
// targets and the patterns' offsets are 16-bit (about 2,040 predicates without strings).
const MaxProgram = 0xffff &^ 7

// programSize is the bytes Program returns.
func (f *Filter) programSize() int {
	n := HeaderSize + len(f.prog)*EntrySize
	for _, e := range f.prog {
		if pr := &f.preds[e.pred]; pr.fn == FnString {
			n += len(pr.pattern) + 1
		}
	}
	return (n + 7) &^ 7
}

// checkSize refuses a filter whose program the runtime could not hold (Parse).
func (f *Filter) checkSize() error {
	if size := f.programSize(); size > MaxProgram {
		return &Error{Expr: f.Expr, Pos: -1, Code: ErrTooManyPreds, Detail: fmt.Sprintf(
			"Too many terms in predicate expression: %d predicates make a filter program of %d bytes, the runtime's limit is %d (about %d predicates)",
			len(f.prog), size, MaxProgram, (MaxProgram-HeaderSize)/EntrySize)}
	}
	return nil
}

// Program is the filter compiled for the runtime.
func (f *Filter) Program() []byte {
	n := len(f.prog)
	out := make([]byte, HeaderSize+n*EntrySize)
	var pats []byte
	le := binary.LittleEndian
	needs := byte(0)
	for i, e := range f.prog {
		pr := &f.preds[e.pred]
		b := out[HeaderSize+i*EntrySize:]
		b[0], b[1], b[2], b[3] = pr.fn, byte(pr.src), pr.op, pr.size
		b[4], b[5], b[6], b[7] = b2u(pr.signed), b2u(pr.not), b2u(e.when), pr.match
		if pr.biased {
			b[4] |= 2
		}
		le.PutUint16(b[8:], uint16(e.target))
		le.PutUint16(b[10:], uint16(pr.off))
		if pr.fn == FnString {
			le.PutUint16(b[12:], uint16(len(out)+len(pats)))
			le.PutUint16(b[14:], uint16(len(pr.pattern)))
			pats = append(append(pats, pr.pattern...), 0)
		}
		le.PutUint64(b[16:], pr.val)
		le.PutUint64(b[24:], pr.val2)
		switch pr.src {
		case SrcCPU:
			needs |= NeedCPU
		case SrcComm:
			needs |= NeedComm
		}
	}
	out = append(out, pats...)
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	out[0], out[1], out[4] = ProgMagic, ProgVersion, needs
	le.PutUint16(out[2:], uint16(n))
	le.PutUint16(out[6:], uint16(len(out)))
	return out
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// Env is what a filter sees at a hit.
type Env struct {
	Data  []byte   // the record's data (the fetchargs)
	TID   uint32   // common_pid
	CPU   uint32   // CPU
	Comm  [16]byte // COMM
	Type  uint32   // common_type: the event id
	IP    uint64   // __probe_ip, __probe_func (run time)
	RetIP uint64   // __probe_ret_ip
	Bias  uint64   // the image's load bias
}

var errProgram = errors.New("malformed filter program")

// Check validates a program's structure (as the runtime does before running it).
func Check(prog []byte) error {
	le := binary.LittleEndian
	if len(prog) < HeaderSize || prog[0] != ProgMagic || prog[1] != ProgVersion || int(le.Uint16(prog[6:])) != len(prog) {
		return errProgram
	}
	n := int(le.Uint16(prog[2:]))
	if n == 0 || HeaderSize+n*EntrySize > len(prog) {
		return errProgram
	}
	for i := 0; i < n; i++ {
		b := prog[HeaderSize+i*EntrySize:]
		t := int(le.Uint16(b[8:]))
		if t <= i || t > n+1 || b[0] > FnFunc || Source(b[1]) > SrcRetIP {
			return errProgram
		}
		if b[0] == FnString {
			po, pl := int(le.Uint16(b[12:])), int(le.Uint16(b[14:]))
			if po < HeaderSize+n*EntrySize || po+pl >= len(prog) || prog[po+pl] != 0 || b[7] > MatchGlob {
				return errProgram
			}
		}
	}
	return nil
}

// Match runs a program on a hit: true when the record is to be written. A program
// that fails Check matches (the runtime writes the record rather than lose it).
func Match(prog []byte, env *Env) bool {
	if Check(prog) != nil {
		return true
	}
	le := binary.LittleEndian
	n := int(le.Uint16(prog[2:]))
	i := 0
	for i < n {
		b := prog[HeaderSize+i*EntrySize:]
		m := entryMatch(prog, b, env)
		if m == (b[6] != 0) {
			i = int(le.Uint16(b[8:]))
		} else {
			i++
		}
	}
	return i == n
}

// value is the field's bytes as a little-endian number of size bytes; ok false when
// the record is too short to hold it.
func value(b []byte, env *Env) (uint64, bool) {
	size, off := int(b[3]), int(binary.LittleEndian.Uint16(b[10:]))
	var v uint64
	switch Source(b[1]) {
	case SrcData:
		if off+size > len(env.Data) || size > 8 {
			return 0, false
		}
		for k := size - 1; k >= 0; k-- {
			v = v<<8 | uint64(env.Data[off+k])
		}
		return v, true
	case SrcPID:
		v = uint64(env.TID)
	case SrcType:
		v = uint64(env.Type)
	case SrcIP:
		v = env.IP
	case SrcRetIP:
		v = env.RetIP
	case SrcCPU:
		v = uint64(env.CPU)
	}
	if size < 8 {
		v &= 1<<(8*size) - 1
	}
	return v, true
}

func signExtend(v uint64, size int) int64 {
	sh := uint(64 - 8*size)
	return int64(v<<sh) >> sh
}

func entryMatch(prog, b []byte, env *Env) bool {
	le := binary.LittleEndian
	fn, op, size, signed, not := b[0], int(b[2]), int(b[3]), b[4]&1 != 0, b[5] != 0
	val, val2 := le.Uint64(b[16:]), le.Uint64(b[24:])
	switch fn {
	case FnEq:
		v, ok := value(b, env)
		if !ok {
			return false
		}
		if size < 8 {
			val &= 1<<(8*size) - 1
		}
		return (v == val) != not
	case FnCmp:
		v, ok := value(b, env)
		if !ok {
			return false
		}
		if op == opBand {
			if size < 8 {
				val &= 1<<(8*size) - 1
			}
			return v&val != 0
		}
		var c int
		if signed {
			x, y := signExtend(v, size), signExtend(val, size)
			c = cmp3(x < y, x > y)
		} else {
			if size < 8 {
				val &= 1<<(8*size) - 1
			}
			c = cmp3(v < val, v > val)
		}
		switch op {
		case opLT:
			return c < 0
		case opLE:
			return c <= 0
		case opGT:
			return c > 0
		case opGE:
			return c >= 0
		}
		return false
	case FnCPU:
		cpu, want := int32(env.CPU), int32(val)
		switch op {
		case opEQ:
			return cpu == want
		case opNE:
			return cpu != want
		case opLT:
			return cpu < want
		case opLE:
			return cpu <= want
		case opGT:
			return cpu > want
		case opGE:
			return cpu >= want
		}
		return false
	case FnFunc:
		v, ok := value(b, env)
		if !ok {
			return false
		}
		if b[4]&2 != 0 {
			val, val2 = val+env.Bias, val2+env.Bias
		}
		in := v >= val && v < val2
		return in == (op == opEQ)
	case FnString:
		po, pl := int(le.Uint16(b[12:])), int(le.Uint16(b[14:]))
		pat := prog[po : po+pl]
		var str []byte
		var n int // the kernel's len: bytes of the string with its NUL, 0 for "NUL-terminated"
		if Source(b[1]) == SrcComm {
			str, n = env.Comm[:], 16
		} else {
			off := int(le.Uint16(b[10:]))
			if off+4 > len(env.Data) {
				return false
			}
			item := le.Uint32(env.Data[off:])
			loc, sl := int(item&0xffff), int(item>>16)
			if loc > len(env.Data) {
				loc = len(env.Data)
			}
			str, n = env.Data[loc:], sl
			if n > len(str) { // cut by the record's end: as a C string
				n = 0
			}
			if n > 0 {
				str = str[:n]
			}
		}
		return strMatch(b[7], pat, str, n) != not
	}
	return false
}

func cmp3(lt, gt bool) int {
	switch {
	case lt:
		return -1
	case gt:
		return 1
	}
	return 0
}

// cstr is the C string at the start of b (up to its first NUL).
func cstr(b []byte) []byte {
	if k := bytes.IndexByte(b, 0); k >= 0 {
		return b[:k]
	}
	return b
}

// strncmpEq is strncmp(a, b, n) == 0 for C strings (bytes past the end are NUL).
func strncmpEq(a, b []byte, n int) bool {
	at := func(s []byte, i int) byte {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	for i := 0; i < n; i++ {
		x, y := at(a, i), at(b, i)
		if x != y {
			return false
		}
		if x == 0 {
			return true
		}
	}
	return true
}

// strMatch is the kernel's regex_match_* on a string of n bytes with its NUL (n 0:
// str is a C string).
func strMatch(typ uint8, pat, str []byte, n int) bool {
	switch typ {
	case MatchFull:
		if n == 0 {
			return bytes.Equal(cstr(str), pat)
		}
		return strncmpEq(str, pat, n)
	case MatchFront:
		if n != 0 && n < len(pat) {
			return false
		}
		return strncmpEq(str, pat, len(pat))
	case MatchMiddle:
		if n == 0 {
			return bytes.Contains(cstr(str), pat)
		}
		// strnstr: raw bytes within the first n
		for l := n; l >= len(pat); l-- {
			k := n - l
			if k+len(pat) > len(str) {
				return false
			}
			if bytes.Equal(str[k:k+len(pat)], pat) {
				return true
			}
		}
		return false
	case MatchEnd:
		sl := n - 1
		if sl < len(pat) || sl > len(str) {
			return false
		}
		return bytes.Equal(str[sl-len(pat):sl], pat)
	case MatchGlob:
		return globMatch(pat, cstr(str))
	}
	return false
}
