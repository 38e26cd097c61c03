package tests

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// goFaultSrc recovers from a nil dereference (a SIGSEGV that Go's runtime turns into a
// panic) 400 times while main.probe's argument is a bad pointer, and every tenth time
// a good one (to a word holding 42); every 40th time it runs a program (os/exec's child
// shares its memory and resets Go's handlers before exec) and takes a SIGUSR1 through
// signal.Notify. With an argument it ends in an unrecovered nil dereference. It exits
// 3 (the kernel's tracer helpers want it).
const goFaultSrc = `package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"unsafe"
)

type T struct{ x, y int }

var good = 42

//go:noinline
func deref(p *T) (v int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return p.y, nil
}

//go:noinline
func probe(p uintptr) uintptr { return p + 1 }

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	panics, sum := 0, uintptr(0)
	for i := 0; i < 400; i++ {
		if i%40 == 0 {
			if err := exec.Command("/bin/true").Run(); err != nil {
				panic(err)
			}
			syscall.Kill(os.Getpid(), syscall.SIGUSR1)
			<-c
		}
		if _, err := deref(nil); err != nil {
			panics++
		}
		p := uintptr(0xdead0000 + 8*i)
		if i%10 == 0 {
			p = uintptr(unsafe.Pointer(&good))
		}
		sum += probe(p) - p
	}
	fmt.Println(panics, sum)
	if len(os.Args) > 1 {
		var p *T
		fmt.Println(p.x)
	}
	os.Exit(3)
}
`

// goFaultCgo makes goFaultSrc a cgo program: a C function it calls once.
const goFaultCgo = `package main

// static int twice(int x) { return 2 * x; }
import "C"

func init() {
	if C.twice(21) != 42 {
		panic("cgo")
	}
}
`

// TestGoFastReadFaults: a Go program's fetches read memory with the fault-catching copy
// (its runtime's raw rt_sigaction and rtsigprocmask redirected to the runtime's stubs),
// static or PIE, stripped or not, and the program's own nil dereferences still reach
// Go's handler and become panics it recovers from: output unchanged, an unrecovered one
// dies as before, and the records are the kernel's uprobe tracer's (a faulting read
// stored as 0), with jump-optimized and int3 probes.
func TestGoFastReadFaults(t *testing.T) {
	testprog.Need(t, "go")
	dir := goProgDir(t, goFaultSrc)
	prog := buildGo(t, dir, "prog")
	defs := []string{"p:" + diffGroup + "/probe main.probe v=+0(%ax):u64 p=%ax:x64"}
	for _, c := range []struct {
		name  string
		build []string
		flags []string
	}{
		{"optimize", nil, nil},
		{"int3", nil, []string{"--no-optimize"}},
		{"pie", []string{"-buildmode=pie"}, nil},
		// stripped: the runtime's functions found by .gopclntab's names
		{"stripped", []string{"-ldflags=-s -w"}, nil},
		{"pie-stripped", []string{"-buildmode=pie", "-ldflags=-s -w"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			prog := prog
			if c.build != nil {
				prog = buildGo(t, dir, "prog-"+c.name, c.build...)
			}
			out := filepath.Join(dir, "prog."+c.name)
			rewriteWith(t, prog, out, defs, c.flags...)
			tr := filepath.Join(dir, c.name+".trace")
			res := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_TRACE=" + tr}})
			if !strings.Contains(res.Stderr, "signal guard: 2 function entries wrapped, 0 not") || !strings.Contains(res.Stderr, ", fast reads") {
				t.Fatalf("the runtime does not read fast:\n%s", res)
			}
			runGoFault(t, prog, out, tr)
		})
	}
	t.Run("cgo", func(t *testing.T) {
		// the same program linked with C code (and so with libc, its runtime's signal
		// calls going through cgo's sigaction): the program's sigaction is libc's
		testprog.Need(t, "gcc")
		cdir := goProgDir(t, goFaultSrc)
		os.WriteFile(filepath.Join(cdir, "cgo.go"), []byte(goFaultCgo), 0o644)
		prog := buildGo(t, cdir, "prog-cgo")
		if !strings.Contains(testprog.MustRun(t, "readelf", "-d", prog), "libc.so") {
			t.Fatalf("%s is not linked with libc: no cgo", prog)
		}
		out := filepath.Join(cdir, "prog.cgo")
		rewriteWith(t, prog, out, defs)
		tr := filepath.Join(cdir, "cgo.trace")
		res := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_DEBUG=1", "KPREWRITE_TRACE=" + tr}})
		if !strings.Contains(res.Stderr, ", fast reads") {
			t.Fatalf("the runtime does not read fast:\n%s", res)
		}
		runGoFault(t, prog, out, tr)
	})
	t.Run("other-code", func(t *testing.T) {
		// rt_sigaction's last byte changed (ret to int3; the program is not run): its
		// code is not the one the runtime's stub replaces, so it is not redirected and
		// reads are by system call, said
		other := filepath.Join(dir, "prog-other")
		if err := os.WriteFile(other, withByte(t, prog, "runtime.rt_sigaction.abi0", 31, 0xcc), 0o755); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := kp("rewrite", "-o", other+".k", "-e", defs[0], other)
		if code != 0 || !strings.Contains(stderr, "use the system-call read") ||
			!strings.Contains(stderr, "runtime.rt_sigaction.abi0 (its code is not the Go runtime's that the runtime's stub replaces") {
			t.Errorf("rewrite: exit %d: %s", code, stderr)
		}
	})
	t.Run("kernel", func(t *testing.T) {
		needUprobeTracer(t)
		checkGoFaultTrace(t, kernelTraceDefs(t, prog, defs, nil))
	})
}

