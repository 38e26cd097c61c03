package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const switchesSrc = `
#include <stdio.h>
__attribute__((noinline)) int work(int a) { return a * 2; }
int main(void) { int s = 0; for (int i = 0; i < 3; i++) s += work(i); printf("%d\n", s); return 0; }
`

// rewriteWork compiles switchesSrc and rewrites it with an event on work, returning
// the directory and the rewritten program.
func rewriteWork(t *testing.T) (dir, out string) {
	t.Helper()
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, switchesSrc, "c", "-O1")
	dir = t.TempDir()
	out = filepath.Join(dir, "prog.kp")
	if code, _, stderr := kp("rewrite", "-o", out, "-e", "p:g/w work a=%di", prog); code != 0 {
		t.Fatalf("rewrite: %s", stderr)
	}
	return dir, out
}

// TestRunTimeSwitches: a KPREWRITE_* value the runtime does not understand is said on
// stderr, once, with what is done instead, and the program runs as it would; before,
// KPREWRITE_TRACE_SIZE=100T, -5 and abc were clamped or ignored in silence, and
// KPREWRITE_DEBUG=0 turned debugging on (issue 13).
func TestRunTimeSwitches(t *testing.T) {
	dir, out := rewriteWork(t)
	for _, c := range []struct {
		env  []string
		want string // the stderr line; "" = nothing
		size int64  // the new trace file's record area (0: not checked)
	}{
		{[]string{"KPREWRITE_TRACE_SIZE=100T"}, "kprewrite: KPREWRITE_TRACE_SIZE=100T: not a size (N, NK, NM or NG bytes); the rewrite's size is used", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=-5"}, "kprewrite: KPREWRITE_TRACE_SIZE=-5: not a size", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=abc"}, "kprewrite: KPREWRITE_TRACE_SIZE=abc: not a size", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=65G"}, "kprewrite: KPREWRITE_TRACE_SIZE=65G: larger than the 64G", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=1K"}, "kprewrite: KPREWRITE_TRACE_SIZE=1K: smaller than the 4K", 64 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=2M"}, "", 2 << 20},
		{[]string{"KPREWRITE_TRACE_SIZE=8KiB"}, "", 8 << 10},
		{[]string{"KPREWRITE_DEBUG=0"}, "", 0},
		{[]string{"KPREWRITE_DEBUG=maybe"}, "kprewrite: KPREWRITE_DEBUG=maybe: want 1 or 0; taken as 1", 0},
		{[]string{"KPREWRITE_SIGGUARD=of"}, "kprewrite: KPREWRITE_SIGGUARD=of: unknown value; want off or on; ignored", 0},
		{[]string{"KPREWRITE_SAFE_READ=sycall"}, "kprewrite: KPREWRITE_SAFE_READ=sycall: unknown value; want syscall or fast; ignored", 0},
		{[]string{"KPREWRITE_THREADKEY=fs"}, "kprewrite: KPREWRITE_THREADKEY=fs: unknown value; want fs0, tid or hash; ignored", 0},
		{[]string{"KPREWRITE_THREADKEY=hash"}, "", 0},
		{[]string{"KPREWRITE_SAFE_READ=fast"}, "", 0},
		{[]string{"KPREWRITE_SIGGUARD=on"}, "", 0},
		{[]string{"KPREWRITE_THREADKEY="}, "", 0},
	} {
		tr := filepath.Join(dir, "t.trace")
		os.Remove(tr)
		r := testprog.Run(t, testprog.Cmd{Path: out, Extra: append([]string{"KPREWRITE_TRACE=" + tr}, c.env...)})
		if r.Exit != 0 || r.Stdout != "6\n" {
			t.Errorf("%v: %s", c.env, r)
			continue
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(r.Stderr), "\n") {
			if l != "" && !strings.HasPrefix(l, "kprewrite: runtime up") {
				lines = append(lines, l)
			}
		}
		switch {
		case c.want == "" && len(lines) != 0:
			t.Errorf("%v: stderr %q, want nothing", c.env, lines)
		case c.want != "" && (len(lines) != 1 || !strings.HasPrefix(lines[0], c.want)):
			t.Errorf("%v: stderr %q, want one line starting %q", c.env, lines, c.want)
		}
		debug := strings.Contains(r.Stderr, "runtime up")
		if want := strings.HasSuffix(c.env[0], "maybe"); debug != want {
			t.Errorf("%v: debug output %v, want %v", c.env, debug, want)
		}
		if c.size != 0 {
			code, stdout, stderr := kp("trace", "-b", out, tr)
			if code != 0 {
				t.Errorf("%v: trace: %s", c.env, stderr)
			}
			st, err := os.Stat(tr)
			if err != nil || st.Size() < c.size || st.Size() > c.size+(4<<20) {
				t.Errorf("%v: trace file of %v bytes, want a record area of %d (%v)", c.env, st.Size(), c.size, err)
			}
			if !strings.Contains(stdout, "g/w") && !strings.Contains(stdout, "w: (") {
				t.Errorf("%v: no record in\n%s", c.env, stdout)
			}
		}
	}
}

