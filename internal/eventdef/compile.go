package eventdef

import (
	"encoding/binary"
	"fmt"
)

// Program header layout and flags; see the package documentation.
const (
	ProgMagic   = 0x4B // 'K'
	ProgVersion = 1
	HeaderSize  = 24
	BlockHeader = 6 // u32 dest, u16 len

	FlagReturn    = 1 << 0 // a return probe: run the argument blocks when the function returns
	FlagEntryData = 1 << 1 // run the entry blocks at function entry, keeping their results per instance
	FlagComm      = 1 << 2 // some argument stores $comm
	FlagLoadBias  = 1 << 3 // some argument uses the image load bias (@SYM)

	// RecordLimit bounds a record with strings, as the kernel's uprobe
	// buffer does (one page, including the kernel's 16 or 24-byte entry
	// header): strings are cut when the record would grow past it.
	RecordLimit = 4096
)

// Opcodes of the fetch program; see the package documentation.
const (
	OpReg      = 0x01
	OpStack    = 0x02
	OpStackP   = 0x03
	OpImm      = 0x04
	OpImage    = 0x05
	OpEData    = 0x06
	OpXmm      = 0x07 // kprewrite: u8 n, the low 64 bits of xmm<n>
	OpDeref    = 0x10
	OpUDeref   = 0x11
	OpStRaw    = 0x20
	OpStMem    = 0x21
	OpStStr    = 0x22
	OpStStrArr = 0x23
	OpStComm   = 0x24
	OpStData   = 0x25
	// OpStGoStr (kprewrite): u32 offset, u8 mode; a Go string of the length it
	// gives, no NUL needed. Mode 0: the {pointer, length} header is at the value
	// plus offset. Mode 1: the value is the pointer; the rest of the block, a
	// source and its dereferences, fetches the length.
	OpStGoStr = 0x26
	// OpStMemN (kprewrite): u8 size, u8 count, then a source and its dereferences
	// that give n: the first min(n, count) elements of size bytes at the value
	// (read as STMEM reads them), zeros for the rest.
	OpStMemN = 0x27
	// OpStGoErr = 0x28 (kprewrite), goerr.go
	OpBitfield = 0x30
	// OpSBitfield is OpBitfield with an arithmetic right shift: a signed bitfield.
	OpSBitfield = 0x31
)

// SlotSize is the number of bytes an argument takes in a record's fixed area.
func (a *Arg) SlotSize() int {
	n := a.Count
	if n == 0 {
		n = 1
	}
	return a.Size * n
}

// dynamic reports whether the argument stores strings after the fixed area.
func (a *Arg) dynamic() bool {
	return a.Kind == KindString || a.Kind == KindUString || a.Kind == KindGoErr
}

// RecordSize returns the size of a record's fixed area for the probe, and
// the largest record its program may write (fixed area plus strings).
func RecordSize(p *Probe) (fixed, max int) {
	dyn := false
	for i := range p.Args {
		fixed += p.Args[i].SlotSize()
		dyn = dyn || p.Args[i].dynamic()
	}
	max = fixed
	if dyn {
		esize := 16
		if p.Return {
			esize = 24
		}
		if b := RecordLimit - esize - fixed; b > 0 {
			max += b
		}
	}
	return fixed, max
}

