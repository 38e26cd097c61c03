package rewriter

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestGoidOffset: the offset of goid in runtime.g comes from a Go program's DWARF,
// and for a stripped build from the table by release, which must agree with the DWARF
// of this machine's Go when it lists its release.
func TestGoidOffset(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module g\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { println(1) }\n"), 0o644)
	build := func(name string, flags ...string) []byte {
		cmd := exec.Command("go", append(append([]string{"build", "-o", name}, flags...), ".")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	off, ok := dwarfGoidOffset(build("full"))
	if !ok || off <= 0 {
		t.Fatalf("no goid in the DWARF type runtime.g (%d)", off)
	}
	rel := runtime.Version()
	if i := strings.IndexByte(rel[4:], '.'); i >= 0 {
		rel = rel[:4+i]
	}
	want, listed := goidOffsets[rel]
	if listed && want != off {
		t.Errorf("%s: goidOffsets says %d, the DWARF %d", rel, want, off)
	}
	stripped := build("stripped", "-ldflags=-s -w")
	if _, ok := dwarfGoidOffset(stripped); ok {
		t.Fatal("a stripped build has DWARF")
	}
	got, err := goidOffset(stripped)
	switch {
	case listed && (err != nil || got != off):
		t.Errorf("stripped %s: %d, %v; want %d", rel, got, err, off)
	case !listed && (err == nil || !strings.Contains(err.Error(), "not known")):
		t.Errorf("stripped %s, a release the table lacks: %d, %v", rel, got, err)
	}
}
