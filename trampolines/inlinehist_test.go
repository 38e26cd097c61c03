package trampolines

import (
	"errors"
	"math/rand"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

func ihSpec(r *rand.Rand) InlineHistSpec {
	field := func() InlineHistField {
		sizes := []int{1, 2, 4, 8}
		f := InlineHistField{Size: sizes[r.Intn(4)], Signed: r.Intn(2) == 0}
		if r.Intn(4) == 0 {
			f.Reg, f.SPOff = -1, r.Intn(8/f.Size)*f.Size
		} else {
			for f.Reg = r.Intn(16); f.Reg == 4; f.Reg = r.Intn(16) {
			}
		}
		return f
	}
	s := InlineHistSpec{Key: field(), FlagsDead: r.Intn(2) == 0, CtlGen: 0x700000, PFGen: 0x700100, TrigBase: 0x700200,
		CtlOff: -int32(8 * (1 + r.Intn(100))), SoftBit: 1, TabOff: int32(8 * r.Intn(1<<20)), Mask: 1<<(1+r.Intn(16)) - 1,
		EntBytes: uint32(8 * (3 + r.Intn(5))), KeyWords: 1, Seed: 0x6a09e667f3bcc908, Mul: 0x9e3779b97f4a7c15,
		TagBit: 1 << 63, HdrBytes: 32}
	s.Key.Log2 = r.Intn(2) == 0
	for n := r.Intn(5); n > 0; n-- {
		s.Vals = append(s.Vals, field())
	}
	return s
}

// TestInlineHistCode: the code decodes as whole instructions, does not depend on the
// addresses for its length, and its jumps land on instructions of its own or on the two
// exits.
func TestInlineHistCode(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		s := ihSpec(r)
		const at, full, count = 0x400000, 0x500000, 0x600000
		code, err := InlineHist(at, s, full, count)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if other, err := InlineHist(0x7fff0000, s, 0x7fff1000, 0x7fff2000); err != nil || len(other) != len(code) {
			t.Fatalf("%+v: %d bytes at another address, %d here (%v)", s, len(other), len(code), err)
		}
		starts := map[uint64]bool{}
		var jumps []uint64
		for off := 0; off < len(code); {
			in, err := x86asm.Decode(code[off:], 64)
			if err != nil {
				t.Fatalf("%+v: at +%d: %v\n% x", s, off, err, code)
			}
			starts[at+uint64(off)] = true
			if rel, ok := in.Args[0].(x86asm.Rel); ok {
				jumps = append(jumps, at+uint64(off+in.Len)+uint64(int64(rel)))
			}
			off += in.Len
		}
		for _, to := range jumps {
			if !starts[to] && to != full && to != count {
				t.Fatalf("%+v: a jump to %#x, inside an instruction or elsewhere", s, to)
			}
		}
	}
}

func TestInlineHistRefuses(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	base := ihSpec(r)
	for name, mod := range map[string]func(*InlineHistSpec){
		"%rsp key":     func(s *InlineHistSpec) { s.Key.Reg = 4 },
		"3-byte value": func(s *InlineHistSpec) { s.Vals = append(s.Vals, InlineHistField{Size: 3}) },
		"five values": func(s *InlineHistSpec) {
			s.Vals = []InlineHistField{{Size: 8}, {Size: 8}, {Size: 8}, {Size: 8}, {Size: 8}}
		},
		"two key words": func(s *InlineHistSpec) { s.KeyWords = 2 },
	} {
		s := base
		s.Vals = append([]InlineHistField(nil), base.Vals...)
		mod(&s)
		if _, err := InlineHist(0, s, 0, 0); !errors.Is(err, ErrNoInlineHist) {
			t.Errorf("%s: %v, want ErrNoInlineHist", name, err)
		}
	}
}