// TestTraceReadsWhatIsUsed: a trace file with a 32 GiB record area holding 3 records is
// read without reading the area (it took 1 GB of memory and 10 s per GiB when read
// whole), and a trace path that is not a regular file is refused, not read forever.
func TestTraceReadsWhatIsUsed(t *testing.T) {
	dir, out := rewriteWork(t)
	tr := filepath.Join(dir, "big.trace")
	r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_TRACE_SIZE=32G"}})
	if r.Exit != 0 || r.Stderr != "" {
		t.Fatalf("run: %s", r)
	}
	if st, err := os.Stat(tr); err != nil || st.Size() < 32<<30 {
		t.Skipf("no 32 GiB sparse trace file here (%v)", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	code, stdout, stderr := kp("trace", "-b", out, tr)
	runtime.ReadMemStats(&after)
	if code != 0 || strings.Count(stdout, " w: (") != 3 {
		t.Fatalf("trace: exit %d, %s\n%s", code, stderr, stdout)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("reading 3 records allocated %d MiB", alloc>>20)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/dev/zero": "a character device", fifo: "a FIFO", dir: "a directory"} {
		code, _, stderr := kp("trace", path)
		if code != 1 || !strings.Contains(stderr, path+": not a regular file ("+want+")") {
			t.Errorf("trace %s: exit %d, %q", path, code, stderr)
		}
	}
}

const threadsSrc = `
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) int work(int a) { return a * 2; }
static void *run(void *p) { long s = 0; for (int i = 0; i < 1000; i++) s += work(i); return (void *)s; }
int main(void) {
	pthread_t t[64];
	long sum = 0;
	for (int i = 0; i < 64; i++) pthread_create(&t[i], 0, run, 0);
	for (int i = 0; i < 64; i++) { void *r; pthread_join(t[i], &r); sum += (long)r; }
	printf("%ld\n", sum);
	return 0;
}
`

// TestFullDisk: a trace file on a full file system costs the trace, never the program:
// it died of SIGBUS at its first record (issue 13). The runtime reserves the header's
// blocks when it creates the file and, when there are none, says so once and runs
// untraced; the default OUT.trace path and 64 threads likewise.
func TestFullDisk(t *testing.T) {
	testprog.Need(t, "gcc")
	small := smallTmpfs(t, "2m")
	for _, c := range []struct {
		name, src, want string
		flags           []string
	}{{"one thread", switchesSrc, "6\n", nil}, {"64 threads", threadsSrc, "63936000\n", []string{"-pthread"}}} {
		prog := testprog.Build(t, c.src, "c", append([]string{"-O1"}, c.flags...)...)
		// the rewritten program on the full file system too: its default trace path
		out := filepath.Join(small, "prog.kp")
		os.Remove(out)
		if code, _, stderr := kp("rewrite", "-o", out, "-e", "p:g/w work a=%di", prog); code != 0 {
			t.Fatalf("rewrite: %s", stderr)
		}
		fill := filepath.Join(small, "fill")
		exec.Command("dd", "if=/dev/zero", "of="+fill, "bs=64k", "count=64").Run() // until full
		for _, env := range [][]string{nil, {"KPREWRITE_TRACE=" + filepath.Join(small, "t.trace")}} {
			r := testprog.Run(t, testprog.Cmd{Path: out, Extra: env})
			if r.Exit != 0 || r.Stdout != c.want {
				t.Errorf("%s %v: %s", c.name, env, r)
			}
			if strings.Count(r.Stderr, "has no space (disk full?)") != 1 || strings.Count(r.Stderr, "\n") != 1 {
				t.Errorf("%s %v: stderr %q, want one line saying there is no space", c.name, env, r.Stderr)
			}
		}
		os.Remove(fill)
		os.Remove(filepath.Join(small, "t.trace"))
		os.Remove(out + ".trace")
	}
}

// smallTmpfs mounts a tmpfs of size (mount's size=) in a temporary directory, unmounted
// at the test's end; it skips the test without root or when the mount fails.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	small := filepath.Join(t.TempDir(), "small")
	os.Mkdir(small, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", small).Run() })
	return small
}

// TestFullDiskMidRun: the record area takes blocks chunk by chunk as records reach it;
// when the file system fills during a run, the records that find no room are lost and
// counted, the program runs to its usual end, says so in one line, and the records
// written before stay readable.
func TestFullDiskMidRun(t *testing.T) {
	testprog.Need(t, "gcc")
	small := smallTmpfs(t, "4m")
	kpd, _ := runProg(t)
	tr := filepath.Join(small, "t.trace")
	env := []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}
	if e := runIt(t, kpd, env, "10"); e != "" {
		t.Fatalf("first run: stderr %q", e)
	}
	exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(small, "fill"), "bs=64k", "count=64").Run() // until full
	r := testprog.Run(t, testprog.Cmd{Path: kpd, Args: []string{"100000"}, Extra: env})
	if r.Exit != 0 || r.Stdout != "1410065408\n" {
		t.Errorf("run on the full file system: %s", r)
	}
	if strings.Count(r.Stderr, "no space left for records (disk full?)") != 1 || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("stderr %q, want one line saying records are lost", r.Stderr)
	}
	code, stdout, stderr := kp("trace", "-b", kpd, tr)
	n := strings.Count(stdout, " w: (")
	if code != 0 || n < 10 || n >= 100010 || !strings.Contains(stdout, "entries-in-buffer/entries-written: ") {
		t.Fatalf("trace: exit %d, %d records (want the first run's 10 and some lost): %s", code, n, stderr)
	}
	if m := regexp.MustCompile(`entries-written: (\d+)/(\d+)`).FindStringSubmatch(stdout); m == nil || m[1] == m[2] {
		t.Errorf("trace header %q: want lost records counted", m)
	}
}

