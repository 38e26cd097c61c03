package tests

// End-to-end tests of the ELF writer: a "null rewrite" adds new segments holding an
// entry stub (jmp rel32 to the original entry), data and symbols, and the rewritten
// program must behave exactly like the original, for C/C++ programs compiled here and
// for real binaries of this machine; binutils and gdb must read the output cleanly.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/atomicfile"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// segNullRewrite rewrites in with an entry stub, data and symbols, and writes the result
// as name in a fresh temporary directory. It checks that the input file is unchanged and
// that a second rewrite gives identical bytes.
func segNullRewrite(t *testing.T, in, name string) (string, elfio.Layout) {
	t.Helper()
	before := testprog.HashFile(t, in)
	start := time.Now()
	f, err := elfio.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	l, err := f.PlanLayout(64, 48, 32, 4096)
	if err != nil {
		t.Fatal(err)
	}
	stub := []byte{0xe9, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(stub[1:], uint32(int32(int64(f.Entry)-int64(l.TextAddr+5))))
	a := &elfio.Addition{
		Layout: l,
		Text:   stub,
		Rodata: []byte("kprewrite null rewrite\x00"),
		Data:   []byte{0xde, 0xad, 0xbe, 0xef},
		BSS:    128,
		Symbols: []elfio.NewSymbol{
			{Name: "kprewrite_entry", Section: elfio.SecText, Size: 5, Func: true},
			{Name: "kprewrite_banner", Section: elfio.SecRodata, Size: 23},
			{Name: "kprewrite_state", Section: elfio.SecData, Size: 4, Global: true},
			{Name: "kprewrite_trace", Section: elfio.SecBSS, Size: 128},
		},
		Entry: &l.TextAddr,
	}
	out, err := rewriteBytes(f, a)
	if err != nil {
		t.Fatal(err)
	}
	rewritten := time.Now()
	outPath := filepath.Join(t.TempDir(), name)
	if err := atomicfile.WriteFile(outPath, bytes.NewReader(out), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d -> %d bytes (phdrs at old bias: %v); open %v, rewrite %v, write %v", name, len(f.Data), len(out), l.PhdrAtOldBias,
		opened.Sub(start).Round(time.Millisecond), rewritten.Sub(opened).Round(time.Millisecond), time.Since(rewritten).Round(time.Millisecond))
	again, err := rewriteBytes(f, a)
	if err != nil || !bytes.Equal(out, again) {
		t.Fatalf("second rewrite of %s differs (err %v)", in, err)
	}
	if after := testprog.HashFile(t, in); after != before {
		t.Fatalf("rewriting changed the input file %s", in)
	}
	if _, err := elf.Open(outPath); err != nil {
		t.Fatalf("debug/elf cannot read the output: %v", err)
	}
	return outPath, l
}

var segBuildID = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

// segCheckTools checks that binutils and gdb read the rewritten file cleanly.
func segCheckTools(t *testing.T, orig, rewritten string, l elfio.Layout, withGDB bool) {
	t.Helper()
	testprog.Need(t, "readelf", "objdump")
	if w := testprog.NewWarnings(t, orig, rewritten, time.Minute, "readelf", "-a", "-W"); len(w) > 0 {
		t.Errorf("readelf -a -W warns about the rewritten file only:\n%s", strings.Join(w, "\n"))
	}
	notes := func(p string) string { return testprog.MustRun(t, "readelf", "-n", p) }
	if want, got := segBuildID.FindStringSubmatch(notes(orig)), segBuildID.FindStringSubmatch(notes(rewritten)); want != nil && (got == nil || got[1] != want[1]) {
		t.Errorf("build id %v, want %s", got, want[1])
	}
	f, err := elfio.Open(orig)
	if err != nil {
		t.Fatal(err)
	}
	dis := testprog.MustRun(t, "objdump", "-d", "-j", elfio.SecText, rewritten)
	jmp := regexp.MustCompile(fmt.Sprintf(`(?m)^\s*%x:\s+e9( [0-9a-f]{2}){4}\s+jmp\s+(0x)?%x\b`, l.TextAddr, f.Entry))
	if !jmp.MatchString(dis) || !strings.Contains(dis, "<kprewrite_entry>:") {
		t.Errorf("objdump does not show the entry stub jmp %#x -> %#x:\n%s", l.TextAddr, f.Entry, testprog.Clip(dis, 2000))
	}
	if !withGDB {
		return
	}
	testprog.Need(t, "gdb")
	if w := testprog.NewWarnings(t, orig, rewritten, time.Minute, "gdb", "-nx", "-batch", "-ex", "info files"); len(w) > 0 {
		t.Errorf("gdb warns about the rewritten file only:\n%s", strings.Join(w, "\n"))
	}
	info := testprog.MustRun(t, "gdb", "-nx", "-batch", "-ex", "info files", rewritten)
	if !strings.Contains(info, fmt.Sprintf("0x%016x - ", l.TextAddr)) || !strings.Contains(info, "is "+elfio.SecText) {
		t.Errorf("gdb info files does not list %s at %#x:\n%s", elfio.SecText, l.TextAddr, testprog.Clip(info, 3000))
	}
	segCheckGDBRun(t, rewritten, l, f.Entry)
}

// segCheckGDBRun runs the rewritten program under gdb, stops at the entry stub by its
// symbol and single-steps into the original entry: gdb must relocate the new segments
// (PIE load bias from the moved PT_PHDR) and land exactly on the original entry.
func segCheckGDBRun(t *testing.T, rewritten string, l elfio.Layout, entry uint64) {
	t.Helper()
	r := testprog.Run(t, testprog.Cmd{Path: "gdb", Args: []string{"-nx", "-batch", "-ex", "break kprewrite_entry", "-ex", "run",
		"-ex", "p/x $pc", "-ex", "stepi", "-ex", "p/x $pc", "-ex", "kill", rewritten}, Timeout: time.Minute})
	if strings.Contains(r.Stdout+r.Stderr, "ptrace: Operation not permitted") {
		t.Log("gdb cannot trace here; skipped the live check")
		return
	}
	pcs := regexp.MustCompile(`(?m)^\$[12] = 0x([0-9a-f]+)$`).FindAllStringSubmatch(r.Stdout, -1)
	if !strings.Contains(r.Stdout, "in kprewrite_entry") || len(pcs) != 2 {
		t.Fatalf("gdb did not stop at kprewrite_entry:\n%s", r)
	}
	var stub, next uint64
	fmt.Sscanf(pcs[0][1], "%x", &stub)
	fmt.Sscanf(pcs[1][1], "%x", &next)
	if bias := stub - l.TextAddr; next-bias != entry {
		t.Errorf("stepping from the stub at %#x reached %#x (file address %#x), want the entry %#x", stub, next, next-bias, entry)
	}
}

// The C corpus: programs that exercise start-up paths (libc init, TLS, ctors, atexit,
// exceptions, threads, fork) and report through stdout, stderr and exit status.
const segCBasic = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int calls;
static int cmp(const void *a, const void *b) { calls++; return *(const int *)a - *(const int *)b; }
static void bye(void) { printf("atexit after %d compares\n", calls); }
__attribute__((constructor)) static void ctor(void) { fputs("ctor ran\n", stderr); }
int main(int argc, char **argv) {
	int v[] = {5, 3, 9, 1, 7, 2, 8};
	atexit(bye);
	qsort(v, 7, sizeof v[0], cmp);
	for (int i = 0; i < 7; i++) printf("%d ", v[i]);
	printf("\nargc=%d last=%s pi=%.6f\n", argc, argv[argc - 1], 3.14159265358979);
	char *p = malloc(1 << 20);
	memset(p, 'x', 1 << 20);
	fprintf(stderr, "heap ok %c\n", p[12345]);
	free(p);
	return argc + 2;
}
`

const segCThreads = `#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>
static __thread long tls_counter = 7;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long total;
static void *work(void *arg) {
	long n = (long)arg;
	for (long i = 0; i < 100000; i++) tls_counter += i % (n + 2);
	pthread_mutex_lock(&mu);
	total += tls_counter;
	pthread_mutex_unlock(&mu);
	return 0;
}
int main(void) {
	pthread_t th[4];
	for (long i = 0; i < 4; i++) pthread_create(&th[i], 0, work, (void *)i);
	for (int i = 0; i < 4; i++) pthread_join(th[i], 0);
	printf("total=%ld main tls=%ld\n", total, tls_counter);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) { printf("child tls=%ld\n", tls_counter); _exit(5); }
	int st;
	waitpid(pid, &st, 0);
	printf("child exit %d\n", WEXITSTATUS(st));
	return 0;
}
`

const segCAbort = `#include <stdio.h>
#include <stdlib.h>
int main(void) { fprintf(stderr, "about to abort\n"); abort(); }
`

const segCXXExceptions = `#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>
#include <memory>
struct Noisy { std::string n; Noisy(std::string s) : n(s) {} ~Noisy() { std::cout << "~" << n << "\n"; } };
static int depth(int n) {
	Noisy guard("level" + std::to_string(n));
	if (n == 0) throw std::runtime_error("bottom reached");
	return depth(n - 1) + 1;
}
int main() {
	std::vector<std::unique_ptr<int>> v;
	for (int i = 0; i < 5; i++) v.push_back(std::make_unique<int>(i * i));
	try { depth(3); } catch (const std::exception &e) { std::cout << "caught: " << e.what() << "\n"; }
	try { v.at(10); } catch (const std::out_of_range &) { std::cerr << "out of range\n"; }
	int sum = 0;
	for (auto &p : v) sum += *p;
	std::cout << "sum " << sum << std::endl;
	return sum % 7;
}
`

type segCorpusProg struct {
	name, src, lang string
	flags           []string
	args            []string
	gdb             bool
	relocs          bool // linked with --emit-relocs: relocations must name the same symbols
}

func TestNullRewriteCorpus(t *testing.T) {
	progs := []segCorpusProg{
		{"basic-O0-pie", segCBasic, "c", []string{"-O0", "-pie", "-fPIE"}, []string{"a", "bb"}, true, false},
		{"basic-O2-nopie", segCBasic, "c", []string{"-O2", "-no-pie", "-fno-pie"}, []string{"x"}, false, false},
		{"basic-static", segCBasic, "c", []string{"-O2", "-static"}, nil, true, false},
		{"basic-static-pie", segCBasic, "c", []string{"-O2", "-static-pie"}, []string{"1", "2", "3"}, false, false},
		{"threads-pie", segCThreads, "c", []string{"-O2", "-pthread"}, nil, false, false},
		{"threads-static", segCThreads, "c", []string{"-O0", "-static", "-pthread"}, nil, false, false},
		{"abort", segCAbort, "c", []string{"-O2"}, nil, false, false},
		{"cxx-exceptions", segCXXExceptions, "c++", []string{"-O2"}, nil, true, false},
		{"cxx-exceptions-static-nopie", segCXXExceptions, "c++", []string{"-O0", "-static", "-no-pie"}, nil, false, false},
		{"basic-align-2M", segCBasic, "c", []string{"-O2", "-Wl,-z,max-page-size=0x200000"}, nil, false, false},
		{"basic-noseparate-code-nopie", segCBasic, "c", []string{"-O2", "-no-pie", "-Wl,-z,noseparate-code"}, nil, false, false},
		{"cxx-emit-relocs", segCXXExceptions, "c++", []string{"-O2", "-Wl,--emit-relocs"}, nil, false, true},
		{"threads-emit-relocs-static", segCThreads, "c", []string{"-O2", "-static", "-pthread", "-Wl,--emit-relocs"}, nil, false, true},
	}
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			orig := testprog.Build(t, p.src, p.lang, p.flags...)
			out, l := segNullRewrite(t, orig, p.name)
			r := testprog.Same(t, orig, out, testprog.Cmd{Args: p.args, Argv0: "prog"}, nil)
			if r.Stdout == "" && r.Stderr == "" {
				t.Fatal("program printed nothing; the comparison proves little")
			}
			segCheckTools(t, orig, out, l, p.gdb)
			if p.relocs {
				segSameRelocs(t, orig, out)
			}
		})
	}
}

var (
	segRelocHeader = regexp.MustCompile(`(?m)^(Relocation section '[^']*') at offset 0x[0-9a-f]+`)
	segRelocInfo   = regexp.MustCompile(`(?m)^([0-9a-f]{16})  [0-9a-f]{16} `) // r_info holds the symbol index
)

