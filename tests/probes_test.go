package tests

// End-to-end tests of int3 probes on testdata/probed.c: 8 threads, recursion beyond
// maxactive, the run-time switches, a set-user-ID program, deterministic output. The
// basic corpus in every probe mode and build, fork, a crash after probes fired and
// disabled events are cases: tests/cases/probes-*.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// basicDefs probe testdata/probed.c; the f_* offsets are its assembly's.
var basicDefs = []string{
	"p:kpw/add add a=%di:s32 b=%si:s32",
	"p:kpw/add2 add x=%di:u8", // a second probe on the same instruction
	"p:kpw/greet greet name=+0(%di):string c0=+0(%di):char",
	"r:kpw/fact fact n=$arg1:s64 ret=$retval:s64",
	"p:kpw/rip0 f_rip a=%di:s32 c=@counter:s32",
	"p:kpw/rip8 f_rip+8 eax=%ax:s32",
	"p:kpw/jcc f_jcc+2 di=%di:u32",
	"p:kpw/call f_call+1",
	"p:kpw/loop f_loop+7 cx=%cx:u32",
	"p:kpw/jrcxz f_jrcxz+2 cx=%cx:u32",
	"p:kpw/ret f_ret+2 ax=%ax:u32",
	"p:kpw/jmp f_jmp",
	"p:kpw/pushf f_pushf",
	"p:kpw/indcall f_indcall+8",
}

// basicWant is the trace of `probed basic`: event and arguments of each line.
var basicWant = []string{
	"add2 x=0", "add a=0 b=-3",
	"add2 x=253", "add a=-3 b=-1",
	"add2 x=252", "add a=-4 b=1",
	"add2 x=253", "add a=-3 b=3",
	"add2 x=0", "add a=0 b=5",
	`greet name="world" c0='w'`,
	`greet name="kprobes" c0='k'`,
	"fact n=1 ret=1", "fact n=2 ret=2", "fact n=3 ret=6", "fact n=4 ret=24", "fact n=5 ret=120", "fact n=6 ret=720",
	"rip0 a=2 c=40", "rip8 eax=42",
	"rip0 a=3 c=42", "rip8 eax=45",
	"jcc di=0", "jcc di=1",
	"call",
	"loop cx=4", "loop cx=3", "loop cx=2", "loop cx=1",
	"jrcxz cx=0", "jrcxz cx=1",
	"ret ax=77",
	"jmp",
	"pushf",
	"indcall",
}

func probedSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("testdata/probed.c")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// rewriteWith rewrites prog into dir/name with the definitions and extra flags.
func rewriteWith(t *testing.T, prog, out string, defs []string, flags ...string) {
	t.Helper()
	args := append([]string{"rewrite", "-o", out}, flags...)
	for _, d := range defs {
		args = append(args, "-e", d)
	}
	args = append(args, prog)
	if code, stdout, stderr := kp(args...); code != 0 {
		t.Fatalf("kprewrite %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
}

// traceLine is one event line of `kprewrite trace`.
type traceLine struct {
	Comm  string
	PID   int
	CPU   int
	TS    string
	Event string
	Head  string
	Args  string // " name=value ..." as printed
	// Stack is a stack entry's frames (Event "<stack trace>"), what its " => " lines
	// say, one per line (a string: lines compare with ==).
	Stack string
}

// EA is "event args" without the head: what differs neither by address nor run.
func (l traceLine) EA() string { return l.Event + l.Args }

var (
	traceLineRE  = regexp.MustCompile(`^\s*(.*)-(\d+)\s+\[(\d+)\]\s+(?:[^\s\d]\S*\s+)?(\d+\.\d+): ([^\s:]+): (\([^)]*\))(.*)$`)
	stackHeadRE  = regexp.MustCompile(`^\s*(.*)-(\d+)\s+\[(\d+)\]\s+(?:[^\s\d]\S*\s+)?(\d+\.\d+): (<stack trace>)$`)
	stackFrameRE = regexp.MustCompile(`^ => (.*)$`)
	// a synthetic event's line: its fields, no address
	synthLineRE = regexp.MustCompile(`^\s*(.*)-(\d+)\s+\[(\d+)\]\s+(?:[^\s\d]\S*\s+)?(\d+\.\d+): ([^\s:]+):((?: \w+=-?\d+)+)$`)
)

func parseTraceLines(t *testing.T, text string) []traceLine {
	t.Helper()
	var out []traceLine
	for _, s := range strings.Split(text, "\n") {
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if m := stackFrameRE.FindStringSubmatch(s); m != nil && len(out) > 0 && out[len(out)-1].Event == "<stack trace>" {
			out[len(out)-1].Stack += m[1] + "\n"
			continue
		}
		m := traceLineRE.FindStringSubmatch(s)
		if m == nil {
			if m = stackHeadRE.FindStringSubmatch(s); m != nil {
				m = append(m, "", "")
			}
		}
		if m == nil {
			if m = synthLineRE.FindStringSubmatch(s); m != nil {
				m = []string{m[0], m[1], m[2], m[3], m[4], m[5], "", m[6]}
			}
		}
		if m == nil {
			t.Fatalf("trace line %q does not parse", s)
		}
		pid, _ := strconv.Atoi(m[2])
		cpu, _ := strconv.Atoi(m[3])
		out = append(out, traceLine{Comm: m[1], PID: pid, CPU: cpu, TS: m[4], Event: m[5], Head: m[6], Args: m[7]})
	}
	return out
}

// readTrace prints a trace file with `kprewrite trace` and parses it.
func readTrace(t *testing.T, file string, bins ...string) []traceLine {
	t.Helper()
	args := []string{"trace", "--no-header"}
	for _, b := range bins {
		args = append(args, "-b", b)
	}
	code, stdout, stderr := kp(append(args, file)...)
	if code != 0 || stderr != "" {
		t.Fatalf("kprewrite trace %s: exit %d: %s", file, code, stderr)
	}
	return parseTraceLines(t, stdout)
}

// profile returns `kprewrite profile` as event -> [hits, misses].
func profile(t *testing.T, file string, bins ...string) map[string][2]uint64 {
	t.Helper()
	args := []string{"profile"}
	for _, b := range bins {
		args = append(args, "-b", b)
	}
	code, stdout, stderr := kp(append(args, file)...)
	if code != 0 || stderr != "" {
		t.Fatalf("kprewrite profile %s: exit %d: %s", file, code, stderr)
	}
	out := map[string][2]uint64{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("profile line %q", line)
		}
		h, _ := strconv.ParseUint(f[1], 10, 64)
		m, _ := strconv.ParseUint(f[2], 10, 64)
		out[f[0]] = [2]uint64{h, m}
	}
	return out
}

func eas(lines []traceLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.EA())
	}
	return out
}

func sameLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := 0; i < max(len(got), len(want)); i++ {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Fatalf("trace line %d: got %q, want %q (got %d lines, want %d)\ngot:\n%s", i+1, g, w, len(got), len(want), strings.Join(got, "\n"))
			}
		}
	}
}

// probedBuilds are the builds of the probes corpus every probe mode is tested on: PIE,
// non-PIE with endbr64 entries, static and static-pie.
var probedBuilds = []struct {
	name  string
	flags []string
}{
	{"pie", []string{"-O2", "-pthread"}},
	{"nopie-cet", []string{"-O2", "-pthread", "-no-pie", "-fcf-protection=full"}},
	{"static", []string{"-O2", "-pthread", "-static"}},
	{"static-pie", []string{"-O2", "-pthread", "-static-pie"}},
}

