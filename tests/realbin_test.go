package tests

// Real programs of this machine rewritten with an event probe on every function entry,
// in seven modes (realModes): int3 probes (--no-optimize), --verify-regions (an int3 on
// every would-be-optimized probe and on every other byte of its DCR: reaching one is a
// violation), jump-optimized (the default), --count-only, return probes with
// --count-only (counted at the functions' exits) and their verify run, and return
// events recorded at the functions' exits (--exits). Their workloads must give exactly the
// original's output and status, the trace must hold the hits, and verify runs must
// report no violation. Programs: zstd and xz round trips, sqlite3 queries, git on a
// temporary repository, python3.11 (a script and a slice of its own regression tests),
// node running a JS workload (V8's embedded builtins excluded: node copies them) and
// the go tool building programs. node's verify run (12 million traps at start-up, about
// a minute) is skipped with -short.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// realMode is one way of rewriting a real binary.
type realMode struct {
	name  string
	flags []string // rewrite flags
	// env of the runs. Verify runs disarm the events (KPREWRITE_DISABLE=all): the
	// int3s and the violation checks stay, and the trace file is left to violation
	// records, which a full file would otherwise drop.
	env []string
	// returns: a return probe on every function entry instead ("r:kpwall/fN 0xADDR");
	// with --count-only most are counted at their functions' rets and tail calls
	returns bool
}

var realModes = []realMode{
	{name: "int3", flags: []string{"--no-optimize"}},
	{name: "verify", flags: []string{"--verify-regions"}, env: []string{"KPREWRITE_DISABLE=all"}},
	{name: "optimize"},
	// events count their hits only: jump-optimized entries become count-only detours
	{name: "count-only", flags: []string{"--count-only"}},
	// return events counted at their exits (and the verify run of those exit sites)
	{name: "count-returns", flags: []string{"--count-only"}, returns: true},
	{name: "verify-returns", flags: []string{"--count-only", "--verify-regions"}, env: []string{"KPREWRITE_DISABLE=all"}, returns: true},
	// return events recorded at their functions' exits (--exits): rets record, tail
	// calls hook the return address, the rest hook it at the entry
	{name: "trace-returns", flags: []string{"--exits"}, returns: true},
}

func (m realMode) verify() bool    { return strings.HasPrefix(m.name, "verify") }
func (m realMode) countOnly() bool { return strings.HasPrefix(m.name, "count") }

// rewriteAll rewrites bin with a probe on every function entry in mode m.
func (m realMode) rewriteAll(t *testing.T, bin, dir string) (string, int) {
	t.Helper()
	return rewriteEntries(t, bin, dir, m.returns, m.flags...)
}

// forModes runs body once per mode, each in its own subtest.
func forModes(t *testing.T, modes []realMode, body func(t *testing.T, m realMode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { body(t, m) })
	}
}

// rewriteAllEntries rewrites bin with "p:kpwall/fN 0xADDR" on every function entry
// (refused ones are skipped) and returns the rewritten path and the number of probes.
func rewriteAllEntries(t *testing.T, bin, dir string, flags ...string) (string, int) {
	t.Helper()
	return rewriteEntries(t, bin, dir, false, flags...)
}

// rewriteEntries is rewriteAllEntries, with return probes ("r:kpwall/fN 0xADDR") when
// returns is set.
func rewriteEntries(t *testing.T, bin, dir string, returns bool, flags ...string) (string, int) {
	t.Helper()
	return rewriteEntriesEvery(t, bin, dir, returns, 1, flags...)
}

