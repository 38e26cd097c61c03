package eventdef

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Machine is the state a fetch program reads at a probe hit. Run is the
// reference interpreter of the program format: the freestanding C runtime
// must write byte-identical records for the same Machine.
type Machine struct {
	Regs      [PtRegsSize / 8]uint64 // struct pt_regs, in memory order (see RegOffset)
	Xmm       [16]uint64             // the low 64 bits of the SSE registers
	Mem       func(addr uint64, buf []byte) bool
	Comm      string // the thread's name; the first 15 bytes are used
	LoadBias  uint64 // added to @SYM addresses
	EntryData []byte // what RunEntry returned at the function's entry
}

var errBadProgram = errors.New("malformed fetch program")

type progHeader struct {
	flags                       byte
	nargs, nentry               int
	fixed, recmax, edata, total int
}

func readHeader(prog []byte) (progHeader, error) {
	var h progHeader
	if len(prog) < HeaderSize || prog[0] != ProgMagic || prog[1] != ProgVersion {
		return h, fmt.Errorf("%w: bad header", errBadProgram)
	}
	le := binary.LittleEndian
	h.flags = prog[2]
	h.nargs = int(le.Uint16(prog[4:]))
	h.nentry = int(le.Uint16(prog[6:]))
	h.fixed = int(le.Uint32(prog[8:]))
	h.recmax = int(le.Uint32(prog[12:]))
	h.edata = int(le.Uint32(prog[16:]))
	h.total = int(le.Uint32(prog[20:]))
	if h.total != len(prog) || h.fixed > h.recmax || h.recmax > 1<<24 || h.edata > 1<<16 {
		return h, fmt.Errorf("%w: bad sizes", errBadProgram)
	}
	return h, nil
}

// RunEntry runs the entry blocks of a return probe's program with the
// registers at function entry and returns the entry data to keep for the
// matching return (nil when the program has no entry blocks).
func RunEntry(prog []byte, m *Machine) ([]byte, error) {
	h, err := readHeader(prog)
	if err != nil {
		return nil, err
	}
	if h.nentry == 0 {
		return nil, nil
	}
	ed := make([]byte, h.edata)
	r := runner{m: m, rec: ed, recmax: len(ed)}
	pos := HeaderSize
	for i := 0; i < h.nentry; i++ {
		if pos, err = r.block(prog, pos); err != nil {
			return nil, err
		}
	}
	return ed, nil
}

// Run runs the argument blocks of a program and returns the trace record.
func Run(prog []byte, m *Machine) ([]byte, error) {
	h, err := readHeader(prog)
	if err != nil {
		return nil, err
	}
	r := runner{m: m, rec: make([]byte, h.fixed, h.recmax), recmax: h.recmax}
	pos := HeaderSize
	for i := 0; i < h.nentry; i++ { // skip the entry blocks
		if pos+BlockHeader > len(prog) {
			return nil, fmt.Errorf("%w: truncated block", errBadProgram)
		}
		pos += BlockHeader + int(binary.LittleEndian.Uint16(prog[pos+4:]))
	}
	for i := 0; i < h.nargs; i++ {
		if pos, err = r.block(prog, pos); err != nil {
			return nil, err
		}
	}
	if pos != len(prog) {
		return nil, fmt.Errorf("%w: trailing bytes", errBadProgram)
	}
	return r.rec, nil
}

type runner struct {
	m      *Machine
	rec    []byte // fixed area, then strings
	recmax int
}

func (r *runner) read(addr uint64, buf []byte) bool {
	if r.m.Mem == nil {
		return false
	}
	return r.m.Mem(addr, buf)
}

// readPartial reads buf as copy_from_user does, which the kernel stores a memory
// argument with: the bytes before the first unreadable one, the rest zero.
func (r *runner) readPartial(addr uint64, buf []byte) {
	if r.read(addr, buf) {
		return
	}
	n := len(buf) - 1
	for ; n > 0 && !r.read(addr, buf[:n]); n-- {
	}
	clear(buf[n:])
}

