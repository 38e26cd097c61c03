package pipeline

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/rewriter"
	"github.com/kprewrite/kprewrite/patch"
)

const editsProg = `#include <stdio.h>
#include <stdlib.h>
int work(int a, int b) { return a * b + 1; }
int main(int argc, char **argv) {
	char *p = malloc(argc * 16);
	int s = 0;
	for (int i = 0; i < 10; i++) s += work(i, argc);
	printf("%d %p\n", s, (void *)(p != 0));
	free(p);
	return 0;
}
`

// TestOutputDiffersOnlyAtEdits: every byte of the input's loaded segments that the
// output changes is inside an edit the rewrite lists (Result.Edits: the plan's
// probes, the dynamic section's entries, the property note), and each listed edit
// replaced exactly the bytes it says. Checked on a program with entry, return and
// library probes (DT_NEEDED edits), on its library copy (DT_INIT, DT_FINI), and on a
// program with library probes only (the rewrite without probes of its own).
func TestOutputDiffersOnlyAtEdits(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte(editsProg), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", "-O1", "-fcf-protection=full", "-o", prog, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cases := []struct {
		name string
		defs []string
	}{
		{"probes-and-library", []string{"p:t/work work a=%di:s32", "r:t/work_ret work $retval:s32", "p:t/malloc libc.so.6:malloc size=%di:u64"}},
		{"library-only", []string{"r:t/malloc_ret libc.so.6:malloc $retval:x64"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, c.name)
			res, err := Rewrite(prog, out, Options{Definitions: Definitions{Exprs: c.defs},
				Assembly: rewriter.Options{ImageName: c.name, TracePath: out + ".trace"}})
			if err != nil {
				t.Fatal(err)
			}
			checkEdits(t, prog, out, res.Program, len(c.defs) > 1)
			if len(res.Libraries) != 1 {
				t.Fatalf("%d library copies, want 1", len(res.Libraries))
			}
			lib := res.Libraries[0]
			checkEdits(t, lib.Input, lib.Output, lib.Result, true)
		})
	}
}

// checkEdits compares input and output over the input's loaded file bytes.
func checkEdits(t *testing.T, input, output string, res *rewriter.Result, wantEdits bool) {
	t.Helper()
	in, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(output)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if wantEdits && len(res.Edits) == 0 {
		t.Fatalf("%s: no edits listed", output)
	}
	edited := map[uint64]bool{} // file offsets the edits cover
	for _, e := range res.Edits {
		off := fileOffset(t, ef, e.Addr)
		if !bytes.Equal(in[off:off+uint64(len(e.Orig))], e.Orig) {
			t.Errorf("%s: edit at %#x: Orig % x, the input has % x", output, e.Addr, e.Orig, in[off:off+uint64(len(e.Orig))])
		}
		if !bytes.Equal(out[off:off+uint64(len(e.New))], e.New) {
			t.Errorf("%s: edit at %#x: New % x, the output has % x", output, e.Addr, e.New, out[off:off+uint64(len(e.New))])
		}
		for i := range e.New {
			edited[off+uint64(i)] = true
		}
	}
	var stray []uint64
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		for off := max(p.Off, 64); off < p.Off+p.Filesz; off++ { // past the ELF header
			if in[off] != out[off] && !edited[off] {
				stray = append(stray, off)
			}
		}
	}
	if len(stray) > 0 {
		t.Errorf("%s: %d loaded bytes differ from %s outside the listed edits (first at file offset %#x); edits: %s",
			output, len(stray), input, stray[0], describe(res.Edits))
	}
}

func fileOffset(t *testing.T, ef *elf.File, addr uint64) uint64 {
	t.Helper()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("edit at %#x is not in a loaded segment", addr)
	return 0
}

func describe(edits []patch.Edit) string {
	var b strings.Builder
	for _, e := range edits {
		fmt.Fprintf(&b, " %#x+%d", e.Addr, len(e.New))
	}
	return b.String()
}