// Compile turns a parsed probe into the fetch program the runtime
// interprets at each hit. resolve gives the link-time address of a symbol
// named in @SYM; the program adds the image's load bias at run time.
func Compile(p *Probe, resolve func(sym string) (addr uint64, ok bool)) (prog []byte, err error) {
	if p == nil || p.Delete {
		return nil, fmt.Errorf("compile: not a probe definition")
	}
	if len(p.Args) > MaxArgs {
		return nil, fmt.Errorf("compile %s/%s: %w", p.Group, p.Event, ErrTooManyArgs)
	}
	c := &compiler{p: p, resolve: resolve, entryIdx: map[uint32]int{}}
	var args [][]byte
	dest := 0
	for i := range p.Args {
		a := &p.Args[i]
		code, err := c.arg(a)
		if err != nil {
			return nil, fmt.Errorf("compile %s/%s argument %s=%s: %w", p.Group, p.Event, a.Name, a.Body, err)
		}
		args = append(args, block(uint32(dest), code))
		dest += a.SlotSize()
	}
	fixed, max := RecordSize(p)
	var flags byte
	if p.Return {
		flags |= FlagReturn
	}
	if len(c.entry) > 0 {
		flags |= FlagEntryData
	}
	flags |= c.flags
	out := make([]byte, HeaderSize)
	out[0], out[1], out[2] = ProgMagic, ProgVersion, flags
	le := binary.LittleEndian
	le.PutUint16(out[4:], uint16(len(args)))
	le.PutUint16(out[6:], uint16(len(c.entry)))
	le.PutUint32(out[8:], uint32(fixed))
	le.PutUint32(out[12:], uint32(max))
	le.PutUint32(out[16:], uint32(8*len(c.entry)))
	for _, b := range c.entry {
		out = append(out, b...)
	}
	for _, b := range args {
		out = append(out, b...)
	}
	le.PutUint32(out[20:], uint32(len(out)))
	return out, nil
}

type compiler struct {
	p        *Probe
	resolve  func(string) (uint64, bool)
	entry    [][]byte       // entry blocks
	entryIdx map[uint32]int // $argN index -> entry data slot
	flags    byte
}

func block(dest uint32, code []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, dest)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(code)))
	return append(b, code...)
}

// argSource emits the code reading function argument n (0-based) from the
// registers at entry, as regs_get_kernel_argument() does: six registers,
// then the stack above the return address.
func argSource(n uint32) []byte {
	if n < uint32(len(argRegs)) {
		off, _ := RegOffset(argRegs[n])
		return []byte{OpReg, byte(off)}
	}
	return binary.LittleEndian.AppendUint32([]byte{OpStack}, n-uint32(len(argRegs))+1)
}

