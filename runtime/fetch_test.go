package kprt_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// TestFetchMatchesEventdef runs the C interpreter (src/rt_fetch.c) and eventdef.Run on
// the same programs, registers and memory, and requires byte-identical records, with
// memory read both ways: the fault-catching copy (src/nofault.S) and process_vm_readv.
// It also checks the raw reads' results at the edge of the mapping (partial counts) and
// at bad addresses (-EFAULT) in both modes.
func TestFetchMatchesEventdef(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "fetchrun")
	// no SSE code: the xmm registers fetchrun loads must reach the fetch intact
	cmd := exec.Command("gcc", "-O1", "-fno-builtin", "-fno-stack-protector", "-mgeneral-regs-only", "-Iinclude", "-Isrc", "-o", exe,
		"testdata/fetchrun.c", "src/rt_fetch.c", "src/rt_util.c", "src/nofault.S")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}

	const base, size = 0x6d0000000000, 2 * 4096
	mem := make([]byte, size)
	put64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(mem[off:], v) }
	copy(mem[0x100:], "hello\x00")
	copy(mem[0x200:], "world, a longer string\x00")
	put64(0x300, base+0x100) // string array: good, good, bad
	put64(0x308, base+0x200)
	put64(0x310, 8)
	put64(0x400, base+0x300) // pointer chain
	for i := 0; i < 64; i++ {
		mem[0x500+i] = byte(i * 7)
	}
	// Go errors (eventdef's goerr): an *errors.errorString, an itab of syscall.Errno,
	// an *fs.PathError, Errnos, syscall's errors table, a message longer than a record
	put64(0x800, base+0x900)
	put64(0x808, 19)
	copy(mem[0x900:], "file does not exist")
	put64(0x828, 0x5300)
	for i, v := range []uint64{base + 0x920, 4, base + 0x930, 8, base + 0x820, base + 0x880} {
		put64(0x840+8*i, v)
	}
	copy(mem[0x920:], "open")
	copy(mem[0x930:], "/missing")
	put64(0x880, 2)
	put64(0x888, 7)
	put64(0x890, ^uint64(2))
	for i, v := range []uint64{0, 0, base + 0x9a0, 5, base + 0x9b0, 25} {
		put64(0xa00+8*i, v)
	}
	copy(mem[0x9a0:], "perm!")
	copy(mem[0x9b0:], "no such file or directory")
	// a position-independent program's: type words moved by the load bias (base)
	for i, v := range []uint64{base + 0x920, 4, base + 0x930, 8, base + 0xb40, base + 0x880} {
		put64(0xb00+8*i, v)
	}
	put64(0xb48, base+0x5300)
	for i, v := range []uint64{base + 0x920, 4, base + 0x820, base + 0x888} { // an *os.SyscallError
		put64(0xb80+8*i, v)
	}
	put64(0x8c0, base+0x1000)
	put64(0x8c8, 1<<20)
	goErrTable := fmt.Sprintf("goerr{nil=0,*os.SyscallError=0x5100/wrap/0/16,*errors.errorString=0x5000/str/0,*fs.PathError=0x5200/path/0/16,syscall.Errno=0x5300/errno/%#x/3,*main.CodeErr=0x5400}", base+0xa00)
	goErrDef := func(args string) string {
		var b strings.Builder
		b.WriteString("p:g/m f")
		for _, a := range strings.Fields(args) {
			b.WriteString(" " + a + ":" + goErrTable)
		}
		return b.String()
	}
	copy(mem[size-4:], "end\x00")   // ends exactly at the last mapped byte
	copy(mem[size-3:size], "abc")   // (overwritten) no NUL before the unmapped page
	copy(mem[size-12:], "edge\x00") // a string near the end
	memRead := func(addr uint64, buf []byte) bool {
		if addr < base || addr+uint64(len(buf)) > base+size || addr+uint64(len(buf)) < addr {
			return false
		}
		copy(buf, mem[addr-base:])
		return true
	}

	// the raw reads fetchrun makes after the record: {offset from the end of the
	// mapping, bytes}, then 8 bytes at addresses that are never readable
	const efault = -14
	var rawWant []int64
	for _, p := range [][2]int64{{-16, 16}, {-9, 8}, {-8, 8}, {-7, 8}, {-1, 8}, {-3, 16}, {-1, 1}, {0, 8}, {0, 1}, {-4, 4}, {-2, 4}, {-100, 100}, {-100, 99}} {
		if r := min(-p[0], p[1]); r > 0 {
			rawWant = append(rawWant, r)
		} else {
			rawWant = append(rawWant, efault)
		}
	}
	for range 8 {
		rawWant = append(rawWant, efault)
	}

	defs := []string{
		`p:g/a f a=%di s=+0(%di):string b=+4(%cx):b4@3/32[2] c=@sym+8:u16 d=$comm e=\"hi" f=$stack3 g=$stack h=\-1:s8 i=+u0(%di):string[2] j=$arg2:u32 k=$arg8 l=+0(+16(%dx)):x16`,
		`p:g/b f x=+0(%ax):u32 s=+0(%ax):string arr=+0(%bx):string[3] m=+0(%r8):x8[16] bf=+0(%r8):b3@2/8[4]`,
		`p:g/c f s1=+0(%r9):string s2=+0(%r10):string s3=+0(%r11):string deep=+0(+0(+0(%r12))):string`,
		`r:g/d f $retval a=$arg1 b=+0($arg2):string c=$arg7`,
		`p:g/e f c=$comm c2=$comm x=%flags:x32 n=%sp:s64 u=+0(%r8):u64[3] sb=+1(%r8):s16`,
		// registers and plain reads only: these compile to fetch plans (kprw_fetch_plan)
		`p:g/f f a=%di b=+0(%sp):u64 c=%ax:u8 d=+8(%r8):s32 e=-4(%r9):u16 f=+0(%r9):u64 g=$arg2:u32 h=+2(%di):x16 i=+0(%r10):s8`,
		`p:g/h f`,
		// kprewrite's extensions: signed bitfields, floats, enum tables
		`p:g/j f a=%xmm0:f64 b=%xmm1:f32 c=%xmm15:u64 d=+0(%xmm2):u32 e=+0(%xmm3):string g=%xmm4:s32{M=-1}`,
		// Go strings: a header in memory, {pointer, length} from two fetches, never past the length
		// Go slices' first elements, never past the length
		`p:g/l f a=%r8,\3:u8[8] b=%r8,%si:u64[3] c=%r8,+0(%di):x16[2] d=%r9,\4:u32[2]`,
		`p:g/k f a=+8(%bx):gostring c=%di,\3:gostring d=%r9,\8:gostring e=%di,+8(%bx):gostring z=%di,\0:gostring b=+0(%bx):gostring`,
		// Go errors: messages, nil, names, faults, a message cut at the record's room
		goErrDef(fmt.Sprintf(`a=\0x5000,\%#x b=\0x5200,\%#x c=\0x5300,\%#x d=+8(\%#x),\%#x e=%%ax,%%bx n=\0,\0 x=\0x5400,%%di bad=\0x5000,\0x9000 s=\0x5100,\%#x`,
			base+0x800, base+0x840, base+0x890, base+0x820, base+0x888, base+0xb80)),
		goErrDef(fmt.Sprintf(`long=\0x5000,\%#x next=\0x5000,\%#x`, base+0x8c0, base+0x800)),
		fmt.Sprintf(`p:g/p f a=\%#[1]x,\%#[2]x:%[3]s b=\%#[4]x,\%#[5]x:%[3]s x=\%#[6]x,\%#[7]x:%[3]s n=\0,\0:%[3]s`, base+0x5000, base+0x800,
			"goerr{@image,nil=0,*errors.errorString=0x5000/str/0,*fs.PathError=0x5200/path/0/16,syscall.Errno=0x5300/errno/0xa00/3,*main.CodeErr=0x5400}",
			base+0x5200, base+0xb00, base+0x5400, base+0x800),
		`p:g/i f sb=+0(%r8):sb3@2/8[4] sw=+4(%cx):sb5@27/32 ub=+4(%cx):b5@27/32 fl=+0(%r8):f32 db=+0(%r8):f64 en=+0(%r8):u32{A=1,B=2} es=+1(%r8):s8[3]{M=-1,Z=0}`,
	}
	planned := 0
	regSets := []map[string]uint64{
		{"di": base + 0x100, "si": base + 0x200, "cx": base + 0x500, "dx": base + 0x400 - 16, "sp": base + 0x600,
			"ax": 0, "bx": base + 0x300, "r8": base + 0x500, "r9": base + size - 4, "r10": base + size - 3,
			"r11": base + size - 12, "r12": base + 0x400, "flags": 0x246,
			"xmm0": 0x400921fb54442d18, "xmm1": 0x3fc00000, "xmm15": ^uint64(0), "xmm2": base + 0x500, "xmm3": base + 0x200, "xmm4": 0xffffffff},
		{"di": 0, "si": 8, "cx": 0, "dx": 0, "sp": 0x10, "ax": base + 0x500, "bx": base + 0x308, "r8": base + size - 10,
			"r9": base + size - 1, "r10": base, "r11": 1, "r12": base + 0x300},
		// null pointers: the appended plain load reads zeros below the user range (the
		// Go runtime's R14 on a thread without a g)
		{"sp": 0x10},
	}
	for _, def := range defs {
		p, err := eventdef.Parse(def)
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		prog, err := eventdef.Compile(p, func(string) (uint64, bool) { return 0x100, true })
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		// and with a plain load appended (a Go function's goroutine id: the records'
		// other fields and strings where they were)
		safe, _, err := eventdef.AppendSafeLoad(prog, "r8", 0)
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		for pi, prog := range [][]byte{prog, safe} {
			def := def + []string{"", " +safe load at 0(%r8)"}[pi]
			testFetchRegSets(t, def, prog, regSets, memRead, exe, dir, base, size, mem, rawWant, &planned)
		}
	}
	// g/f and g/h in the three register sets and both read modes, with and without the load
	if planned != 24 {
		t.Errorf("%d runs went through a fetch plan, want 24", planned)
	}
	for _, def := range defs {
		if strings.HasPrefix(def, "p:g/m f a=") || strings.HasPrefix(def, "p:g/p ") {
			testGoErrMutations(t, exe, filepath.Join(dir, "mvec"), base, size, mem, memRead, def)
		}
	}
}

