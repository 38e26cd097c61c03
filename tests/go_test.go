package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// buildGoProg builds testdata/goprog (goroutines, stack-growing recursion, a string
// argument, an HTTP server with 8 clients) with this machine's go tool.
func buildGoProg(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module goprog\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(readSource(t, "goprog/main.go")), 0o644)
	prog := filepath.Join(dir, "goprog")
	cmd := exec.Command(goBin, "build", "-o", prog, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return prog
}

// goCounts reads the calls the program counted itself ("calls main.fib 79202").
func goCounts(t *testing.T, stdout string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, l := range strings.Split(stdout, "\n") {
		var name string
		var n int
		if _, err := fmt.Sscanf(l, "calls %s %d", &name, &n); err == nil {
			m[name] = n
		}
	}
	if len(m) != 5 || !strings.HasPrefix(stdout, "sum 34550 bad 0\n") {
		t.Fatalf("unexpected output:\n%s", stdout)
	}
	return m
}

// TestGoCalls: a Go program rewritten with --calls 'main.*' and no other option
// (returns at the exits, entries after the stack check, on their own: a hooked return
// address made Go throw "unexpected return pc" while copying a stack, and the
// traceback then died of SIGSEGV on the trampoline's frame) behaves as the original;
// report counts every call as the program counts them, none lost, with deep's self
// time below its total (leaf is its callee); the HTTP server answers its 400
// requests, each through serverHandler.ServeHTTP.
func TestGoCalls(t *testing.T) {
	prog := buildGoProg(t)
	out := prog + ".k"
	rewriteWith(t, prog, out, []string{"p:g/serve net/http.serverHandler.ServeHTTP"}, "--calls", "main.*")
	_, list, _ := kp("list", out)
	for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == "r" && !strings.Contains(l, "[EXIT]") {
			t.Errorf("a Go function's return probe hooks the return address: %s", l)
		}
	}
	if !strings.Contains(list, " k  main.fib+0x6 ") || !strings.Contains(list, " k  main.deep+0x1a ") {
		t.Errorf("fib's and deep's entries should follow their stack checks (at +0x6 and +0x1a):\n%s", list)
	}
	trace := filepath.Join(t.TempDir(), "go.trace")
	res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + trace}}, nil)
	want := goCounts(t, res.Stdout)
	code, rep, stderr := kp("report", trace)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	calls, lost := reportCalls(t, rep)
	for fn, n := range want {
		if calls[fn] != n {
			t.Errorf("report: %s has %d calls, the program counted %d\n%s", fn, calls[fn], n, rep)
		}
	}
	if want["main.handle"] != 400 || len(lost) != 0 {
		t.Errorf("main.handle: %d calls, want 400; lost returns %v, want none\n%s", want["main.handle"], lost, rep)
	}
	total, self := reportTimes(t, rep, "main.deep")
	if self >= total {
		t.Errorf("main.deep: self time %.0f ns not below its total %.0f ns\n%s", self, total, rep)
	}
	serves := 0
	for _, l := range readTrace(t, trace, out) {
		if l.Event == "serve" {
			serves++
		}
	}
	if serves != 400 {
		t.Errorf("%d serverHandler.ServeHTTP records, want 400", serves)
	}
}

// reportTimes returns fn's total and self time in a report, in ns.
func reportTimes(t *testing.T, rep, fn string) (total, self float64) {
	t.Helper()
	for _, l := range strings.Split(rep, "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[len(f)-1] == fn {
			return parseDuration(t, f[0], f[1]), parseDuration(t, f[2], f[3])
		}
	}
	t.Fatalf("no %s in the report:\n%s", fn, rep)
	return 0, 0
}

// TestGoInt3: int3 probes in a Go program (--no-optimize). Go's runtime installs its
// own SIGTRAP handler with raw system calls, which threw "SIGTRAP: trace trap" at the
// first hit; the rewrite now keeps ours (runtime.sigtable). fib's entry, after its
// stack check, fires once a call whatever morestack does, with its argument in %ax;
// greet's string argument is its pointer and length in %ax and %bx, n in %cx. A Go
// function's return probe is refused (no jump-optimized exits), never hooked. The
// HTTP server's 400 requests each hit two int3 probes on the server's threads.
func TestGoInt3(t *testing.T) {
	prog := buildGoProg(t)
	out := prog + ".k"
	code, _, stderr := kp("rewrite", "-o", out, "--no-optimize", "-e", "r:g/fibr main.fib", prog)
	if code != 1 || !strings.Contains(stderr, "a Go function, whose return address is never hooked") {
		t.Errorf("a Go return probe with --no-optimize: exit %d, want 1 and the reason\n%s", code, stderr)
	}
	rewriteWith(t, prog, out, []string{"p:g/fib main.fib n=%ax:s64", "p:g/greet main.greet len=%bx:s64 n=%cx:s64 s=+0(%ax):u8",
		"p:g/serve net/http.serverHandler.ServeHTTP", "p:g/handle main.handle"}, "--no-optimize")
	trace := filepath.Join(t.TempDir(), "go.trace")
	res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + trace}}, nil)
	want := goCounts(t, res.Stdout)
	fibs, greets, serves, handles := 0, 0, 0, 0
	fibArg := regexp.MustCompile(`^ n=(\d+)$`)
	for _, l := range readTrace(t, trace, out) {
		switch l.Event {
		case "fib":
			m := fibArg.FindStringSubmatch(l.Args)
			if n, _ := strconv.Atoi(m[1]); m == nil || n > 21 {
				t.Fatalf("fib: %s", l.Args)
			}
			fibs++
		case "greet":
			var ln, n, s int
			if _, err := fmt.Sscanf(l.Args, " len=%d n=%d s=%d", &ln, &n, &s); err != nil || ln != 16 || n < 0 || n > 3 || s != 'h' {
				t.Fatalf("greet: %q: want len=16, n in 0..3 and s's first byte 'h' (%d)", l.Args, 'h')
			}
			greets++
		case "serve":
			serves++
		case "handle":
			handles++
		}
	}
	if fibs != want["main.fib"] || greets != want["main.greet"] || serves != 400 || handles != 400 {
		t.Errorf("%d fib, %d greet, %d serve and %d handle records; the program counted %d, %d, 400 and 400",
			fibs, greets, serves, handles, want["main.fib"], want["main.greet"])
	}
}

