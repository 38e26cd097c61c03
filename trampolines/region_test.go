package trampolines

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// regionCases are DCRs with every relocation form.
var regionCases = []struct {
	name  string
	code  string
	forms []Form
}{
	{"prologue", "55 48 89 e5 41 57", []Form{FormCopy, FormCopy, FormCopy}},
	{"riprel legacy", "48 8b 05 10 20 00 00 01 f8", []Form{FormRIPRel, FormCopy}},
	{"riprel imm after disp", "c7 05 00 01 00 00 78 56 34 12", []Form{FormRIPRel}},
	{"riprel vex", "c5 fe 6f 05 80 00 00 00", []Form{FormRIPRel}},
	{"riprel vex3 + copy", "c4 e2 7d 18 05 fc ff ff ff 90", []Form{FormRIPRel, FormCopy}},
	{"riprel evex + imm", "62 f3 75 48 25 05 00 01 00 00 ca", []Form{FormRIPRel}},
	{"jcc rel8 widened", "85 ff 74 05 48 89 f8", []Form{FormCopy, FormBranch32, FormCopy}},
	{"jcc rel32", "85 ff 0f 85 00 10 00 00", []Form{FormCopy, FormBranch32}},
	{"jrcxz", "89 f9 e3 05 90 90", []Form{FormCopy, FormSandwich, FormCopy, FormCopy}},
	{"loop", "83 c0 03 e2 f0", []Form{FormCopy, FormSandwich}},
	{"ends in jmp rel8", "48 89 f8 eb 10", []Form{FormCopy, FormBranch32}},
	{"ends in jmp rel32", "e9 00 01 00 00", []Form{FormBranch32}},
	{"ends in ret", "31 c0 5d c3", []Form{FormCopy, FormCopy, FormCopy}},
	{"ends in call", "48 83 ec 08 e8 00 01 00 00", []Form{FormCopy, FormCallPushJmp}},
	{"ends in call *rip", "53 ff 15 10 20 00 00", []Form{FormCopy, FormCallPushJmp}},
	{"ends in call *reg", "48 89 c3 41 ff d3", []Form{FormCopy, FormCallPushJmp}},
}

func TestRelocateRegion(t *testing.T) {
	for _, opt := range []Options{{CallPushJmp: true}, {CallPushJmp: true, PIC: true}} {
		testRelocateRegion(t, opt)
	}
}

func testRelocateRegion(t *testing.T, opt Options) {
	for _, c := range regionCases {
		code := hx(t, c.code)
		for _, p := range []struct{ pc, at uint64 }{
			{0x401000, 0x900000},
			{0x555555559000, 0x555555559000 + 0x4000000},
			{0x7fff0000, 0x90000000}, // return addresses above 2^31: the lea/xchg push
		} {
			r, err := RelocateRegion(code, p.pc, p.at, opt)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			n, err := RegionLen(code, p.pc, opt)
			if err != nil || n != len(r.Code) {
				t.Fatalf("%s: RegionLen %d %v, made %d", c.name, n, err, len(r.Code))
			}
			if len(r.Insns) != len(c.forms) || r.OrigLen != len(code) {
				t.Fatalf("%s: %d instructions, want %d", c.name, len(r.Insns), len(c.forms))
			}
			for i, rl := range r.Insns {
				if rl.Form != c.forms[i] {
					t.Errorf("%s: instruction %d form %v, want %v", c.name, i, rl.Form, c.forms[i])
				}
				// each copy decodes back to what the original did at its place
				orig := code[r.OrigOffsets[i]:]
				at := p.at + uint64(r.Offsets[i])
				end := len(r.Code)
				if i+1 < len(r.Insns) {
					end = r.Offsets[i+1]
				}
				if !bytes.Equal(rl.Code, r.Code[r.Offsets[i]:end]) {
					t.Fatalf("%s: instruction %d is not where Offsets says", c.name, i)
				}
				checkRelocated(t, orig, p.pc+uint64(r.OrigOffsets[i]), at, opt, rl)
				// a suffix of the block is the relocation of the suffix (verify mode's
				// inner-byte slots rely on it)
				s, err := RelocateRegion(code[r.OrigOffsets[i]:], p.pc+uint64(r.OrigOffsets[i]), at, opt)
				if err != nil || !bytes.Equal(s.Code, r.Code[r.Offsets[i]:]) {
					t.Fatalf("%s: suffix from %d differs: %v", c.name, i, err)
				}
				if off, ok := r.OffsetOf(r.OrigOffsets[i]); !ok || off != r.Offsets[i] {
					t.Fatalf("%s: OffsetOf(%d) = %d %v", c.name, r.OrigOffsets[i], off, ok)
				}
			}
			if _, ok := r.OffsetOf(1); ok && r.OrigOffsets[1] != 1 {
				t.Fatalf("%s: OffsetOf inside an instruction", c.name)
			}
			// the copy decodes linearly into instructions with no gap
			for off := 0; off < len(r.Code); {
				in, err := x86dec.Decode(r.Code[off:], p.at+uint64(off))
				if err != nil {
					t.Fatalf("%s: copy % x does not decode at +%d: %v", c.name, r.Code, off, err)
				}
				off += in.Len
			}
		}
	}
}