// rewriteEntriesEvery is rewriteEntries on every nth function only (by address order):
// a run whose probes all trap does work in proportion to the probes it hits, and this
// bounds it without depending on the machine's speed.
func rewriteEntriesEvery(t *testing.T, bin, dir string, returns bool, every int, flags ...string) (string, int) {
	t.Helper()
	f, err := elfio.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	fns := f.Functions()
	var b *analysis.Binary
	if returns {
		// return probes go on functions proper: at the start of a fragment (an FDE of a
		// stripped binary's .cold part or shared epilogue, only jumped to) the word at
		// the stack pointer is no return address
		if b, err = analysis.Analyze(f, analysis.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	skip := 0
	for i, fn := range fns.List {
		switch {
		case i%every != 0:
			skip++
		case !returns:
			fmt.Fprintf(&sb, "p:kpwall/f%d %#x\n", i, fn.Addr)
		case b.Referenced(fn.Addr) && fn.Addr != f.Entry:
			fmt.Fprintf(&sb, "r:kpwall/f%d %#x\n", i, fn.Addr)
		default:
			skip++
		}
	}
	defs := filepath.Join(dir, "defs.txt")
	if err := os.WriteFile(defs, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(bin))
	args := append([]string{"rewrite", "--skip-refused", "-o", out, "-f", defs}, flags...)
	code, _, stderr := kp(append(args, bin)...)
	if code != 0 {
		t.Fatalf("rewrite %s: exit %d: %s", bin, code, testprog.Clip(stderr, 2000))
	}
	skipped := strings.Count(stderr, "skipped:")
	n := len(fns.List) - skipped - skip
	t.Logf("%s %s: %d functions, %d probes refused, %d optimized", bin, strings.Join(flags, " "), len(fns.List), skipped, countOptimized(t, out))
	if skipped > len(fns.List)/10 && !slices.Contains(flags, "--exits-only") {
		t.Errorf("%d of %d entries refused:\n%s", skipped, len(fns.List), testprog.Clip(stderr, 2000))
	}
	return out, n
}

// countOptimized counts the [OPTIMIZED] probes `kprewrite list` shows.
func countOptimized(t *testing.T, bin string) int {
	t.Helper()
	code, stdout, stderr := kp("list", bin)
	if code != 0 {
		t.Fatalf("list %s: %s", bin, stderr)
	}
	return strings.Count(stdout, "[OPTIMIZED]")
}

// totalHits sums `kprewrite profile` (without the violations line).
func totalHits(t *testing.T, trace, bin string) (hits, missed uint64, events int) {
	t.Helper()
	for ev, c := range profile(t, trace, bin) {
		if ev == "(violations)" {
			continue
		}
		hits += c[0]
		missed += c[1]
		if c[0] > 0 {
			events++
		}
	}
	return
}

// noViolations checks a --verify-regions run's trace file: no violation record, and a
// zero violation count when the file holds the image's counters.
func noViolations(t *testing.T, trace, bin string) {
	t.Helper()
	if _, err := os.Stat(trace); err != nil {
		t.Fatalf("no trace file after a --verify-regions run: %v", err)
	}
	code, stdout, stderr := kp("trace", "-b", bin, trace)
	if code != 0 || stderr != "" {
		t.Fatalf("kprewrite trace: exit %d: %s", code, stderr)
	}
	if n := strings.Count(stdout, ": kprewrite_violation: "); n > 0 {
		t.Errorf("%d violations:\n%s", n, testprog.Clip(stdout, 3000))
	}
	code, stdout, stderr = kp("profile", "-b", bin, trace)
	if code != 0 {
		t.Fatalf("kprewrite profile: exit %d: %s", code, stderr)
	}
	if m := regexp.MustCompile(`\(violations\)\s+(\d+)`).FindStringSubmatch(stdout); m == nil {
		t.Logf("the trace file holds no counters for %s (more probes than the runtime's counter area holds): violations checked by their records only", filepath.Base(bin))
	} else if m[1] != "0" {
		t.Errorf("profile counts %s violations:\n%s", m[1], testprog.Clip(stdout, 3000))
	}
}

func realBin(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		t.Skip(err)
	}
	// pyenv and friends put shell scripts first on PATH: take the system's ELF file
	if _, err := elfio.Open(p); err != nil {
		if _, err = elfio.Open("/usr/bin/" + name); err != nil {
			t.Skipf("%s is not an ELF executable", p)
		}
		p = "/usr/bin/" + name
	}
	return p
}

func TestRealZstd(t *testing.T) {
	bin := realBin(t, "zstd")
	var in strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&in, "line %d of a file kprewrite compresses %x\n", i, i*i)
	}
	forModes(t, realModes, func(t *testing.T, m realMode) {
		dir := t.TempDir()
		kpd, n := m.rewriteAll(t, bin, dir)
		src := filepath.Join(dir, "in.txt")
		os.WriteFile(src, []byte(in.String()), 0o644)
		tr := filepath.Join(dir, "zstd.trace")
		env := append([]string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}, m.env...)
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-q", "-c", "-3", src}, Extra: env}, nil)
		// with worker threads
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-q", "-c", "-T2", "-6", "--long", src}, Extra: env}, nil)
		zst := filepath.Join(dir, "in.zst")
		testprog.MustRun(t, bin, "-q", "-o", zst, src)
		res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-d", "-q", "-c", zst}, Extra: env}, nil)
		if res.Stdout != in.String() {
			t.Fatal("decompressed data differs from the input")
		}
		// the rewritten zstd compresses, the original decompresses
		zst2 := filepath.Join(dir, "in2.zst")
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-q", "-f", "-1", "-o", zst2, src}, Extra: env}, nil)
		if out := testprog.MustRun(t, bin, "-d", "-q", "-c", zst2); out != in.String() {
			t.Fatal("round trip through the rewritten zstd differs")
		}
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-t", "-q", filepath.Join(dir, "nope.zst")}, Extra: env}, nil)
		if m.verify() {
			noViolations(t, tr, kpd)
			return
		}
		hits, missed, events := totalHits(t, tr, kpd)
		lines := readTrace(t, tr, kpd)
		t.Logf("zstd: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
		// every hit is a record: the counters and the records agree (--count-only: no records)
		want := hits
		if m.countOnly() {
			want = 0
		}
		if hits < 1000 || uint64(len(lines)) != want || (missed != 0 && !m.returns) {
			t.Errorf("%d hits, %d trace lines, %d missed", hits, len(lines), missed)
		}
	})
}