// withByte returns the bytes of the ELF file path with the byte at off of function fn
// set to b.
func withByte(t *testing.T, path, fn string, off uint64, b byte) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, s := range elfSymbols(t, path) {
		if sec := ef.Section(".text"); s.Name == fn && sec != nil && s.Value >= sec.Addr && s.Value+off < sec.Addr+sec.Size {
			data[sec.Offset+s.Value-sec.Addr+off] = b
			return data
		}
	}
	t.Fatalf("%s: no %s in .text", path, fn)
	return nil
}

// runGoFault runs goFaultSrc's build prog and its rewrite out (tracing into tr): the
// same output, the records, and an unrecovered nil dereference's death.
func runGoFault(t *testing.T, prog, out, tr string) {
	t.Helper()
	res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	if res.Stdout != "400 400\n" || res.Exit != 3 {
		t.Fatalf("unexpected run: %s", res)
	}
	checkGoFaultTrace(t, readTrace(t, tr, out))
	crash := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"crash"}, Extra: []string{"KPREWRITE_TRACE=" + tr}})
	if crash.Exit != 2 || !strings.Contains(crash.Stderr, "panic: runtime error: invalid memory address or nil pointer dereference\n[signal SIGSEGV: segmentation violation code=0x1 addr=0x0") {
		t.Errorf("an unrecovered nil dereference: %s", crash)
	}
}

// checkGoFaultTrace checks the 400 records of goFaultSrc's main.probe: the good word
// read as 42, the bad pointers' reads as 0.
func checkGoFaultTrace(t *testing.T, lines []traceLine) {
	t.Helper()
	if len(lines) != 400 {
		t.Fatalf("%d records, the program made 400 calls", len(lines))
	}
	for i, l := range lines {
		want := fmt.Sprintf(" v=0 p=%#x", 0xdead0000+8*i)
		if i%10 == 0 {
			want = " v=42 p="
		}
		if !strings.HasPrefix(l.Args, want) {
			t.Fatalf("record %d: %q, want %q", i, l.Args, want)
		}
	}
}
