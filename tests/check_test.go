package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"

	"github.com/kprewrite/kprewrite/internal/cli"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// kp runs the kprewrite command line in-process.
func kp(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = cli.Main(args, &o, &e)
	return code, o.String(), e.String()
}

// checkSrc has functions whose entry verdicts are known by construction (also
// tests/cases/check-verdicts-O2/prog.c).
// checkSrc is tests/testdata/check.c (the cases under tests/cases use it too).
var checkSrc = mustReadTestdata("check.c")

// TestCheckJSONOnCorpus: the JSON report's schema, summary and sites agree (the
// verdicts of checkSrc's functions are tests/cases/check-verdicts-*).
func TestCheckJSONOnCorpus(t *testing.T) {
	for _, flags := range [][]string{{"-O2"}, {"-O0", "-no-pie"}, {"-O2", "-fcf-protection=full"}} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			prog := testprog.Build(t, checkSrc, "c", flags...)
			code, out, errOut := kp("check", "--json", prog)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var r cli.CheckReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("bad JSON: %v\n%s", err, testprog.Clip(out, 2000))
			}
			if r.Schema != cli.CheckSchema || r.Binary != prog {
				t.Errorf("schema %q binary %q", r.Schema, r.Binary)
			}
			if r.Summary.Sites != len(r.Sites) || len(r.Sites) < 4 {
				t.Fatalf("summary counts %d sites, list has %d", r.Summary.Sites, len(r.Sites))
			}
			total := 0
			for _, v := range []string{"optimize", "boost", "single-step", "refuse"} {
				n, ok := r.Summary.Verdicts[v]
				if !ok {
					t.Errorf("summary lacks verdict %s", v)
				}
				total += n
			}
			if total != r.Summary.Sites {
				t.Errorf("verdict counts add to %d, want %d", total, r.Summary.Sites)
			}
			for _, s := range r.Sites {
				if s.Reasons == nil {
					t.Errorf("%s: reasons must be an array", s.Function)
				}
				if s.Verdict == "optimize" && (s.DCR == nil || s.DCR.Length < 5) {
					t.Errorf("%s: optimize without a DCR of >= 5 bytes: %+v", s.Function, s.DCR)
				}
			}
		})
	}
}

func hasRule(s cli.CheckSite, rule string) bool {
	for _, r := range s.Reasons {
		if r.Rule == rule && !r.Note {
			return true
		}
	}
	return false
}

func TestCheckDefinitions(t *testing.T) {
	prog := testprog.Build(t, checkSrc, "c", "-O2")
	defs := filepath.Join(t.TempDir(), "probes.txt")
	os.WriteFile(defs, []byte("# entry and return of plain\np:demo/plain_in plain a=%di b=%si\n\nr:demo/plain_out plain $retval\n"), 0o644)
	code, out, errOut := kp("check", "--json", "-f", defs, "-e", "p:demo/loop loop_at_entry+2", prog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r cli.CheckReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Sites) != 3 {
		t.Fatalf("got %d sites, want 3", len(r.Sites))
	}
	events := map[string]cli.CheckSite{}
	for _, s := range r.Sites {
		events[s.Event] = s
	}
	if s := events["demo/loop"]; s.Function != "loop_at_entry" || s.Offset != 2 || s.Definition == "" {
		t.Errorf("demo/loop site: %+v", s)
	}
	if s := events["demo/plain_out"]; !s.Return {
		t.Errorf("demo/plain_out should be a return probe: %+v", s)
	}
	// the text form: tests/cases/check-definitions
}

