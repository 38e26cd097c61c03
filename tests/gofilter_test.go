package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// goFilterSrc calls main.work 5 times from the main goroutine and 10+k times from
// goroutine k of 4, and writes "GOID CALLS" per goroutine (ids from runtime.Stack's
// header) to the file its argument names.
const goFilterSrc = `package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
)

func goid() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

//go:noinline
func work(n int) int { return n * 3 }

func main() {
	var mu sync.Mutex
	var out bytes.Buffer
	sum := 0
	do := func(n int) {
		for i := 0; i < n; i++ {
			sum += work(i)
		}
		mu.Lock()
		fmt.Fprintln(&out, goid(), n)
		mu.Unlock()
	}
	do(5)
	var wg sync.WaitGroup
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func() { defer wg.Done(); mu.Lock(); mu.Unlock(); do(10 + k) }()
	}
	wg.Wait()
	os.WriteFile(os.Args[1], out.Bytes(), 0o644)
	fmt.Println("done")
}
`

// TestGoGoidFilterHist: common_goid in a filter and as a hist key on a Go function's
// event. The filter keeps the main goroutine's (id 1) calls only; the histogram, run
// on every hit (the kernel runs triggers on the hits the filter refuses), counts each
// goroutine's calls as the program counted them.
func TestGoGoidFilterHist(t *testing.T) {
	testprog.Need(t, "go")
	dir := goProgDir(t, goFilterSrc)
	prog := buildGo(t, dir, "prog")
	out, tr, counts := filepath.Join(dir, "prog.k"), filepath.Join(dir, "prog.trace"), filepath.Join(dir, "counts")
	rewriteWith(t, prog, out, []string{"p:g/work main.work"},
		"--filter", "g/work:common_goid == 1", "--trigger", "g/work:hist:keys=common_goid:sort=common_goid")
	res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{counts}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	if res.Stdout != "done\n" {
		t.Fatalf("unexpected run: %s", res)
	}
	checkGoidFilterHist(t, out, tr, goidCounts(t, counts)) // the rewritten program's: it ran last
	// the same given at run time, in a control file
	plain, ctl := filepath.Join(dir, "plain.k"), filepath.Join(dir, "ctl")
	rewriteWith(t, prog, plain, []string{"p:g/work main.work"})
	if code, _, stderr := kp("control", "-o", ctl, "--filter", "g/work:common_goid == 1", "--trigger", "g/work:hist:keys=common_goid:sort=common_goid", plain); code != 0 {
		t.Fatalf("control: exit %d: %s", code, stderr)
	}
	tr = filepath.Join(dir, "ctl.trace")
	if res := testprog.Run(t, testprog.Cmd{Path: plain, Args: []string{counts}, Extra: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_CONTROL=" + ctl}}); res.Stdout != "done\n" {
		t.Fatalf("unexpected run: %s", res)
	}
	checkGoidFilterHist(t, plain, tr, goidCounts(t, counts))
}

// checkGoidFilterHist checks trace tr of goFilterSrc's rewrite out with the filter
// common_goid == 1 and the histogram keyed by common_goid: the main goroutine's records
// only, and each goroutine's calls (want, as the program counted them) in the table.
func checkGoidFilterHist(t *testing.T, out, tr string, want map[uint64]int) {
	t.Helper()
	if want[1] != 5 || len(want) != 5 {
		t.Fatalf("the program's calls by goroutine: %v (the main goroutine's id is 1)", want)
	}
	code, jl, stderr := kp("trace", "--format", "json", tr)
	if code != 0 {
		t.Fatalf("trace: exit %d: %s", code, stderr)
	}
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(jl), "\n") {
		var r struct {
			Goid *uint64 `json:"goid"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Goid == nil || *r.Goid != 1 {
			t.Fatalf("a record the filter should have refused: %s (%v)", l, err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("%d records, the main goroutine made 5 calls", n)
	}
	h := findHist(t, histOf(t, tr), "hist:keys=common_goid")
	for id, calls := range want {
		if got := h.Entries[fmt.Sprintf("common_goid: %d", id)]; len(got) == 0 || got[0] != uint64(calls) {
			t.Errorf("hist: goroutine %d: %v, the program made %d calls\n%v", id, got, calls, h.Entries)
		}
	}
	if len(h.Entries) != len(want) || h.Hits != 5+10+11+12+13 {
		t.Errorf("hist: %d entries, %d hits: %v; the program: %v", len(h.Entries), h.Hits, h.Entries, want)
	}
	if code, ff, _ := kp("format", "--event", "g/work", out); code != 0 || !strings.Contains(ff, "common_goid") {
		t.Errorf("format: exit %d: %s", code, ff)
	}
}

// goidCounts reads the "GOID CALLS" lines goFilterSrc writes.
func goidCounts(t *testing.T, file string) map[uint64]int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint64]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var id uint64
		var n int
		if _, err := fmt.Sscan(l, &id, &n); err != nil {
			t.Fatalf("line %q of %s: %v", l, file, err)
		}
		m[id] += n
	}
	return m
}

// TestGoidFilterRefused: common_goid where records carry no goroutine id (a C
// program's event) is refused, in a filter and in a trigger, naming the option, the
// event and the reason, with no output file.
func TestGoidFilterRefused(t *testing.T) {
	prog := testprog.Build(t, "int main(void) { return 0; }\n", "c", "-O2")
	out := filepath.Join(t.TempDir(), "prog.k")
	for _, flags := range [][]string{
		{"--filter", "c/main:common_goid == 1"},
		{"--trigger", "c/main:hist:keys=common_goid"},
		{"--trigger", "c/main:traceoff if common_goid > 3"},
	} {
		code, _, stderr := kp(append(append([]string{"rewrite", "-o", out, "-e", "p:c/main main"}, flags...), prog)...)
		if code != 1 || !strings.Contains(stderr, flags[0]+" #1: ") || !strings.Contains(stderr, "c/main names common_goid, but its records carry no goroutine id") {
			t.Errorf("%v: exit %d: %s", flags, code, stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: an output file was written", flags)
		}
	}
}
