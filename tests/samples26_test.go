package tests

// The kernel's 2.6 kprobes samples (kprobe, jprobe, kretprobe) as C handler files,
// changed only in their include line and their target symbol (testdata/samples26):
// plain struct kprobe / struct jprobe / struct kretprobe registered in module_init by
// symbol_name, at a site the rewrite prepared (--prepare do_work); issue 46.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

func TestSamples26(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "samples26", "target.c"))
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2")
	var want5 []string // do_work(i, 10i) for i < 5: its arguments, its result
	for i := 0; i < 5; i++ {
		want5 = append(want5, fmt.Sprintf("a = %d, b = %d|%d", i, 10*i, 13*i))
	}
	for _, c := range []struct {
		file  string
		flags []string
		line  *regexp.Regexp // one a call, in order; its submatches joined with | are want5's
		args  func(m []string) string
	}{
		// post_handler: a single-stepped site (int3)
		{"kprobe_example.c", []string{"--no-optimize", "--no-boost"}, regexp.MustCompile(`(?m)^pre_handler: p->addr = 0x[0-9a-f]+, ip = [0-9a-f]+, flags = 0x[0-9a-f]+\npost_handler: p->addr = 0x[0-9a-f]+, flags = 0x[0-9a-f]+$`), nil},
		{"jprobe_example.c", nil, regexp.MustCompile(`(?m)^jprobe: a = (\d+), b = (\d+)$`), func(m []string) string { return "a = " + m[1] + ", b = " + m[2] }},
		{"kretprobe_example.c", nil, regexp.MustCompile(`(?m)^do_work returned (\d+) and took \d+ ns to execute$`), func(m []string) string { return m[1] }},
	} {
		t.Run(strings.TrimSuffix(c.file, ".c"), func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "target.kp")
			args := append([]string{"rewrite", "--prepare", "do_work", "--handlers", filepath.Join("testdata", "samples26", c.file), "-o", bin}, c.flags...)
			if code, o, e := kp(append(args, prog)...); code != 0 {
				t.Fatalf("kprewrite %v: exit %d\n%s%s", args, code, o, e)
			}
			r := testprog.Run(t, testprog.Cmd{Path: bin})
			if r.Stdout != "sum 130\n" || r.Exit != 0 {
				t.Fatalf("the program: exit %d, %q", r.Exit, r.Stdout)
			}
			ms := c.line.FindAllStringSubmatch(r.Stderr, -1)
			if len(ms) != 5 || !strings.Contains(r.Stderr, "Planted") || !strings.Contains(r.Stderr, "unregistered") {
				t.Fatalf("stderr: %d of 5 calls seen, want registration, 5 calls, unregistration:\n%s", len(ms), r.Stderr)
			}
			for i, m := range ms {
				if c.args == nil {
					continue
				}
				got, want := c.args(m), want5[i]
				if !strings.HasPrefix(want, got+"|") && !strings.HasSuffix(want, "|"+got) {
					t.Errorf("call %d: %q, want a part of %q", i, got, want)
				}
			}
		})
	}
}

// TestSamples26InitFails: a module_init that fails (register_kprobe of a function not
// prepared: -ENOENT) leaves the program running without handlers, and its module_exit
// is not run, as a module whose init failed is not loaded.
func TestSamples26InitFails(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "samples26", "target.c"))
	if err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile(filepath.Join("testdata", "samples26", "kprobe_example.c"))
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2")
	dir := t.TempDir()
	h := filepath.Join(dir, "bad.c")
	os.WriteFile(h, []byte(strings.Replace(string(sample), `"do_work"`, `"no_such_function"`, 1)), 0o644)
	bin := filepath.Join(dir, "target.kp")
	if code, o, e := kp("rewrite", "--prepare", "do_work", "--no-optimize", "--handlers", h, "-o", bin, prog); code != 0 {
		t.Fatalf("rewrite: exit %d\n%s%s", code, o, e)
	}
	r := testprog.Run(t, testprog.Cmd{Path: bin})
	if r.Stdout != "sum 130\n" || r.Exit != 0 || !strings.Contains(r.Stderr, "register_kprobe failed, returned -2") ||
		strings.Contains(r.Stderr, "pre_handler") || strings.Contains(r.Stderr, "kprobe at") {
		t.Fatalf("the program: exit %d, %q, stderr:\n%s", r.Exit, r.Stdout, r.Stderr)
	}
}
