package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestFormatMatchesKernel: `kprewrite format` prints, for each event of a rewritten
// program, the format file the kernel's uprobe tracer shows for the same definition
// on the original program (only the ID differs: ours is the event's id in the trace);
// the trace file the program wrote gives the same output as the binary.
func TestFormatMatchesKernel(t *testing.T) {
	needUprobeTracer(t)
	prog := testprog.Build(t, probedSource(t), "c", "-O2")
	out := filepath.Join(t.TempDir(), "probed.kp")
	args := []string{"rewrite", "-o", out}
	for _, d := range diffDefs {
		args = append(args, "-e", d)
	}
	if code, _, errOut := kp(append(args, prog)...); code != 0 {
		t.Fatalf("rewrite: %s", errOut)
	}
	f, err := elfio.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	fns := f.Functions()
	removeDiffEvents()
	defer removeDiffEvents()
	idLine := regexp.MustCompile(`(?m)^ID: \d+$`)
	for _, d := range diffDefs {
		p, err := eventdef.Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		fn, _ := fns.ByName(p.Symbol)
		off, err := f.FileOffset(fn.Addr+p.Offset, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := appendUprobeEvent(p.UprobeDefinition(prog, off)); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(tracefs, "events", p.Group, p.Event, "format"))
		if err != nil {
			t.Fatal(err)
		}
		code, got, errOut := kp("format", "--event", p.Group+"/"+p.Event, out)
		if code != 0 {
			t.Fatalf("format: %s", errOut)
		}
		if idLine.ReplaceAllString(got, "ID: N") != idLine.ReplaceAllString(string(want), "ID: N") {
			t.Errorf("%s:\nours:\n%s\nthe kernel's:\n%s", d, got, want)
		}
	}
	f.Close()

	code, all, errOut := kp("format", out)
	if code != 0 || strings.Count(all, "\nformat:\n") != len(diffDefs) {
		t.Fatalf("format of every event: %d %s\n%s", code, errOut, all)
	}
	r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"diff"}})
	if r.Exit != 3 { // probed.c's main returns 3
		t.Fatalf("the rewritten program: %v", r)
	}
	if code, fromTrace, errOut := kp("format", out+".trace"); code != 0 || fromTrace != all {
		t.Errorf("format of the trace file: %d %s\n%s", code, errOut, fromTrace)
	}
	if code, _, errOut := kp("format", "--event", "kpwe2e/none", out); code != 1 || !strings.Contains(errOut, "no event kpwe2e/none") {
		t.Errorf("an unknown event: %d %s", code, errOut)
	}
}
