package eventdef

import (
	"encoding/binary"
	"testing"
)

// TestAppendSafeLoad: the appended load goes after the fixed fields, which keep their
// offsets, and a string is still found through its offset; the program reads no
// memory that could fault only when its own arguments read none.
func TestAppendSafeLoad(t *testing.T) {
	const g, str = 0x1000, 0x2000
	for _, tc := range []struct {
		def      string
		at       int
		readsMem bool
	}{
		{"p:g/a f", 0, false},
		{"p:g/b f n=%ax:s64 m=%bx:u8", 9, false},
		{"p:g/c f n=%ax:u32 s=+0(%si):string", 8, true},
	} {
		p, err := Parse(tc.def)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := Compile(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, at, err := AppendSafeLoad(prog, "r14", 152)
		if err != nil || at != tc.at {
			t.Fatalf("%s: appended at %d (%v), want %d", tc.def, at, err, tc.at)
		}
		if ReadsMemory(out) != tc.readsMem {
			t.Errorf("%s: ReadsMemory %v, want %v", tc.def, !tc.readsMem, tc.readsMem)
		}
		var m Machine
		r14, _ := RegOffset("r14")
		ax, _ := RegOffset("ax")
		si, _ := RegOffset("si")
		m.Regs[r14/8], m.Regs[ax/8], m.Regs[si/8] = g, 42, str
		m.Mem = func(a uint64, b []byte) bool {
			switch {
			case a == g+152 && len(b) == 8:
				binary.LittleEndian.PutUint64(b, 77)
			case a >= str && a < str+16:
				copy(b, "hi\x00"[min(int(a-str), 3):])
			default:
				return false
			}
			return true
		}
		rec, err := Run(out, &m)
		if err != nil {
			t.Fatal(err)
		}
		if id := binary.LittleEndian.Uint64(rec[at:]); id != 77 {
			t.Errorf("%s: goroutine id %d in %x", tc.def, id, rec)
		}
		vals, err := DecodeArgs(p, rec, FormatOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.def, err)
		}
		if len(p.Args) > 0 && (vals[0].Value != int64(42) && vals[0].Value != uint64(42)) {
			t.Errorf("%s: first field %v", tc.def, vals[0].Value)
		}
		if len(p.Args) == 2 && p.Args[1].Kind == KindString && vals[1].Value != "hi" {
			t.Errorf("%s: string %v", tc.def, vals[1].Value)
		}
	}
}
