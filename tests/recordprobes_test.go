package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// loopySrc calls work(i) for i = 0..N-1 and prints the sum of 2i.
const loopySrc = `
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return 2 * a; }
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	long s = 0;
	for (int i = 0; i < n; i++)
		s += work(i);
	printf("sum %ld\n", s);
	return 0;
}
`

// userPath puts an unmodified loopy on PATH, a cache in a temporary directory, and the
// test in an empty working directory; it returns the cache directory.
func userPath(t *testing.T) string {
	t.Helper()
	bin, cache, work := t.TempDir(), t.TempDir(), t.TempDir()
	copyFile(t, testprog.Build(t, loopySrc, "c", "-O1"), filepath.Join(bin, "loopy"))
	os.Chmod(filepath.Join(bin, "loopy"), 0o755)
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Chdir(work)
	return filepath.Join(cache, "kprewrite")
}

// cachedProgram returns the one rewritten program named name in the cache, and its
// file's identity and modification time.
func cachedProgram(t *testing.T, cache, name string) (string, *syscall.Stat_t) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(cache, "*", name))
	if len(m) != 1 {
		t.Fatalf("the cache holds %d rewrites of %s (%v), want 1", len(m), name, m)
	}
	st, err := os.Stat(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return m[0], st.Sys().(*syscall.Stat_t)
}

// TestRecordRewrites (issue 47, item 1): record -e DEF -- PROG with PROG an unmodified
// program found on PATH rewrites it into the cache, runs it (its output, its exit
// status) and writes kprewrite.trace, which trace reads by default; a second run
// reuses the rewrite (the cached file is not written again) and keeps the first
// trace as kprewrite.trace.old; other options make another entry; cache clean empties
// the cache.
func TestRecordRewrites(t *testing.T) {
	cache := userPath(t)
	def := "p:t/w work a=%di:s64"
	code, stdout, stderr := kp("record", "-e", def, "--", "loopy", "100")
	if code != 0 || stdout != "sum 9900\n" || !strings.Contains(stderr, "100 records (") {
		t.Fatalf("record -e %q -- loopy 100: exit %d, stdout %q, stderr %q", def, code, stdout, stderr)
	}
	lines := readTrace(t, "kprewrite.trace")
	for i, l := range lines {
		if want := fmt.Sprintf(" a=%d", i); l.Event != "w" || l.Args != want || l.Comm != "loopy" {
			t.Fatalf("record %d: %+v, want loopy's w with%s", i, l, want)
		}
	}
	if len(lines) != 100 {
		t.Fatalf("kprewrite.trace holds %d records, want 100", len(lines))
	}
	if code, out, _ := kp("trace", "--no-header"); code != 0 || strings.Count(out, ": w: ") != 100 {
		t.Errorf("trace with no FILE: exit %d, %d records, want kprewrite.trace's 100", code, strings.Count(out, ": w: "))
	}
	path, before := cachedProgram(t, cache, "loopy")

	code, stdout, stderr = kp("record", "-e", def, "--", "loopy", "7")
	if _, after := cachedProgram(t, cache, "loopy"); code != 0 || stdout != "sum 42\n" || after.Ino != before.Ino || after.Mtim != before.Mtim {
		t.Fatalf("second record: exit %d, stdout %q, stderr %q; %s was written again (inode %d -> %d)", code, stdout, stderr, path, before.Ino, after.Ino)
	}
	if !strings.Contains(stderr, "its rewrite from the cache") || len(readTrace(t, "kprewrite.trace")) != 7 || len(readTrace(t, "kprewrite.trace.old")) != 100 {
		t.Errorf("second record: %q; want the cache said, 7 records, the first run's 100 in kprewrite.trace.old", stderr)
	}

	if code, _, stderr := kp("record", "-q", "-e", "p:t/w work a=%di:u64", "--", "loopy", "1"); code != 0 {
		t.Fatalf("record with another definition: exit %d: %s", code, stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "*", "loopy")); len(m) != 2 {
		t.Errorf("another definition: %d entries in the cache, want 2", len(m))
	}
	if code, _, stderr := kp("cache", "clean"); code != 0 || !strings.Contains(stderr, "2 rewritten program(s)") {
		t.Errorf("cache clean: exit %d: %q", code, stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "*")); len(m) != 0 {
		t.Errorf("after cache clean: %v", m)
	}
}

