package tests

// Events given at start-up in the environment (issue 46): KPREWRITE_EVENTS in the form
// of the kernel's kprobe_event= boot parameter adds live events at prepared sites
// before main runs (the runtime runs `kprewrite probe --startup`); they print what the
// same definitions given at rewrite time print, one that fails is said and skipped,
// and a fork child of the run does not add them again.

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const liveBootSrc = `#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noipa)) long work(long a, long b) { return a * 3 + b; }
int main(void) {
	long s = 0;
	for (int i = 0; i < 20; i++)
		s += work(i, 1);
	pid_t c = fork();
	if (c == 0) {
		for (int i = 0; i < 5; i++)
			s += work(i, 2);
		_exit(0);
	}
	waitpid(c, NULL, 0);
	printf("sum %ld\n", s);
	return 0;
}
`

func TestLiveBootEvents(t *testing.T) {
	testprog.Need(t, "gcc", "go")
	dir := t.TempDir()
	tool := buildKprewrite(t, dir)
	prog := testprog.Build(t, liveBootSrc, "c", "-O2")
	defs := []string{"p:t/n work a=%di:s64 b=%si:s64", "r:t/r work $retval"}

	// the reference: the same definitions given at rewrite time
	ref := filepath.Join(dir, "ref.kp")
	rewriteWith(t, prog, ref, defs)
	testprog.MustRun(t, ref) // (into ref.kp.trace)

	bin := filepath.Join(dir, "boot.kp")
	rewriteWith(t, prog, bin, nil, "--prepare", "work")
	tr := bin + ".trace"
	cmd := exec.Command(bin)
	cmd.Env = []string{"KPREWRITE_TOOL=" + tool, "KPREWRITE_TRACE=" + tr,
		"KPREWRITE_EVENTS=p:t/n,work,a=%di:s64,b=%si:s64;r:t/r,work,$retval;p:t/bad,nosuch"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "sum 590\n" {
		t.Fatalf("run: %v %q %s", err, out, stderr.String())
	}
	if !strings.Contains(stderr.String(), "KPREWRITE_EVENTS: p:t/bad nosuch: t/bad: bad probe definition") ||
		!strings.Contains(stderr.String(), "no symbol nosuch") {
		t.Errorf("stderr %q: want the failing definition said", stderr.String())
	}
	got := readTrace(t, tr, bin)
	want := readTrace(t, ref+".trace", ref)
	if len(got) != 50 || len(got) != len(want) {
		t.Fatalf("%d records with KPREWRITE_EVENTS, %d with the definitions at rewrite time; want 50 (20 calls and 5 in the fork child, entry and return each)", len(got), len(want))
	}
	for i := range got {
		if g, w := got[i].Event+got[i].Args, want[i].Event+want[i].Args; g != w {
			t.Errorf("record %d: %q, at rewrite time %q", i, g, w)
		}
	}
	_, list, _ := kp("probe", tr)
	if strings.Count(list, "\n") != 2 || !strings.HasPrefix(list, "t/n  prog  25 hits  ") || !strings.Contains(list, "\nt/r  prog  25 hits  ") {
		t.Errorf("probe %s: %q, want t/n and t/r once each with 25 hits (the fork child added nothing)", tr, list)
	}
}