// TestProbesThreads: 8 threads hammer a probed function; every hit is a record with the
// thread's own arguments, nothing lost or torn.
func TestProbesThreads(t *testing.T) {
	prog := testprog.Build(t, probedSource(t), "c", "-O2", "-pthread")
	for _, mode := range []string{"boost", "no-boost"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "probed")
			var flags []string
			if mode == "no-boost" {
				flags = []string{"--no-boost"}
			}
			rewriteWith(t, prog, out, []string{"p:kpw/add add t=%di:s32 i=%si:s32"}, flags...)
			tr := filepath.Join(dir, "run.trace")
			testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"threads"}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
			lines := readTrace(t, tr, out)
			if len(lines) != 8000 {
				t.Fatalf("%d records, want 8000", len(lines))
			}
			next := map[int]int{}   // tid -> next i
			thread := map[int]int{} // tid -> t
			for _, l := range lines {
				var tt, i int
				if _, err := fmt.Sscanf(l.Args, " t=%d i=%d", &tt, &i); err != nil {
					t.Fatalf("args %q: %v", l.Args, err)
				}
				if prev, ok := thread[l.PID]; ok && prev != tt {
					t.Fatalf("thread %d called with t=%d and t=%d", l.PID, prev, tt)
				}
				thread[l.PID] = tt
				if i != next[l.PID] {
					t.Fatalf("thread %d: i=%d after %d (records out of order or lost)", l.PID, i, next[l.PID]-1)
				}
				next[l.PID]++
			}
			if len(thread) != 8 {
				t.Errorf("records from %d threads, want 8", len(thread))
			}
			if p := profile(t, tr, out); p["add"] != [2]uint64{8000, 0} {
				t.Errorf("profile %v", p)
			}
		})
	}

	// a trace file too small for the run: what does not fit is counted as lost
	dir := t.TempDir()
	out := filepath.Join(dir, "probed")
	rewriteWith(t, prog, out, []string{"p:kpw/add add t=%di:s32 i=%si:s32"}, "--trace-size", "64K")
	testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"threads"}}, nil)
	code, stdout, stderr := kp("trace", out+".trace")
	var kept, written int
	if i := strings.Index(stdout, "entries-in-buffer/entries-written: "); code != 0 || i < 0 {
		t.Fatalf("trace: exit %d %s", code, stderr)
	} else {
		fmt.Sscanf(stdout[i:], "entries-in-buffer/entries-written: %d/%d", &kept, &written)
	}
	lines := parseTraceLines(t, stdout)
	if written != 8000 || kept != len(lines) || kept == 0 || kept >= 8000 || !strings.Contains(stdout, fmt.Sprintf("# lost: %d records", 8000-kept)) {
		t.Errorf("small trace file: %d kept, %d written, %d lines", kept, written, len(lines))
	}
	if p := profile(t, out+".trace"); p["add"] != [2]uint64{8000, 0} {
		t.Errorf("the counters count every hit: %v", p)
	}
}

// TestProbesRecursion: a recursion deeper than maxactive misses exactly the instances
// it has no room for; rb and r alike. A maxactive above the default (r20, as --calls'
// r64) has room for the whole recursion: its instances past the default's 10 live in
// the pools' second part (src/rt_kretprobe.c), and each frame's return event sees its
// own value.
func TestProbesRecursion(t *testing.T) {
	prog := testprog.Build(t, probedSource(t), "c", "-O2")
	for _, mode := range []string{"boost", "no-boost"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "probed")
			var flags []string
			if mode == "no-boost" {
				flags = []string{"--no-boost"}
			}
			rewriteWith(t, prog, out, []string{"r3:kpw/deep fact ret=$retval:s64", "r:kpw/all fact n=$arg1:s32", "p:kpw/entry fact n=%di:s32",
				"r20:kpw/wide fact ret=$retval:s64"}, flags...)
			tr := filepath.Join(dir, "run.trace")
			testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"recurse", "12"}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
			p := profile(t, tr, out)
			// fact(12): 12 frames; maxactive 3 -> 3 hits, 9 missed; the default
			// (at least 10) misses 2 at most
			if p["deep"] != [2]uint64{3, 9} || p["entry"] != [2]uint64{12, 0} || p["all"][0]+p["all"][1] != 12 ||
				p["wide"] != [2]uint64{12, 0} {
				t.Fatalf("profile %v", p)
			}
			var deep, wide, want []string
			for _, l := range readTrace(t, tr, out) {
				switch l.Event {
				case "deep":
					deep = append(deep, l.Args)
				case "wide":
					wide = append(wide, l.Args)
				}
			}
			// the three outermost frames got the instances: fact(10), (11), (12)
			sameLines(t, deep, []string{" ret=3628800", " ret=39916800", " ret=479001600"})
			for n, f := 1, int64(1); n <= 12; n++ {
				f *= int64(n)
				want = append(want, fmt.Sprintf(" ret=%d", f))
			}
			sameLines(t, wide, want) // innermost first: fact(1) .. fact(12)
		})
	}
}

