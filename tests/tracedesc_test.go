package tests

// Self-describing trace files: the runtime copies each image's description into the
// trace file when the image registers there, so `kprewrite trace` and `profile` need no
// binary: a trace file moved away from the binaries (or outliving them) still prints.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

func TestTraceDescribesItself(t *testing.T) {
	probed := testprog.Build(t, probedSource(t), "c", "-O2", "-pthread")
	other := testprog.Build(t, sigguardSrc, "c", "-O2", "-pthread")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "probed"), filepath.Join(dir, "sg")
	rewriteWith(t, probed, a, basicDefs)
	rewriteWith(t, other, b, []string{"p:sg/work work a=%di:s32 b=%si:s32"}, "--no-optimize")
	// two images append to one trace file
	tr := filepath.Join(dir, "run.trace")
	env := []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}
	testprog.Run(t, testprog.Cmd{Path: a, Args: []string{"basic"}, Extra: env})
	testprog.Run(t, testprog.Cmd{Path: b, Args: []string{"block"}, Extra: env})
	withBins := readTrace(t, tr, a, b)
	if len(withBins) != len(basicWant)+12 {
		t.Fatalf("%d lines with the binaries, want %d", len(withBins), len(basicWant)+12)
	}

	// the trace alone, elsewhere, the binaries gone
	moved := filepath.Join(t.TempDir(), "moved.trace")
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(moved, data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(a)
	os.Remove(b)
	alone := readTrace(t, moved)
	if len(alone) != len(withBins) {
		t.Fatalf("%d lines from the trace alone, want %d", len(alone), len(withBins))
	}
	for i := range alone {
		if alone[i] != withBins[i] {
			t.Fatalf("line %d: %+v alone, %+v with the binaries", i, alone[i], withBins[i])
		}
	}
	// profile names the image first when several share the file
	code, stdout, stderr := kp("profile", moved)
	if code != 0 || stderr != "" {
		t.Fatalf("profile: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"probed add 5 0", "probed greet 2 0", "sg work 12 0"} {
		if !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
			t.Errorf("profile of the trace alone has no %q:\n%s", want, stdout)
		}
	}
	// no "name their binaries with -b" complaint, every event named
	code, stdout, stderr = kp("trace", "--no-header", moved)
	if code != 0 || stderr != "" || !strings.Contains(stdout, "greet: (") {
		t.Errorf("trace: exit %d, %q, %q", code, stderr, testprog.Clip(stdout, 300))
	}
}
