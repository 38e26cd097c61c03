package tests

// C++ exceptions through return-probed frames: the return trampoline has no unwind
// information, so the runtime's throw wrappers (signal guard, KPRW_SG_THROW) put the
// original return addresses back before every throw from the program's own code.

import (
	"path/filepath"
	"strings"
	"testing"

	"kprewrite/tests/internal/testprog"
)

// cxxThrowSrc throws through return-probed frames: from a leaf under recursion (at -O2
// rec(n, 0) tail-calls leaf, so two return probes share one frame), rethrown from a
// catch (...) (__cxa_rethrow), and from libstdc++'s std::__throw_out_of_range_fmt that
// std::vector::at calls. Every exception is caught in main.
const cxxThrowSrc = `
#include <cstdio>
#include <stdexcept>
#include <vector>

extern "C" __attribute__((noinline)) int leaf(int n) {
	if (n == 7)
		throw std::runtime_error("seven");
	return n * 2;
}

extern "C" __attribute__((noinline)) int rec(int n, int d) {
	if (d == 0)
		return leaf(n);
	int r = rec(n, d - 1);
	asm volatile("" ::: "memory");
	return r + 1;
}

extern "C" __attribute__((noinline)) int rethrower(int n) {
	try {
		return rec(n, 2);
	} catch (...) {
		std::printf("rethrowing %d\n", n);
		throw;
	}
}

extern "C" __attribute__((noinline)) int at(int i) {
	static std::vector<int> v{1, 2, 3};
	return v.at(i);
}

int main() {
	for (int n = 5; n <= 8; n++) {
		try {
			std::printf("rec %d -> %d\n", n, rec(n, 3));
		} catch (const std::exception &e) {
			std::printf("caught %s at %d\n", e.what(), n);
		}
	}
	try {
		std::printf("rethrower %d\n", rethrower(7));
	} catch (const std::exception &e) {
		std::printf("caught again %s\n", e.what());
	}
	for (int i = 2; i <= 3; i++) {
		try {
			std::printf("at %d -> %d\n", i, at(i));
		} catch (const std::out_of_range &e) {
			std::printf("out of range %d\n", i);
		}
	}
	std::printf("done\n");
	return 0;
}
`

var cxxThrowDefs = []string{
	"r:cx/leaf leaf ret=$retval:s32",
	"r:cx/rec rec ret=$retval:s32",
	"r:cx/rethrower rethrower ret=$retval:s32",
	"r:cx/at at ret=$retval:s32",
}

// the return records of the frames that returned normally, in order; the frames an
// exception left (and rethrower, whose frame was flushed by the first throw) have none
var cxxThrowWant = []string{
	"leaf ret=10", "rec ret=10", "rec ret=11", "rec ret=12", "rec ret=13",
	"leaf ret=12", "rec ret=12", "rec ret=13", "rec ret=14", "rec ret=15",
	"leaf ret=16", "rec ret=16", "rec ret=17", "rec ret=18", "rec ret=19",
	"at ret=3",
}

// TestCxxThrowThroughRetprobes: the rewritten program prints the same and exits 0 with
// return probes in jump-optimized (ro) and int3 (rb, --no-optimize) modes, -O0 and -O2
// PIE; without the throw wrappers (KPREWRITE_SIGGUARD=off) it would abort.
func TestCxxThrowThroughRetprobes(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			prog := testprog.Build(t, cxxThrowSrc, "c++", opt, "-pie", "-fPIE")
			for _, mode := range []string{"ro", "rb"} {
				t.Run(mode, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "prog")
					args := []string{"rewrite", "-o", out}
					flag := "[OPTIMIZED]"
					if mode == "rb" {
						args = append(args, "--no-optimize")
						flag = "[BOOSTED]"
					}
					for _, d := range cxxThrowDefs {
						args = append(args, "-e", d)
					}
					code, _, stderr := kp(append(args, prog)...)
					if code != 0 {
						t.Fatalf("rewrite: exit %d: %s", code, stderr)
					}
					if !strings.Contains(stderr, "flushes the thread's pending return probes") {
						t.Errorf("rewrite warning: %q", stderr)
					}
					list := listFlags(t, out)
					for _, fn := range []string{"leaf", "rec", "rethrower", "at"} {
						if !strings.Contains(list[fn+"+0x0"], "r"+flag) {
							t.Errorf("%s: %q, want r%s", fn, list[fn+"+0x0"], flag)
						}
					}
					tr := filepath.Join(dir, "run.trace")
					res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
					if res.Exit != 0 || !strings.Contains(res.Stdout, "caught seven at 7\n") ||
						!strings.Contains(res.Stdout, "out of range 3\n") || !strings.HasSuffix(res.Stdout, "done\n") {
						t.Fatalf("run: %s", res)
					}
					sameLines(t, eas(readTrace(t, tr, out)), cxxThrowWant)
					if mode == "ro" && opt == "-O2" {
						// the wrappers are what makes it work
						off := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_SIGGUARD=off"}})
						if off.Signal == "" || !strings.Contains(off.Stderr, "terminate called") {
							t.Errorf("without the throw wrappers: %s, want std::terminate", off)
						}
					}
				})
			}
		})
	}
}