func (r *runner) readU64(addr uint64) (uint64, bool) {
	var b [8]byte
	if !r.read(addr, b[:]) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// putString appends a string to the record and returns its data_loc; s
// nil means the fetch faulted. Strings are cut at the record limit.
func (r *runner) putString(s []byte, fault bool) uint32 {
	off := len(r.rec)
	if fault {
		return uint32(off) & 0xffff
	}
	room := r.recmax - off
	n := len(s) + 1
	if n > room {
		n = room
	}
	if n <= 0 {
		return uint32(off) & 0xffff
	}
	r.rec = append(r.rec, s[:n-1]...)
	r.rec = append(r.rec, 0)
	return uint32(n)<<16 | uint32(off)&0xffff
}

// readString reads a NUL-terminated string of at most max bytes (without
// the NUL), as strncpy_from_user: a fault anywhere fails the whole string.
func (r *runner) readString(addr uint64, max int) ([]byte, bool) {
	var out []byte
	var b [1]byte
	for len(out) < max {
		if !r.read(addr+uint64(len(out)), b[:]) {
			return nil, false
		}
		if b[0] == 0 {
			return out, true
		}
		out = append(out, b[0])
	}
	return out, true
}

func (r *runner) room() int {
	if n := r.recmax - len(r.rec) - 1; n > 0 {
		return n
	}
	return 0
}

// block runs one block starting at prog[pos] and returns the next position.
func (r *runner) block(prog []byte, pos int) (int, error) {
	le := binary.LittleEndian
	if pos+BlockHeader > len(prog) {
		return 0, fmt.Errorf("%w: truncated block", errBadProgram)
	}
	dest := int(le.Uint32(prog[pos:]))
	n := int(le.Uint16(prog[pos+4:]))
	code := prog[pos+BlockHeader:]
	if n > len(code) {
		return 0, fmt.Errorf("%w: truncated code", errBadProgram)
	}
	code = code[:n]
	next := pos + BlockHeader + n
	bad := fmt.Errorf("%w: bad code at %d", errBadProgram, pos)

	need := func(k int) bool { return len(code) >= k }
	slot := func(size int) ([]byte, bool) {
		if dest < 0 || size < 0 || dest+size > len(r.rec) || dest+size > r.recmax {
			return nil, false
		}
		return r.rec[dest : dest+size], true
	}
	if !need(1) {
		return 0, bad
	}
	// Lone string sources.
	switch code[0] {
	case OpStComm:
		s, ok := slot(4)
		if !ok || len(code) != 1 {
			return 0, bad
		}
		comm := []byte(r.m.Comm)
		if len(comm) > 15 {
			comm = comm[:15]
		}
		for i, c := range comm {
			if c == 0 {
				comm = comm[:i]
				break
			}
		}
		if len(comm) > r.room() {
			comm = comm[:r.room()]
		}
		le.PutUint32(s, r.putString(comm, false))
		return next, nil
	case OpStData:
		if !need(3) {
			return 0, bad
		}
		l := int(le.Uint16(code[1:]))
		s, ok := slot(4)
		if !ok || len(code) != 3+l {
			return 0, bad
		}
		data := code[3 : 3+l]
		if i := indexByte(data, 0); i >= 0 {
			data = data[:i]
		}
		le.PutUint32(s, r.putString(data, false))
		return next, nil
	}

	val, fault, code, ok := r.source(code)
	if !ok {
		return 0, bad
	}

	// Store.
	if len(code) == 0 {
		return 0, bad
	}
	var elems []byte // the stored numeric elements, for BITFIELD
	esize := 0
	switch code[0] {
	case OpStRaw:
		if len(code) < 2 || !validSize(code[1]) {
			return 0, bad
		}
		esize = int(code[1])
		s, ok := slot(esize)
		if !ok {
			return 0, bad
		}
		var b [8]byte
		if !fault {
			le.PutUint64(b[:], val)
		}
		copy(s, b[:esize])
		elems = s
		code = code[2:]
	case OpStMem:
		if len(code) < 8 || !validSize(code[5]) || code[6] == 0 || code[7] > StMemSafe {
			return 0, bad
		}
		off := int64(int32(le.Uint32(code[1:])))
		esize = int(code[5])
		cnt := int(code[6])
		s, ok := slot(esize * cnt)
		if !ok {
			return 0, bad
		}
		for i := 0; i < cnt; i++ {
			e := s[i*esize : (i+1)*esize]
			if fault {
				clear(e)
			} else {
				r.readPartial(val+uint64(off)+uint64(i*esize), e)
			}
		}
		elems = s
		code = code[8:]
	case OpStStr:
		if len(code) < 6 || code[5] > 1 {
			return 0, bad
		}
		off := int64(int32(le.Uint32(code[1:])))
		s, ok := slot(4)
		if !ok {
			return 0, bad
		}
		var str []byte
		f := fault
		if !f {
			str, ok = r.readString(val+uint64(off), r.room())
			f = !ok
		}
		le.PutUint32(s, r.putString(str, f))
		code = code[6:]
	case OpStStrArr:
		if len(code) < 11 || code[9] == 0 || code[10] > 1 {
			return 0, bad
		}
		poff := int64(int32(le.Uint32(code[1:])))
		soff := int64(int32(le.Uint32(code[5:])))
		cnt := int(code[9])
		s, ok := slot(4 * cnt)
		if !ok {
			return 0, bad
		}
		for i := 0; i < cnt; i++ {
			f := fault
			var str []byte
			if !f {
				var p uint64
				p, ok = r.readU64(val + uint64(poff) + uint64(8*i))
				if ok {
					str, ok = r.readString(p+uint64(soff), r.room())
				}
				f = !ok
			}
			le.PutUint32(s[4*i:], r.putString(str, f))
		}
		code = code[11:]
	case OpStGoStr:
		if code, ok = r.goString(code, val, fault, slot); !ok {
			return 0, bad
		}
	case OpStGoErr:
		if !r.goErr(code, val, fault, slot) {
			return 0, bad
		}
		code = nil
	case OpStMemN:
		if len(code) < 3 || !validSize(code[1]) || code[2] == 0 {
			return 0, bad
		}
		esize = int(code[1])
		cnt := int(code[2])
		s, ok := slot(esize * cnt)
		if !ok {
			return 0, bad
		}
		n, lf, rest, ok := r.source(code[3:])
		if !ok {
			return 0, bad
		}
		for i := 0; i < cnt; i++ {
			e := s[i*esize : (i+1)*esize]
			if fault || lf || int64(n) <= int64(i) {
				clear(e)
			} else {
				r.readPartial(val+uint64(i*esize), e)
			}
		}
		elems, code = s, rest
	default:
		return 0, bad
	}

	// Bitfield.
	if len(code) > 0 && (code[0] == OpBitfield || code[0] == OpSBitfield) {
		if len(code) != 3 || elems == nil {
			return 0, bad
		}
		ls, rs := uint(code[1]), uint(code[2])
		if ls >= uint(8*esize) || rs >= uint(8*esize) || rs < ls {
			return 0, bad
		}
		signed := code[0] == OpSBitfield
		top := uint(64 - 8*esize) // shift within the element's width
		for i := 0; i+esize <= len(elems); i += esize {
			e := elems[i : i+esize]
			var v uint64
			for k := esize - 1; k >= 0; k-- {
				v = v<<8 | uint64(e[k])
			}
			v <<= ls + top
			if signed {
				v = uint64(int64(v) >> (rs + top))
			} else {
				v >>= rs + top
			}
			for k := range e {
				e[k] = byte(v >> (8 * k))
			}
		}
		code = code[3:]
	}
	if len(code) != 0 {
		return 0, bad
	}
	return next, nil
}

// goString stores a Go string (OpStGoStr) and returns the rest of the code.
func (r *runner) goString(code []byte, val uint64, fault bool, slot func(int) ([]byte, bool)) ([]byte, bool) {
	le := binary.LittleEndian
	if len(code) < 6 || code[5] > 1 {
		return nil, false
	}
	off, mode := int64(int32(le.Uint32(code[1:]))), code[5]
	code = code[6:]
	s, ok := slot(4)
	if !ok {
		return nil, false
	}
	var ptr, n uint64
	if mode == 0 {
		hdr := val + uint64(off)
		var ok1, ok2 bool
		ptr, ok1 = r.readU64(hdr)
		n, ok2 = r.readU64(hdr + 8)
		fault = fault || !ok1 || !ok2
	} else {
		if off != 0 {
			return nil, false
		}
		var lf bool
		if n, lf, code, ok = r.source(code); !ok {
			return nil, false
		}
		ptr, fault = val, fault || lf
	}
	var str []byte
	if !fault && int64(n) >= 0 {
		str = make([]byte, min(n, uint64(r.room())))
		fault = len(str) > 0 && !r.read(ptr, str)
	}
	le.PutUint32(s, r.putString(str, fault || int64(n) < 0))
	return code, true
}

// source runs a block's source and its dereferences: the value, whether a read
// faulted, the rest of the code; ok is false for malformed code.
func (r *runner) source(code []byte) (val uint64, fault bool, rest []byte, ok bool) {
	le := binary.LittleEndian
	if len(code) == 0 {
		return 0, false, nil, false
	}
	regs := &r.m.Regs
	switch code[0] {
	case OpReg:
		if len(code) < 2 || code[1]%8 != 0 || int(code[1]) >= PtRegsSize {
			return 0, false, nil, false
		}
		val = regs[code[1]/8]
		code = code[2:]
	case OpXmm:
		if len(code) < 2 || code[1] >= 16 {
			return 0, false, nil, false
		}
		val = r.m.Xmm[code[1]]
		code = code[2:]
	case OpStack:
		if len(code) < 5 {
			return 0, false, nil, false
		}
		v, ok := r.readU64(regs[offSP/8] + 8*uint64(le.Uint32(code[1:])))
		if ok {
			val = v
		}
		code = code[5:]
	case OpStackP:
		val = regs[offSP/8]
		code = code[1:]
	case OpImm, OpImage:
		if len(code) < 9 {
			return 0, false, nil, false
		}
		val = le.Uint64(code[1:])
		if code[0] == OpImage {
			val += r.m.LoadBias
		}
		code = code[9:]
	case OpEData:
		if len(code) < 5 {
			return 0, false, nil, false
		}
		off := int(le.Uint32(code[1:]))
		if off < 0 || off+8 > len(r.m.EntryData) {
			return 0, false, nil, false
		}
		val = le.Uint64(r.m.EntryData[off:])
		code = code[5:]
	default:
		return 0, false, nil, false
	}

	// Dereferences.
	for len(code) > 0 && (code[0] == OpDeref || code[0] == OpUDeref) {
		if len(code) < 5 {
			return 0, false, nil, false
		}
		off := int64(int32(le.Uint32(code[1:])))
		if !fault {
			v, ok := r.readU64(val + uint64(off))
			val, fault = v, !ok
		}
		code = code[5:]
	}

	return val, fault, code, true
}

func validSize(s byte) bool { return s == 1 || s == 2 || s == 4 || s == 8 }

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// ReadsMemory reports whether some block of prog (entry or argument) reads the
// program's memory: a $stackN source, a dereference, or a store of memory, a string or
// a string array. A malformed program counts as reading memory.
func ReadsMemory(prog []byte) bool {
	h, err := readHeader(prog)
	if err != nil {
		return true
	}
	le := binary.LittleEndian
	pos := HeaderSize
	for i := 0; i < h.nentry+h.nargs; i++ {
		if pos+BlockHeader > len(prog) {
			return true
		}
		n := int(le.Uint16(prog[pos+4:]))
		if pos+BlockHeader+n > len(prog) || n == 0 {
			return true
		}
		code := prog[pos+BlockHeader : pos+BlockHeader+n]
		pos += BlockHeader + n
		k := 0
		switch code[0] {
		case OpStComm, OpStData:
			continue
		case OpStack:
			return true
		case OpReg, OpXmm:
			k = 2
		case OpStackP:
			k = 1
		case OpImm, OpImage:
			k = 9
		case OpEData:
			k = 5
		default:
			return true
		}
		if k >= len(code) {
			return true
		}
		switch {
		case code[k] == OpStRaw:
		case code[k] == OpStMem && k+7 < len(code) && code[k+7] == StMemSafe: // cannot fault
		default: // a dereference, OpStMem, OpStStr, OpStStrArr, or something unknown
			return true
		}
	}
	return false
}
