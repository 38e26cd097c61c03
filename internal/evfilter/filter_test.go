package evfilter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// testProbe has a field of every kind.
const testProbe = `p:g/e f a=%di:s32 b=%si:u64 s=+0(%di):string c=%ax:x8 ch=%si:char w=%dx:s16 u=%cx:u16 by=%r8:s8 arr=+0(%sp):u32[2] bf=%di:b3@2/32 sa=+0(%sp):string[2] cm=$comm x=%di en=%dx:s32{NEG=-5,POS=5} fl=%si:f64`

func testFields(t testing.TB) ([]Field, *eventdef.Probe) {
	p, err := eventdef.Parse(testProbe)
	if err != nil {
		t.Fatal(err)
	}
	return Fields(p), p
}

// matchExprs are filters with a known verdict on matchEnv.
var matchExprs = map[string]bool{
	"a == -5": true, "a != -5": false, "a < 0": true, "a > -6 && a <= -5": true, "b == 18446744073709551615": true,
	"en == NEG": true, "en != POS": true, "en < POS": true, "en == -5": true, "en > NEG || en == POS": false,
	"b > 1": true, "c == 0x7f": true, "c & 0x80": false, "c & 1": true, "ch == 65": true, "w == -2": true,
	"u == 65534": true, "by == -1": true, "by < 0": true, "bf == 5": true, "x == 0x1234": true,
	`s == "hello"`: true, `s == "hell"`: false, `s ~ "hel*"`: true, `s ~ "*llo"`: true, `s ~ "*ll*"`: true,
	`s ~ "h?llo"`: true, `s ~ "h[a-e]llo"`: true, `s ~ "h[!e]llo"`: false, `s ~ "!hel*"`: false, `s != "x"`: true,
	`sa == "first"`: true, `cm == "worker"`: true, `comm == "worker"`: true, `comm ~ "work*"`: true,
	`comm ~ "*ker"`:      false, // the kernel's suffix match looks at the end of all 16 bytes of comm
	"common_pid == 4242": true, "cpu == 3": true, "CPU != 3": false, "common_type == 7": true,
	"common_flags == 0": true, "__probe_ip == 0x401000": true, "__probe_ip.function == f": true,
	"__probe_ip.function != f": false, "x.function == f": false,
	"!(a == -5) || s ~ \"*x*\"": false, "(a == 1 || b == 2) && c == 3": false, "a == 1 || b == 2 && c == 3 || ch == 65": true,
	"arr == 1": false, "arr == 0x200000001": true,
}

type fSyms struct{}

func (fSyms) Func(name string) (uint64, uint64, bool) {
	if name == "f" {
		return 0x1000, 0x40, true
	}
	return 0, 0, false
}

func (fSyms) FuncAt(addr uint64) (uint64, uint64, bool) {
	if addr >= 0x1000 && addr < 0x1040 {
		return 0x1000, 0x40, true
	}
	return 0, 0, false
}

// matchEnv is a hit of testProbe: a=-5 b=~0 s="hello" c=0x7f ch='A' w=-2 u=65534 by=-1
// arr={1,2} bf=5 sa={"first","second"} cm="worker" x=0x1234, thread 4242 "worker" on CPU 3.
func matchEnv() *Env {
	var d []byte
	le := binary.LittleEndian
	d = le.AppendUint32(d, uint32(0xfffffffb))
	d = le.AppendUint64(d, ^uint64(0))
	d = le.AppendUint32(d, 0) // s: set below
	d = append(d, 0x7f, 'A')
	d = le.AppendUint16(d, 0xfffe)
	d = le.AppendUint16(d, 65534)
	d = append(d, 0xff)
	d = le.AppendUint32(d, 1)
	d = le.AppendUint32(d, 2)
	d = le.AppendUint32(d, 5)
	d = le.AppendUint32(d, 0) // sa[0]
	d = le.AppendUint32(d, 0) // sa[1]
	d = le.AppendUint32(d, 0) // cm
	d = le.AppendUint64(d, 0x1234)
	d = le.AppendUint32(d, uint32(0xfffffffb)) // en: NEG
	d = le.AppendUint64(d, 0x3ff0000000000000) // fl: 1.0
	str := func(slot int, s string) {
		le.PutUint32(d[slot:], uint32(len(s)+1)<<16|uint32(len(d)))
		d = append(append(d, s...), 0)
	}
	str(12, "hello")
	str(35, "first")
	str(39, "second")
	str(43, "worker")
	e := &Env{Data: d, TID: 4242, CPU: 3, Type: 7, IP: 0x401000, RetIP: 0x401234, Bias: 0x400000}
	copy(e.Comm[:], "worker")
	return e
}

