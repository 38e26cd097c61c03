package eventdef

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestExtensionTypes runs kprewrite's own types (the kernel has none of them):
// signed bitfields, f32/f64 and enum tables, through Parse, Compile, Run,
// FormatArgs and DecodeArgs.
func TestExtensionTypes(t *testing.T) {
	le := binary.LittleEndian
	mem := make([]byte, 64)
	mem[0] = 0b000_111_00 // bits 2..4 set: -1 as sb3@2/8, 7 as b3@2/8
	mem[1] = 0b011_010_00 // bits 3..5 = 101 (-3), bits 5..7 = 011 (3)
	le.PutUint32(mem[4:], math.Float32bits(1.5))
	le.PutUint64(mem[8:], math.Float64bits(0.1))
	le.PutUint32(mem[16:], 2)
	le.PutUint32(mem[20:], 5)
	mem[24] = 0xff // -1
	le.PutUint32(mem[28:], math.Float32bits(float32(math.NaN())))
	le.PutUint32(mem[32:], 0b10110<<27) // sb5@27/32: -10
	le.PutUint64(mem[40:], math.Float64bits(-1e300))
	m := &Machine{Mem: memFrom(0x1000, mem)}
	m.Regs[14] = 0x1000 // di
	for _, c := range []struct{ def, want, json string }{
		{"p:e f a=+0(%di):sb3@2/8 b=+0(%di):b3@2/8 c=+1(%di):sb3@3/8[2]", ` a=-1 b=7 c={-3,0}`, "[-1 7 [-3 0]]"},
		{"p:e f a=+32(%di):sb5@27/32 b=+32(%di):b5@27/32 c=+1(%di):sb3@5/8", ` a=-10 b=22 c=3`, "[-10 22 3]"},
		{"p:e f a=+4(%di):f32 b=+8(%di):f64 c=+28(%di):f32 d=+40(%di):f64", ` a=1.5 b=0.1 c=nan d=-1e+300`, "[1.5 0.1 nan -1e+300]"},
		{"p:e f a=+16(%di):u32{A=1,B=2} b=+20(%di):u32{A=1,B=2} c=+24(%di):s8{M=-1,Z=0}", ` a=B b=5 c=M`, "[B 5 M]"},
		{"p:e f a=+16(%di):x32[2]{Two=2,ns::Five=5} b=+0(%di):sb3@2/8{minus=-1}", ` a={Two,ns::Five} b=minus`, "[[Two ns::Five] minus]"},
	} {
		p, rec := parseRun(t, c.def, m)
		if got := p.String(); got != "p:uprobes/e f+0"+strings.TrimPrefix(c.def, "p:e f") {
			t.Errorf("String() = %q", got)
		}
		got, err := FormatArgs(p, rec)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q (%v), want %q", c.def, got, err, c.want)
		}
		vals, err := DecodeArgs(p, rec, FormatOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, v := range vals {
			vs = append(vs, fmtAny(v.Value))
		}
		if g := "[" + strings.Join(vs, " ") + "]"; g != c.json {
			t.Errorf("%s: decoded %s, want %s", c.def, g, c.json)
		}
	}
}

// fmtAny prints a decoded value, floats as the formatter does.
func fmtAny(v any) string {
	switch x := v.(type) {
	case []any:
		var s []string
		for _, e := range x {
			s = append(s, fmtAny(e))
		}
		return "[" + strings.Join(s, " ") + "]"
	case float64:
		return formatFloat(math.Float64bits(x), 8)
	case float32:
		return formatFloat(uint64(math.Float32bits(x)), 4)
	}
	return fmt.Sprint(v)
}

