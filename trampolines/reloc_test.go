package trampolines

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

func hx(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// relocCases are encodings whose relocation the tests check by decoding the output.
var relocCases = []struct {
	name string
	code string
	form Form
}{
	{"push rbp", "55", FormCopy},
	{"mov rsp,rbp", "48 89 e5", FormCopy},
	{"endbr64", "f3 0f 1e fa", FormCopy},
	{"mov rip,rax", "48 8b 05 10 20 00 00", FormRIPRel},
	{"lea rip,rdi", "48 8d 3d f0 ff ff ff", FormRIPRel},
	{"movl imm,rip (imm after disp)", "c7 05 00 01 00 00 78 56 34 12", FormRIPRel},
	{"cmpb imm8,rip", "80 3d 44 33 22 11 07", FormRIPRel},
	{"call *rip", "ff 15 12 34 00 00", FormRIPRel},
	{"jmp *rip", "ff 25 00 00 10 00", FormRIPRel},
	{"notrack jmp *rip", "3e ff 25 00 00 10 00", FormRIPRel},
	{"vmovdqu ymm0,rip (vex2)", "c5 fe 6f 05 80 00 00 00", FormRIPRel},
	{"vbroadcastss rip,ymm0 (vex3)", "c4 e2 7d 18 05 fc ff ff ff", FormRIPRel},
	{"vpshufd imm,rip (vex + imm)", "c5 fd 70 05 10 00 00 00 1b", FormRIPRel},
	{"vmovdqu64 zmm0,rip (evex)", "62 f1 fe 48 6f 05 40 00 00 00", FormRIPRel},
	{"vpternlogd imm,rip (evex + imm)", "62 f3 75 48 25 05 00 01 00 00 ca", FormRIPRel},
	{"jmp rel8", "eb 10", FormBranch32},
	{"jmp rel8 back", "eb fe", FormBranch32},
	{"jmp rel32", "e9 00 01 00 00", FormBranch32},
	{"bnd jmp rel32", "f2 e9 00 01 00 00", FormBranch32},
	{"je rel8", "74 05", FormBranch32},
	{"jg rel8 (hint prefix)", "3e 7f 80", FormBranch32},
	{"jne rel32", "0f 85 00 10 00 00", FormBranch32},
	{"call rel32", "e8 00 00 00 00", FormBranch32},
	{"loop", "e2 f0", FormSandwich},
	{"loope", "e1 10", FormSandwich},
	{"loopne", "e0 10", FormSandwich},
	{"jrcxz", "e3 fe", FormSandwich},
	{"jecxz (67)", "67 e3 05", FormSandwich},
}

// checkRelocated decodes r.Code at `at` and checks it does what the original did at pc.
func checkRelocated(t testing.TB, orig []byte, pc, at uint64, opt Options, r Relocated) {
	t.Helper()
	checkRelocatedTo(t, orig, pc, at, opt, r, nil)
}

// checkRelocatedTo is checkRelocated for an instruction of a region: target maps a
// branch's original target to where its copy must go (nil: the same).
func checkRelocatedTo(t testing.TB, orig []byte, pc, at uint64, opt Options, r Relocated, target func(uint64) uint64) {
	t.Helper()
	in, err := x86dec.Decode(orig, pc)
	if err != nil {
		t.Fatalf("original: %v", err)
	}
	if target != nil && in.Kind != x86dec.KindCall {
		in.Target = target(in.Target)
	}
	n, err := RelocatedLen(orig, pc, opt)
	if err != nil || n != len(r.Code) {
		t.Fatalf("RelocatedLen %d, %v; made %d bytes", n, err, len(r.Code))
	}
	dec := func(off int) x86dec.Inst {
		t.Helper()
		o, err := x86dec.Decode(r.Code[off:], at+uint64(off))
		if err != nil {
			t.Fatalf("output % x does not decode at +%d: %v", r.Code, off, err)
		}
		return o
	}
	end := at + uint64(len(r.Code))
	switch r.Form {
	case FormCopy:
		if !bytes.Equal(r.Code, orig[:in.Len]) {
			t.Fatalf("copy % x != % x", r.Code, orig[:in.Len])
		}
	case FormRIPRel:
		o := dec(0)
		if o.Len != in.Len || !o.RIPRel || o.RIPTarget != in.RIPTarget || o.Op != in.Op {
			t.Fatalf("relocated % x: len %d riprel %v target %#x op %v; want len %d target %#x op %v",
				r.Code, o.Len, o.RIPRel, o.RIPTarget, o.Op, in.Len, in.RIPTarget, in.Op)
		}
		// only the displacement changed
		a, b := append([]byte(nil), r.Code...), append([]byte(nil), orig[:in.Len]...)
		copy(a[o.DispOff:o.DispOff+4], make([]byte, 4))
		copy(b[in.DispOff:in.DispOff+4], make([]byte, 4))
		if !bytes.Equal(a, b) {
			t.Fatalf("relocated % x changed more than the displacement of % x", r.Code, orig[:in.Len])
		}
	case FormBranch32:
		o := dec(0)
		if o.Len != len(r.Code) || o.Kind != in.Kind || o.Target != in.Target || o.RelSize != 4 {
			t.Fatalf("relocated % x: kind %v target %#x len %d; want kind %v target %#x", r.Code, o.Kind, o.Target, o.Len, in.Kind, in.Target)
		}
		if in.Kind == x86dec.KindJcc && orig[in.OpcodeOff]&15 != r.Code[o.OpcodeOff]&15 {
			t.Fatalf("condition changed: % x -> % x", orig[:in.Len], r.Code)
		}
	case FormSandwich:
		o1 := dec(0)
		o2 := dec(o1.Len)
		o3 := dec(o1.Len + o2.Len)
		if o1.Kind != x86dec.KindLoop || o1.Target != at+uint64(o1.Len+o2.Len) || !bytes.Equal(r.Code[:in.OpcodeOff+1], orig[:in.OpcodeOff+1]) {
			t.Fatalf("sandwich head % x: target %#x", r.Code, o1.Target)
		}
		if o2.Kind != x86dec.KindJmp || o2.Target != end {
			t.Fatalf("sandwich skip: target %#x, want %#x", o2.Target, end)
		}
		if o3.Kind != x86dec.KindJmp || o3.Target != in.Target || at+uint64(o1.Len+o2.Len+o3.Len) != end {
			t.Fatalf("sandwich jmp: target %#x, want %#x", o3.Target, in.Target)
		}
	case FormCallPushJmp:
		ret := pc + uint64(in.Len)
		o1 := dec(0)
		var jmpOff int
		if ret < 1<<31 && !opt.PIC {
			if r.Code[0] != 0x68 || uint64(binary.LittleEndian.Uint32(r.Code[1:])) != ret {
				t.Fatalf("push imm32 % x, want %#x", r.Code, ret)
			}
			jmpOff = o1.Len
		} else {
			o2 := dec(1)
			o3 := dec(1 + o2.Len)
			if r.Code[0] != 0x50 || !o2.RIPRel || o2.RIPTarget != ret || !bytes.Equal(r.Code[1+o2.Len:1+o2.Len+o3.Len], []byte{0x48, 0x87, 0x04, 0x24}) {
				t.Fatalf("push sequence % x (lea target %#x, want %#x)", r.Code, o2.RIPTarget, ret)
			}
			jmpOff = 1 + o2.Len + o3.Len
		}
		j := dec(jmpOff)
		if in.Kind == x86dec.KindCallIndirect {
			// the same operand, as jmp *: only ModRM.reg and a RIP-relative disp differ
			if j.Kind != x86dec.KindJmpIndirect || j.Len != in.Len || at+uint64(jmpOff+j.Len) != end || j.RIPRel != in.RIPRel || j.RIPTarget != in.RIPTarget {
				t.Fatalf("push-jmp indirect % x: kind %v rip %v %#x, want jmp * with rip %v %#x", r.Code[jmpOff:], j.Kind, j.RIPRel, j.RIPTarget, in.RIPRel, in.RIPTarget)
			}
			a, b := append([]byte(nil), r.Code[jmpOff:]...), append([]byte(nil), orig[:in.Len]...)
			a[j.ModRMOff] &^= 0x38
			b[in.ModRMOff] &^= 0x38
			if in.RIPRel {
				copy(a[j.DispOff:j.DispOff+4], make([]byte, 4))
				copy(b[in.DispOff:in.DispOff+4], make([]byte, 4))
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("push-jmp indirect % x changed more than ModRM.reg of % x", r.Code[jmpOff:], orig[:in.Len])
			}
			break
		}
		if j.Kind != x86dec.KindJmp || j.Target != in.Target || at+uint64(jmpOff+j.Len) != end {
			t.Fatalf("push-jmp jmp: target %#x, want %#x", j.Target, in.Target)
		}
	}
}

func TestRelocate(t *testing.T) {
	places := []struct{ pc, at uint64 }{
		{0x401000, 0x402000},
		{0x401000, 0x401000},
		{0x555555559000, 0x555555559000 + 0x7ff00000},
		{0x7ff00000 + 0x1000, 0x2000},
		{0x1000, 0x40000000},
	}
	for _, c := range relocCases {
		for _, p := range places {
			code := hx(t, c.code)
			r, err := Relocate(append(code, 0x90, 0x90), p.pc, p.at, Options{})
			if err != nil {
				if errors.Is(err, ErrRelocate) && strings.Contains(err.Error(), "rel32 reach") {
					continue // checked in TestRelocateReach
				}
				t.Fatalf("%s at %#x -> %#x: %v", c.name, p.pc, p.at, err)
			}
			if r.Form != c.form {
				t.Errorf("%s: form %v, want %v", c.name, r.Form, c.form)
			}
			if r.Single != (c.form != FormSandwich) {
				t.Errorf("%s: single %v", c.name, r.Single)
			}
			checkRelocated(t, code, p.pc, p.at, Options{}, r)
		}
	}
}

func TestRelocateCallPushJmp(t *testing.T) {
	call := hx(t, "e8 10 00 00 00")
	for _, p := range []struct{ pc, at uint64 }{
		{0x401000, 0x500000},             // ret < 2^31: push imm32
		{0x7ffffff0, 0x80001000},         // ret just above 2^31: lea/xchg
		{0x555555559000, 0x55555a000000}, // PIE
	} {
		r, err := Relocate(call, p.pc, p.at, Options{CallPushJmp: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Form != FormCallPushJmp || r.Single {
			t.Fatalf("form %v single %v", r.Form, r.Single)
		}
		checkRelocated(t, call, p.pc, p.at, Options{CallPushJmp: true}, r)
	}
	// indirect calls: push, then the same operand as jmp *
	for _, c := range []string{"ff d0", "41 ff d3", "ff 15 10 20 00 00", "3e ff d0", "ff 50 08", "41 ff 54 c5 10", "ff 14 c5 00 10 40 00"} {
		code := hx(t, c)
		for _, p := range []struct{ pc, at uint64 }{{0x401000, 0x500000}, {0x555555559000, 0x55555a000000}} {
			r, err := Relocate(code, p.pc, p.at, Options{CallPushJmp: true})
			if err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			if r.Form != FormCallPushJmp || r.Single {
				t.Fatalf("%s: form %v single %v", c, r.Form, r.Single)
			}
			checkRelocated(t, code, p.pc, p.at, Options{CallPushJmp: true}, r)
		}
		// without the option an indirect call is copied (or its disp relocated)
		if r, err := Relocate(code, 0x401000, 0x500000, Options{}); err != nil || r.Form == FormCallPushJmp {
			t.Fatalf("%s without CallPushJmp: %v %v", c, r.Form, err)
		}
	}
	// an operand that reads %rsp would move with the push
	for _, c := range []string{"ff d4", "ff 54 24 08", "ff 14 24", "ff 14 64"} {
		if _, err := Relocate(hx(t, c), 0x401000, 0x500000, Options{CallPushJmp: true}); !errors.Is(err, ErrRelocate) || !strings.Contains(err.Error(), "rsp") && !strings.Contains(err.Error(), "stack") {
			t.Errorf("%s: err %v, want a refusal naming the stack pointer", c, err)
		}
	}
	// in a PIE every return address moves with the code: always RIP-relative
	pic := Options{CallPushJmp: true, PIC: true}
	r, err := Relocate(call, 0x1000, 0x500000, pic)
	if err != nil || r.Code[0] != 0x50 {
		t.Fatalf("PIC push: % x %v", r.Code, err)
	}
	checkRelocated(t, call, 0x1000, 0x500000, pic, r)
	if n, _ := RelocatedLen(call, 0x1000, pic); n != 17 {
		t.Errorf("PIC push-jmp length %d", n)
	}
	// other instructions are unaffected by the option
	r, err = Relocate(hx(t, "48 8b 05 10 20 00 00"), 0x401000, 0x402000, Options{CallPushJmp: true})
	if err != nil || r.Form != FormRIPRel {
		t.Fatalf("%v %v", r.Form, err)
	}
}

func TestRelocateReach(t *testing.T) {
	// 3 GiB apart: neither the RIP-relative operand nor the branch target reach
	for _, c := range []string{"48 8b 05 00 00 00 00", "e9 00 00 00 00", "74 00", "e2 00", "e8 00 00 00 00"} {
		_, err := Relocate(hx(t, c), 0x10000000, 0xd0000000, Options{})
		if !errors.Is(err, ErrRelocate) || !strings.Contains(err.Error(), "rel32 reach") {
			t.Errorf("%s: err %v, want an out-of-reach error", c, err)
		}
	}
	// just in reach
	target := uint64(0x10000000 + 7 + 0x10)
	code := hx(t, "48 8b 05 10 00 00 00")
	at := target + 1<<31 - 7 // disp = target - (at+7) = -2^31, the limit
	r, err := Relocate(code, 0x10000000, at, Options{})
	if err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	checkRelocated(t, code, 0x10000000, at, Options{}, r)
	if _, err := Relocate(code, 0x10000000, at+1, Options{}); err == nil {
		t.Fatal("one past the limit relocated")
	}
}

func TestRelocateRefuses(t *testing.T) {
	for _, c := range []struct{ name, code, want string }{
		{"syscall", "0f 05", "syscall"},
		{"int3", "cc", "int3"},
		{"xbegin", "c7 f8 00 00 00 00", "xbegin"},
		{"ud2", "0f 0b", "traps"},
		{"in", "ec", "port I/O"},
		{"truncated", "48 8b 05 00", "decode"},
		{"eip-relative", "67 48 8b 05 00 00 00 00", "EIP-relative"},
	} {
		_, err := Relocate(hx(t, c.code), 0x401000, 0x402000, Options{})
		if !errors.Is(err, ErrRelocate) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrRelocate mentioning %q", c.name, err, c.want)
		}
	}
}

func TestJmpRel32(t *testing.T) {
	j, err := JmpRel32(0x401000, 0x400000)
	if err != nil || !bytes.Equal(j, []byte{0xe9, 0xfb, 0xef, 0xff, 0xff}) {
		t.Fatalf("% x %v", j, err)
	}
	if _, err := JmpRel32(0, 1<<33); err == nil {
		t.Fatal("out of reach accepted")
	}
	stub, err := EntryStub(0x800000, 0x401020)
	if err != nil {
		t.Fatal(err)
	}
	in, err := x86dec.Decode(stub, 0x800000)
	if err != nil || in.Kind != x86dec.KindJmp || in.Target != 0x401020 || len(stub) != EntryStubLen {
		t.Fatalf("entry stub % x: %+v %v", stub, in, err)
	}
}

// FuzzRelocate checks that Relocate never panics and that whatever it makes decodes
// back to the same operation.
func FuzzRelocate(f *testing.F) {
	for _, c := range relocCases {
		b, _ := hex.DecodeString(strings.ReplaceAll(c.code, " ", ""))
		f.Add(b, uint64(0x401000), uint64(0x402000), false)
		f.Add(b, uint64(0x555555559000), uint64(0x555555559000+0x10000000), true)
	}
	f.Fuzz(func(t *testing.T, code []byte, pc, at uint64, push bool) {
		opt := Options{CallPushJmp: push, PIC: at&1 != 0}
		r, err := Relocate(code, pc, at, opt)
		if err != nil {
			if !errors.Is(err, ErrRelocate) {
				t.Fatalf("error does not wrap ErrRelocate: %v", err)
			}
			return
		}
		checkRelocated(t, code, pc, at, opt, r)
	})
}