func TestRealXz(t *testing.T) {
	bin := realBin(t, "xz")
	var in strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&in, "record %d: %x %s\n", i, i*7919, strings.Repeat("xz", i%13))
	}
	forModes(t, realModes, func(t *testing.T, m realMode) {
		dir := t.TempDir()
		kpd, n := m.rewriteAll(t, bin, dir)
		src := filepath.Join(dir, "in.txt")
		os.WriteFile(src, []byte(in.String()), 0o644)
		tr := filepath.Join(dir, "xz.trace")
		env := append([]string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}, m.env...)
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", "-6", src}, Extra: env}, nil)
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", "-T2", "-3", src}, Extra: env}, nil)
		xzf := filepath.Join(dir, "in.xz")
		os.WriteFile(xzf, []byte(testprog.MustRun(t, bin, "-c", src)), 0o644)
		res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-d", "-c", xzf}, Extra: env}, nil)
		if res.Stdout != in.String() {
			t.Fatal("decompressed data differs from the input")
		}
		// compressed by the rewritten xz, decompressed by the original
		res = testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", "-e", src}, Extra: env}, nil)
		back := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{"-d", "-c"}, Stdin: res.Stdout})
		if back.Stdout != in.String() {
			t.Fatal("round trip through the rewritten xz differs")
		}
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-t", filepath.Join(dir, "nope.xz")}, Argv0: "xz", Extra: env}, nil)
		if m.verify() {
			noViolations(t, tr, kpd)
			return
		}
		hits, missed, events := totalHits(t, tr, kpd)
		t.Logf("xz: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
		// the xz command is small: the codec is in liblzma.so, which is not probed
		if hits < 100 || (missed != 0 && !m.returns) {
			t.Errorf("%d hits, %d missed", hits, missed)
		}
	})
}

