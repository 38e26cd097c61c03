package x86dec

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

func hx(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

const testPC = 0x401000

var testPCv uint64 = testPC // for wrapping arithmetic

// want is what a test case expects; zero fields that are not listed in
// check are not compared.
type want struct {
	len       int
	kind      Kind
	trusted   bool
	ripRel    bool
	dispOff   int
	ripTarget uint64
	relOff    int
	relSize   int
	target    uint64
	op        x86asm.Op
	noOOL     string // substring of NoOutOfLine; "-" means must be empty
	endbr     bool
}

func checkInst(t *testing.T, name string, code []byte, w want) {
	t.Helper()
	in, err := Decode(code, testPC)
	if err != nil {
		t.Errorf("%s: Decode(% x): %v", name, code, err)
		return
	}
	if in.Len != w.len {
		t.Errorf("%s: Len = %d, want %d", name, in.Len, w.len)
	}
	if in.Kind != w.kind {
		t.Errorf("%s: Kind = %v, want %v", name, in.Kind, w.kind)
	}
	if in.Trusted != w.trusted {
		t.Errorf("%s: Trusted = %v, want %v (Agree %v)", name, in.Trusted, w.trusted, in.Agree)
	}
	if in.RIPRel != w.ripRel || w.ripRel && (in.DispOff != w.dispOff || in.RIPTarget != w.ripTarget) {
		t.Errorf("%s: RIPRel %v DispOff %d RIPTarget %#x, want %v %d %#x", name, in.RIPRel, in.DispOff, in.RIPTarget,
			w.ripRel, w.dispOff, w.ripTarget)
	}
	if w.relSize != 0 && (in.RelOff != w.relOff || in.RelSize != w.relSize || in.Target != w.target) {
		t.Errorf("%s: RelOff %d RelSize %d Target %#x, want %d %d %#x", name, in.RelOff, in.RelSize, in.Target,
			w.relOff, w.relSize, w.target)
	}
	if w.relSize == 0 && in.Kind.IsDirectBranch() {
		t.Errorf("%s: direct branch without expected rel field", name)
	}
	if w.op != 0 && in.Op != w.op {
		t.Errorf("%s: Op = %v, want %v", name, in.Op, w.op)
	}
	switch {
	case w.noOOL == "-" && in.NoOutOfLine != "":
		t.Errorf("%s: NoOutOfLine = %q, want empty", name, in.NoOutOfLine)
	case w.noOOL != "" && w.noOOL != "-" && !strings.Contains(in.NoOutOfLine, w.noOOL):
		t.Errorf("%s: NoOutOfLine = %q, want it to mention %q", name, in.NoOutOfLine, w.noOOL)
	}
	if in.Endbr != w.endbr {
		t.Errorf("%s: Endbr = %v", name, in.Endbr)
	}
	// The fast path must agree on everything but the x86asm fields.
	fast, ferr := DecodeFast(code, testPC)
	fast.Op, fast.Agree, fast.Trusted = in.Op, in.Agree, in.Trusted
	if ferr != nil || fast != in {
		t.Errorf("%s: DecodeFast = %+v, %v; Decode = %+v", name, fast, ferr, in)
	}
	if n, lerr := Length(code); n != in.Len || lerr != nil {
		t.Errorf("%s: Length = %d, %v", name, n, lerr)
	}
}

// TestX86asmPitfalls pins every x86asm failure listed in docs/design.md (decision 1).
func TestX86asmPitfalls(t *testing.T) {
	const pc = testPC
	tests := []struct {
		name string
		code string
		w    want
	}{
		// x86asm returns a wrong length for vzeroupper/vzeroall, no error.
		{"vzeroupper", "c5 f8 77 48 89 e5", want{len: 3, trusted: true, noOOL: "-"}},
		{"vzeroall", "c5 fc 77 c3", want{len: 3, trusted: true, noOOL: "-"}},
		{"vzeroupper vex3", "c4 e1 78 77 90", want{len: 4, trusted: true, noOOL: "-"}},
		// 1-byte Op == 0 with err == nil.
		{"endbr64", "f3 0f 1e fa 55", want{len: 4, trusted: true, endbr: true, noOOL: "-"}},
		{"endbr32", "f3 0f 1e fb", want{len: 4, trusted: true, endbr: true, noOOL: "-"}},
		{"adcx", "66 0f 38 f6 c1", want{len: 5, trusted: true, noOOL: "-"}},
		{"adox", "f3 0f 38 f6 c1", want{len: 5, trusted: true, noOOL: "-"}},
		{"adcx rex.w", "66 48 0f 38 f6 c1", want{len: 6, trusted: true, noOOL: "-"}},
		{"adox rip", "f3 48 0f 38 f6 05 10 00 00 00", want{len: 10, trusted: true, ripRel: true, dispOff: 6,
			ripTarget: pc + 10 + 0x10, noOOL: "-"}},
		{"fs vmovdqa rip", "64 c5 f9 6f 05 10 00 00 00", want{len: 9, trusted: true, ripRel: true, dispOff: 5,
			ripTarget: pc + 9 + 0x10, op: x86asm.VMOVDQA, noOOL: "-"}},
		{"cs vpbroadcastd rip", "2e c4 e2 79 18 05 f0 ff ff ff", want{len: 10, trusted: true, ripRel: true, dispOff: 6,
			ripTarget: pc + 10 - 0x10, noOOL: "-"}},
		// RIP-relative VEX/EVEX operands (x86asm reports them absolute).
		{"vmovdqa xmm0,[rip+x]", "c5 f9 6f 05 10 00 00 00", want{len: 8, trusted: true, ripRel: true, dispOff: 4,
			ripTarget: pc + 8 + 0x10, op: x86asm.VMOVDQA, noOOL: "-"}},
		{"vmovdqu [rip-x],ymm0", "c5 fe 7f 05 f0 ff ff ff", want{len: 8, trusted: true, ripRel: true, dispOff: 4,
			ripTarget: pc + 8 - 0x10, noOOL: "-"}},
		{"vbroadcastss vex3 rip", "c4 e2 7d 18 05 00 01 00 00", want{len: 9, trusted: true, ripRel: true, dispOff: 5,
			ripTarget: pc + 9 + 0x100, noOOL: "-"}},
		{"vpermq imm8 after rip disp", "c4 e3 fd 00 05 10 00 00 00 01", want{len: 10, trusted: true, ripRel: true, dispOff: 5,
			ripTarget: pc + 10 + 0x10, noOOL: "-"}},
		{"evex vmovdqa32 zmm0,[rip+x]", "62 f1 7d 48 6f 05 01 02 03 04", want{len: 10, trusted: true, ripRel: true, dispOff: 6,
			ripTarget: pc + 10 + 0x04030201, noOOL: "-"}},
		{"evex vpternlogd imm8 after rip disp", "62 f3 75 48 25 05 f0 ff ff ff 96", want{len: 11, trusted: true, ripRel: true,
			dispOff: 6, ripTarget: pc + 11 - 0x10, noOOL: "-"}},
		{"evex disp8*N keeps length", "62 f1 75 48 fe 51 01", want{len: 7, trusted: true, noOOL: "-"}},
		{"evex fp16 map5 rip", "62 f5 6c 48 58 1d 10 00 00 00", want{len: 10, trusted: true, ripRel: true, dispOff: 6,
			ripTarget: pc + 10 + 0x10, noOOL: "-"}},
		// XOP (x86asm fails), including RIP-relative operands and immediates.
		{"xop vpcmov", "8f e8 78 a2 c1 00", want{len: 6, trusted: true, noOOL: "-"}},
		{"xop vpcmov rip is4", "8f e8 74 a2 05 10 00 00 00 20", want{len: 10, trusted: true, ripRel: true, dispOff: 5,
			ripTarget: pc + 10 + 0x10, noOOL: "-"}},
		{"xop vfrczps map9", "8f e9 78 80 c1", want{len: 5, trusted: true, noOOL: "-"}},
		{"xop bextr imm32 rip", "8f ea 78 10 05 10 00 00 00 34 12 00 00", want{len: 13, trusted: true, ripRel: true, dispOff: 5,
			ripTarget: pc + 13 + 0x10, noOOL: "-"}},
		{"rdpkru", "0f 01 ee", want{len: 3, trusted: true, noOOL: "-"}},
		{"wrpkru", "0f 01 ef", want{len: 3, trusted: true, noOOL: "-"}},
		{"rdseed eax", "0f c7 f8", want{len: 3, trusted: true, noOOL: "-"}},
		{"rdseed rax", "48 0f c7 f8", want{len: 4, trusted: true, noOOL: "-"}},
		{"rdrand eax", "0f c7 f0", want{len: 3, trusted: true, noOOL: "-"}},
		// Mem.Disp of a RIP-relative operand is an int32.
		{"mov rax,[rip-16]", "48 8b 05 f0 ff ff ff", want{len: 7, trusted: true, ripRel: true, dispOff: 3,
			ripTarget: pc + 7 - 16, op: x86asm.MOV, noOOL: "-"}},
		{"lea rip max negative", "48 8d 05 00 00 00 80", want{len: 7, trusted: true, ripRel: true, dispOff: 3,
			ripTarget: testPCv + 7 - 0x80000000, op: x86asm.LEA, noOOL: "-"}},
		{"movq $imm32,[rip] imm after disp", "48 c7 05 10 00 00 00 78 56 34 12", want{len: 11, trusted: true, ripRel: true,
			dispOff: 3, ripTarget: pc + 11 + 0x10, noOOL: "-"}},
		{"cmpb $1,[rip]", "80 3d 10 00 00 00 01", want{len: 7, trusted: true, ripRel: true, dispOff: 2,
			ripTarget: pc + 7 + 0x10, noOOL: "-"}},
	}
	for _, tc := range tests {
		checkInst(t, tc.name, hx(t, tc.code), tc.w)
	}
}

func TestControlFlow(t *testing.T) {
	const pc = testPC
	tests := []struct {
		name string
		code string
		w    want
	}{
		{"jmp rel8 self", "eb fe", want{len: 2, kind: KindJmp, trusted: true, relOff: 1, relSize: 1, target: pc, noOOL: "-"}},
		{"jmp rel32", "e9 00 01 00 00", want{len: 5, kind: KindJmp, trusted: true, relOff: 1, relSize: 4, target: pc + 5 + 0x100, noOOL: "-"}},
		{"jmp rel32 back", "e9 fb ff ff ff", want{len: 5, kind: KindJmp, trusted: true, relOff: 1, relSize: 4, target: pc, noOOL: "-"}},
		{"je rel8", "74 10", want{len: 2, kind: KindJcc, trusted: true, relOff: 1, relSize: 1, target: pc + 0x12, noOOL: "-"}},
		{"jne rel32", "0f 85 f0 ff ff ff", want{len: 6, kind: KindJcc, trusted: true, relOff: 2, relSize: 4, target: pc + 6 - 0x10, noOOL: "-"}},
		{"bnd jmp rel32", "f2 e9 00 00 00 00", want{len: 6, kind: KindJmp, trusted: true, relOff: 2, relSize: 4, target: pc + 6, noOOL: "-"}},
		{"ds jcc hint", "3e 74 00", want{len: 3, kind: KindJcc, trusted: true, relOff: 2, relSize: 1, target: pc + 3, noOOL: "-"}},
		{"loop", "e2 fe", want{len: 2, kind: KindLoop, trusted: true, relOff: 1, relSize: 1, target: pc, noOOL: "-"}},
		{"loope", "e1 00", want{len: 2, kind: KindLoop, trusted: true, relOff: 1, relSize: 1, target: pc + 2, noOOL: "-"}},
		{"loopne", "e0 00", want{len: 2, kind: KindLoop, trusted: true, relOff: 1, relSize: 1, target: pc + 2, noOOL: "-"}},
		{"jrcxz", "e3 05", want{len: 2, kind: KindLoop, trusted: true, relOff: 1, relSize: 1, target: pc + 7, noOOL: "-"}},
		{"jecxz", "67 e3 05", want{len: 3, kind: KindLoop, trusted: true, relOff: 2, relSize: 1, target: pc + 8, noOOL: "-"}},
		{"call rel32", "e8 00 00 00 00", want{len: 5, kind: KindCall, trusted: true, relOff: 1, relSize: 4, target: pc + 5, noOOL: "-"}},
		{"tls call data16 data16 rex.w", "66 66 48 e8 00 00 00 00", want{len: 8, kind: KindCall, trusted: true, relOff: 4, relSize: 4, target: pc + 8, noOOL: "-"}},
		{"ret", "c3", want{len: 1, kind: KindRet, trusted: true, noOOL: "-"}},
		{"rep ret", "f3 c3", want{len: 2, kind: KindRet, trusted: true, noOOL: "-"}},
		{"ret imm16", "c2 08 00", want{len: 3, kind: KindRet, trusted: true, noOOL: "-"}},
		{"jmp *rax", "ff e0", want{len: 2, kind: KindJmpIndirect, trusted: true, noOOL: "-"}},
		{"notrack jmp *(rax,rdx,8)", "3e ff 24 d0", want{len: 4, kind: KindJmpIndirect, trusted: true, noOOL: "-"}},
		{"call *[rip]", "ff 15 10 00 00 00", want{len: 6, kind: KindCallIndirect, trusted: true, ripRel: true, dispOff: 2,
			ripTarget: pc + 6 + 0x10, noOOL: "-"}},
		{"jmp *[rip] plt", "ff 25 10 00 00 00", want{len: 6, kind: KindJmpIndirect, trusted: true, ripRel: true, dispOff: 2,
			ripTarget: pc + 6 + 0x10, noOOL: "-"}},
		{"ljmp *[rax]", "ff 28", want{len: 2, kind: KindJmpFar, trusted: true, noOOL: "far"}},
		{"lcall *[rax]", "ff 18", want{len: 2, kind: KindCallFar, trusted: true, noOOL: "far"}},
		{"lret", "cb", want{len: 1, kind: KindRetFar, trusted: true, noOOL: "far"}},
		{"lret imm16", "ca 08 00", want{len: 3, kind: KindRetFar, trusted: true, noOOL: "far"}},
		{"iretq", "48 cf", want{len: 2, kind: KindIret, trusted: true, noOOL: "iret"}},
		{"int3", "cc", want{len: 1, kind: KindInt3, trusted: true, noOOL: "int3"}},
		{"int 0x80", "cd 80", want{len: 2, kind: KindTrap, trusted: true, noOOL: "trap"}},
		{"int1", "f1", want{len: 1, kind: KindTrap, trusted: true, noOOL: "trap"}},
		{"hlt", "f4", want{len: 1, kind: KindTrap, trusted: true, noOOL: "trap"}},
		{"ud2", "0f 0b", want{len: 2, kind: KindTrap, trusted: true, noOOL: "trap"}},
		{"ud1", "0f b9 00", want{len: 3, kind: KindTrap, trusted: true, noOOL: "trap"}},
		{"syscall", "0f 05", want{len: 2, kind: KindSyscall, trusted: true, noOOL: "syscall"}},
		{"sysenter", "0f 34", want{len: 2, kind: KindSyscall, trusted: true, noOOL: "syscall"}},
		{"xbegin rel32", "c7 f8 10 00 00 00", want{len: 6, kind: KindXbegin, trusted: true, relOff: 2, relSize: 4,
			target: pc + 6 + 0x10, noOOL: "xbegin"}},
		{"xbegin rel16", "66 c7 f8 10 00", want{len: 5, kind: KindXbegin, trusted: true, relOff: 3, relSize: 2,
			target: pc + 5 + 0x10, noOOL: "xbegin"}},
		{"xabort", "c6 f8 01", want{len: 3, trusted: true, noOOL: "-"}},
	}
	for _, tc := range tests {
		checkInst(t, tc.name, hx(t, tc.code), tc.w)
	}
	fall := map[string]bool{"eb fe": false, "c3": false, "ff e0": false, "0f 0b": false, "f4": false, "cb": false,
		"74 00": true, "e8 00 00 00 00": true, "cc": true, "cd 80": true, "ff d0": true, "90": true}
	for code, want := range fall {
		in, err := Decode(hx(t, code), pc)
		if err != nil || in.FallsThrough() != want {
			t.Errorf("FallsThrough(%s) = %v, %v; want %v", code, in.FallsThrough(), err, want)
		}
	}
}

// TestLengths covers the structural corner cases of the length decoder.
func TestLengths(t *testing.T) {
	tests := []struct {
		code string
		n    int
	}{
		{"48 b8 88 77 66 55 44 33 22 11", 10}, // movabs $imm64,%rax
		{"49 b8 88 77 66 55 44 33 22 11", 10}, // movabs $imm64,%r8
		{"66 b8 34 12", 4},                    // mov $imm16,%ax
		{"b8 78 56 34 12", 5},
		{"48 c7 c0 ff ff ff ff", 7},           // mov $-1,%rax (imm32 sign-extended)
		{"a1 88 77 66 55 44 33 22 11", 9},     // movabs moffs64,%eax
		{"48 a3 88 77 66 55 44 33 22 11", 10}, // movabs %rax,moffs64
		{"67 a1 04 03 02 01", 6},              // addr32 moffs32
		{"c8 10 00 01", 4},                    // enter $0x10,$1
		{"f6 c0 01", 3},                       // test $1,%al (f6 /0 ib)
		{"f6 c8 01", 3},                       // f6 /1 alias
		{"f6 d0", 2},                          // not %al: no imm
		{"f7 c0 78 56 34 12", 6},              // test $imm32,%eax
		{"66 f7 c0 34 12", 5},                 // test $imm16,%ax
		{"48 f7 c0 78 56 34 12", 7},           // test $imm32,%rax
		{"f7 d8", 2},                          // neg
		{"f7 38", 2},                          // idivl (%rax)
		{"66 68 34 12", 4},                    // pushw $imm16
		{"68 78 56 34 12", 5},
		{"6a 01", 2},
		{"69 c0 2c 01 00 00", 6},                 // imul $300,%eax,%eax
		{"66 69 c0 2c 01", 5},                    // imul $300,%ax,%ax
		{"6b c0 03", 3},                          // imul $3
		{"66 81 05 10 00 00 00 34 12", 9},        // addw $imm16,rip
		{"8b 04 85 00 00 00 00", 7},              // SIB, no base: disp32
		{"8b 45 00", 3},                          // (%rbp) needs disp8
		{"41 8b 45 00", 4},                       // (%r13) too
		{"8b 04 24", 3},                          // (%rsp) needs SIB
		{"8b 84 24 78 56 34 12", 7},              // disp32(%rsp)
		{"8b 04 25 78 56 34 12", 7},              // absolute disp32
		{"67 8b 00", 3},                          // addr32 (%eax)
		{"0f 20 05", 3},                          // mov %cr0,%rbp: mod ignored
		{"0f 0f c1 b4", 4},                       // 3DNow! pfmul: imm8 suffix
		{"0f 0f 40 10 b4", 5},                    // with disp8
		{"0f 0f 05 10 00 00 00 96", 8},           // with rip disp32
		{"66 0f 78 c0 01 02", 6},                 // extrq $1,$2
		{"f2 0f 78 c1 01 02", 6},                 // insertq
		{"66 0f 79 c1", 4},                       // extrq xmm,xmm
		{"0f 3a 0f c1 03", 5},                    // palignr mmx
		{"66 0f 3a 0f 05 10 00 00 00 03", 10},    // palignr rip
		{"66 0f 38 00 c1", 5},                    // pshufb
		{"0f ba e0 03", 4},                       // bt $3
		{"0f a4 c1 03", 4},                       // shld imm8
		{"0f c2 c1 01", 4},                       // cmpps
		{"66 0f 71 d0 01", 5},                    // psrlw $1
		{"c5 f9 71 d0 01", 5},                    // vpsrlw $1
		{"c4 e3 79 14 c0 01", 6},                 // vpextrb
		{"c4 e3 71 4a c2 30", 6},                 // vblendvps is4
		{"0f 01 d0", 3},                          // xgetbv
		{"d9 3c 24", 3},                          // fnstcw (%rsp)
		{"dd 05 10 00 00 00", 6},                 // fldl rip
		{"9b", 1},                                // fwait
		{"62 f3 75 48 25 c2 96", 7},              // vpternlogd reg
		{"62 f1 7c 48 c2 c1 01", 7},              // vcmpps k: imm8
		{"62 f2 7d 48 58 c1", 6},                 // vpbroadcastd: no imm (map 2)
		{"62 f1 fd 48 7f 84 24 00 01 00 00", 11}, // vmovdqa64 disp32(%rsp)
		{"c4 e2 78 49 00", 5},                    // ldtilecfg (%rax)
		{"c5 f8 ae 15 10 00 00 00", 8},           // vldmxcsr rip
		{"66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", 15},
		{"2e 66 0f 1f 84 00 00 00 00 00", 10}, // cs nopw
		{"66 2e 0f 1f 84 00 00 00 00 00", 10},
		{"0f 1f 44 00 00", 5},
		{"f0 48 0f b1 0a", 5}, // lock cmpxchg
		{"f0 83 00 01", 4},    // lock addl $1,(%rax)
		{"f0 0f c7 0e", 4},    // lock cmpxchg8b
		{"0f a6 c0", 3},       // VIA montmul
		{"8c d8", 2},          // mov %ds,%eax
	}
	for _, tc := range tests {
		code := hx(t, tc.code)
		n, err := Length(code)
		if err != nil || n != tc.n {
			t.Errorf("Length(%s) = %d, %v; want %d", tc.code, n, err, tc.n)
		}
		// The decoder must not need bytes past the instruction, and must
		// report truncation one byte short of it.
		if n2, err := Length(code[:tc.n]); n2 != tc.n || err != nil {
			t.Errorf("Length(%s exact) = %d, %v", tc.code, n2, err)
		}
		if _, err := Length(code[:tc.n-1]); !errors.Is(err, ErrTruncated) {
			t.Errorf("Length(%s minus one byte) error = %v, want ErrTruncated", tc.code, err)
		}
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		code   string
		err    error
		n      int    // structural length still reported (0: none)
		reason string // substring of the error
	}{
		{"", ErrTruncated, 0, ""},
		{"e8 00 00", ErrTruncated, 0, ""},
		{"0f", ErrTruncated, 0, ""},
		{"0f 38", ErrTruncated, 0, ""},
		{"c5 f8", ErrTruncated, 0, ""},
		{"62 f1 7d 48", ErrTruncated, 0, ""},
		{"66 66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", ErrTooLong, 0, ""},
		{"66 66 66 66 66 66 66 66 66 66 66 66 66 48 b8 01 02 03 04 05 06 07 08", ErrTooLong, 0, ""},
		{"06", ErrInvalid, 1, "undefined in 64-bit"},
		{"27", ErrInvalid, 1, "undefined in 64-bit"},
		{"60", ErrInvalid, 1, "undefined in 64-bit"},
		{"82 c0 01", ErrInvalid, 1, "undefined in 64-bit"},
		{"9a 00 00 00 00 00 00", ErrInvalid, 1, "undefined in 64-bit"},
		{"ea 00 00 00 00 00 00", ErrInvalid, 1, "undefined in 64-bit"},
		{"ce", ErrInvalid, 1, "undefined in 64-bit"},
		{"d4 0a", ErrInvalid, 1, "undefined in 64-bit"},
		{"d6", ErrInvalid, 1, "undefined in 64-bit"},
		{"0f 04", ErrInvalid, 2, "undefined in 64-bit"},
		{"66 c5 f8 77", ErrInvalid, 4, "after a 66/f2/f3/lock/REX"},
		{"48 c5 f8 77", ErrInvalid, 4, "after a 66/f2/f3/lock/REX"},
		{"f3 62 f1 7d 48 6f c1", ErrInvalid, 7, "after a 66/f2/f3/lock/REX"},
		{"66 e8 00 00 00 00", ErrInvalid, 6, "Intel and AMD disagree"},
		{"66 0f 84 00 00 00 00", ErrInvalid, 7, "Intel and AMD disagree"},
		{"f0 01 c0", ErrInvalid, 3, "lock"},
		{"f0 90", ErrInvalid, 2, "lock"},
		{"f0 83 38 01", ErrInvalid, 4, "lock"}, // lock cmp
		{"8d c0", ErrInvalid, 2, "lea"},
		{"8f e0", ErrInvalid, 2, "8f group"}, // reg=4: not XOP (mmmmm < 8)
		{"ff f8", ErrInvalid, 2, "ff group"},
		{"ff d8", ErrInvalid, 2, "far call/jmp with a register"},
		{"fe d0", ErrInvalid, 2, "fe group"},
		{"c7 c8 00 00 00 00", ErrInvalid, 6, "c6/c7 group"},
		{"8e c8", ErrInvalid, 2, "cs"},
		{"48 66 90", ErrInvalid, 3, "REX prefix not adjacent"},
		{"48 48 90", ErrInvalid, 3, "REX prefix not adjacent"},
		{"c4 e4 78 00 c0", ErrInvalid, 5, "VEX opcode map"},
		{"62 f9 7d 48 6f c1", ErrInvalid, 6, "EVEX"},
		{"62 f4 7d 48 6f c1", ErrInvalid, 6, "EVEX opcode map"},
	}
	for _, tc := range tests {
		code := hx(t, tc.code)
		in, err := Decode(code, testPC)
		if !errors.Is(err, tc.err) {
			t.Errorf("Decode(%s) error = %v, want %v", tc.code, err, tc.err)
			continue
		}
		if tc.reason != "" && !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("Decode(%s) error %q does not say %q", tc.code, err, tc.reason)
		}
		if in.Len != tc.n {
			t.Errorf("Decode(%s) Len = %d, want %d", tc.code, in.Len, tc.n)
		}
		if in.Len > 0 && in.NoOutOfLine == "" {
			t.Errorf("Decode(%s): invalid instruction without NoOutOfLine", tc.code)
		}
		if n, ferr := Length(code); !errors.Is(ferr, tc.err) || n != tc.n {
			t.Errorf("Length(%s) = %d, %v", tc.code, n, ferr)
		}
	}
}