// TestProbesSwitches: the default trace path, KPREWRITE_TRACE, and disabling probes at
// rewrite time and at run time.
func TestProbesSwitches(t *testing.T) {
	prog := testprog.Build(t, probedSource(t), "c", "-O2")
	dir := t.TempDir()
	out := filepath.Join(dir, "probed")
	defs := []string{"p:kpw/add add a=%di:s32", "p:kpw/greet greet", "p:other/fact fact"}
	rewriteWith(t, prog, out, defs)

	// default: OUT.trace, found by `kprewrite trace FILE` without -b
	env := []string{"PATH=" + os.Getenv("PATH")}
	testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"basic"}, Env: env}, nil)
	code, stdout, stderr := kp("trace", out+".trace")
	if code != 0 || stderr != "" || strings.Count(stdout, ": add: ") != 5 || strings.Count(stdout, ": fact: ") != 6 || !strings.HasPrefix(stdout, "# tracer: kprewrite") {
		t.Fatalf("default trace file: exit %d: %s\n%s", code, stderr, stdout)
	}

	count := func(extra ...string) map[string]int {
		tr := filepath.Join(t.TempDir(), "x.trace")
		testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"basic"}, Env: env, Extra: append(extra, "KPREWRITE_TRACE="+tr)}, nil)
		n := map[string]int{}
		if _, err := os.Stat(tr); err != nil {
			return n
		}
		for _, l := range readTrace(t, tr, out) {
			n[l.Event]++
		}
		return n
	}
	for _, c := range []struct {
		env  string
		want map[string]int
	}{
		{"KPREWRITE_DISABLE=all", map[string]int{}}, // the others are tests/cases/probes-disable-env-*
		{"KPREWRITE_TRACE=", map[string]int{}},      // overridden below by the later entry: tested separately
	} {
		if c.env == "KPREWRITE_TRACE=" {
			continue
		}
		if got := count(c.env); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: events %v, want %v", c.env, got, c.want)
		}
	}
	// KPREWRITE_TRACE="" turns tracing off: no file anywhere, same behaviour
	os.Remove(out + ".trace")
	testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"basic"}, Env: env, Extra: []string{"KPREWRITE_TRACE="}}, nil)
	if _, err := os.Stat(out + ".trace"); err == nil {
		t.Errorf("KPREWRITE_TRACE= still wrote the default trace file")
	}

	// --trace names the default trace file (--disable at rewrite time: tests/cases/probes-disable-rewrite)
	out2 := filepath.Join(dir, "probed2")
	rewriteWith(t, prog, out2, defs, "--trace", filepath.Join(dir, "custom.trace"))
	testprog.Same(t, prog, out2, testprog.Cmd{Args: []string{"basic"}, Env: env}, nil)
	n := map[string]int{}
	for _, l := range readTrace(t, filepath.Join(dir, "custom.trace"), out2) {
		n[l.Event]++
	}
	if fmt.Sprint(n) != fmt.Sprint(map[string]int{"add": 5, "fact": 6, "greet": 2}) {
		t.Errorf("--trace custom.trace: %v", n)
	}
}

