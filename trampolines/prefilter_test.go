package trampolines

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"golang.org/x/arch/x86/x86asm"
)

// The inline filter is checked against the runtime filter's reference (evfilter.Match):
// random filters over arguments of every size and signedness, in registers that need
// a REX prefix or not, %rax (saved with the flags where they are live) and the stack,
// with constants that fit an imm32 and constants that do not, run by a small
// interpreter of the code Prefilter writes on random register values. Every verdict
// must be Match's.

const (
	pfAt, pfAccept, pfRefuse = 0x400000, 0x500000, 0x600000
	pfCtlGen, pfGenWord      = 0x700000, 0x700100
	pfCtlGenTarget           = 0x700200
)

var pfDef = "p:t/e f a=%di:s32 b=%si:u8 c=%r9:s8 d=%r12:u16 e=%ax:s64 f=+0(%sp):u64 g=%dx:x64 h=%cx:s16 i=%r8:u64 j=+4(%sp):s32 k=%r15:x8 l=%bp:u32"

type pfArg struct {
	name string
	reg  int // x86 number, -1 the stack
	off  int // with reg -1: from %sp
	size int
}

func pfSetup(t testing.TB) (*eventdef.Probe, []pfArg, func(off, size int) (PrefilterField, bool)) {
	p, err := eventdef.Parse(pfDef)
	if err != nil {
		t.Fatal(err)
	}
	var args []pfArg
	offs := map[int]int{}
	o := 0
	for k, a := range p.Args {
		loc, ok := p.Direct(k)
		if !ok {
			t.Fatalf("%s is not direct", a.Body)
		}
		pa := pfArg{name: a.Name, reg: -1, off: loc.SPOff, size: a.Size}
		if loc.Reg >= 0 {
			pa.reg = PrefilterRegs[loc.Reg]
		}
		offs[o] = k
		o += a.SlotSize()
		args = append(args, pa)
	}
	field := func(off, size int) (PrefilterField, bool) {
		k, ok := offs[off]
		if !ok || args[k].size != size {
			return PrefilterField{}, false
		}
		return PrefilterField{Reg: args[k].reg, SPOff: args[k].off}, true
	}
	return p, args, field
}

var pfConsts = []string{"0", "1", "-1", "5", "0x7f", "0x80", "-128", "255", "0xff", "0x7fff", "-32768", "0xffff",
	"0x7fffffff", "0x80000000", "-2147483648", "0xffffffff", "0x100000000", "-4294967296", "0x7fffffffffffffff",
	"0x8000000000000000", "0xffffffffffffff00", "12345678901"}

func pfRandFilter(r *rand.Rand, args []pfArg, depth int) string {
	if depth > 0 && r.Intn(3) > 0 {
		op := " && "
		if r.Intn(2) == 0 {
			op = " || "
		}
		s := pfRandFilter(r, args, depth-1) + op + pfRandFilter(r, args, depth-1)
		if r.Intn(3) == 0 {
			s = "!(" + s + ")"
		} else if r.Intn(2) == 0 {
			s = "(" + s + ")"
		}
		return s
	}
	a := args[r.Intn(len(args))]
	ops := []string{"==", "!=", "<", "<=", ">", ">=", "&"}
	return a.name + " " + ops[r.Intn(len(ops))] + " " + pfConsts[r.Intn(len(pfConsts))]
}

// pfRandValue is a register or stack value near the interesting edges.
func pfRandValue(r *rand.Rand) uint64 {
	switch r.Intn(6) {
	case 0:
		return uint64(r.Intn(512)) - 256
	case 1:
		return uint64(r.Intn(1 << 17))
	case 2:
		v := []uint64{0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 1 << 32, 1<<63 - 1, 1 << 63}[r.Intn(12)]
		return v + uint64(r.Intn(3)) - 1
	}
	return r.Uint64()
}