func TestRealSqlite3(t *testing.T) {
	bin := realBin(t, "sqlite3")
	script := `
create table t(a integer primary key, b text, c real);
with recursive n(i) as (select 1 union all select i+1 from n where i < 2000)
  insert into t select i, printf('row %05d', i), i * 1.5 from n;
create index tb on t(b);
select count(*), sum(a), avg(c), min(b), max(b) from t;
select b, json_object('a', a, 'c', c) from t where a % 400 = 0 order by b desc;
update t set c = c * 2 where a % 3 = 0;
select group_concat(a, ',') from (select a from t where c > 5990 order by a);
select upper(substr(b, 1, 3)), count(*) from t group by 1;
`
	forModes(t, realModes, func(t *testing.T, m realMode) {
		dir := t.TempDir()
		kpd, n := m.rewriteAll(t, bin, dir)
		tr := filepath.Join(dir, "sqlite3.trace")
		env := append([]string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}, m.env...)
		res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{":memory:"}, Stdin: script, Extra: env}, nil)
		if !strings.Contains(res.Stdout, "2000|2001000|") {
			t.Fatalf("unexpected output: %s", res)
		}
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{":memory:", "select no_such_function(1);"}, Extra: env}, nil)
		if m.verify() {
			noViolations(t, tr, kpd)
			return
		}
		hits, missed, events := totalHits(t, tr, kpd)
		t.Logf("sqlite3: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
		// the sqlite3 shell is small: the engine is in libsqlite3.so, which is not probed
		if hits < 50 || (missed != 0 && !m.returns) {
			t.Errorf("%d hits, %d missed", hits, missed)
		}
	})
}

func TestRealGit(t *testing.T) {
	bin := realBin(t, "git")
	forModes(t, realModes, func(t *testing.T, m realMode) {
		dir := t.TempDir()
		kpd, n := m.rewriteAll(t, bin, dir)
		tr := filepath.Join(dir, "git.trace")
		home := filepath.Join(dir, "home")
		os.Mkdir(home, 0o755)
		env := append([]string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=K P", "GIT_AUTHOR_EMAIL=kp@example.com",
			"GIT_COMMITTER_NAME=K P", "GIT_COMMITTER_EMAIL=kp@example.com", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
			"GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "PATH=" + os.Getenv("PATH"), "LC_ALL=C", "KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}, m.env...)
		// Commands that run no child process: a probe hit in a child between fork and
		// exec, after git blocked every signal and reset their handlers, is fatal to
		// int3 probes (see the report); auto maintenance would be such a child.
		steps := [][]string{
			{"init", "-q", "-b", "main", "."},
			{"config", "maintenance.auto", "false"},
			{"config", "gc.auto", "0"},
			{"add", "."},
			{"commit", "-q", "-m", "first"},
			{"rm", "-q", "b.txt"},
			{"commit", "-q", "-m", "second"},
			{"log", "--stat", "--format=%H %s"},
			{"cat-file", "-p", "HEAD^{tree}"},
			{"rev-parse", "HEAD~1"},
			{"diff", "HEAD~1", "HEAD"},
			{"status", "--porcelain"},
			{"show", "nope"},
		}
		repos := map[string]string{}
		for _, which := range []string{"orig", "kp"} {
			r := filepath.Join(dir, which)
			os.Mkdir(r, 0o755)
			for i := 0; i < 30; i++ {
				os.WriteFile(filepath.Join(r, "f"+strconv.Itoa(i)+".txt"), []byte(strings.Repeat("content "+strconv.Itoa(i)+"\n", i+1)), 0o644)
			}
			os.WriteFile(filepath.Join(r, "b.txt"), []byte("bye\n"), 0o644)
			repos[which] = r
		}
		for _, s := range steps {
			want := testprog.Run(t, testprog.Cmd{Path: bin, Args: s, Dir: repos["orig"], Env: env})
			got := testprog.Run(t, testprog.Cmd{Path: kpd, Args: s, Dir: repos["kp"], Env: env})
			norm := func(s string) string { return strings.ReplaceAll(s, repos["kp"], repos["orig"]) }
			got.Stdout, got.Stderr = norm(got.Stdout), norm(got.Stderr)
			if d := want.Diff(got); d != "" {
				t.Fatalf("git %s: %s\noriginal: %s\nrewritten: %s", strings.Join(s, " "), d, want, got)
			}
		}
		if m.verify() {
			noViolations(t, tr, kpd)
			return
		}
		hits, missed, events := totalHits(t, tr, kpd)
		t.Logf("git: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
		if hits < 10000 || (missed != 0 && !m.returns) {
			t.Errorf("%d hits, %d missed", hits, missed)
		}
	})
}