// TestProbesSecure: a set-user-ID program ignores the KPREWRITE_* environment
// (AT_SECURE): an unprivileged user cannot redirect its trace file or disarm its
// probes.
func TestProbesSecure(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a set-user-ID program and run it as nobody")
	}
	prog := testprog.Build(t, probedSource(t), "c", "-O2")
	dir, err := os.MkdirTemp("", "kpw-secure-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	out := filepath.Join(dir, "probed")
	rewriteWith(t, prog, out, []string{"p:kpw/add add a=%di:s32"})
	if err := os.Chmod(out, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(dir, "evil.trace")
	cmd := exec.Command(out, "basic")
	cmd.Env = []string{"KPREWRITE_TRACE=" + evil, "KPREWRITE_DISABLE=all"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	if err != nil && (cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3) {
		t.Fatalf("set-user-ID run: %v\n%s", err, b)
	}
	if _, err := os.Stat(evil); err == nil {
		t.Errorf("KPREWRITE_TRACE was obeyed in a set-user-ID program")
	}
	if n := len(readTrace(t, out+".trace", out)); n != 5 {
		t.Errorf("%d records in the default trace file, want 5 (KPREWRITE_DISABLE ignored)", n)
	}
}

// TestProbesDeterministic: the same definitions give the same bytes.
func TestProbesDeterministic(t *testing.T) {
	prog := testprog.Build(t, probedSource(t), "c", "-O2")
	dir := t.TempDir()
	// the output's name is part of the image (it names it in traces): same name
	a, b := filepath.Join(dir, "a", "p"), filepath.Join(dir, "b", "p")
	os.Mkdir(filepath.Dir(a), 0o755)
	os.Mkdir(filepath.Dir(b), 0o755)
	rewriteWith(t, prog, a, basicDefs, "--trace", "/tmp/x.trace")
	rewriteWith(t, prog, b, basicDefs, "--trace", "/tmp/x.trace")
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Fatal("two rewrites with the same definitions differ")
	}
	// a refused probe names its rule and leaves no output
	c := filepath.Join(dir, "c")
	if testprog.HashFile(t, a) == testprog.HashFile(t, filepath.Join(dir, "a", "p")) {
		rewriteWith(t, prog, c, basicDefs, "--trace", "/tmp/x.trace", "--no-boost")
		if testprog.HashFile(t, a) == testprog.HashFile(t, c) {
			t.Error("--no-boost made no difference")
		}
		d := filepath.Join(dir, "d")
		rewriteWith(t, prog, d, basicDefs, "--trace", "/tmp/x.trace", "--no-boost", "--single-step", "int3")
		if testprog.HashFile(t, c) == testprog.HashFile(t, d) {
			t.Error("--single-step int3 made no difference to --no-boost")
		}
		os.Remove(c)
		os.Remove(d)
		if code, _, stderr := kp("rewrite", "--single-step", "dr7", "-o", c, "-e", "p:kpw/add add", prog); code != 2 || !strings.Contains(stderr, "want tf or int3") {
			t.Errorf("--single-step dr7: exit %d: %s", code, stderr)
		}
	}
	code, _, stderr := kp("rewrite", "-o", c, "-e", "p:kpw/mid add+1", prog)
	if code != 1 || !strings.Contains(stderr, "-e #1") || !strings.Contains(stderr, "not-boundary") {
		t.Errorf("probe inside an instruction: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(c); err == nil {
		t.Errorf("an output was written for a refused probe")
	}
	code, _, stderr = kp("rewrite", "--skip-refused", "-o", c, "-e", "p:kpw/mid add+1", "-e", "p:kpw/add add", prog)
	if code != 0 || !strings.Contains(stderr, "skipped") {
		t.Errorf("--skip-refused: exit %d: %s", code, stderr)
	}
}

// symbolTable returns the function symbols of an executable.
func symbolTable(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	out := testprog.MustRun(t, "nm", path)
	syms := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			v, err := strconv.ParseUint(f[0], 16, 64)
			if err == nil {
				syms[f[2]] = v
			}
		}
	}
	return syms
}