func TestPrefilterMatchesRuntimeFilter(t *testing.T) {
	p, args, field := pfSetup(t)
	fields := evfilter.Fields(p)
	r := rand.New(rand.NewSource(1))
	nfilters, nvals := 600, 60
	if testing.Short() {
		nfilters = 150
	}
	checked := 0
	for i := 0; i < nfilters; i++ {
		expr := pfRandFilter(r, args, 3)
		f, err := evfilter.Parse(expr, fields, evfilter.AnySymbols{})
		if err != nil { // the kernel refuses a negative constant for an unsigned field
			i--
			continue
		}
		prog := f.Program()
		for _, dead := range []bool{false, true} {
			spec := PrefilterSpec{Prog: prog, Field: field, FlagsDead: dead, CtlGen: pfCtlGen, PFGen: pfGenWord}
			code, err := Prefilter(pfAt, spec, pfAccept, pfRefuse)
			if err != nil {
				t.Fatalf("%s: %v", expr, err)
			}
			for v := 0; v < nvals; v++ {
				var m pfMachine
				for k := range m.regs {
					m.regs[k] = pfRandValue(r)
				}
				m.regs[4] = 0x7ff000100000
				m.stack = make([]byte, 512)
				for k := 0; k < 16; k++ {
					binary.LittleEndian.PutUint64(m.stack[256+8*k:], pfRandValue(r))
				}
				m.flags = r.Uint64() & flagsArith
				data := pfData(&m, args)
				want := evfilter.Match(prog, &evfilter.Env{Data: data})
				before := m
				before.stack = append([]byte(nil), m.stack...)
				to, err := m.run(t, code)
				if err != nil {
					t.Fatalf("%s (flags dead %v): %v\n%s", expr, dead, err, pfListing(code))
				}
				if want != (to == pfAccept) {
					t.Fatalf("%s (flags dead %v): exit %#x, Match %v; registers %#x\n%s", expr, dead, to, want, before.regs, pfListing(code))
				}
				// a match leaves every register, the flags and %rsp as they were; a refusal
				// leaves the count-only detour's save: %rsp 128 (and %rax) lower
				wantSP := before.regs[4]
				if to == pfRefuse {
					wantSP -= 128
					if !dead {
						wantSP -= 8
					}
				}
				if m.regs[4] != wantSP {
					t.Fatalf("%s: %%rsp %#x at the exit, want %#x", expr, m.regs[4], wantSP)
				}
				for k := range m.regs {
					if k != 4 && m.regs[k] != before.regs[k] && !(to == pfRefuse && k == 0 && !dead) {
						t.Fatalf("%s: register %d changed: %#x -> %#x", expr, k, before.regs[k], m.regs[k])
					}
				}
				if to == pfAccept && !dead && m.flags != before.flags {
					t.Fatalf("%s: flags %#x -> %#x", expr, before.flags, m.flags)
				}
				checked++
			}
		}
	}
	t.Logf("%d filters, %d verdicts equal to Match", nfilters, checked)
}

// TestPrefilterGate: no trace file yet (ctl_gen pointer 0) or a generation the probe's
// pfgen does not name: the full detour, whatever the filter says.
func TestPrefilterGate(t *testing.T) {
	p, _, field := pfSetup(t)
	f, err := evfilter.Parse("a == 12345", evfilter.Fields(p), evfilter.AnySymbols{})
	if err != nil {
		t.Fatal(err)
	}
	code, err := Prefilter(pfAt, PrefilterSpec{Prog: f.Program(), Field: field, CtlGen: pfCtlGen, PFGen: pfGenWord}, pfAccept, pfRefuse)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ptr      uint64
		gen, pfg uint32
		want     uint64
	}{{pfCtlGenTarget, 3, 3, pfRefuse}, {0, 3, 3, pfAccept}, {pfCtlGenTarget, 4, 3, pfAccept}, {pfCtlGenTarget, 0, ^uint32(0), pfAccept}} {
		m := pfMachine{stack: make([]byte, 512), ctlPtr: c.ptr, gen: c.gen, pfgen: c.pfg, gateSet: true}
		m.regs[4] = 0x7ff000100000
		to, err := m.run(t, code)
		if err != nil {
			t.Fatal(err)
		}
		if to != c.want {
			t.Errorf("pointer %#x gen %d pfgen %#x: exit %#x, want %#x", c.ptr, c.gen, c.pfg, to, c.want)
		}
	}
}