// TestEnumFloatFields: a float field is refused, as is a name an enum field's table does
// not have (matchExprs compare with the names).
func TestEnumFloatFields(t *testing.T) {
	fields, _ := testFields(t)
	for expr, detail := range map[string]string{"en == ZERO": "no value of en is named ZERO", "fl == 1": "floating-point field (fl)",
		"a == NEG": ""} {
		_, err := Parse(expr, fields, fSyms{})
		var pe *Error
		if !errors.As(err, &pe) || !strings.Contains(pe.Detail, detail) {
			t.Errorf("%s: %v, want an error saying %q", expr, err, detail)
		}
	}
}

func TestMatch(t *testing.T) {
	fields, _ := testFields(t)
	env := matchEnv()
	for expr, want := range matchExprs {
		f, err := Parse(expr, fields, fSyms{})
		if err != nil {
			t.Errorf("%s: %v", expr, err)
			continue
		}
		if got := Match(f.Program(), env); got != want {
			t.Errorf("%s: %v, want %v", expr, got, want)
		}
	}
}

// TestGlob checks globMatch on glob(7)'s corners.
func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pat, str string
		want     bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*c", "abbbc", true}, {"a*c", "abcd", false}, {"?", "", false},
		{"a?c", "abc", true}, {"[abc]", "b", true}, {"[!abc]", "b", false}, {"[a-c]x", "bx", true},
		{"[]]", "]", true}, {"[a-]", "-", true}, {"[", "[", true}, {"[ab", "[ab", true}, {"\\*", "*", true},
		{"\\*", "a", false}, {"*a*b*c", "xaybzc", true}, {"*aaaaa", "aaaaaaaaaa", true}, {"a\\", "a", true},
	} {
		if got := globMatch([]byte(c.pat), []byte(c.str)); got != c.want {
			t.Errorf("glob %q %q: %v, want %v", c.pat, c.str, got, c.want)
		}
	}
}