func (c *compiler) arg(a *Arg) ([]byte, error) {
	code := a.code
	if len(code) == 0 {
		return nil, fmt.Errorf("argument was not parsed")
	}
	le := binary.LittleEndian
	var out []byte
	i := 0
	switch in := code[0]; in.op {
	case opReg:
		out = []byte{OpReg, byte(in.param)}
	case opXmm:
		out = []byte{OpXmm, byte(in.param)}
	case opRetval:
		out = []byte{OpReg, byte(offAX)}
		if a.Kind == KindFloat && len(code) > 1 && code[1].op == opStRaw {
			out = []byte{OpXmm, 0} // a float or double is returned in xmm0
		}
	case opStack:
		out = le.AppendUint32([]byte{OpStack}, in.param)
	case opStackP:
		out = []byte{OpStackP}
	case opImm:
		out = le.AppendUint64([]byte{OpImm}, in.imm)
	case opSymbol:
		sym, off, ok := splitSymbolOffset(in.data)
		if !ok {
			return nil, ErrBadMemAddr
		}
		var addr uint64
		if c.resolve != nil {
			addr, ok = c.resolve(sym)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNoSymbol, sym)
		}
		out = le.AppendUint64([]byte{OpImage}, addr+uint64(off))
		c.flags |= FlagLoadBias
		i++ // the opImm that holds the address in the kernel
	case opArg:
		out = argSource(in.param)
	case opEArg:
		k, ok := c.entryIdx[in.param]
		if !ok {
			k = len(c.entry)
			c.entryIdx[in.param] = k
			c.entry = append(c.entry, block(uint32(8*k), append(argSource(in.param), OpStRaw, 8)))
		}
		out = le.AppendUint32([]byte{OpEData}, uint32(8*k))
	case opComm:
		c.flags |= FlagComm
		return []byte{OpStComm}, nil
	case opData:
		if len(in.data) > 0xffff {
			return nil, ErrUnsupported
		}
		out = le.AppendUint16([]byte{OpStData}, uint16(len(in.data)))
		return append(out, in.data...), nil
	default:
		return nil, fmt.Errorf("unexpected fetch operation %d", in.op)
	}
	i++

	count := 1
	for _, in := range code {
		if in.op == opLpArray {
			count = int(in.param)
		}
	}
	lastDeref := -1 // code index of the last dereference emitted
	derefAt := -1   // its position in out
	for ; i < len(code); i++ {
		in := code[i]
		switch in.op {
		case opDeref, opUDeref:
			lastDeref, derefAt = i, len(out)
			op := byte(OpDeref)
			if in.op == opUDeref {
				op = OpUDeref
			}
			out = le.AppendUint32(append(out, op), uint32(in.offset))
		case opStRaw:
			out = append(out, OpStRaw, byte(in.size))
		case opStSymstr:
			out = append(out, OpStRaw, 8)
		case opStMem, opStUMem:
			out = le.AppendUint32(append(out, OpStMem), uint32(in.offset))
			out = append(out, byte(in.size), byte(count), b2u(in.op == opStUMem))
		case opStString, opStUString:
			user := in.op == opStUString
			if a.Count == 0 {
				out = le.AppendUint32(append(out, OpStStr), uint32(in.offset))
				out = append(out, b2u(user))
				break
			}
			// string[N]: an array of pointers read by the last dereference.
			if lastDeref != i-1 {
				return nil, fmt.Errorf("%w: a string array needs a memory address", ErrUnsupported)
			}
			d := code[lastDeref]
			user = user || d.op == opUDeref
			out = out[:derefAt]
			out = le.AppendUint32(append(out, OpStStrArr), uint32(d.offset))
			out = le.AppendUint32(out, uint32(in.offset))
			out = append(out, byte(count), b2u(user))
		case opStGoString:
			out = le.AppendUint32(append(out, OpStGoStr), uint32(in.offset))
			out = append(out, byte(in.param))
			if in.param == 1 {
				lc, err := c.lengthCode(a)
				if err != nil {
					return nil, err
				}
				out = append(out, lc...)
			}
		case opStMemN:
			lc, err := c.lengthCode(a)
			if err != nil {
				return nil, err
			}
			out = append(append(out, OpStMemN, byte(in.size), byte(count)), lc...)
		case opModBF:
			op := byte(OpBitfield)
			if in.signed {
				op = OpSBitfield
			}
			out = append(out, op, in.lshift, in.rshift)
		case opStGoErr:
			gc, err := c.goErrCode(a)
			if err != nil {
				return nil, err
			}
			out = append(out, gc...)
		case opLpArray, opEnd:
		default:
			return nil, fmt.Errorf("unexpected fetch operation %d", in.op)
		}
	}
	return out, nil
}

// lengthCode compiles the LEN fetch of a PTR,LEN:gostring or PTR,LEN:TYPE[N]: a
// source and its dereferences, without a store.
func (c *compiler) lengthCode(a *Arg) ([]byte, error) {
	if len(a.lenCode) == 0 {
		return nil, fmt.Errorf("no length fetch")
	}
	code := append([]insn(nil), a.lenCode[:len(a.lenCode)-1]...)
	la := Arg{Kind: KindUnsigned, Size: 8, code: append(code, insn{op: opStRaw, size: 8}, insn{op: opEnd})}
	out, err := c.arg(&la)
	if err != nil {
		return nil, fmt.Errorf("length: %w", err)
	}
	if n := len(out); n < 2 || out[n-2] != OpStRaw || out[0] == OpStComm || out[0] == OpStData || out[0] == OpXmm {
		return nil, fmt.Errorf("length: %w", ErrUnsupported)
	}
	return out[:len(out)-2], nil
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}
