package tests

// Real programs of this machine rewritten with an event probe on every function entry
// (int3 probes): their workloads must give exactly the original's output and status,
// and the trace must hold the hits.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"kprewrite/elfio"
	"kprewrite/tests/internal/testprog"
)

// rewriteAllEntries rewrites bin with "p:kpwall/fN 0xADDR" on every function entry
// (refused ones are skipped) and returns the rewritten path and the number of probes.
func rewriteAllEntries(t *testing.T, bin, dir string, flags ...string) (string, int) {
	t.Helper()
	f, err := elfio.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	fns := f.Functions()
	for i, fn := range fns.List {
		fmt.Fprintf(&sb, "p:kpwall/f%d %#x\n", i, fn.Addr)
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
	t.Logf("%s: %d functions, %d probes refused", bin, len(fns.List), skipped)
	if skipped > len(fns.List)/10 {
		t.Errorf("%d of %d entries refused:\n%s", skipped, len(fns.List), testprog.Clip(stderr, 2000))
	}
	return out, len(fns.List) - skipped
}

// totalHits sums `kprewrite profile`.
func totalHits(t *testing.T, trace, bin string) (hits, missed uint64, events int) {
	t.Helper()
	for _, c := range profile(t, trace, bin) {
		hits += c[0]
		missed += c[1]
		if c[0] > 0 {
			events++
		}
	}
	return
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
	if f, err := elfio.Open(p); err != nil {
		if f, err = elfio.Open("/usr/bin/" + name); err != nil {
			t.Skipf("%s is not an ELF executable", p)
		}
		_ = f
		p = "/usr/bin/" + name
	} else {
		_ = f
	}
	return p
}

func TestRealZstd(t *testing.T) {
	bin := realBin(t, "zstd")
	dir := t.TempDir()
	kpd, n := rewriteAllEntries(t, bin, dir)
	var in strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&in, "line %d of a file kprewrite compresses %x\n", i, i*i)
	}
	src := filepath.Join(dir, "in.txt")
	os.WriteFile(src, []byte(in.String()), 0o644)
	tr := filepath.Join(dir, "zstd.trace")
	env := []string{"KPREWRITE_TRACE=" + tr}
	testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-q", "-c", "-3", src}, Extra: env}, nil)
	// with worker threads
	testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-q", "-c", "-T2", "-6", "--long", src}, Extra: env}, nil)
	zst := filepath.Join(dir, "in.zst")
	testprog.MustRun(t, bin, "-q", "-o", zst, src)
	res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-d", "-q", "-c", zst}, Extra: env}, nil)
	if res.Stdout != in.String() {
		t.Fatal("decompressed data differs from the input")
	}
	testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-t", "-q", filepath.Join(dir, "nope.zst")}, Extra: env}, nil)
	hits, missed, events := totalHits(t, tr, kpd)
	lines := readTrace(t, tr, kpd)
	t.Logf("zstd: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
	// every hit is a record: the counters and the records agree
	if hits < 1000 || uint64(len(lines)) != hits || missed != 0 {
		t.Errorf("%d hits, %d trace lines, %d missed", hits, len(lines), missed)
	}
}

func TestRealSqlite3(t *testing.T) {
	bin := realBin(t, "sqlite3")
	dir := t.TempDir()
	kpd, n := rewriteAllEntries(t, bin, dir)
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
	tr := filepath.Join(dir, "sqlite3.trace")
	db := filepath.Join(dir, "db")
	for _, p := range []string{bin, kpd} {
		os.Remove(db)
		_ = p
	}
	res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{":memory:"}, Stdin: script, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	if !strings.Contains(res.Stdout, "2000|2001000|") {
		t.Fatalf("unexpected output: %s", res)
	}
	testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{":memory:", "select no_such_function(1);"}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	hits, missed, events := totalHits(t, tr, kpd)
	t.Logf("sqlite3: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
	// the sqlite3 shell is small: the engine is in libsqlite3.so, which is not probed
	if hits < 50 || missed != 0 {
		t.Errorf("%d hits, %d missed", hits, missed)
	}
}

func TestRealGit(t *testing.T) {
	bin := realBin(t, "git")
	dir := t.TempDir()
	kpd, n := rewriteAllEntries(t, bin, dir)
	tr := filepath.Join(dir, "git.trace")
	home := filepath.Join(dir, "home")
	os.Mkdir(home, 0o755)
	env := []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=K P", "GIT_AUTHOR_EMAIL=kp@example.com",
		"GIT_COMMITTER_NAME=K P", "GIT_COMMITTER_EMAIL=kp@example.com", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
		"GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "PATH=" + os.Getenv("PATH"), "LC_ALL=C", "KPREWRITE_TRACE=" + tr}
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
	hits, missed, events := totalHits(t, tr, kpd)
	t.Logf("git: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
	if hits < 10000 || missed != 0 {
		t.Errorf("%d hits, %d missed", hits, missed)
	}
}

func TestRealPython(t *testing.T) {
	bin := realBin(t, "python3.11")
	dir := t.TempDir()
	kpd, n := rewriteAllEntries(t, bin, dir)
	tr := filepath.Join(dir, "python.trace")
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
	env := []string{"KPREWRITE_TRACE=" + tr, "PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1"}
	res := testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", script}, Extra: env}, nil)
	if res.Exit != 4 || !strings.Contains(res.Stdout, "KeyError 'missing'") {
		t.Fatalf("unexpected run: %s", res)
	}
	testprog.Same(t, bin, kpd, testprog.Cmd{Args: []string{"-c", "import sys; sys.stdout.write(str(1/0))"}, Extra: env}, nil)
	hits, missed, events := totalHits(t, tr, kpd)
	t.Logf("python3.11: %d probes, %d hits of %d events, %d missed", n, hits, events, missed)
	if hits < 100000 || missed != 0 {
		t.Errorf("%d hits, %d missed", hits, missed)
	}
}