// TestRecordNoProbes (issue 47, item 1): record of a program with no probes, given
// none, is an error saying so, after the program ran; no trace is left, and the
// previous one stays where it was (it used to say "0 records written", exit 0, and
// leave a 48 MB file).
func TestRecordNoProbes(t *testing.T) {
	userPath(t)
	if code, _, stderr := kp("record", "-q", "-e", "p:t/w work", "--", "loopy", "3"); code != 0 {
		t.Fatalf("record -e: exit %d: %s", code, stderr)
	}
	before, _ := os.Stat("kprewrite.trace")
	code, stdout, stderr := kp("record", "--", "loopy", "5")
	if code != 1 || stdout != "sum 20\n" || !strings.Contains(stderr, "loopy: no probes: it is no rewritten program and ran none") {
		t.Errorf("record -- loopy: exit %d, stdout %q, stderr %q; want exit 1 and no probes", code, stdout, stderr)
	}
	if after, err := os.Stat("kprewrite.trace"); err != nil || !os.SameFile(before, after) {
		t.Errorf("the previous kprewrite.trace is not where it was: %v", err)
	}
	if _, err := os.Stat("kprewrite.trace.old"); err == nil {
		t.Errorf("kprewrite.trace.old left by a recording that wrote nothing")
	}
	code, _, stderr = kp("record", "-o", "x.trace", "--", "sh", "-c", "exit 3")
	if _, err := os.Stat("x.trace"); code != 3 || !strings.Contains(stderr, "sh: no probes") || err == nil {
		t.Errorf("record -- sh -c 'exit 3': exit %d, %q, x.trace: %v; want the program's 3, no probes, no file", code, stderr, err)
	}
	if code, _, stderr := kp("record", "--filter", "t/w:a>1", "--", "loopy"); code != 2 || !strings.Contains(stderr, "--filter is a rewrite option") {
		t.Errorf("record --filter without definitions: exit %d: %q", code, stderr)
	}
}

// TestRecordScript: a #! script on PATH (a pyenv shim) is refused with the program of
// the same name further on PATH named.
func TestRecordScript(t *testing.T) {
	userPath(t)
	shims := t.TempDir()
	os.WriteFile(filepath.Join(shims, "loopy"), []byte("#!/bin/sh\nexec loopy \"$@\"\n"), 0o755)
	t.Setenv("PATH", shims+":"+os.Getenv("PATH"))
	code, _, stderr := kp("record", "-e", "p:t/w work", "--", "loopy")
	if code != 1 || !strings.Contains(stderr, "a script (#!/bin/sh), not a program") || !strings.Contains(stderr, "/loopy\n") {
		t.Errorf("record of a script: exit %d: %q", code, stderr)
	}
}

// TestRecordRewritesLibrary (issue 47, item 1): record -e 'p:m/malloc
// libc.so.6:malloc ...' -- python3.11 rewrites the interpreter and its C library into
// the cache; the program finds the library's copy, its output is its own, and its
// mallocs are recorded.
func TestRecordRewritesLibrary(t *testing.T) {
	const py = "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no " + py)
	}
	userPath(t)
	code, stdout, stderr := kp("record", "-e", "p:m/malloc libc.so.6:malloc size=%di:u64", "--", py, "-c", "print('hi from python')")
	if code != 0 || stdout != "hi from python\n" {
		t.Fatalf("record -- python3.11: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	lines := readTrace(t, "kprewrite.trace")
	sizes := 0
	for _, l := range lines {
		if l.Event == "malloc" && strings.HasPrefix(l.Args, " size=") {
			sizes++
		}
	}
	if sizes < 100 || sizes != len(lines) {
		t.Errorf("%d malloc records with a size of %d, want at least 100, all of them", sizes, len(lines))
	}
}