// TestNoOutOfLine checks the uprobes-style refusals that are not tied to a
// control-flow kind.
func TestNoOutOfLine(t *testing.T) {
	tests := []struct {
		code, reason string
	}{
		{"e4 80", "port I/O"},
		{"ec", "port I/O"},
		{"6c", "port I/O"},
		{"f3 6f", "port I/O"},
		{"fa", "cli/sti"},
		{"fb", "cli/sti"},
		{"8e d0", "mov ss"},
		{"0f 22 d8", "privileged"},
		{"0f 21 f8", "privileged"},
		{"0f 30", "privileged"},
		{"0f 32", "privileged"},
		{"0f 06", "privileged"},
		{"0f 09", "privileged"},
		{"0f 01 f8", "privileged"},               // swapgs
		{"0f 01 10", "privileged"},               // lgdt
		{"0f 01 38", "privileged"},               // invlpg
		{"0f 01 d1", "privileged"},               // xsetbv
		{"0f 01 c1", "privileged"},               // vmcall
		{"0f 00 d0", "lldt"},                     // lldt
		{"0f 78 c1", "vmread"},                   // vmread
		{"66 0f 38 82 00", "invpcid"},            // invpcid
		{"f3 0f 01 ec", "uiret"},                 // uiret
		{"67 8b 05 10 00 00 00", "EIP-relative"}, // addr32 rip
		{"66 eb 00", "operand-size prefix on a near branch"},
		{"66 c3", "operand-size prefix on a near branch"},
		{"66 ff e0", "operand-size prefix on a near branch"},
		{"f2 f3 a4", "both f2 and f3"},
		{"0f 0e", "3DNow"},
	}
	for _, tc := range tests {
		in, err := Decode(hx(t, tc.code), testPC)
		if err != nil {
			t.Errorf("Decode(%s): %v", tc.code, err)
			continue
		}
		if !strings.Contains(in.NoOutOfLine, tc.reason) {
			t.Errorf("Decode(%s).NoOutOfLine = %q, want it to mention %q", tc.code, in.NoOutOfLine, tc.reason)
		}
	}
	// Ordinary instructions, including prefixes compilers emit, may run out of line.
	for _, code := range []string{"55", "48 89 e5", "f0 48 0f b1 0a", "64 48 8b 04 25 28 00 00 00",
		"2e 66 0f 1f 84 00 00 00 00 00", "f3 48 a5", "0f a2", "0f 31", "0f 01 f9", "0f 33", "9c", "9d",
		"8e d8", "0f ae f8", "c5 f8 77", "f3 0f 1e fa", "0f 00 c0"} {
		in, err := Decode(hx(t, code), testPC)
		if err != nil || in.NoOutOfLine != "" {
			t.Errorf("Decode(%s) = NoOutOfLine %q, %v; want allowed", code, in.NoOutOfLine, err)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		code, want string
	}{
		{"c5 f9 6f 05 10 00 00 00", "(%rip)"},
		{"62 f1 7d 48 6f 05 01 02 03 04", "(%rip)"},
		{"48 8b 05 f0 ff ff ff", "-0x10(%rip)"},
		{"f3 0f 1e fa", "endbr64"},
		{"62 f5 6c 48 58 1d 10 00 00 00", "avx512-fp16"},
		{"c5 f8 77", "vzeroupper"},
		{"0f 01 ee", "rdpkru"},
		{"06", "(bad)"},
		{"e8 00 00 00 00", "call"},
	}
	for _, tc := range tests {
		got := Format(hx(t, tc.code), testPC, nil)
		if !strings.Contains(got, tc.want) {
			t.Errorf("Format(%s) = %q, want it to contain %q", tc.code, got, tc.want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k := KindOther; k <= KindXbegin; k++ {
		if s := k.String(); s == "" || strings.Contains(s, "?") {
			t.Errorf("Kind(%d).String() = %q", k, s)
		}
	}
	if Kind(200).String() != "kind(?)" {
		t.Errorf("out-of-range Kind name")
	}
	if EncEVEX.String() != "evex" {
		t.Errorf("EncEVEX.String() = %q", EncEVEX.String())
	}
}

// TestDecoderMatchesDecode sweeps libc's .text: the memoised Decoder, Flow
// and DecodeFast must give exactly what Decode gives, instruction by
// instruction.
func TestDecoderMatchesDecode(t *testing.T) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skipf("libc not available: %v", err)
	}
	defer f.Close()
	sec := f.Section(".text")
	if sec == nil {
		t.Skip("libc has no .text")
	}
	text, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder()
	insns, hits := 0, 0
	for off := 0; off < len(text); {
		pc := sec.Addr + uint64(off)
		want, werr := Decode(text[off:], pc)
		got, gerr := d.Decode(text[off:], pc)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Fatalf("%#x: Decoder.Decode = %+v, %v; Decode = %+v, %v", pc, got, gerr, want, werr)
		}
		n, k, tgt, ferr := Flow(text[off:], pc)
		if n != want.Len || (ferr == nil) != (werr == nil) || werr == nil && (k != want.Kind || tgt != want.Target) {
			t.Fatalf("%#x: Flow = %d %v %#x %v; Decode = %+v, %v", pc, n, k, tgt, ferr, want, werr)
		}
		insns++
		if werr != nil || n == 0 {
			off++
			continue
		}
		off += n
	}
	hits = insns - len(d.memo)
	t.Logf("%d instructions, %d distinct shapes (memo hit rate %.1f%%)", insns, len(d.memo), 100*float64(hits)/float64(insns))
	if insns < 100000 {
		t.Fatalf("only %d instructions", insns)
	}
}