// segSameRelocs checks that every relocation names the same symbol after new local symbols
// shifted the global symbols' indices.
func segSameRelocs(t *testing.T, orig, rewritten string) {
	t.Helper()
	testprog.Need(t, "readelf")
	read := func(p string) string {
		r := segRelocHeader.ReplaceAllString(testprog.MustRun(t, "readelf", "-r", "-W", p), "$1")
		return segRelocInfo.ReplaceAllString(r, "$1 ")
	}
	want, got := read(orig), read(rewritten)
	if strings.Count(want, "Relocation section") < 3 {
		t.Fatalf("expected --emit-relocs sections:\n%s", testprog.Clip(want, 1000))
	}
	if want != got {
		t.Errorf("relocations changed:\n%s", testprog.Result{Stdout: want}.Diff(testprog.Result{Stdout: got}))
	}
}

// A .bss too big to pad into the file takes the compact layout; the program must still
// find its program headers (AT_PHDR) for TLS set-up in static glibc.
func TestNullRewriteBigBSS(t *testing.T) {
	src := `#include <stdio.h>
static char big[64 << 20];
static __thread int t = 3;
int main(void) { big[sizeof big - 1] = 9; printf("%d %d\n", big[sizeof big - 1] + t, big[5]); return 0; }
`
	for _, flags := range [][]string{{"-O2", "-static"}, {"-O2"}} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			orig := testprog.Build(t, src, "c", flags...)
			out, l := segNullRewrite(t, orig, "bigbss")
			if l.PhdrAtOldBias {
				t.Errorf("64 MiB .bss should not be padded into the file: %+v", l)
			}
			if st, _ := os.Stat(out); st.Size() > 4<<20 {
				t.Errorf("output is %d bytes", st.Size())
			}
			testprog.Same(t, orig, out, testprog.Cmd{}, nil)
		})
	}
}

