package tests

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// goBinSrc counts its own calls of each main function (goroutines, a method, shallow
// recursion) and prints the counts.
const goBinSrc = `package main

import (
	"fmt"
	"sync"
	"sync/atomic"
)

var nAdd, nFib, nSquare atomic.Int64
var mu sync.Mutex

type acc struct{ sum int }

//go:noinline
func (a *acc) add(n int) { nAdd.Add(1); a.sum += n }

//go:noinline
func fib(n int) int {
	nFib.Add(1)
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

//go:noinline
func square(n int) int { nSquare.Add(1); return n * n }

// work returns before its goroutine says it is done (the closure's return may come
// after main's exit).
//
//go:noinline
func work(a *acc) {
	for i := 0; i < 50; i++ {
		v := square(i)
		mu.Lock()
		a.add(v)
		mu.Unlock()
	}
}

func main() {
	var wg sync.WaitGroup
	a := &acc{}
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() { work(a); wg.Done() }()
	}
	wg.Wait()
	fmt.Println(fib(12), a.sum, nFib.Load(), nSquare.Load(), nAdd.Load())
}
`

// buildGo builds the module in dir with the go tool's flags into dir/name (no cgo but
// for -race, which needs it; no toolchain download, no GOFLAGS from the environment).
func buildGo(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), ".")...)
	cmd.Dir = dir
	cgo := "CGO_ENABLED=0"
	if slices.Contains(flags, "-race") || usesCgo(dir) {
		cgo = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), cgo, "GOFLAGS=", "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(flags, " "), err, b)
	}
	return out
}

// usesCgo says whether a Go file of dir imports "C".
func usesCgo(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), "import \"C\"") {
			return true
		}
	}
	return false
}

// mainFuncs is the oracle: the main.* functions of an unstripped build's .symtab,
// name to entry.
func mainFuncs(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	for _, s := range elfSymbols(t, path) {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && strings.HasPrefix(s.Name, "main.") {
			m[s.Name] = s.Value
		}
	}
	return m
}

// listedEntries is kprewrite list's entry probes of main.* functions, name to address.
func listedEntries(t *testing.T, bin string) map[string]uint64 {
	t.Helper()
	code, out, stderr := kp("list", bin)
	if code != 0 {
		t.Fatalf("kprewrite list %s: exit %d: %s", bin, code, stderr)
	}
	m := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[1] != "k" || !strings.HasPrefix(f[2], "main.") {
			continue
		}
		// an entry probe at +0, or after Go's stack check (+0x6, +0xa, ...): the
		// function's entry is the site less the offset
		name, off, ok := strings.Cut(f[2], "+0x")
		addr, err1 := strconv.ParseUint(f[0], 16, 64)
		o, err2 := strconv.ParseUint(off, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("list line %q", l)
		}
		if _, seen := m[name]; !seen || o == 0 {
			m[name] = addr - o
		}
	}
	return m
}

// checkSays fails unless kprewrite check lists fn's entry at addr.
func checkSays(t *testing.T, prog, fn string, addr uint64) {
	t.Helper()
	code, out, stderr := kp("check", prog)
	if code != 0 {
		t.Fatalf("kprewrite check %s: exit %d: %s", prog, code, stderr)
	}
	// (the entry probe of a function starting with Go's stack check goes after it, and
	// check says so at the function's entry: note go-stack-check-skip)
	skip := fmt.Sprintf("note: go-stack-check-skip at %#x: %s starts", addr, fn)
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == fmt.Sprintf("%#x", addr) && f[2] == fn {
			return
		}
		if strings.Contains(l, skip) {
			return
		}
	}
	t.Fatalf("kprewrite check does not list %s at %#x:\n%s", fn, addr, testprog.Clip(out, 3000))
}