func TestRelocateRegionRefuses(t *testing.T) {
	opt := Options{CallPushJmp: true}
	for _, c := range []struct{ name, code, want string }{
		{"call in the middle", "e8 00 01 00 00 90", "return into it"},
		{"indirect call in the middle", "ff d0 90 90 90", "return into it"},
		{"truncated", "48 8b 05 10 20", "truncated"},
		{"empty", "", "empty"},
		{"syscall", "90 0f 05 90 90", "syscall"},
	} {
		_, err := RelocateRegion(hx(t, c.code), 0x401000, 0x900000, opt)
		if !errors.Is(err, ErrRelocate) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrRelocate mentioning %q", c.name, err, c.want)
		}
		if _, err2 := RegionLen(hx(t, c.code), 0x401000, opt); err2 == nil {
			t.Errorf("%s: RegionLen accepted it", c.name)
		}
	}
	// without CallPushJmp a call anywhere is a call rel32
	r, err := RelocateRegion(hx(t, "e8 00 01 00 00 90"), 0x401000, 0x900000, Options{})
	if err != nil || r.Insns[0].Form != FormBranch32 {
		t.Fatalf("%v", err)
	}
}

// FuzzRelocateRegion: never panics; whatever it makes has consistent offsets.
func FuzzRelocateRegion(f *testing.F) {
	for _, c := range regionCases {
		f.Add(hx(f, c.code), uint64(0x401000), uint64(0x900000))
	}
	f.Fuzz(func(t *testing.T, code []byte, pc, at uint64) {
		opt := Options{CallPushJmp: true, PIC: pc&1 != 0}
		r, err := RelocateRegion(code, pc, at, opt)
		if err != nil {
			if !errors.Is(err, ErrRelocate) {
				t.Fatalf("error does not wrap ErrRelocate: %v", err)
			}
			return
		}
		if n, err := RegionLen(code, pc, opt); err != nil || n != len(r.Code) {
			t.Fatalf("RegionLen %d %v, made %d", n, err, len(r.Code))
		}
		// a branch to an instruction of the region after its first goes to its copy
		copyOf := func(a uint64) uint64 {
			for k, o := range r.OrigOffsets {
				if o > 0 && pc+uint64(o) == a {
					return at + uint64(r.Offsets[k])
				}
			}
			return a
		}
		for i, rl := range r.Insns {
			checkRelocatedTo(t, code[r.OrigOffsets[i]:], pc+uint64(r.OrigOffsets[i]), at+uint64(r.Offsets[i]), opt, rl, copyOf)
		}
	})
}

// TestRelocateRegionInternalBranch: a jcc back to an instruction of the region after
// its first goes to that instruction's copy; one to the first goes to the site.
func TestRelocateRegionInternalBranch(t *testing.T) {
	// 0: mov %rdi,%rax; 3: test %eax,%eax; 5: jne 3; 7: jne 0
	code := []byte{0x48, 0x89, 0xf8, 0x85, 0xc0, 0x75, 0xfc, 0x75, 0xf7}
	const pc, at = 0x401000, 0x900000
	r, err := RelocateRegion(code, pc, at, Options{})
	if err != nil {
		t.Fatal(err)
	}
	target := func(k int) uint64 { // the rel32 target of the jcc copy k (0f 8x rel32)
		c := r.Code[r.Offsets[k]:]
		if c[0] != 0x0f || c[1] != 0x85 {
			t.Fatalf("copy %d: % x, want jne rel32", k, c[:6])
		}
		return at + uint64(r.Offsets[k]) + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(c[2:]))))
	}
	if got, want := target(2), uint64(at+r.Offsets[1]); got != want {
		t.Errorf("jne 3 goes to %#x, want the copy of test at %#x", got, want)
	}
	if got := target(3); got != pc {
		t.Errorf("jne 0 goes to %#x, want the site %#x", got, uint64(pc))
	}
	// into the middle of an instruction: refused
	bad := []byte{0x48, 0x89, 0xf8, 0x75, 0xfc} // jne 1 (inside the mov)
	if _, err := RelocateRegion(bad, pc, at, Options{}); err == nil {
		t.Error("a branch into the middle of an instruction was relocated")
	}
}