// segRealBinary is one program of this machine with workloads to compare.
type segRealBinary struct {
	name, path string
	run        func(t *testing.T, orig, out string)
}

func TestNullRewriteRealBinaries(t *testing.T) {
	bins := []segRealBinary{
		{"python3.11", "/usr/bin/python3.11", segRunPython},
		{"git", "/usr/bin/git", segRunGit},
		{"zstd", "/usr/bin/zstd", segRunZstd},
		{"sqlite3", "/usr/bin/sqlite3", segRunSQLite},
		{"node", "/usr/bin/node", segRunNode},
		{"go", "/usr/local/go/bin/go", segRunGo},
	}
	for _, b := range bins {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testprog.Need(t, b.path)
			out, l := segNullRewrite(t, b.path, b.name)
			b.run(t, b.path, out)
			segCheckTools(t, b.path, out, l, true)
		})
	}
}

func segRunPython(t *testing.T, orig, out string) {
	script := `
import json, re, hashlib, sqlite3, threading, subprocess, sys, zlib
d = {"k": [1, 2.5, None, True, "\u00e9"], "n": {"x": list(range(10))}}
s = json.dumps(d, sort_keys=True)
assert json.loads(s) == d
print(s)
print(re.findall(r"(\w+)=(\d+)", "a=1 bb=22 ccc=333"))
print(hashlib.sha256(s.encode()).hexdigest())
db = sqlite3.connect(":memory:")
db.execute("create table t(a, b)")
db.executemany("insert into t values (?, ?)", [(i, i * i) for i in range(100)])
print(db.execute("select count(*), sum(b) from t").fetchone())
out = []
ts = [threading.Thread(target=lambda i=i: out.append(sum(range(i * 10000)))) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sorted(out))
print(len(zlib.compress(bytes(range(256)) * 100)))
print(subprocess.run([sys.executable, "-c", "print(6*7)"], capture_output=True, text=True).stdout.strip())
sys.stderr.write("bye\n")
sys.exit(3)
`
	r := testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"-c", script}}, nil)
	if r.Exit != 3 || !strings.Contains(r.Stdout, "42\n") {
		t.Fatalf("python workload: %s", r)
	}
	// The stdlib test suite, when the Debian testsuite package is installed.
	if _, err := os.Stat("/usr/lib/python3.11/test/test_json"); err == nil {
		timing := regexp.MustCompile(`[0-9.]+ (sec|ms)\b|\d+:\d\d:\d\d|load avg: [0-9.]+`)
		r := testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"-m", "test", "-q", "test_json", "test_re"}, Extra: []string{"PYTHONHASHSEED=0"}},
			func(s string) string { return timing.ReplaceAllString(s, "TIME") })
		if r.Exit != 0 || !strings.Contains(r.Stdout, "SUCCESS") {
			t.Fatalf("python -m test: %s", r)
		}
	} else {
		t.Log("python stdlib tests not installed (libpython3.11-testsuite); ran the -c workload only")
	}
}

