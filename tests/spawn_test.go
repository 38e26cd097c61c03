package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// spawnSrc starts children every way a static program can: posix_spawn (glibc's child
// runs with every signal blocked until its exec), vfork, and clone(CLONE_VM) on a stack
// of its own.
const spawnSrc = `
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
static int cloned(void *arg) { (void)arg; write(1, "cloned\n", 7); return 3; }
int main(void) {
	for (int i = 0; i < 3; i++) {
		char n[8];
		snprintf(n, sizeof n, "%d", i);
		char *argv[] = {"echo", "spawned", n, 0};
		pid_t p;
		if (posix_spawn(&p, "/bin/echo", 0, 0, argv, environ) != 0) { printf("spawn failed\n"); return 1; }
		int st;
		waitpid(p, &st, 0);
		printf("spawn %d: %d\n", i, st);
		fflush(stdout);
	}
	pid_t p = vfork();
	if (p == 0) { execl("/bin/echo", "echo", "vforked", (char *)0); _exit(127); }
	int st;
	waitpid(p, &st, 0);
	printf("vfork: %d\n", st);
	fflush(stdout);
	static char stack[64 << 10];
	p = clone(cloned, stack + sizeof stack, CLONE_VM | SIGCHLD, 0);
	waitpid(p, &st, 0);
	printf("clone: %d\n", st);
	return 0;
}
`

// TestSpawnUnderProbes: a static program that spawns, with a probe on every function,
// printed nothing of its children: they died of SIGTRAP before their exec (int3 probes
// in C library code that runs with every signal blocked), and with return probes a
// trace file's first word was once in seven runs the address of the return-probe
// trampoline (a return probe on clone's child part, whose (%rsp) is the top of the
// child's stack, next to the trace file's mapping) (issue 13). Now such code gets
// jump-optimized probes or none (signals-blocked), and a hundred runs with return
// probes leave a hundred readable traces.
func TestSpawnUnderProbes(t *testing.T) {
	testprog.Need(t, "gcc")
	if _, err := os.Stat("/bin/echo"); err != nil {
		t.Skip("no /bin/echo")
	}
	prog := testprog.Build(t, spawnSrc, "c", "-O2", "-static")
	want := testprog.Run(t, testprog.Cmd{Path: prog})
	if want.Exit != 0 || strings.Count(want.Stdout, "spawned") != 3 || !strings.Contains(want.Stdout, "vforked") {
		t.Fatalf("original: %s", want)
	}
	f, err := elfio.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	// every function start, fragments included (what a definitions file generated from
	// the symbol table and .eh_frame holds)
	var entries, returns strings.Builder
	for i, fn := range f.Functions().List {
		fmt.Fprintf(&entries, "p:all/f%d %#x\n", i, fn.Addr)
		fmt.Fprintf(&returns, "r:all/r%d %#x\n", i, fn.Addr)
	}
	f.Close()
	dir := t.TempDir()
	for _, c := range []struct {
		name, defs string
		flags      []string
		runs       int
		refusals   bool // some probes refused as signals-blocked (by default the first refusal found may be another rule's)
	}{
		{"entries", entries.String(), nil, 3, false},
		{"entries int3", entries.String(), []string{"--no-optimize"}, 3, true},
		{"returns", returns.String(), nil, 100, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			defs := filepath.Join(dir, "defs")
			os.WriteFile(defs, []byte(c.defs), 0o644)
			out := filepath.Join(dir, "prog.kp")
			args := append([]string{"rewrite", "--skip-refused", "-o", out, "-f", defs}, c.flags...)
			code, _, stderr := kp(append(args, prog)...)
			if code != 0 {
				t.Fatalf("rewrite: %s", testprog.Clip(stderr, 2000))
			}
			if c.refusals && !strings.Contains(stderr, "signals-blocked") {
				t.Errorf("no probe refused as signals-blocked:\n%s", testprog.Clip(stderr, 2000))
			}
			trace := filepath.Join(dir, "t.trace")
			for run := 0; run < c.runs; run++ {
				os.Remove(trace)
				got := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + trace}})
				if got.Exit != 0 || got.Stdout != want.Stdout {
					t.Fatalf("run %d: %s\nwant: %s", run, got, want)
				}
				if code, _, stderr := kp("profile", trace); code != 0 {
					t.Fatalf("run %d: the trace does not read: %s", run, stderr)
				}
			}
		})
	}
}