// TestGoStripped: Go programs as shipped, stripped of their symbol table and DWARF
// (-ldflags='-s -w'), PIE and not: the functions come from .gopclntab. list shows
// every main function at its entry in the unstripped build's symbol table, and
// --calls 'main.*' at the exits leaves the output as it was, with the program's own
// counts of each function's returns (and its calls, but for morestack's restarts).
func TestGoStripped(t *testing.T) {
	testprog.Need(t, "go")
	for _, mode := range []string{"exe", "pie"} {
		t.Run(mode, func(t *testing.T) {
			dir := goProgDir(t, goBinSrc)
			bm := "-buildmode=" + mode
			want := mainFuncs(t, buildGo(t, dir, "full", bm))
			prog := buildGo(t, dir, "prog", bm, "-ldflags=-s -w")
			if f, err := elf.Open(prog); err != nil || f.Section(".symtab") != nil || f.Section(".debug_info") != nil {
				t.Fatalf("%s: still has a symbol table or DWARF (%v)", prog, err)
			}
			checkSays(t, prog, "main.fib", want["main.fib"])
			out := filepath.Join(dir, "prog.k")
			rewriteWith(t, prog, out, nil, "--calls", "main.*", "--exits", "--exits-only", "--optimized-only")
			got := listedEntries(t, out)
			for _, fn := range []string{"main.fib", "main.square", "main.(*acc).add", "main.work", "main.main", "main.main.func1"} {
				if want[fn] == 0 || got[fn] != want[fn] {
					t.Errorf("%s: listed at %#x, the unstripped build's symbol table says %#x", fn, got[fn], want[fn])
				}
			}
			for fn, addr := range got {
				if want[fn] != addr {
					t.Errorf("%s: listed at %#x, the unstripped build's symbol table says %#x", fn, addr, want[fn])
				}
			}
			tr := filepath.Join(dir, "prog.trace")
			res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
			var fibN, sumN, fibs, squares, adds int
			if _, err := fmt.Sscan(res.Stdout, &fibN, &sumN, &fibs, &squares, &adds); err != nil || fibN != 144 {
				t.Fatalf("unexpected output: %s", res)
			}
			calls := map[string]int{}
			for _, l := range readTrace(t, tr, out) {
				calls[l.Event]++
			}
			// Exact: the entry probe sits after Go's stack check, so a function
			// morestack restarts is counted once.
			for ev, n := range map[string]int{"main_fib": fibs, "main_square": squares, "main___acc__add": adds, "main_work": 4, "main_main": 1} {
				if calls[ev+"__return"] != n || calls[ev] != n {
					t.Errorf("%s: %d calls and %d returns traced, the program counted %d", ev, calls[ev], calls[ev+"__return"], n)
				}
			}
			t.Logf("traced: %v", calls)
		})
	}
}

// goProgDir writes a Go module of src into a new directory.
func goProgDir(t *testing.T, src string) string {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gobin\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
	return dir
}

// TestGoStrippedBadTable: a stripped Go program whose function table is corrupt (its
// function count past what the functab holds) is refused, naming the file, the
// table, the place and the reason, with no output file.
func TestGoStrippedBadTable(t *testing.T) {
	testprog.Need(t, "go")
	dir := goProgDir(t, goBinSrc)
	prog := buildGo(t, dir, "prog", "-ldflags=-s -w")
	ef, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	off := ef.Section(".gopclntab").Offset
	ef.Close()
	data, _ := os.ReadFile(prog)
	copy(data[off+8:], []byte{0xff, 0xff, 0xff, 0x7f})
	os.WriteFile(prog, data, 0o755)
	out := filepath.Join(dir, "prog.k")
	code, _, stderr := kp("rewrite", "-o", out, "--calls", "main.*", prog)
	if code != 1 || !strings.Contains(stderr, prog+": .gopclntab: bad Go function table: at offset 0x8: 2147483647 functions") {
		t.Fatalf("exit %d, want 1 and the table's fault named: %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatalf("%s written", out)
	}
}

// goRaceSrc races on shared in two goroutines through bump.
const goRaceSrc = `package main

import (
	"fmt"
	"sync"
)

var shared int

//go:noinline
func bump(n int) int { return n + 1 }

func main() {
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); shared = bump(shared) }()
	}
	wg.Wait()
	fmt.Println("done")
}
`

// TestGoRace: a -race build (the race runtime, ThreadSanitizer's C code linked in
// with cgo), stripped, probed at a Go function's entry, jump-optimized and int3:
// the race detector still reports the race (exit 66) and each call is traced.
func TestGoRace(t *testing.T) {
	testprog.Need(t, "go", "gcc")
	dir := goProgDir(t, goRaceSrc)
	prog := buildGo(t, dir, "prog", "-race", "-ldflags=-s -w")
	for _, mode := range [][]string{nil, {"--no-optimize"}} {
		out, tr := filepath.Join(dir, "prog.k"), filepath.Join(dir, "prog.trace")
		rewriteWith(t, prog, out, []string{"p:g/bump main.bump n=%ax:s64"}, mode...)
		res := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + tr}})
		if res.Exit != 66 || res.Stdout != "done\n" || !strings.Contains(res.Stderr, "WARNING: DATA RACE") {
			t.Fatalf("%v: want the race reported (exit 66): %s", mode, res)
		}
		if n := len(readTrace(t, tr, out)); n != 2 {
			t.Fatalf("%v: %d calls of bump traced, want 2", mode, n)
		}
	}
}