func segRunGit(t *testing.T, orig, out string) {
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=K Probe", "GIT_AUTHOR_EMAIL=k@example.org", "GIT_COMMITTER_NAME=K Probe",
		"GIT_COMMITTER_EMAIL=k@example.org", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z"}
	// Each binary builds its own repository; with fixed dates both must get the same
	// commit hashes and print the same things.
	var repos [2]string
	for i, bin := range []string{orig, out} {
		dir := filepath.Join(t.TempDir(), "repo")
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello kprobes\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "b.txt"), bytes.Repeat([]byte("line\n"), 1000), 0o644)
		for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "first"},
			{"mv", "a.txt", "c.txt"}, {"commit", "-q", "-am", "second"}} {
			if r := testprog.Run(t, testprog.Cmd{Path: bin, Args: args, Dir: dir, Env: env}); r.Exit != 0 {
				t.Fatalf("%s %v: %s", bin, args, r)
			}
		}
		repos[i] = dir
	}
	for _, args := range [][]string{{"log", "--format=%H %an %s", "--stat"}, {"cat-file", "-p", "HEAD^{tree}"},
		{"status", "--short", "--branch"}, {"fsck", "--strict"}, {"diff", "HEAD~1", "--stat"}} {
		var res [2]testprog.Result
		for i, bin := range []string{orig, out} {
			res[i] = testprog.Run(t, testprog.Cmd{Path: bin, Args: args, Dir: repos[i], Env: env})
		}
		if d := res[0].Diff(res[1]); d != "" || res[0].Exit != 0 {
			t.Fatalf("git %v differs:\n%s\n%s\n%s", args, d, res[0], res[1])
		}
		if args[0] == "log" && !strings.Contains(res[1].Stdout, "K Probe second") {
			t.Fatalf("git log: %s", res[1])
		}
	}
}

