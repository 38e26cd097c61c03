package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// selftestSrc: two functions called in turn.
const selftestSrc = `
#include <stdio.h>
__attribute__((noinline)) int f1(int a) { return a + 1; }
__attribute__((noinline)) int f2(int a) { return a + 2; }
int main(int argc, char **argv) {
	(void)argv;
	printf("%d\n", f1(argc) + f2(argc));
	return 0;
}
`

// TestKernelSelftestSyntax: definitions of the kernel's ftrace selftests
// kprobe_syntax_errors.tc and kprobe_multiprobe.tc (issue 50) through the command
// line, on a program with debug information (so that source-level definitions are
// looked for too): each error is the kernel's message at the kernel's caret
// (internal/eventdef's TestSelftestSyntaxErrors has the whole file), and
// "-:GRP/EVENT SYM" removes the one probe of a multi-probe event at SYM.
func TestKernelSelftestSyntax(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, selftestSrc, "c", "-O1", "-g")
	for _, c := range []struct{ def, msg string }{
		{"p ^non_exist_func", "Invalid probed address or symbol"},
		{"p vfs_read ^$stack10000", "Invalid stack number"},
		{"p vfs_read ^var.1=@11", "Argument name must follow the same rules as C identifiers"},
		{"p vfs_read ^=@11", "Argument name is not specified"},
		{"p vfs_read var1=@11 ^var1=@12", "This argument name is already used"},
		{"p vfs_read ^$none_var", "Invalid $-variable specified"},
		{"p vfs_read ^%none_reg", "Invalid register name"},
		{"p vfs_read ^&1", "Invalid fetch argument"},
		{"p vfs_read +0(^$comm)", "$comm can not be dereferenced"},
		{"p vfs_read @11:^unknown_type", "Unknown type is specified"},
		{"r ^vfs_read+10", "Retprobe address must be an function entry"},
		{"p:foo/^bar.1 vfs_read", "Event name must follow the same rules as C identifiers"},
	} {
		tc := strings.ReplaceAll(c.def, "vfs_read", "f1")
		pos := strings.IndexByte(tc, '^')
		def := tc[:pos] + tc[pos+1:]
		t.Run(def, func(t *testing.T) {
			code, _, stderr := kp("check", "-e", def, prog)
			caret := "Command: " + def + "\n" + strings.Repeat(" ", 2+11+pos) + "^\n"
			if code != 1 || !strings.Contains(stderr, "-e #1: bad probe definition") ||
				!strings.Contains(stderr, "error: "+c.msg+"\n") || !strings.Contains(stderr, caret) {
				t.Errorf("exit %d, want 1, %q and the caret at %d:\n%s", code, c.msg, pos, stderr)
			}
		})
	}

	// kprobe_multiprobe.tc: "Remove just 1 event"
	dir := t.TempDir()
	defs := filepath.Join(dir, "defs")
	os.WriteFile(defs, []byte("p:kprobes/testevent f1 x=%di\np:kprobes/testevent f2 x=%di\n-:kprobes/testevent f1\n"), 0o644)
	_, list, stderr := kp("check", "-f", defs, prog)
	if !strings.Contains(list, "f2 [kprobes/testevent]") || strings.Contains(list, "f1 [kprobes/testevent]") {
		t.Errorf("check after removing one probe:\n%s%s", list, stderr)
	}
	out := filepath.Join(dir, "prog.kp")
	trace := filepath.Join(dir, "t.trace")
	// (the kernel's default types: the program has DWARF, which would type x)
	if code, _, stderr := kp("rewrite", "--kernel-types", "-o", out, "-f", defs, prog); code != 0 {
		t.Fatalf("rewrite: %s", stderr)
	}
	r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + trace}})
	if r.Exit != 0 || r.Stdout != "5\n" {
		t.Fatalf("run: %s", r)
	}
	_, text, stderr := kp("trace", trace)
	lines := traceLines(text)
	if len(lines) != 1 || !strings.Contains(lines[0], " testevent: (") || !strings.HasSuffix(lines[0], " x=0x1") {
		t.Errorf("trace: want one record (f2's; check lists no other site):\n%s%s", text, stderr)
	}
	// the last probe takes the event with it
	code, _, stderr := kp("check", "-e", "p:kprobes/testevent f1", "-e", "-:kprobes/testevent f1", "-e", "-:kprobes/testevent", prog)
	if code != 1 || !strings.Contains(stderr, "-e #3") || !strings.Contains(stderr, "No such event to delete") {
		t.Errorf("deleting an event gone with its last probe: exit %d:\n%s", code, stderr)
	}
}