// TestGoCheck: check names the Go runtime's functions no probe may go in, says where
// a Go function's entry and return probes go, and that Go's signal handler takes no
// int3 (it runs with every signal blocked).
func TestGoCheck(t *testing.T) {
	prog := buildGoProg(t)
	code, out, stderr := kp("check", "-e", "p:g/m runtime.morestack.abi0", "-e", "p:g/s runtime.systemstack.abi0", "-e", "p:g/x runtime.goexit.abi0",
		"-e", "p:g/f main.fib", "-e", "r:g/r main.fib", "-e", "p:g/h runtime.sighandler", prog)
	if code != 0 {
		t.Fatalf("check: exit %d: %s", code, stderr)
	}
	for _, w := range []string{
		"go-do-not-probe at 0x", "runtime.morestack.abi0 runs when the goroutine's stack is used up",
		"runtime.systemstack.abi0 switches between the goroutine's stack and the thread's g0 stack",
		"runtime.goexit.abi0 every goroutine's first frame returns to goexit+1",
		"note: go-stack-check-skip", "main.fib+0x6 [g/f]", "note: go-return-at-exits", "--exits: recorded at its 2 exits",
		"note: signals-blocked at 0x", "(Go's signal handler, which runs with every signal blocked): only a jump-optimized probe",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("check does not say %q:\n%s", w, out)
		}
	}
	if n := strings.Count(out, "refuse      runtime."); n != 3 {
		t.Errorf("%d runtime functions refused, want 3:\n%s", n, out)
	}
}

// TestGoCgo: in a cgo program the Go function's return is recorded at its exits and
// the C function's, outside runtime.text..runtime.etext, hooks its return address as
// in any C program (C runs on the thread's g0 stack, which Go neither copies nor
// unwinds); both are counted once.
func TestGoCgo(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module cg\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

/*
int cadd(int a, int b) { return a + b; }
*/
import "C"
import "fmt"

//go:noinline
func gadd(a, b int) int { return int(C.cadd(C.int(a), C.int(b))) }

func main() {
	s := 0
	for i := 0; i < 100; i++ {
		s += gadd(i, 1)
	}
	fmt.Println(s)
}
`), 0o644)
	prog := filepath.Join(dir, "cg")
	cmd := exec.Command(goBin, "build", "-o", prog, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := prog + ".k"
	rewriteWith(t, prog, out, nil, "--calls", "main.gadd", "--calls", "cadd")
	_, list, _ := kp("list", out)
	if !regexp.MustCompile(`(?m) r  main\.gadd\+0x[0-9a-f]+ .*\[EXIT\]$`).MatchString(list) ||
		!regexp.MustCompile(`(?m) r  cadd\+0x0 +\S+ \[OPTIMIZED\]$`).MatchString(list) {
		t.Errorf("want gadd's return at its exits and cadd's hooked:\n%s", list)
	}
	trace := filepath.Join(dir, "cg.trace")
	res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + trace}}, nil)
	if res.Stdout != "5050\n" {
		t.Fatalf("unexpected run: %s", res)
	}
	code, rep, stderr := kp("report", trace)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	calls, lost := reportCalls(t, rep)
	if calls["main.gadd"] != 100 || calls["cadd"] != 100 || len(lost) != 0 {
		t.Errorf("calls %v, lost %v; want 100 of each, none lost\n%s", calls, lost, rep)
	}
}

// TestGoCountOnly: --count-only --calls 'main.*' on a Go program counts each call once
// at the entry after the stack check and once at the exits, as the program counts
// them.
func TestGoCountOnly(t *testing.T) {
	prog := buildGoProg(t)
	out := prog + ".k"
	rewriteWith(t, prog, out, nil, "--count-only", "--calls", "main.*")
	trace := filepath.Join(t.TempDir(), "go.trace")
	res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + trace}}, nil)
	want := goCounts(t, res.Stdout)
	code, prof, stderr := kp("profile", trace)
	if code != 0 {
		t.Fatalf("profile: exit %d: %s", code, stderr)
	}
	hits := map[string]int{}
	for _, l := range strings.Split(prof, "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			hits[f[0]], _ = strconv.Atoi(f[1])
		}
	}
	for fn, n := range want {
		ev := strings.ReplaceAll(fn, ".", "_")
		if hits[ev] != n || hits[ev+"__return"] != n {
			t.Errorf("%s: %d entries and %d returns counted, the program counted %d\n%s", fn, hits[ev], hits[ev+"__return"], n, prof)
		}
	}
}