func segRunZstd(t *testing.T, orig, out string) {
	var data bytes.Buffer
	for i := 0; i < 20000; i++ {
		fmt.Fprintf(&data, "record %d value %x\n", i, i*i*2654435761%1000003)
	}
	c := testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"-q", "-10", "-c"}, Stdin: data.String()}, nil)
	if c.Exit != 0 || len(c.Stdout) == 0 || len(c.Stdout) >= data.Len() {
		t.Fatalf("zstd compress: %d -> %d bytes, %s", data.Len(), len(c.Stdout), testprog.Clip(c.Stderr, 500))
	}
	d := testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"-q", "-d", "-c"}, Stdin: c.Stdout}, nil)
	if d.Stdout != data.String() {
		t.Fatal("zstd round trip lost data")
	}
	testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"-d", "-c"}, Stdin: "not zstd"}, nil)
}

func segRunSQLite(t *testing.T, orig, out string) {
	sql := `create table p(id integer primary key, name text, score real);
with recursive n(i) as (select 1 union all select i + 1 from n where i < 500)
insert into p select i, 'probe' || i, i * 1.5 from n;
create index p_score on p(score);
select count(*), sum(score), max(name) from p;
select name from p where score between 100 and 106 order by score desc;
select json_object('a', 1, 'b', json_array(1, 2));
select nosuchfunction(1);`
	r := testprog.Same(t, orig, out, testprog.Cmd{Args: []string{":memory:"}, Stdin: sql}, nil)
	if !strings.Contains(r.Stdout, "500|") || !strings.Contains(r.Stderr, "nosuchfunction") {
		t.Fatalf("sqlite3 workload: %s", r)
	}
}