// unittestTime blanks unittest's run time ("Ran 23 tests in 0.012s").
var unittestTime = regexp.MustCompile(`in [0-9.]+s\b`)

func TestRealPython(t *testing.T) {
	bin := realBin(t, "python3.11")
	script := `
import json, re, hashlib, collections, sys
d = {"k%d" % i: [i, i * i, str(i)] for i in range(300)}
s = json.dumps(d, sort_keys=True)
print(len(s), hashlib.sha256(s.encode()).hexdigest())
print(re.sub(r"k(\d)", r"<\1>", s[:60]))
c = collections.Counter(ch for ch in s)
print(sorted(c.items())[:5])
class C:
    def __init__(self, x): self.x = x
    def __repr__(self): return "C(%r)" % self.x
print([C(i) for i in range(3)], sum(x.x for x in map(C, range(1000))))
try:
    {}["missing"]
except KeyError as e:
    print("KeyError", e)
sys.exit(4)
`
	haveTests := exec.Command(bin, "-c", "import test.test_textwrap").Run() == nil
	forModes(t, realModes, func(t *testing.T, m realMode) {
		dir := t.TempDir()
		kpd, n := m.rewriteAll(t, bin, dir)
		tr := filepath.Join(dir, "python.trace")
		env := append([]string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1", "PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1"}, m.env...)
		res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", script}, Extra: env}, nil)
		if res.Exit != 4 || !strings.Contains(res.Stdout, "KeyError 'missing'") {
			t.Fatalf("unexpected run: %s", res)
		}
		testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", "import sys; sys.stdout.write(str(1/0))"}, Extra: env}, nil)
		// a slice of its own regression tests (libpython3.11-testsuite): the same
		// tests pass and fail; a trap costs microseconds, so the int3 modes run a
		// smaller slice
		if haveTests {
			slice := []string{"test.test_textwrap"}
			switch {
			case m.name == "optimize" || m.name == "count-only":
				slice = append(slice, "test.test_bisect", "test.test_heapq", "test.test_string", "test.test_json")
			case m.returns && !m.verify():
				// (the functions not counted at their exits hook their return address:
				// the full return probe, ~40 ns a call)
				slice = append(slice, "test.test_bisect", "test.test_heapq")
			}
			norm := func(s string) string { return unittestTime.ReplaceAllString(s, "in Ts") }
			res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: append([]string{"-m", "unittest", "-q"}, slice...), Extra: env}, norm)
			if res.Exit != 0 || !strings.Contains(res.Stderr, "\nOK") {
				t.Errorf("regression tests %v: %s", slice, res)
			}
		} else {
			t.Log("python3.11's test package (libpython3.11-testsuite) is not installed: no regression tests")
		}
		if m.verify() {
			noViolations(t, tr, kpd)
			return
		}
		hits, missed, events := totalHits(t, tr, kpd)
		t.Logf("python3.11: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
		if hits < 100000 || (missed != 0 && !m.returns) {
			t.Errorf("%d hits, %d missed", hits, missed)
		}
	})
}

// nodeWork is the JS workload node runs.
const nodeWork = `
const crypto = require('crypto');
let o = {};
for (let i = 0; i < 2000; i++) o['k' + i] = [i, i * i, String(i)];
const s = JSON.stringify(o);
const back = JSON.parse(s);
console.log(s.length, Object.keys(back).length, crypto.createHash('sha256').update(s).digest('hex'));
console.log([3, 1, 2].sort().join(','), 'abc'.replace(/b/g, 'X'), Math.max(...[1, 5, 3]));
class A { constructor(x) { this.x = x; } get y() { return this.x * 2; } }
console.log(new A(21).y, [...new Set([1, 1, 2])].length);
try { null.x } catch (e) { console.log(e.constructor.name) }
Promise.resolve(7).then(v => console.log('promise', v));
setTimeout(() => { console.log('timeout'); process.exitCode = 3 }, 10);
`

