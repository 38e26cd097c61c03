package runtime

import (
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"
)

// TestCountDetour decodes count-only detours back: the increments address the given
// counters, the flags are saved and restored exactly when they are live, and the DCR
// copy and the jmp back follow.
func TestCountDetour(t *testing.T) {
	const at = 0x500000
	reloc := []byte{0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00} // mov 0(%rip),%rax (already relocated)
	counters := []uint64{0x600000, 0x600010, 0x600020}
	for _, dead := range []bool{true, false} {
		b, err := CountDetour(at, counters, dead, reloc, 0x401007)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != CountDetourLen(len(counters), dead, len(reloc)) {
			t.Fatalf("dead=%v: %d bytes, CountDetourLen says %d", dead, len(b), CountDetourLen(len(counters), dead, len(reloc)))
		}
		var ops []string
		var incs []uint64
		pc := uint64(at)
		for off := 0; off < len(b); {
			in, err := x86asm.Decode(b[off:], 64)
			if err != nil {
				t.Fatalf("dead=%v: decode at +%d: %v", dead, off, err)
			}
			if off == CountDetourRelocOff(len(counters), dead) {
				ops = append(ops, "|DCR")
			}
			ops = append(ops, in.Op.String())
			if in.Op == x86asm.INC {
				if in.Prefix[0]&0xff != x86asm.PrefixLOCK {
					t.Errorf("dead=%v: increment without lock at +%d", dead, off)
				}
				m := in.Args[0].(x86asm.Mem)
				incs = append(incs, pc+uint64(in.Len)+uint64(m.Disp))
			}
			if in.Op == x86asm.JMP {
				if tgt := pc + uint64(in.Len) + uint64(int64(in.Args[0].(x86asm.Rel))); tgt != 0x401007 {
					t.Errorf("dead=%v: jmp back to %#x", dead, tgt)
				}
			}
			off += in.Len
			pc += uint64(in.Len)
		}
		want := "INC INC INC |DCR MOV JMP"
		if !dead {
			want = "LEA PUSH LAHF SETO INC INC INC ADD SAHF POP LEA |DCR MOV JMP"
		}
		if got := strings.Join(ops, " "); got != want {
			t.Errorf("dead=%v: %s, want %s", dead, got, want)
		}
		for i, c := range counters {
			if i >= len(incs) || incs[i] != c {
				t.Errorf("dead=%v: increments of %#x, want %#x", dead, incs, counters)
				break
			}
		}
	}
	if _, err := CountDetour(at, nil, true, reloc, 0x401007); err == nil {
		t.Error("a count-only detour with no counter accepted")
	}
	if _, err := CountDetour(at, []uint64{at + 1<<32}, true, reloc, 0x401007); err == nil {
		t.Error("a counter out of rel32 reach accepted")
	}
}
