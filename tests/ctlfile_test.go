package tests

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// ctlSrc calls work and other a few times each, so that a control file's filters,
// triggers and histograms run at once.
const ctlSrc = `
__attribute__((noinline)) int work(int a) { __asm__ volatile(""); return a + 1; }
__attribute__((noinline)) int other(int a) { __asm__ volatile(""); return a + 2; }
int main(void)
{
	long s = 0;
	for (int i = 0; i < 20; i++)
		s += work(i) + other(i);
	return s == 0;
}
`

// ctlFileProgram rewrites ctlSrc (work and other probed) and makes a control file for it
// with a filter, count triggers, switches and two histograms placed at start-up
func ctlFileProgram(t *testing.T, dir string, flags ...string) (bin string, ctl []byte) {
	t.Helper()
	prog := testprog.Build(t, ctlSrc, "c", "-O2")
	bin = filepath.Join(dir, "prog")
	rewriteWith(t, prog, bin, []string{"p:ctl/w work a=%di:s32", "p:ctl/o other a=%di:s32"}, flags...)
	file := filepath.Join(dir, "good.ctl")
	if code, o, e := kp("control", "-o", file, "--filter", "ctl/w:a < 15 || a == 17",
		"--trigger", "ctl/w:hist:keys=a.buckets=4:vals=a", "--trigger", "ctl/o:traceoff:1 if a == 18",
		"--trigger", "ctl/o:hist:keys=common_pid:vals=a", "--disable", "ctl/o", bin); code != 0 {
		t.Fatalf("control: exit %d\n%s%s", code, o, e)
	}
	ctl, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return bin, ctl
}

// TestControlFileCorrupted: a KPREWRITE_CONTROL file with one byte changed (1,000
// random ones) never kills the program: it is installed, or refused with one stderr line
// and the program runs with the rewrite's controls (was: SIGSEGV in walk_blob).
func TestControlFileCorrupted(t *testing.T) {
	dir := t.TempDir()
	bin, good := ctlFileProgram(t, dir, "--trigger", "ctl/o:hist:keys=a.log2")
	tr := filepath.Join(dir, "t.trace")
	file := filepath.Join(dir, "bad.ctl")
	run := func(ctl []byte) testprog.Result {
		os.Remove(tr)
		if err := os.WriteFile(file, ctl, 0o644); err != nil {
			t.Fatal(err)
		}
		return testprog.Run(t, testprog.Cmd{Path: bin, Extra: []string{"KPREWRITE_CONTROL=" + file, "KPREWRITE_TRACE=" + tr, "KPREWRITE_TRACE_SIZE=256K"}})
	}
	if r := run(good); r.Exit != 0 || r.Stderr != "" {
		t.Fatalf("the control file as made: %v", r)
	}
	rng := rand.New(rand.NewSource(50))
	refused, crashed := 0, 0
	for i := 0; i < 1000; i++ {
		bad := append([]byte(nil), good...)
		at := rng.Intn(len(bad))
		bad[at] ^= byte(1 + rng.Intn(255))
		r := run(bad)
		if r.Exit != 0 || r.Signal != "" || strings.Count(r.Stderr, "\n") > 1 {
			crashed++
			if crashed <= 5 {
				t.Errorf("byte %d changed to %#x: %v", at, bad[at], r)
			}
			continue
		}
		if r.Stderr != "" {
			refused++
		}
	}
	t.Logf("1000 corruptions of a %d-byte control file: %d refused, %d failed", len(good), refused, crashed)
}