func segRunNode(t *testing.T, orig, out string) {
	js := `const crypto = require('crypto');
const a = Array.from({length: 1000}, (_, i) => (i * 7919) % 1009).sort((x, y) => x - y);
console.log(a.slice(0, 5), a.length, JSON.stringify({k: [1, 'two', null]}));
console.log(crypto.createHash('sha256').update('kprobes').digest('hex'));
Promise.resolve(6).then(v => { console.log('async', v * 7); console.error('done'); process.exitCode = 4; });`
	r := testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"-e", js}}, nil)
	if r.Exit != 4 || !strings.Contains(r.Stdout, "async 42") {
		t.Fatalf("node workload: %s", r)
	}
}

func segRunGo(t *testing.T, orig, out string) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from a kprewritten go\") }\n"), 0o644)
	extra := []string{"GOROOT=/usr/local/go", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GO111MODULE=on", "CGO_ENABLED=0"}
	testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"env", "GOROOT", "GOOS", "GOARCH"}, Dir: dir, Extra: extra}, nil)
	for i, bin := range []string{orig, out} {
		exe := filepath.Join(dir, fmt.Sprintf("hello%d", i))
		r := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{"build", "-o", exe, "."}, Dir: dir, Extra: extra})
		if r.Exit != 0 {
			t.Fatalf("%s build: %s", bin, r)
		}
		if got := testprog.MustRun(t, exe); got != "hello from a kprewritten go\n" {
			t.Fatalf("hello built by %s printed %q", bin, got)
		}
	}
	testprog.Same(t, orig, out, testprog.Cmd{Args: []string{"vet", "."}, Dir: dir, Extra: extra}, nil)
}

// A failed rewrite leaves no output file.
func TestFailedRewriteLeavesNoFile(t *testing.T) {
	orig := testprog.Build(t, "int main(void){return 0;}\n", "c", "-O2")
	f, err := elfio.Open(orig)
	if err != nil {
		t.Fatal(err)
	}
	l, err := f.PlanLayout(16, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(t.TempDir(), "out")
	_, err = f.Rewrite(&elfio.Addition{Layout: l, Text: make([]byte, 17)}) // too big
	if err == nil {
		t.Fatal("oversized text accepted")
	}
	if !strings.Contains(err.Error(), orig) {
		t.Errorf("error %q does not name the file", err)
	}
	// atomicfile.WriteFile onto a directory fails without leaving anything behind.
	os.MkdirAll(filepath.Join(outPath, "busy"), 0o755)
	if err := atomicfile.WriteFile(outPath, bytes.NewReader([]byte("x")), 0o755); err == nil {
		t.Fatal("wrote over a directory")
	}
	ents, _ := os.ReadDir(filepath.Dir(outPath))
	if len(ents) != 1 {
		t.Errorf("%d entries left after a failed write", len(ents))
	}
}

// rewriteBytes is f.Rewrite with the image in one buffer.
func rewriteBytes(f *elfio.File, a *elfio.Addition) ([]byte, error) {
	out, err := f.Rewrite(a)
	if err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
