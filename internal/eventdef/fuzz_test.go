package eventdef

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// fuzzSeeds are real definitions: every case of the parse table and of
// the trace oracle test.
func fuzzSeeds() []string {
	var s []string
	for _, c := range parseCases {
		s = append(s, ourDef(c.def))
	}
	for _, e := range oracleEvents {
		s = append(s, e.ours)
	}
	// kprewrite's own types
	return append(s, "p:e f a=+0(%di):u32{A=1,B=2} b=%xmm3:f64 c=+4(%si):sb3@2/8 d=+8(%di):s8[3]{M=-1}",
		"r:e f $retval:f32 x=%xmm15:x64", "p:e f a=+0(%xmm0):string b=%di:sb5@0/8{Z=0,N=-1}",
		"p:e f e=+8(%bx),%cx:goerr{nil=0,a/b.E=0x10010/str/8,P=0x10020/path/0/16,N=0x10030/errno/0x10040/3,C=0x10050}")
}

// fuzzMachine returns a machine with every register pointing into a
// small readable memory full of pointers back into it.
func fuzzMachine() *Machine {
	mem := make([]byte, 512)
	for i := 0; i+8 <= len(mem); i += 8 {
		binary.LittleEndian.PutUint64(mem[i:], 0x10000+uint64(i*7%480))
	}
	mem[100] = 0
	m := &Machine{Mem: memFrom(0x10000, mem), Comm: "fuzz", EntryData: make([]byte, 64)}
	for i := range m.Regs {
		m.Regs[i] = 0x10000 + uint64(i*24)
	}
	return m
}

// FuzzParse checks that Parse never panics, that what it accepts prints
// back (String) to a definition that parses to the same thing, and that
// it compiles, runs and formats.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, def string) {
		p, err := Parse(def)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Pos < 0 {
				t.Fatalf("Parse(%q): %v", def, err)
			}
			return
		}
		if !p.Delete && !strings.Contains(FormatFile(p, 1), "\nprint fmt: \"") {
			t.Fatalf("FormatFile(%q) has no print fmt", def)
		}
		s := p.String()
		q, err := Parse(s)
		if err != nil || q.String() != s {
			t.Fatalf("Parse(%q).String() = %q, which reparses to %v, %v", def, s, q, err)
		}
		if p.Delete {
			return
		}
		prog, err := Compile(p, func(string) (uint64, bool) { return 0x10010, true })
		if errors.Is(err, ErrUnsupported) {
			return
		}
		if err != nil {
			t.Fatalf("Compile(%q): %v", def, err)
		}
		m := fuzzMachine()
		if _, err := RunEntry(prog, m); err != nil {
			t.Fatalf("RunEntry(%q): %v", def, err)
		}
		rec, err := Run(prog, m)
		if err != nil {
			t.Fatalf("Run(%q): %v", def, err)
		}
		if fixed, max := RecordSize(p); len(rec) < fixed || len(rec) > max {
			t.Fatalf("Run(%q): record of %d bytes, fixed %d, max %d", def, len(rec), fixed, max)
		}
		if _, err := FormatArgs(p, rec); err != nil {
			t.Fatalf("FormatArgs(%q): %v", def, err)
		}
	})
}

// FuzzFormatArgs feeds arbitrary records to FormatArgs.
func FuzzFormatArgs(f *testing.F) {
	for _, s := range fuzzSeeds() {
		p, err := Parse(s)
		if err != nil || p.Delete {
			continue
		}
		prog, err := Compile(p, func(string) (uint64, bool) { return 0x10010, true })
		if err != nil {
			continue
		}
		rec, err := Run(prog, fuzzMachine())
		if err != nil {
			continue
		}
		f.Add(s, rec)
	}
	f.Fuzz(func(t *testing.T, def string, rec []byte) {
		p, err := Parse(def)
		if err != nil || p.Delete {
			return
		}
		FormatArgs(p, rec)
	})
}

// FuzzRun feeds arbitrary programs to the reference interpreter.
func FuzzRun(f *testing.F) {
	for _, s := range fuzzSeeds() {
		p, err := Parse(s)
		if err != nil || p.Delete {
			continue
		}
		if prog, err := Compile(p, func(string) (uint64, bool) { return 0x10010, true }); err == nil {
			f.Add(prog)
		}
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		m := fuzzMachine()
		RunEntry(prog, m)
		Run(prog, m)
	})
}