// TestRealNode: node with a probe on every function entry the analysis allows: V8's
// embedded builtins are refused by the copied-code rule (node copies them into its code
// range and runs the copy, where a jmp rel32 or an int3 would be wrong; before
// 2026-11-29 the test had to --exclude 'Builtins_*', and without it node died).
func TestRealNode(t *testing.T) {
	bin := realBin(t, "node")
	// int3 mode: the verify run traps as much; count-returns: return events counted at
	// node's functions' exits, the others hooked
	modes := []realMode{realModes[1], realModes[2], realModes[4]}
	forModes(t, modes, func(t *testing.T, m realMode) {
		dir := t.TempDir()
		// every function's entry traps in verify mode: with all of them node's start-up
		// hits 12 million int3s (132 s on a machine whose round trip costs 9 us); one
		// function in 16 bounds that to ~750,000 whatever the machine
		every := 1
		if m.verify() {
			every = 16
		}
		kpd, n := rewriteEntriesEvery(t, bin, dir, m.returns, every, m.flags...)
		tr := filepath.Join(dir, "node.trace")
		env := append([]string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}, m.env...)
		res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-e", nodeWork}, Extra: env}, nil)
		if res.Exit != 3 || !strings.Contains(res.Stdout, "55208 2000 ") || !strings.Contains(res.Stdout, "TypeError") {
			t.Fatalf("unexpected run: %s", res)
		}
		if m.verify() {
			noViolations(t, tr, kpd)
			return
		}
		if m.countOnly() {
			// no records: the counters the trace file holds
			hits, missed, events := totalHits(t, tr, kpd)
			t.Logf("node: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
			if hits < 1000000 {
				t.Errorf("%d hits", hits)
			}
			return
		}
		// 78,000 probes: count the records
		code, stdout, _ := kp("trace", "-b", kpd, tr)
		var kept, written int
		if i := strings.Index(stdout, "entries-in-buffer/entries-written: "); code != 0 || i < 0 {
			t.Fatalf("trace: exit %d", code)
		} else {
			fmt.Sscanf(stdout[i:], "entries-in-buffer/entries-written: %d/%d", &kept, &written)
		}
		t.Logf("node: %d probes, %d hits recorded (%d kept in the file)", n, written, kept)
		if written < 1000000 {
			t.Errorf("%d records written", written)
		}
	})
}

// sameBuild builds c's module with the rewritten go tool kpd (c gives its directory
// and environment) and checks that the binary is byte for byte ref, the original go
// tool's build.
func sameBuild(t *testing.T, kpd string, c testprog.Cmd, ref string) {
	t.Helper()
	out := ref + ".rewritten-go"
	c.Path, c.Args = kpd, []string{"build", "-o", out, "."}
	if res := testprog.Run(t, c); res.Exit != 0 {
		t.Fatalf("rewritten go build: %s", res)
	}
	if want, got := testprog.HashFile(t, ref), testprog.HashFile(t, out); want != got {
		t.Errorf("the rewritten go tool built %s with sha256 %s, the original %s", filepath.Base(out), got, want)
	}
}

// TestRealGo: the go tool building programs. Go's runtime installs its own SIGTRAP
// handler (and the go tool is static: there is no libc call to interpose), so an int3
// probe kills it after start-up: only jump-optimized probes can be used
// (--optimized-only), and --verify-regions cannot run. runtime.goexit is excluded:
// new goroutines get goexit+1 as their return address (computed as funcPC(goexit) +
// PCQuantum, which no analysis sees), inside goexit's DCR.
func TestRealGo(t *testing.T) {
	bin := "/usr/local/go/bin/go"
	if _, err := os.Stat(bin); err != nil {
		bin = realBin(t, "go")
	}
	for _, name := range []string{"optimize", "count-entries", "count-returns", "trace-returns"} {
		t.Run(name, func(t *testing.T) { testRealGo(t, bin, name) })
	}
}