// truncSrc: eight threads call work; the main thread truncates the trace file (the path
// in $TRUNCATE) while they run, as log rotation's copytruncate or ": > f.trace" would,
// and every thread then calls work again, so each writes to the file after it shrank.
const truncSrc = `
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((noinline)) int work(int a) { return a * 2; }
static long progress;
static int truncated;
static void *run(void *p) {
	long s = 0;
	for (int i = 0; i < 20000; i++) { s += work(i); __atomic_add_fetch(&progress, 1, __ATOMIC_RELAXED); }
	while (!__atomic_load_n(&truncated, __ATOMIC_ACQUIRE)) usleep(100);
	for (int i = 0; i < 100; i++) s += work(i);
	return (void *)s;
}
int main(void) {
	pthread_t t[8];
	long sum = 0;
	for (int i = 0; i < 8; i++) pthread_create(&t[i], 0, run, 0);
	while (__atomic_load_n(&progress, __ATOMIC_RELAXED) < 40000) ;
	if (truncate(getenv("TRUNCATE"), 0) != 0) { perror("truncate"); return 1; }
	__atomic_store_n(&truncated, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 100; i++) sum += work(i);
	for (int i = 0; i < 8; i++) { void *r; pthread_join(t[i], &r); sum += (long)r; }
	printf("%ld\n", sum);
	return 0;
}
`

// TestTruncatedTrace: a trace file that shrinks under the running program (truncated
// in the middle of a multi-threaded run) killed it with SIGBUS, count-only programs
// included (issue 13). Now the program goes on, says so in one line, and later records
// are counted as lost: jump-optimized, int3 and count-only probes.
func TestTruncatedTrace(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	prog := testprog.Build(t, truncSrc, "c", "-O1", "-pthread")
	orig := testprog.Run(t, testprog.Cmd{Path: prog, Extra: []string{"TRUNCATE=/dev/null/x"}})
	if orig.Exit != 1 {
		t.Fatalf("original without a file to truncate: %s", orig)
	}
	want := 8*(19999*20000+99*100) + 99*100
	for _, mode := range [][]string{nil, {"--no-optimize"}, {"--count-only"}} {
		out := filepath.Join(dir, "prog.kp")
		os.Remove(out)
		args := append([]string{"rewrite", "-o", out, "-e", "p:g/w work a=%di"}, mode...)
		if code, _, stderr := kp(append(args, prog)...); code != 0 {
			t.Fatalf("rewrite %v: %s", mode, stderr)
		}
		trace := filepath.Join(dir, "t.trace")
		for round := 0; round < 3; round++ {
			os.Remove(trace)
			r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + trace,
				"KPREWRITE_TRACE_SIZE=16M", "TRUNCATE=" + trace}})
			if r.Exit != 0 || r.Stdout != fmt.Sprintf("%d\n", want) {
				t.Fatalf("%v round %d: %s", mode, round, r)
			}
			if strings.Count(r.Stderr, "shrank while the program ran") != 1 || strings.Count(r.Stderr, "\n") != 1 {
				t.Errorf("%v round %d: stderr %q, want one line saying the file shrank", mode, round, r.Stderr)
			}
		}
	}
}