// writeVec writes fetchrun's input: the memory at base, the machine and the program.
func writeVec(t *testing.T, path string, base, size uint64, mem []byte, m *eventdef.Machine, prog []byte) {
	t.Helper()
	var in bytes.Buffer
	le := binary.LittleEndian
	binary.Write(&in, le, uint64(base))
	binary.Write(&in, le, uint64(size))
	in.Write(mem)
	binary.Write(&in, le, m.Regs)
	binary.Write(&in, le, m.Xmm)
	var comm [16]byte
	copy(comm[:15], m.Comm)
	in.Write(comm[:])
	binary.Write(&in, le, m.LoadBias)
	binary.Write(&in, le, uint32(len(prog)))
	in.Write(prog)
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testGoErrMutations sets each byte of the first block's code of def (a goerr's: its
// cases, flags and sources) to a few values in turn: the C interpreter must refuse the
// program where eventdef.Run does, and write the same record where it does not.
func testGoErrMutations(t *testing.T, exe, vec string, base, size uint64, mem []byte, memRead func(uint64, []byte) bool, def string) {
	p, err := eventdef.Parse(def)
	if err != nil || !strings.Contains(def, "goerr") {
		t.Fatalf("%s: %v", def, err)
	}
	prog, err := eventdef.Compile(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	code := eventdef.HeaderSize + eventdef.BlockHeader
	m := eventdef.Machine{Mem: memRead, LoadBias: base}
	runs, refused := 0, 0
	for i := code; i < code+int(le.Uint16(prog[eventdef.HeaderSize+4:])); i++ {
		for _, v := range []byte{0, 1, 2, 4, 0x10, 0x28, 0xff} {
			if prog[i] == v {
				continue
			}
			q := bytes.Clone(prog)
			q[i] = v
			want, err := eventdef.Run(q, &m)
			wantLen := int64(len(want))
			if err != nil {
				wantLen, refused = -1, refused+1
			}
			writeVec(t, vec, base, size, mem, &m, q)
			out, err := exec.Command(exe, vec, "fast").Output()
			if err != nil {
				t.Fatalf("byte %d = %#x: fetchrun: %v", i, v, err)
			}
			elen := le.Uint32(out)
			n := int64(le.Uint64(out[4+elen:]))
			if got := out[12+elen:]; n != wantLen || n > 0 && !bytes.Equal(got[:n], want) {
				t.Errorf("byte %d = %#x: C wrote %d bytes %x, eventdef %d bytes %x", i, v, n, got[:max(n, 0)], wantLen, want)
			}
			runs++
		}
	}
	t.Logf("%d changed goerr programs, %d refused by both", runs, refused)
}

// testFetchRegSets runs prog in C and in eventdef.Run with each register set and
// both read modes, and compares the records.
func testFetchRegSets(t *testing.T, def string, prog []byte, regSets []map[string]uint64, memRead func(uint64, []byte) bool,
	exe, dir string, base, size uint64, mem []byte, rawWant []int64, planned *int) {
	t.Helper()
	for ri, rs := range regSets {
		var m eventdef.Machine
		for name, v := range rs {
			if n, ok := strings.CutPrefix(name, "xmm"); ok {
				k, _ := strconv.Atoi(n)
				m.Xmm[k] = v
				continue
			}
			off, ok := eventdef.RegOffset(name)
			if !ok {
				t.Fatalf("register %s", name)
			}
			m.Regs[off/8] = v
		}
		m.Mem = memRead
		m.Comm = "fetchrun-comm-long"
		m.LoadBias = base
		wantED, err := eventdef.RunEntry(prog, &m)
		if err != nil {
			t.Fatal(err)
		}
		m.EntryData = wantED
		want, err := eventdef.Run(prog, &m)
		if err != nil {
			t.Fatalf("%s: eventdef.Run: %v", def, err)
		}

		le := binary.LittleEndian
		vec := filepath.Join(dir, "vec")
		writeVec(t, vec, base, size, mem, &m, prog)
		for _, mode := range []string{"fast", "syscall"} {
			var stderr bytes.Buffer
			cmd := exec.Command(exe, vec, mode)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s regs %d %s: fetchrun: %v", def, ri, mode, err)
			}
			if strings.Contains(stderr.String(), "plan") {
				*planned++
			}
			elen := le.Uint32(out)
			out = out[4:]
			if int(elen) != len(wantED) || !bytes.Equal(out[:elen], wantED) {
				t.Errorf("%s regs %d %s: entry data\n got %x\nwant %x", def, ri, mode, out[:min(int(elen), len(out))], wantED)
				continue
			}
			out = out[elen:]
			n := int64(le.Uint64(out))
			got := out[8:]
			if len(got) < len(rawWant)*8 {
				t.Fatalf("%s regs %d %s: short output", def, ri, mode)
			}
			raw := got[len(got)-8*len(rawWant):]
			got = got[:len(got)-8*len(rawWant)]
			if n != int64(len(want)) || !bytes.Equal(got, want) {
				t.Errorf("%s regs %d %s: record (%d bytes)\n got %x\nwant %x", def, ri, mode, n, got, want)
			}
			for i, w := range rawWant {
				if r := int64(le.Uint64(raw[8*i:])); r != w {
					t.Errorf("%s: raw read %d: %d, want %d", mode, i, r, w)
				}
			}
		}
	}
}
