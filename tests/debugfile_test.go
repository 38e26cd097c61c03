package tests

// --debug-file of another program (issue 50, item 5): with build-ids, theirs must be
// equal; without one (or with a 2-byte one cut short of its padding), the functions both
// files name must be at the same addresses, else the debug file is refused.

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const debugOneSrc = `#include <stdio.h>
__attribute__((noinline)) long work(long a) { long r = a * 3; return r + 1; }
int main(int argc, char **argv) { (void)argv; printf("%ld\n", work(argc)); return 0; }
`

// debugTwoSrc has a function before work(): work() moves.
const debugTwoSrc = `#include <stdio.h>
__attribute__((noinline)) long other(long a) { return a * a * a + 7; }
__attribute__((noinline)) long work(long a) { long r = a * 3; return r + 1; }
int main(int argc, char **argv) { (void)argv; printf("%ld\n", work(argc) + other(argc)); return 0; }
`

func TestDebugFileOfAnotherProgram(t *testing.T) {
	testprog.Need(t, "gcc", "objcopy")
	for _, c := range []struct {
		name, id1, id2, want string
	}{
		{"no build-id", "none", "none", "does not describe"},
		{"two-byte build-ids", "0x1234", "0xabcd", "has build-id abcd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			one := testprog.Build(t, debugOneSrc, "c", "-g", "-O1", "-Wl,--build-id="+c.id1)
			two := testprog.Build(t, debugTwoSrc, "c", "-g", "-O1", "-Wl,--build-id="+c.id2)
			dir := t.TempDir()
			dbgOne, dbgTwo := filepath.Join(dir, "one.debug"), filepath.Join(dir, "two.debug")
			for _, p := range [][2]string{{one, dbgOne}, {two, dbgTwo}} {
				if o, err := exec.Command("objcopy", "--only-keep-debug", p[0], p[1]).CombinedOutput(); err != nil {
					t.Fatalf("objcopy: %v\n%s", err, o)
				}
			}
			out := filepath.Join(dir, "one.kp")
			def := "p:src/w work a"
			code, _, stderr := kp("rewrite", "--debug-file", dbgTwo, "-o", out, "-e", def, one)
			if code != 1 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, dbgTwo) {
				t.Fatalf("another program's debug file: exit %d, %q; want exit 1 and %q naming it", code, stderr, c.want)
			}
			if _, err := exec.LookPath(out); err == nil {
				t.Fatalf("%s written", out)
			}
			if code, _, stderr := kp("rewrite", "--debug-file", dbgOne, "-o", out, "-e", def, one); code != 0 {
				t.Fatalf("its own debug file: exit %d, %s", code, stderr)
			}
		})
	}
}