// TestFloatRetval: $retval of a float type is xmm0, where the System V ABI returns
// floats and doubles; %xmmN reads the others.
func TestFloatRetval(t *testing.T) {
	m := &Machine{}
	m.Regs[offAX/8] = 7
	m.Xmm[0] = math.Float64bits(2.5)
	m.Xmm[3] = math.Float64bits(-0.125)
	p, rec := parseRun(t, "r:e f a=$retval:f64 b=$retval:f32 c=$retval:u64 d=%xmm3:f64", m)
	got, _ := FormatArgs(p, rec)
	f32 := formatFloat(uint64(uint32(math.Float64bits(2.5))), 4) // the low half of the double
	if want := " a=2.5 b=" + f32 + " c=7 d=-0.125"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestExtensionTypeErrors: enum tables and signed bitfields refuse what they cannot
// hold, at the position of the mistake.
func TestExtensionTypeErrors(t *testing.T) {
	for _, c := range []struct {
		arg  string
		code ErrorCode
		pos  int // in the argument
	}{
		{"a=%di:u32{}", ErrBadEnum, 10},
		{"a=%di:u32{A=1", ErrBadEnum, 9},
		{"a=+0(%di):string{A=1}", ErrBadEnum, 16},
		{"a=%di:f64{A=1}", ErrBadEnum, 9},
		{"a=%di:u8{A=256}", ErrBadEnum, 11},
		{"a=%di:s8{A=-129}", ErrBadEnum, 11},
		{"a=%di:u8{A=1,A=2}", ErrBadEnum, 13},
		{"a=%di:u8{A=1,1B=2}", ErrBadEnum, 13},
		{"a=%di:u8{A=1,B=x}", ErrBadEnum, 15},
		{"a=%di:u8{A=1,B}", ErrBadEnum, 13},
		{"a=%di:sb9@0/8", ErrBadBitfield, 6},
		{"a=%di:sb3@6/8", ErrBadBitfield, 6},
		{"a=%di:sb3/8", ErrBadBitfield, 6},
		{"a=%di:f16", ErrBadType, 6},
		{"a=%xmm16:f64", ErrBadRegName, 2},
		{"a=%xmm01:f64", ErrBadRegName, 2},
		{"a=%xmm:f64", ErrBadRegName, 2},
	} {
		_, err := Parse("p:e f " + c.arg)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v, want %v", c.arg, err, c.code)
			continue
		}
		if pe.Code != c.code || pe.Pos != len("p:e f ")+c.pos {
			t.Errorf("%s: %v at %d, want %v at %d\n%s", c.arg, pe.Code, pe.Pos-len("p:e f "), c.code, c.pos, pe.Caret())
		}
	}
	// the table does not count against the kernel's 63-byte expression limit
	long := "a=+0(%di):u32{NAME_OF_A_VALUE_0=0"
	for i := 1; i < 20; i++ {
		long += ",NAME_OF_A_VALUE_" + strconv.Itoa(i) + "=" + strconv.Itoa(i)
	}
	if _, err := Parse("p:e f " + long + "}"); err != nil {
		t.Errorf("long enum table: %v", err)
	}
	// events of several probes must agree on their tables
	set := &Set{}
	if _, _, err := set.Add("p:g/e f a=%di:u32{A=1}"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := set.Add("p:g/e g a=%di:u32{A=2}"); err == nil {
		t.Errorf("a second probe of g/e with another enum table was accepted")
	}
}

// TestExtensionFormatFile: enums print through __print_symbolic, floats as float
// and double fields.
func TestExtensionFormatFile(t *testing.T) {
	p, err := Parse("p:g/e f c=%di:s32{DOWN=-3,UP=3} x=+0(%si):f32 y=+8(%si):f64 s=%dx:sb4@0/16")
	if err != nil {
		t.Fatal(err)
	}
	ff := FormatFile(p, 7)
	for _, want := range []string{
		"field:s32 c;\toffset:16;\tsize:4;\tsigned:1;",
		"field:float x;\toffset:20;\tsize:4;\tsigned:0;",
		"field:double y;\toffset:24;\tsize:8;\tsigned:0;",
		"field:s16 s;\toffset:32;\tsize:2;\tsigned:1;",
		`print fmt: "(%lx) c=%s x=%g y=%g s=%d", REC->__probe_ip, __print_symbolic(REC->c, { -3, "DOWN" }, { 3, "UP" }), REC->x, REC->y, REC->s`,
	} {
		if !strings.Contains(ff, want) {
			t.Errorf("format file lacks %q:\n%s", want, ff)
		}
	}
}