// TestMatchesC runs src/rt_filter.c (the runtime's evaluator, built with AddressSanitizer)
// and Match on random filters and random hits and requires the same verdicts.
func TestMatchesC(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed")
	}
	rt := filepath.Join("..", "..", "runtime")
	exe := filepath.Join(t.TempDir(), "filterrun")
	cmd := exec.Command("gcc", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-builtin",
		"-I"+filepath.Join(rt, "include"), "-I"+filepath.Join(rt, "src"), "-o", exe, "testdata/filterrun.c",
		filepath.Join(rt, "src", "rt_filter.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	fields, _ := testFields(t)
	r := rand.New(rand.NewSource(2))
	var progs [][]byte
	var exprs []string
	for expr := range matchExprs {
		f, err := Parse(expr, fields, fSyms{})
		if err != nil {
			t.Fatal(err)
		}
		progs, exprs = append(progs, f.Program()), append(exprs, expr)
	}
	for _, expr := range randomMatchExprs(r, 4000) {
		if f, err := Parse(expr, fields, fSyms{}); err == nil {
			progs, exprs = append(progs, f.Program()), append(exprs, expr)
		}
	}
	var in bytes.Buffer
	var envs []*Env
	le := binary.LittleEndian
	for i, prog := range progs {
		env := matchEnv()
		if i >= len(matchExprs) {
			env = randomEnv(r)
		}
		if i%97 == 0 { // a corrupted program: both refuse it
			prog = append([]byte(nil), prog...)
			prog[HeaderSize+8] = 0
		}
		envs = append(envs, env)
		in.Write(le.AppendUint32(nil, uint32(len(prog))))
		in.Write(prog)
		in.Write(le.AppendUint32(nil, uint32(len(env.Data))))
		in.Write(env.Data)
		for _, v := range []uint32{env.TID, env.CPU, env.Type} {
			in.Write(le.AppendUint32(nil, v))
		}
		for _, v := range []uint64{env.IP, env.RetIP, env.Bias} {
			in.Write(le.AppendUint64(nil, v))
		}
		in.Write(env.Comm[:])
		progs[i] = prog
	}
	run := exec.Command(exe)
	run.Stdin = &in
	out, err := run.Output()
	if err != nil {
		t.Fatalf("filterrun: %v", err)
	}
	if len(out) != len(progs) {
		t.Fatalf("filterrun answered %d of %d cases", len(out), len(progs))
	}
	matched := 0
	for i, prog := range progs {
		want := byte('0')
		switch {
		case Check(prog) != nil:
			want = 'x'
		case Match(prog, envs[i]):
			want = '1'
			matched++
		}
		if out[i] != want {
			t.Errorf("%q on %x: C %c, Go %c", exprs[i], envs[i].Data, out[i], want)
		}
	}
	if matched < len(progs)/10 || matched > len(progs)*9/10 {
		t.Errorf("%d of %d cases matched: the random cases do not exercise both verdicts", matched, len(progs))
	}
	t.Logf("%d programs, %d matched", len(progs), matched)
}

var strVals = []string{"ab", "abc", "b", "", "ba", "abab", "a*", "*b", "*a*", "a?", "[ab]*", "[!a]*", "!a*", "a\\*", "*", "x"}

func randomMatchExprs(r *rand.Rand, n int) []string {
	num := []string{"a", "b", "c", "ch", "w", "u", "by", "bf", "x", "arr", "common_pid", "cpu", "common_type", "__probe_ip"}
	str := []string{"s", "sa", "cm", "comm"}
	nums := []string{"0", "1", "-1", "2", "0x80", "255", "65535", "-32768", "0x7fffffff", "4242", "3", "0x401000"}
	var pred func(depth int) string
	pred = func(depth int) string {
		switch k := r.Intn(8); {
		case k == 0 && depth < 3:
			return "(" + pred(depth+1) + ")"
		case k == 1 && depth < 3:
			return "!" + pred(depth+1)
		case k < 4 && depth < 3:
			return pred(depth+1) + []string{" && ", " || "}[r.Intn(2)] + pred(depth+1)
		case k < 6:
			return str[r.Intn(len(str))] + []string{" == ", " != ", " ~ "}[r.Intn(3)] + `"` + strVals[r.Intn(len(strVals))] + `"`
		}
		return num[r.Intn(len(num))] + []string{" == ", " != ", " < ", " <= ", " > ", " >= ", " & "}[r.Intn(7)] + nums[r.Intn(len(nums))]
	}
	out := make([]string, n)
	for i := range out {
		out[i] = pred(0)
	}
	return out
}

// randomEnv is a hit of testProbe with values near the filters' constants and strings
// from the patterns' alphabet; its string slots sometimes point past the data.
func randomEnv(r *rand.Rand) *Env {
	e := matchEnv()
	d := e.Data[:55]
	for _, f := range []struct{ off, size int }{{0, 4}, {4, 8}, {16, 1}, {17, 1}, {18, 2}, {20, 2}, {22, 1}, {23, 8}, {31, 4}, {47, 8}} {
		v := []uint64{0, 1, ^uint64(0), 2, 0x80, 255, 65535, 0x7fffffff, uint64(r.Int63())}[r.Intn(9)]
		for k := 0; k < f.size; k++ {
			d[f.off+k] = byte(v >> (8 * k))
		}
	}
	for _, slot := range []int{12, 35, 39, 43} {
		s := strings.Repeat(strVals[r.Intn(len(strVals))], 1+r.Intn(2))
		item := uint32(len(s)+1)<<16 | uint32(len(d))
		switch r.Intn(10) {
		case 0:
			item = uint32(len(d)) // a faulted string: no bytes
		case 1:
			item = 200<<16 | uint32(len(d)) // longer than the record
		case 2:
			item = 0xffff
		}
		binary.LittleEndian.PutUint32(d[slot:], item)
		d = append(append(d, s...), 0)
	}
	if r.Intn(20) == 0 {
		d = d[:r.Intn(len(d))] // a short record
	}
	e.Data = d
	e.TID = []uint32{4242, 1, 0}[r.Intn(3)]
	e.CPU = uint32(r.Intn(4))
	e.Comm = [16]byte{}
	copy(e.Comm[:], strVals[r.Intn(len(strVals))])
	if r.Intn(3) == 0 {
		copy(e.Comm[:], "abababababababab") // no NUL within comm's 16 bytes
	}
	return e
}