// TestPrefilterRefusesWhatItCannotRead: strings, the thread's name and CPU, memory
// behind a pointer: no inline filter.
func TestPrefilterRefusesWhatItCannotRead(t *testing.T) {
	p, err := eventdef.Parse("p:t/e f a=%di:s32 s=+0(%si):string m=+8(%di):u64 sp=+16(%sp):u64")
	if err != nil {
		t.Fatal(err)
	}
	field := func(off, size int) (PrefilterField, bool) {
		if off == 0 && size == 4 {
			return PrefilterField{Reg: 7}, true
		}
		return PrefilterField{}, false
	}
	for _, expr := range []string{`s == "x"`, "m > 3", "sp == 0", `comm == "a"`, "cpu == 0", "common_pid == 1", "a > 0 && m > 3"} {
		f, err := evfilter.Parse(expr, evfilter.Fields(p), evfilter.AnySymbols{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Prefilter(pfAt, PrefilterSpec{Prog: f.Program(), Field: field}, pfAccept, pfRefuse); !errors.Is(err, ErrNoPrefilter) {
			t.Errorf("%s: %v, want ErrNoPrefilter", expr, err)
		}
	}
	for k, want := range map[int]bool{0: true, 1: false, 2: false, 3: false} {
		if _, ok := p.Direct(k); ok != want {
			t.Errorf("argument %s direct %v", p.Args[k].Body, ok)
		}
	}
}

func pfData(m *pfMachine, args []pfArg) []byte {
	var data []byte
	for _, a := range args {
		var v uint64
		if a.reg >= 0 {
			v = m.regs[a.reg]
		} else {
			v = binary.LittleEndian.Uint64(m.stack[256+a.off:])
		}
		data = binary.LittleEndian.AppendUint64(data, v)[:len(data)+a.size]
	}
	return data
}

func pfListing(code []byte) string {
	var b strings.Builder
	for off := 0; off < len(code); {
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			fmt.Fprintf(&b, "%#x: % x (%v)\n", pfAt+off, code[off:], err)
			break
		}
		fmt.Fprintf(&b, "%#x: %s\n", pfAt+off, x86asm.GNUSyntax(in, uint64(pfAt+off), nil))
		off += in.Len
	}
	return b.String()
}

const (
	flagCF, flagPF, flagAF, flagZF, flagSF, flagOF = 1, 4, 0x10, 0x40, 0x80, 0x800
	flagsArith                                     = flagCF | flagPF | flagAF | flagZF | flagSF | flagOF
)

// pfMachine runs the instructions Prefilter writes: the stack is 512 bytes whose byte
// 256 is at the probe's %sp (regs[4] at the start).
type pfMachine struct {
	regs       [16]uint64
	flags      uint64
	stack      []byte
	ctlPtr     uint64
	gen, pfgen uint32
	gateSet    bool
	sp0        uint64
}

func (m *pfMachine) mem(addr uint64, size int) ([]byte, error) {
	off := int64(addr-m.sp0) + 256
	if off < 0 || off+int64(size) > int64(len(m.stack)) {
		return nil, fmt.Errorf("stack access at %#x outside the test's stack", addr)
	}
	return m.stack[off : off+int64(size)], nil
}

func regOf(r x86asm.Reg) (int, int, bool) {
	switch {
	case r >= x86asm.AL && r <= x86asm.BL:
		return int(r - x86asm.AL), 1, true
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return int(r-x86asm.SPB) + 4, 1, true
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX), 2, true
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX), 4, true
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX), 8, true
	}
	return 0, 0, false
}

func mask(size int) uint64 {
	if size == 8 {
		return ^uint64(0)
	}
	return 1<<(8*size) - 1
}

// read is the value of operand a (memory of size bytes) at the instruction ending at next.
func (m *pfMachine) read(a x86asm.Arg, size int, next uint64) (uint64, error) {
	switch a := a.(type) {
	case x86asm.Reg:
		k, sz, ok := regOf(a)
		if !ok {
			return 0, fmt.Errorf("register %v", a)
		}
		return m.regs[k] & mask(sz), nil
	case x86asm.Imm:
		return uint64(a) & mask(size), nil
	case x86asm.Mem:
		if a.Base == x86asm.RIP {
			switch addr := next + uint64(a.Disp); addr {
			case pfCtlGen:
				if m.gateSet {
					return m.ctlPtr, nil
				}
				return pfCtlGenTarget, nil
			case pfGenWord:
				if m.gateSet {
					return uint64(m.pfgen), nil
				}
				return 7, nil
			}
			return 0, fmt.Errorf("rip-relative read of %#x", next+uint64(a.Disp))
		}
		k, _, ok := regOf(a.Base)
		if !ok || a.Index != 0 {
			return 0, fmt.Errorf("memory operand %v", a)
		}
		addr := m.regs[k] + uint64(a.Disp)
		if k == 1 && addr == pfCtlGenTarget { // mov (%rcx),%ecx
			if m.gateSet {
				return uint64(m.gen), nil
			}
			return 7, nil
		}
		b, err := m.mem(addr, size)
		if err != nil {
			return 0, err
		}
		var v uint64
		for i := size - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v, nil
	}
	return 0, fmt.Errorf("operand %v", a)
}

func (m *pfMachine) setFlags(res, a, b uint64, size int, sub bool) {
	n := uint(8*size - 1)
	res &= mask(size)
	f := uint64(0)
	if res == 0 {
		f |= flagZF
	}
	if res>>n&1 != 0 {
		f |= flagSF
	}
	if sub {
		if a&mask(size) < b&mask(size) {
			f |= flagCF
		}
		if ((a^b)&(a^res))>>n&1 != 0 {
			f |= flagOF
		}
	}
	m.flags = m.flags&^(flagCF|flagZF|flagSF|flagOF) | f
}