// TestBadInput: every bad input gets a clear message naming file, place and reason, a
// non-zero exit, and no output file.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "notelf")
	os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o755)
	truncated := filepath.Join(dir, "truncated")
	data, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip(err)
	}
	os.WriteFile(truncated, data[:200], 0o755)
	prog := testprog.Build(t, checkSrc, "c", "-O2")
	out := filepath.Join(dir, "out")

	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"missing file", []string{"check", filepath.Join(dir, "nope")}, 1, []string{"nope", "no such file"}},
		{"not ELF", []string{"check", notELF}, 1, []string{notELF, "not an ELF file"}},
		{"truncated", []string{"check", truncated}, 1, []string{truncated, "past end of file"}},
		{"bad register", []string{"check", "-e", "p:g/e plain a=%xyz", prog}, 1, []string{"-e #1", "Invalid register name", "^"}},
		{"unknown symbol", []string{"check", "-e", "p:g/e no_such_function", prog}, 1,
			[]string{"-e #1", "Invalid probed address or symbol (no symbol no_such_function in", "Command: p:g/e no_such_function\n" + strings.Repeat(" ", 19) + "^"}},
		{"retprobe offset", []string{"check", "-e", "r:g/e plain+4", prog}, 1, []string{"-e #1", "Retprobe address must be an function entry"}},
		{"event of another type", []string{"check", "-e", "p:g/e plain", "-e", "r:g/e main", prog}, 1, []string{"-e #2", "Probe type is different from existing probe"}},
		{"no binary", []string{"check"}, 2, []string{"BINARY"}},
		{"unknown flag", []string{"check", "--frobnicate", prog}, 2, []string{"frobnicate"}},
		{"bad --only", []string{"check", "--only", "fast", prog}, 2, []string{"fast"}},
		{"unknown command", []string{"frobnicate"}, 2, []string{"unknown command"}},
		{"rewrite not ELF", []string{"rewrite", "-o", out, notELF}, 1, []string{notELF, "not an ELF file"}},
		{"rewrite truncated", []string{"rewrite", "-o", out, truncated}, 1, []string{truncated}},
		{"rewrite without -o", []string{"rewrite", prog}, 2, []string{"-o"}},
		{"rewrite onto input", []string{"rewrite", "-o", prog, prog}, 1, []string{"is the input"}},
		{"rewrite bad def", []string{"rewrite", "-o", out, "-e", "p:g/e plain $retval", prog}, 1, []string{"$retval"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := testprog.HashFile(t, prog)
			code, stdout, stderr := kp(c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("an output file was left behind")
				os.Remove(out)
			}
			if testprog.HashFile(t, prog) != before {
				t.Errorf("the input binary changed")
			}
		})
	}
}

// TestRewriteDeterministic: the same input gives byte-identical output, the input is not
// touched, and the probe-less rewrite runs like the original.
func TestRewriteDeterministic(t *testing.T) {
	prog := testprog.Build(t, checkSrc, "c", "-O2")
	before := testprog.HashFile(t, prog)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, out := range []string{a, b} {
		if code, _, errOut := kp("rewrite", "-o", out, prog); code != 0 {
			t.Fatalf("rewrite: exit %d: %s", code, errOut)
		}
	}
	if testprog.HashFile(t, a) != testprog.HashFile(t, b) {
		t.Errorf("two rewrites of the same input differ")
	}
	if testprog.HashFile(t, prog) != before {
		t.Errorf("the input binary changed")
	}
	testprog.Same(t, prog, a, testprog.Cmd{Args: []string{"x", "y"}}, nil)
	// A rewritten binary is refused as input: rewrite the original instead.
	c := filepath.Join(dir, "c")
	if code, _, errOut := kp("rewrite", "-o", c, a); code != 1 || !strings.Contains(errOut, "already rewritten") {
		t.Errorf("rewriting a rewritten binary: exit %d: %s", code, errOut)
	}
}

// TestCheckRewriteAgree: check accepted definitions that rewrite then refused (a fetcharg
// naming no symbol, more probes on a site than a probepoint holds, whose error sounded
// internal); check now resolves and compiles them the same way and says the same
// (issue 13).
func TestCheckRewriteAgree(t *testing.T) {
	prog := testprog.Build(t, checkSrc, "c", "-O2")
	out := filepath.Join(t.TempDir(), "out")
	many := []string{}
	for i := 0; i <= kprt.MaxProbesPerPoint; i++ {
		many = append(many, "-e", fmt.Sprintf("p:g/e%d plain", i))
	}
	for _, c := range []struct {
		name string
		defs []string
		want string
	}{
		{"fetcharg symbol", []string{"-e", "p:g/e plain x=@nosuchsym"}, "Symbol is not found: nosuchsym"},
		{"fetcharg symbol expression", []string{"-e", "p:g/e plain x=@_sdata*10"}, "Symbol is not found: _sdata*10"},
		{"65 probes on one site", many, "-e #65: g/e64 is the 65th probe on "},
		{"no such function", []string{"-e", "p non_exist_func"}, "Invalid probed address or symbol"},
		{"delete what is not there", []string{"-e", "-:event"}, "No such event to delete"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ccode, _, cerr := kp(append(append([]string{"check"}, c.defs...), prog)...)
			rcode, _, rerr := kp(append(append([]string{"rewrite", "-o", out}, c.defs...), prog)...)
			if ccode != 1 || rcode != 1 || !strings.Contains(cerr, c.want) {
				t.Fatalf("check exit %d, rewrite exit %d, want 1 and %q:\ncheck: %s\nrewrite: %s", ccode, rcode, c.want, cerr, rerr)
			}
			if strings.TrimPrefix(cerr, "kprewrite check: ") != strings.TrimPrefix(rerr, "kprewrite rewrite: ") {
				t.Errorf("check and rewrite differ:\ncheck: %s\nrewrite: %s", cerr, rerr)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("rewrite left an output")
			}
		})
	}
}

