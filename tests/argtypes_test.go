package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// argTypesSrc's work takes parameters of each class: a size_t, a negative int, a
// string, a double (an SSE register: the next integer one is %cx), a bool and an enum.
const argTypesSrc = `#include <stdbool.h>
#include <stddef.h>
enum color { RED, GREEN = 5 };
__attribute__((noinline)) long work(size_t size, int n, const char *s, double d, bool b, enum color c)
{
	__asm__ volatile("");
	return (long)size + n + s[0] + (long)d + b + c;
}
int main(void) { return work(32, -1, "hi", 1.5, true, GREEN) == 0; }
`

// argTypesDef fetches every parameter's register untyped, one typed explicitly (x32:
// an explicit type wins) and the string as the user asked for it.
const argTypesDef = "p:t/w work size=%di n=%si s=%dx b=%cx c=%r8 x=%si:x32 str=+0(%dx):string"

// argTypesRun rewrites prog with argTypesDef (and flags), runs it and returns its
// record's arguments.
func argTypesRun(t *testing.T, prog, name string, flags ...string) string {
	t.Helper()
	kpd := filepath.Join(t.TempDir(), name)
	rewriteWith(t, prog, kpd, []string{argTypesDef}, flags...)
	r := testprog.Run(t, testprog.Cmd{Path: kpd})
	if r.Exit != 0 {
		t.Fatalf("%s: %s", kpd, r)
	}
	lines := readTrace(t, kpd+".trace", kpd)
	if len(lines) != 1 {
		t.Fatalf("%s: %d records, want 1", kpd, len(lines))
	}
	return strings.TrimSpace(lines[0].Args)
}

// TestArgTypesFromDWARF: an untyped argument register at a C function's entry takes
// its parameter's type from the program's DWARF (size_t prints in decimal, a negative
// int as -1, a bool as 0/1, an enum by name; a pointer stays hex, an explicit type
// wins); without DWARF, or with --kernel-types, every untyped fetcharg prints the
// kernel's x64 hex. `format` shows the types chosen.
func TestArgTypesFromDWARF(t *testing.T) {
	withDWARF := testprog.Build(t, argTypesSrc, "c", "-O1", "-g")
	without := testprog.Build(t, argTypesSrc, "c", "-O1")

	got := argTypesRun(t, withDWARF, "dwarf.kp")
	for _, want := range []string{"size=32 ", "n=-1 ", "b=1 ", "c=GREEN ", "x=0xffffffff ", `str="hi"`} {
		if !strings.Contains(got+" ", want) {
			t.Errorf("with DWARF: record %q, want %q in it", got, want)
		}
	}
	if !strings.Contains(got, " s=0x") {
		t.Errorf("with DWARF: record %q, want the pointer s in hex", got)
	}
	kernel := "size=0x20 n=0xffffffff "
	if got := argTypesRun(t, without, "nodwarf.kp"); !strings.HasPrefix(got, kernel) || !strings.Contains(got, " b=0x1 c=0x5 ") {
		t.Errorf("without DWARF: record %q, want the kernel's hex (%q..., b=0x1 c=0x5)", got, kernel)
	}
	if got := argTypesRun(t, withDWARF, "kernel.kp", "--kernel-types"); !strings.HasPrefix(got, kernel) || !strings.Contains(got, " b=0x1 c=0x5 ") {
		t.Errorf("--kernel-types: record %q, want the kernel's hex (%q..., b=0x1 c=0x5)", got, kernel)
	}

	kpd := filepath.Join(t.TempDir(), "format.kp")
	rewriteWith(t, withDWARF, kpd, []string{argTypesDef})
	format := kpOK(t, "format", kpd)
	for _, want := range []string{"field:u64 size;", "field:s32 n;", "field:u64 s;", "field:u8 b;", "field:u32 x;"} {
		if !strings.Contains(format, want) {
			t.Errorf("format: no %q in\n%s", want, format)
		}
	}
}

// TestArgTypesRecord: record types untyped argument registers from DWARF as rewrite
// does, and takes --kernel-types for the kernel's hex (a rewrite of its own in the
// cache: the option is part of the cache key).
func TestArgTypesRecord(t *testing.T) {
	prog := testprog.Build(t, argTypesSrc, "c", "-O1", "-g")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Chdir(t.TempDir())
	def := "p:t/w work size=%di n=%si"
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, "size=32 n=-1"},
		{[]string{"--kernel-types"}, "size=0x20 n=0xffffffff"},
		{nil, "size=32 n=-1"},
	} {
		args := append(append([]string{"record", "-q"}, c.flags...), "-e", def, "--", prog)
		kpOK(t, args...)
		lines := readTrace(t, "kprewrite.trace")
		if len(lines) != 1 || strings.TrimSpace(lines[0].Args) != c.want {
			t.Errorf("kprewrite %s: records %+v, want one with %q", strings.Join(args, " "), lines, c.want)
		}
		os.Remove("kprewrite.trace.old")
	}
}
