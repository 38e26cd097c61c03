package trampolines

import (
	"errors"
	"testing"

	"github.com/kprewrite/kprewrite/internal/x86dec"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// TestInlineRec builds inline records of each form and register set and decodes them
// whole: every instruction known and trusted, every PC-relative operand aimed at one of
// the runtime's words (kprw_rt's fields, the two tables, the probe's iropen), every
// jump at the stub, back, or inside the code at the start of one of its instructions
// (a jump the stores moved lands mid-instruction), and the length the one InlineRecLen
// said.
func TestInlineRec(t *testing.T) {
	const at, stub, back = 0x400000, 0x3ff000, 0x1234
	syms := InlineRecSyms{RT: 0x500000, TctxTab: 0x510000, TblkTab: 0x510008}
	reloc := []byte{0x55, 0x48, 0x89, 0xe5} // push %rbp; mov %rsp,%rbp
	for _, dead := range []bool{false, true} {
		for _, regs := range [][]int{nil, {7}, {7, 6, 2}, {9, 1, 8}, {0, 10, 11}, {3, 12, 15}} {
			spec := InlineRecSpec{Regs: regs, FlagsDead: dead, Probe: 7, IROpen: 0x520018, Syms: syms}
			n, err := InlineRecLen(spec, len(reloc))
			if err != nil {
				t.Fatal(err)
			}
			b, err := InlineRec(at, spec, stub, reloc, back)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != n {
				t.Fatalf("%v: %d bytes, InlineRecLen said %d", regs, len(b), n)
			}
			end := at + uint64(n)
			starts := map[uint64]bool{}
			var inside []uint64 // the targets of jumps inside the code
			for off := 0; off < n-len(reloc)-kprt.SlotJmpBackLen; {
				starts[at+uint64(off)] = true
				in, err := x86dec.Decode(b[off:], at+uint64(off))
				if err != nil || !in.Trusted {
					t.Fatalf("%v flagsDead %v: at +%#x: %v (trusted %v)", regs, dead, off, err, in.Trusted)
				}
				if in.RIPRel {
					switch tg := in.RIPTarget; {
					case tg >= syms.RT && tg < syms.RT+1024, tg == syms.TctxTab, tg == syms.TblkTab, tg == spec.IROpen:
					default:
						t.Fatalf("%v: at +%#x: a PC-relative operand at %#x", regs, off, tg)
					}
				}
				if in.Kind.IsDirectBranch() && in.Target != stub {
					if in.Target < at || in.Target >= end {
						t.Fatalf("%v: at +%#x: a jump to %#x", regs, off, in.Target)
					}
					inside = append(inside, in.Target)
				}
				off += in.Len
			}
			starts[end-uint64(len(reloc)+kprt.SlotJmpBackLen)] = true // the DCR's copy
			for _, tg := range inside {
				if !starts[tg] {
					t.Fatalf("%v flagsDead %v: a jump to +%#x, inside an instruction", regs, dead, tg-at)
				}
			}
			jb, err := x86dec.Decode(b[n-kprt.SlotJmpBackLen:], end-kprt.SlotJmpBackLen)
			if err != nil || jb.Target != back {
				t.Fatalf("%v: the jmp back goes to %#x (%v), want %#x", regs, jb.Target, err, back)
			}
		}
	}
	if _, err := InlineRecLen(InlineRecSpec{Regs: []int{4}}, 0); !errors.Is(err, ErrNoInlineRec) {
		t.Errorf("%%rsp: %v, want ErrNoInlineRec", err)
	}
	if _, err := InlineRecLen(InlineRecSpec{Regs: []int{7, 6, 2, 1}}, 0); !errors.Is(err, ErrNoInlineRec) {
		t.Errorf("four registers: %v, want ErrNoInlineRec", err)
	}
	if off, err := InlineRecDecline(); err != nil || off <= 0 {
		t.Errorf("InlineRecDecline: %d, %v", off, err)
	}
}