// testRealGo rewrites the go tool with a probe on every function entry, jump-optimized
// only, recorded (mode optimize) or counted (count-entries), or with return events
// counted (count-returns) or recorded (trace-returns) at their exits only (a hooked
// return address breaks Go's stack copying and unwinding), and builds programs with
// it: byte for byte the programs the original builds.
func testRealGo(t *testing.T, bin, mode string) {
	dir := t.TempDir()
	flags := []string{"--optimized-only", "--exclude", "runtime.goexit*"}
	returns := mode != "optimize"
	switch mode {
	case "count-entries":
		flags = append(flags, "--count-only")
	case "count-returns":
		flags = append(flags, "--count-only", "--exits-only")
	case "trace-returns":
		flags = append(flags, "--exits", "--exits-only")
	}
	kpd, n := rewriteEntries(t, bin, dir, returns, flags...)
	tr := filepath.Join(dir, "go.trace")
	mod := filepath.Join(dir, "hello")
	os.Mkdir(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello, world\") }\n"), 0o644)
	env := []string{"GOROOT=" + filepath.Dir(filepath.Dir(bin)), "GOCACHE=" + filepath.Join(dir, "cache"), "GOPATH=" + filepath.Join(dir, "gopath"),
		"GOTOOLCHAIN=local", "GOFLAGS=", "GOPROXY=off", "CGO_ENABLED=0", "HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	// the original fills the build cache with the standard library; the rewritten
	// go tool then builds hello world (and links it) from it
	want := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{"build", "-o", filepath.Join(dir, "h1"), "."}, Dir: mod, Env: env})
	if want.Exit != 0 {
		t.Fatalf("original go build: %s", want)
	}
	run := func(args ...string) testprog.Result {
		got := testprog.Run(t, testprog.Cmd{Path: kpd, Args: args, Dir: mod, Env: env, Extra: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}})
		ref := testprog.Run(t, testprog.Cmd{Path: bin, Args: args, Dir: mod, Env: env})
		if d := ref.Diff(got); d != "" {
			t.Fatalf("go %s: %s\noriginal: %s\nrewritten: %s", strings.Join(args, " "), d, ref, got)
		}
		return got
	}
	run("build", "-o", filepath.Join(dir, "h2"), ".")
	if out := testprog.MustRun(t, filepath.Join(dir, "h2")); out != "hello, world\n" {
		t.Fatalf("the program the rewritten go tool built prints %q", out)
	}
	sameBuild(t, kpd, testprog.Cmd{Dir: mod, Env: env, Extra: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}}, filepath.Join(dir, "h1"))
	run("vet", ".")
	run("list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".")
	// a program that needs packages the cache does not have yet: the rewritten go
	// tool runs the compiler for them
	os.WriteFile(filepath.Join(mod, "main.go"), []byte("package main\n\nimport (\n\t\"encoding/json\"\n\t\"fmt\"\n)\n\nfunc main() { b, _ := json.Marshal(map[string]int{\"a\": 1}); fmt.Println(string(b)) }\n"), 0o644)
	run("build", "-o", filepath.Join(dir, "h3"), ".")
	if out := testprog.MustRun(t, filepath.Join(dir, "h3")); out != "{\"a\":1}\n" {
		t.Fatalf("json program prints %q", out)
	}
	sameBuild(t, kpd, testprog.Cmd{Dir: mod, Env: env, Extra: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}}, filepath.Join(dir, "h3")) // (run's last build is the original's)
	hits, missed, events := totalHits(t, tr, kpd)
	t.Logf("go: %d probes, %d hits of %d events, %d missed (hits while a handler of ours runs: Go's signal handlers)", n, hits, events, missed)
	if hits < 100000 {
		t.Errorf("%d hits", hits)
	}
	if code, list, _ := kp("list", kpd); returns && (code != 0 || strings.Count(list, "[EXIT]") != strings.Count(list, "\n")) {
		t.Errorf("--exits-only: every probe should be an [EXIT] point (exit %d)", code)
	}
}