func (m *pfMachine) cond(op x86asm.Op) (bool, error) {
	cf, zf := m.flags&flagCF != 0, m.flags&flagZF != 0
	sf, of := m.flags&flagSF != 0, m.flags&flagOF != 0
	switch op {
	case x86asm.JB:
		return cf, nil
	case x86asm.JAE:
		return !cf, nil
	case x86asm.JE:
		return zf, nil
	case x86asm.JNE:
		return !zf, nil
	case x86asm.JBE:
		return cf || zf, nil
	case x86asm.JA:
		return !cf && !zf, nil
	case x86asm.JL:
		return sf != of, nil
	case x86asm.JGE:
		return sf == of, nil
	case x86asm.JLE:
		return zf || sf != of, nil
	case x86asm.JG:
		return !zf && sf == of, nil
	}
	return false, fmt.Errorf("condition %v", op)
}

func (m *pfMachine) push(v uint64) error {
	m.regs[4] -= 8
	b, err := m.mem(m.regs[4], 8)
	if err == nil {
		binary.LittleEndian.PutUint64(b, v)
	}
	return err
}

func (m *pfMachine) pop() (uint64, error) {
	b, err := m.mem(m.regs[4], 8)
	m.regs[4] += 8
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// run executes code placed at pfAt until it leaves it; it returns where to.
func (m *pfMachine) run(t testing.TB, code []byte) (uint64, error) {
	m.sp0 = m.regs[4]
	pc := uint64(pfAt)
	for steps := 0; steps < 10000; steps++ {
		if pc < pfAt || pc >= pfAt+uint64(len(code)) {
			return pc, nil
		}
		in, err := x86asm.Decode(code[pc-pfAt:], 64)
		if err != nil {
			return 0, fmt.Errorf("%#x: %v", pc, err)
		}
		next := pc + uint64(in.Len)
		size := in.MemBytes
		if r, ok := in.Args[0].(x86asm.Reg); ok {
			if _, sz, ok := regOf(r); ok {
				size = sz
			}
		}
		switch in.Op {
		case x86asm.LEA:
			mm := in.Args[1].(x86asm.Mem)
			k, _, _ := regOf(mm.Base)
			d, _, _ := regOf(in.Args[0].(x86asm.Reg))
			m.regs[d] = m.regs[k] + uint64(mm.Disp)
		case x86asm.PUSH:
			k, _, _ := regOf(in.Args[0].(x86asm.Reg))
			if err := m.push(m.regs[k]); err != nil {
				return 0, err
			}
		case x86asm.POP:
			k, _, _ := regOf(in.Args[0].(x86asm.Reg))
			v, err := m.pop()
			if err != nil {
				return 0, err
			}
			m.regs[k] = v
		case x86asm.LAHF:
			m.regs[0] = m.regs[0]&^0xff00 | (m.flags&0xff|2)<<8
		case x86asm.SAHF:
			m.flags = m.flags&^0xd5 | m.regs[0]>>8&0xd5
		case x86asm.SETO:
			v := uint64(0)
			if m.flags&flagOF != 0 {
				v = 1
			}
			m.regs[0] = m.regs[0]&^0xff | v
		case x86asm.ADD: // add $0x7f,%al
			a := m.regs[0] & 0xff
			b := uint64(in.Args[1].(x86asm.Imm)) & 0xff
			res := (a + b) & 0xff
			m.regs[0] = m.regs[0]&^0xff | res
			f := uint64(0)
			if ((a^res)&(b^res))>>7&1 != 0 {
				f |= flagOF
			}
			m.flags = m.flags&^flagOF | f
		case x86asm.MOV:
			k, sz, ok := regOf(in.Args[0].(x86asm.Reg))
			if !ok {
				return 0, fmt.Errorf("mov to %v", in.Args[0])
			}
			v, err := m.read(in.Args[1], sz, next)
			if err != nil {
				return 0, err
			}
			if sz == 4 {
				m.regs[k] = v & mask(4)
			} else {
				m.regs[k] = v
			}
		case x86asm.CMP, x86asm.TEST:
			if size == 0 {
				size = 8
			}
			a, err := m.read(in.Args[0], size, next)
			if err != nil {
				return 0, err
			}
			b, err := m.read(in.Args[1], size, next)
			if err != nil {
				return 0, err
			}
			if _, ok := in.Args[1].(x86asm.Imm); ok {
				b = uint64(in.Args[1].(x86asm.Imm)) & mask(size)
			}
			if in.Op == x86asm.CMP {
				m.setFlags(a-b, a, b, size, true)
			} else {
				m.setFlags(a&b, a, b, size, false)
			}
		case x86asm.JMP:
			pc = next + uint64(in.Args[0].(x86asm.Rel))
			continue
		default:
			if taken, err := m.cond(in.Op); err == nil {
				if taken {
					pc = next + uint64(in.Args[0].(x86asm.Rel))
					continue
				}
			} else {
				return 0, fmt.Errorf("%#x: %v not modelled", pc, in)
			}
		}
		pc = next
	}
	t.Fatal("the code loops")
	return 0, nil
}