// multiSrc: two functions called in turn, and (with multiOther) a local function of one
// name in each of two files.
const multiSrc = `
#include <stdio.h>
__attribute__((noinline)) int f1(int a) { return a + 1; }
__attribute__((noinline)) int f2(int a) { return a + 2; }
int other(int);
static __attribute__((noinline)) int helper(int a) { return a * 3; }
int main(int argc, char **argv) {
	(void)argv;
	printf("%d\n", f1(argc) + f2(argc) + helper(argc) + other(argc));
	return 0;
}
`

const multiOther = `
static __attribute__((noinline)) int helper(int a) { return a * 5; }
int other(int a) { return helper(a) + 1; }
`

// TestEventSyntaxLikeKernel: definitions read as the kernel reads its events file
// (issue 13): a second definition of an event on another site with the same
// arguments is a multi-probe event, traced under the one name from both sites; one
// that disagrees gets DIFF_PROBE_TYPE, DIFF_ARG_TYPE or SAME_PROBE at the kernel's
// caret; "-:EVENT" deletes an event defined before it; a symbol that names two local
// functions is refused, not probed at the first.
func TestEventSyntaxLikeKernel(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.c"), filepath.Join(dir, "b.c")
	os.WriteFile(a, []byte(multiSrc), 0o644)
	os.WriteFile(b, []byte(multiOther), 0o644)
	prog := filepath.Join(dir, "prog")
	if out, err := exec.Command("gcc", "-O1", "-o", prog, a, b).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "prog.kp")
	trace := filepath.Join(dir, "t.trace")
	defs := filepath.Join(dir, "defs")
	os.WriteFile(defs, []byte("p:m/ev f1 x=%di\np:m/ev f2 x=%di\np:m/gone f1\n-:m/gone\n"), 0o644)
	if code, _, stderr := kp("rewrite", "-o", out, "-f", defs, prog); code != 0 {
		t.Fatalf("rewrite: %s", stderr)
	}
	r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + trace}})
	if r.Exit != 0 || r.Stdout != "14\n" {
		t.Fatalf("run: %s", r)
	}
	_, text, stderr := kp("trace", trace)
	lines := traceLines(text)
	if len(lines) != 2 || !strings.Contains(lines[0], " ev: (") || !strings.Contains(lines[1], " ev: (") ||
		!strings.HasSuffix(lines[0], " x=0x1") || !strings.HasSuffix(lines[1], " x=0x1") || lines[0] == lines[1] {
		t.Errorf("trace of the multi-probe event:\n%s%s", text, stderr)
	}
	for _, c := range []struct {
		name  string
		defs  []string
		want  string
		caret string
	}{
		{"DIFF_PROBE_TYPE", []string{"p:m/ev f1", "r:m/ev f2"}, "Probe type is different from existing probe", "r:m/ev f2\n" + strings.Repeat(" ", 13) + "^"},
		{"DIFF_ARG_TYPE", []string{"p:m/ev f1 x=%di", "p:m/ev f2 x=%di:u8"}, "Argument type or name is different from existing probe",
			"p:m/ev f2 x=%di:u8\n" + strings.Repeat(" ", 23) + "^"},
		{"DIFF_ARG_TYPE name", []string{"p:m/ev f1 x=%di", "p:m/ev f2 y=%di"}, "Argument type or name is different from existing probe", ""},
		{"SAME_PROBE", []string{"p:m/ev f1 x=%di", "p:m/ev f1 x=%di"}, "There is already the exact same probe event", ""},
		{"NON_UNIQ_SYMBOL", []string{"p:m/h helper"}, "The symbol is not unique", "p:m/h helper\n" + strings.Repeat(" ", 19) + "^"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"check"}
			for _, d := range c.defs {
				args = append(args, "-e", d)
			}
			code, _, stderr := kp(append(args, prog)...)
			if code != 1 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, c.caret) {
				t.Errorf("exit %d, want 1, %q and the caret %q:\n%s", code, c.want, c.caret, stderr)
			}
		})
	}
	// the address of either helper is accepted
	if code, _, stderr := kp("check", "-e", "p:m/h f1", prog); code != 0 {
		t.Errorf("check f1: %s", stderr)
	}
}

// traceLines returns the record lines of `kprewrite trace` text (not the # header).
func traceLines(text string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