// zeroModuledata zeroes the words of the runtime's moduledata that locate it and
// hold the text base (at the start of .go.module, Go 1.26's home of it), as an
// external linker may leave a PIE's relocated words.
func zeroModuledata(t *testing.T, prog string) {
	t.Helper()
	ef, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	md, pcln := ef.Section(".go.module"), ef.Section(".gopclntab")
	ef.Close()
	if md == nil {
		t.Skip("no .go.module section (a Go before 1.26)")
	}
	data, _ := os.ReadFile(prog)
	if binary.LittleEndian.Uint64(data[md.Offset:]) != pcln.Addr {
		t.Fatalf(".go.module does not start with the moduledata")
	}
	clear(data[md.Offset : md.Offset+23*8])
	os.WriteFile(prog, data, 0o755)
}

// TestGoStrippedModuledata: the text base comes from the moduledata's relocations
// when the file's words are 0 (a PIE), and a program without either is refused with
// the reason.
func TestGoStrippedModuledata(t *testing.T) {
	testprog.Need(t, "go")
	dir := goProgDir(t, goBinSrc)
	want := mainFuncs(t, buildGo(t, dir, "full", "-buildmode=pie"))
	pie := buildGo(t, dir, "pie", "-buildmode=pie", "-ldflags=-s -w")
	zeroModuledata(t, pie)
	checkSays(t, pie, "main.fib", want["main.fib"])
	exe := buildGo(t, dir, "exe", "-ldflags=-s -w")
	zeroModuledata(t, exe)
	code, _, stderr := kp("check", exe)
	if code != 1 || !strings.Contains(stderr, exe+": .gopclntab: bad Go function table: no runtime moduledata points at the table") {
		t.Fatalf("exit %d, want 1 and the moduledata missing: %s", code, stderr)
	}
}

// TestGoStrippedGoTool: the go tool (this machine's, 14,000 functions), stripped by
// binutils' strip: every function its symbol table names in .text is a function of
// the stripped copy, at the same entry, by the same name (but for the .abi0 suffix
// the symbol table gives assembly functions and its spelling of the middle dot), and
// the copy has no function the symbol table lacks.
func TestGoStrippedGoTool(t *testing.T) {
	testprog.Need(t, "go", "strip")
	goTool := strings.TrimSpace(testprog.MustRun(t, "go", "env", "GOROOT")) + "/bin/go"
	stripped := filepath.Join(t.TempDir(), "go")
	testprog.MustRun(t, "strip", "-o", stripped, goTool)
	want := textFuncs(t, goTool)
	f, err := elfio.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fns := f.Functions()
	if fns.GoErr != nil || len(fns.List) < 10000 {
		t.Fatalf("%d functions: %v", len(fns.List), fns.GoErr)
	}
	for _, fn := range fns.List {
		name, ok := want[fn.Addr]
		if !ok || fn.Source != elfio.FromGopclntab || name != fn.Name && name != strings.ReplaceAll(fn.Name, "·", ".") {
			t.Fatalf("%s at %#x (from %s): the symbol table says %q", fn.Name, fn.Addr, fn.Source, name)
		}
		delete(want, fn.Addr)
	}
	if len(want) > 0 {
		t.Fatalf("%d functions of the symbol table missing, e.g. %v", len(want), want)
	}
}

// textFuncs is the functions the symbol table of path names in .text, address to
// name (without .abi0), but the linker's markers of the text's bounds.
func textFuncs(t *testing.T, path string) map[uint64]string {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	text := ef.Section(".text")
	ef.Close()
	m := map[uint64]string{}
	for _, s := range elfSymbols(t, path) {
		marker := s.Name == "runtime.text" || s.Name == "runtime.etext"
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && !marker && s.Value >= text.Addr && s.Value < text.Addr+text.Size {
			m[s.Value] = strings.TrimSuffix(s.Name, ".abi0")
		}
	}
	return m
}
