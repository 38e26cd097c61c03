package eventdef

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// u32le and friends build expected programs byte by byte from the format
// in the package documentation.
func u16le(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func reg(name string) byte {
	off, ok := RegOffset(name)
	if !ok {
		panic(name)
	}
	return byte(off)
}

func TestCompileEncoding(t *testing.T) {
	def := `p:g/ev func a=%di s=+8(%si):string b=+4(%cx):b4@3/32[2] c=@sym+8:u16 d=$comm e=\"hi" f=$stack3 g=$stack h=\-1:s8 i=+u0(%di):string[2] j=$arg2:u32 k=$arg8 l=+0(+16(%dx)):x16`
	p, err := Parse(def)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(p, func(s string) (uint64, bool) { return 0x4000, s == "sym" })
	if err != nil {
		t.Fatal(err)
	}
	blk := func(dest uint32, code ...[]byte) []byte {
		c := cat(code...)
		return cat(u32le(dest), u16le(uint16(len(c))), c)
	}
	// c is @sym+8:u16: IMAGE, then the DEREF becomes STMEM of 2 bytes.
	args := cat(
		blk(0, []byte{OpReg, reg("di"), OpStRaw, 8}),
		blk(8, []byte{OpReg, reg("si"), OpStStr}, u32le(8), []byte{0}),
		blk(12, []byte{OpReg, reg("cx"), OpStMem}, u32le(4), []byte{4, 2, 0, OpBitfield, 25, 28}),
		blk(20, []byte{OpImage}, u64le(0x4008), []byte{OpStMem}, u32le(0), []byte{2, 1, 0}),
		blk(22, []byte{OpStComm}),
		blk(26, []byte{OpStData}, u16le(2), []byte("hi")),
		blk(30, []byte{OpStack}, u32le(3), []byte{OpStRaw, 8}),
		blk(38, []byte{OpStackP, OpStRaw, 8}),
		blk(46, []byte{OpImm}, u64le(^uint64(0)), []byte{OpStRaw, 1}),
		blk(47, []byte{OpReg, reg("di"), OpStStrArr}, u32le(0), u32le(0), []byte{2, 1}),
		blk(55, []byte{OpReg, reg("si"), OpStRaw, 4}),
		blk(59, []byte{OpStack}, u32le(2), []byte{OpStRaw, 8}),
		blk(67, []byte{OpReg, reg("dx"), OpDeref}, u32le(16), []byte{OpStMem}, u32le(0), []byte{2, 1, 0}),
	)
	fixed := 69
	hdr := cat([]byte{ProgMagic, ProgVersion, FlagComm | FlagLoadBias, 0},
		u16le(13), u16le(0), u32le(uint32(fixed)), u32le(uint32(RecordLimit-16)), u32le(0),
		u32le(uint32(HeaderSize+len(args))))
	want := cat(hdr, args)
	if !bytes.Equal(prog, want) {
		t.Errorf("Compile(%q):\n got %x\nwant %x", def, prog, want)
	}
	if f, m := RecordSize(p); f != fixed || m != RecordLimit-16 {
		t.Errorf("RecordSize = %d, %d", f, m)
	}
}

func TestCompileReturnEntryData(t *testing.T) {
	p, err := Parse("r:ev func a=$arg1 b=$arg8 c=$arg1:u8 $retval")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	blk := func(dest uint32, code ...[]byte) []byte {
		c := cat(code...)
		return cat(u32le(dest), u16le(uint16(len(c))), c)
	}
	body := cat(
		blk(0, []byte{OpReg, reg("di"), OpStRaw, 8}),
		blk(8, []byte{OpStack}, u32le(2), []byte{OpStRaw, 8}),
		blk(0, []byte{OpEData}, u32le(0), []byte{OpStRaw, 8}),
		blk(8, []byte{OpEData}, u32le(8), []byte{OpStRaw, 8}),
		blk(16, []byte{OpEData}, u32le(0), []byte{OpStRaw, 1}),
		blk(17, []byte{OpReg, reg("ax"), OpStRaw, 8}),
	)
	want := cat([]byte{ProgMagic, ProgVersion, FlagReturn | FlagEntryData, 0},
		u16le(4), u16le(2), u32le(25), u32le(25), u32le(16), u32le(uint32(HeaderSize+len(body))), body)
	if !bytes.Equal(prog, want) {
		t.Fatalf("got  %x\nwant %x", prog, want)
	}

	// At entry: di = 7, stack: return address, then args 7 and 8.
	sp := uint64(0x7000)
	stack := cat(u64le(0x401000), u64le(77), u64le(88))
	m := &Machine{Mem: memFrom(sp, stack)}
	m.Regs[14] = 7 // di
	m.Regs[19] = sp
	ed, err := RunEntry(prog, m)
	if err != nil {
		t.Fatal(err)
	}
	// At return: registers changed, the arguments come from entry data.
	ret := &Machine{EntryData: ed}
	ret.Regs[10] = 0xffff // ax
	rec, err := Run(prog, ret)
	if err != nil {
		t.Fatal(err)
	}
	got, err := FormatArgs(p, rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := " a=0x7 b=0x58 c=7 arg4=0xffff"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// memFrom serves reads inside [base, base+len(data)).
func memFrom(base uint64, data []byte) func(uint64, []byte) bool {
	return func(addr uint64, buf []byte) bool {
		if addr < base || addr-base+uint64(len(buf)) > uint64(len(data)) {
			return false
		}
		copy(buf, data[addr-base:])
		return true
	}
}

func TestCompileErrors(t *testing.T) {
	for _, c := range []struct {
		def  string
		want error
	}{
		{"p:ev func a=@nosuch", ErrNoSymbol},
		{`p:ev func a=\123:string[2]`, ErrUnsupported},
	} {
		p, err := Parse(c.def)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Compile(p, func(string) (uint64, bool) { return 0, false }); !errors.Is(err, c.want) {
			t.Errorf("Compile(%q) = %v, want %v", c.def, err, c.want)
		}
	}
	p, _ := Parse("-:ev")
	if _, err := Compile(p, nil); err == nil {
		t.Error("Compile of a deletion succeeded")
	}
}

// parseRun parses def, compiles it and runs it on m: the probe and its record.
func parseRun(t *testing.T, def string, m *Machine) (*Probe, []byte) {
	t.Helper()
	p, err := Parse(def)
	if err != nil {
		t.Fatalf("%s: %v", def, err)
	}
	prog, err := Compile(p, nil)
	if err != nil {
		t.Fatalf("%s: %v", def, err)
	}
	rec, err := Run(prog, m)
	if err != nil {
		t.Fatalf("%s: %v", def, err)
	}
	return p, rec
}

func TestRunFaultsAndStrings(t *testing.T) {
	long := strings.Repeat("x", 5000)
	mem := cat([]byte("abc\x00"), u64le(0x1000), u64le(0x9999), []byte(long), []byte{0})
	m := &Machine{Mem: memFrom(0x1000, mem), Comm: "averyveryverylongname"}
	m.Regs[14] = 0x1000 // di
	for _, c := range []struct{ def, want string }{
		{"p:e f +0(%di):string +0(%si):string", ` arg1="abc" arg2=(fault)`},
		{"p:e f +4(%di):string[2]", ` arg1={"abc",(fault)}`},
		{"p:e f +0(+0x9000(%di)):u32 +0(%di):u8[2] +0x100000(%di):u16[2]", ` arg1=0 arg2={97,98} arg3={0,0}`},
		{"p:e f +0(+0x9000(%di)):string[2] +0(+0x9000(%di)):b3@1/8", ` arg1={(fault),(fault)} arg2=0`},
		{"p:e f $comm $stack5 +0($stack):x8", ` arg1="averyveryverylo" arg2=0x0 arg3=0x0`},
		{`p:e f \"" \"a\x00b"`, ` arg1="" arg2="a\x00b"`},
	} {
		p, rec := parseRun(t, c.def, m)
		got, err := FormatArgs(p, rec)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q (%v), want %q", c.def, got, err, c.want)
		}
	}

	// A string longer than the room left is cut to fit, keeping its NUL;
	// the next one finds no room and is stored as faulted.
	p, _ := Parse("p:e f +0x14(%di):string +0(%di):string")
	prog, _ := Compile(p, nil)
	rec, err := Run(prog, m)
	if err != nil {
		t.Fatal(err)
	}
	fixed, max := RecordSize(p)
	if len(rec) != max || fixed != 8 || max != RecordLimit-16 {
		t.Fatalf("record of %d bytes, fixed %d, max %d", len(rec), fixed, max)
	}
	got, _ := FormatArgs(p, rec)
	if want := ` arg1="` + long[:max-fixed-1] + `" arg2=(fault)`; got != want {
		t.Errorf("truncation: got %d bytes, want %d", len(got), len(want))
	}
}

func TestRunRejectsBadPrograms(t *testing.T) {
	p, _ := Parse("p:e f a=+0(%di):u32[2] b=+0(%si):string")
	prog, _ := Compile(p, nil)
	m := &Machine{}
	if _, err := Run(prog, m); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(prog); i++ {
		if _, err := Run(prog[:i], m); err == nil {
			t.Errorf("Run accepted a program cut at %d bytes", i)
		}
	}
	bad := bytes.Clone(prog)
	bad[HeaderSize] = 0xff // dest far outside the record
	if _, err := Run(bad, m); err == nil {
		t.Error("Run accepted a slot outside the record")
	}
}

func TestReadsMemory(t *testing.T) {
	for def, want := range map[string]bool{
		`p:g/a f a=%di b=%si:u32 c=$comm d=\"x" e=\1 ip=%ip st=$stack`: false,
		`p:g/a f s=@sym`:                         true, // @SYM reads the memory at SYM
		`r:g/a f $retval a=$arg1`:                false,
		`p:g/a f s=$stack2`:                      true,
		`p:g/a f s=+0(%di):u64`:                  true,
		`p:g/a f s=+0(+8(%di)):u8`:               true,
		`p:g/a f s=+0(%di):string`:               true,
		`p:g/a f s=@sym:string`:                  true,
		`p:g/a f s=+0(%di):string[2]`:            true,
		`p:g/a f s=+0(%di):b3@2/8`:               true,
		`p:g/a f s=+0(%di):u8[4]`:                true,
		`r:g/a f x=$retval s=+0($arg1):u32`:      true,
		`p:g/a f a=%di x=%si:x64 s=+8(%sp):u64`:  true,
		`p:g/a f a=%di x=%si:x64 s=+u8(%sp):u64`: true,
	} {
		p, err := Parse(def)
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		prog, err := Compile(p, func(string) (uint64, bool) { return 0x1000, true })
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		if got := ReadsMemory(prog); got != want {
			t.Errorf("ReadsMemory(%s) = %v, want %v", def, got, want)
		}
	}
	if !ReadsMemory([]byte{1, 2, 3}) {
		t.Error("a malformed program must count as reading memory")
	}
}

// TestRunGoString reads Go strings (no NUL ends them) from a header in memory and
// from two fetches, never past their length, and faults as a string does.
func TestRunGoString(t *testing.T) {
	// at 0x1000: the header {0x1010, 5}; at 0x1010 "hello, world" with no NUL
	mem := cat(u64le(0x1010), u64le(5), []byte("hello, world"))
	m := &Machine{Mem: memFrom(0x1000, mem)}
	m.Regs[14] = 0x1000               // di: the header
	m.Regs[10], m.Regs[5] = 0x1017, 5 // ax, bx: "world"
	m.Regs[11] = 0x9000               // cx: unmapped
	for _, c := range []struct{ def, want string }{
		{"p:e f +0(%di):gostring", ` arg1="hello"`},
		{"p:e f s=%ax,%bx:gostring e=%ax,\\0:gostring", ` s="world" e=""`},
		{"p:e f s=+0(%di),+8(%di):gostring", ` s="hello"`},
		{"p:e f a=%cx,%bx:gostring b=+0(%cx):gostring c=%ax,+0(%cx):gostring", ` a=(fault) b=(fault) c=(fault)`},
	} {
		p, rec := parseRun(t, c.def, m)
		got, err := FormatArgs(p, rec)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q (%v), want %q", c.def, got, err, c.want)
		}
	}
	for _, def := range []string{"p:e f %ax:gostring", "p:e f +0(%ax):gostring[2]", "p:e f %ax,$comm:gostring"} {
		if _, err := Parse(def); err == nil {
			t.Errorf("%s: accepted", def)
		}
	}
}

// TestRunCountedArray reads PTR,LEN:TYPE[N]: the first LEN elements, zeros after
// them (a Go slice never read past its length).
func TestRunCountedArray(t *testing.T) {
	mem := cat(u64le(11), u64le(22), u64le(33), u64le(44))
	m := &Machine{Mem: memFrom(0x1000, mem)}
	m.Regs[10], m.Regs[5] = 0x1000, 2 // ax: the array, bx: its length
	m.Regs[11] = ^uint64(0)           // cx: a negative length
	for _, c := range []struct{ def, want string }{
		{"p:e f xs=%ax,%bx:s64[4]", ` xs={11,22,0,0}`},
		{"p:e f xs=%ax,\\9:u64[3] ys=%ax,%cx:s64[2] zs=+0(%sp),\\2:s64[2]", ` xs={11,22,33} ys={0,0} zs={0,0}`},
		{"p:e f xs=%ax,%bx:u64[2]{ONE=11}", ` xs={ONE,22}`},
	} {
		p, rec := parseRun(t, c.def, m)
		got, err := FormatArgs(p, rec)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q (%v), want %q", c.def, got, err, c.want)
		}
	}
	for _, def := range []string{"p:e f %ax,%bx:b3@1/8[2]", "p:e f %ax,$comm:u8[2]"} {
		if _, err := Parse(def); err == nil {
			t.Errorf("%s: accepted", def)
		}
	}
}
