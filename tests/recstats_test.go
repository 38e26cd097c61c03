package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// recstatsSrc: two threads call work and hooked 10,000 times each, then main calls done
// (where gdb stops it, every thread joined).
const recstatsSrc = `
#include <pthread.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
__attribute__((noinline)) long hooked(long a) {
	long s = a;
	for (int i = 0; i < 3; i++) {
		__asm__ volatile("" : "+r"(s));
		s = s * 3 + i;
	}
	return s;
}
__attribute__((noinline)) void done(void) { __asm__ volatile(""); }
static void *run(void *arg) {
	long s = 0;
	for (long i = 0; i < 10000; i++)
		s += work((long)arg, i) + hooked(i);
	return (void *)s;
}
int main(void) {
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], 0, run, (void *)i);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], 0);
	done();
	return 0;
}
`

// TestFastRecordsCounted: the records the fast paths write (optprobe.S's for register
// fetches, rt_hot.h's hot_record for a %sp fetch, and the return trampoline's,
// kprw_rethook_fast, which counts its runs too) are counted in each thread's kprw_tblk
// line (no shared line written by every record: issue 49) and added to
// kprewrite_rt_stats.records (rettramps) when the thread takes its next block. gdb
// stops the program after both threads wrote their 20,000 records: the runtime's count
// and what the threads' lines still hold add up to the trace's records exactly (a place
// past its block's end takes its count back: the C path writes that record and counts
// it), and the count holds every block a thread left (a thread's block of these
// records holds ~2,000-2,700 of them); the same for the return trampolines' runs.
func TestFastRecordsCounted(t *testing.T) {
	testprog.Need(t, "gcc", "gdb")
	prog := testprog.Build(t, recstatsSrc, "c", "-O2", "-pthread")
	for _, c := range []struct {
		name  string
		args  []string
		trams int // return trampolines run
	}{
		{"registers", []string{"-e", "p:rs/w work a=%di b=%si"}, 0},
		{"sp", []string{"-e", "p:rs/w work a=%di s=%sp"}, 0},
		{"calls-hook", []string{"--calls-hook", "--calls", "hooked"}, 20000},
	} {
		t.Run(c.name, func(t *testing.T) { fastRecordsCounted(t, prog, c.args, c.trams) })
	}
}

func fastRecordsCounted(t *testing.T, prog string, args []string, trams int) {
	out := filepath.Join(t.TempDir(), "rs")
	if code, _, stderr := kp(append(append([]string{"rewrite", "-o", out}, args...), prog)...); code != 0 {
		t.Fatalf("rewrite %v: %s", args, stderr)
	}
	tr := out + ".trace"
	script := filepath.Join(t.TempDir(), "sum.gdb")
	// struct kprw_stats' rettramps and records are its 5th and 7th words; a kprw_tblk
	// is 8 words, nrec and nret its second and third, 1024 of them (rt.h)
	err := os.WriteFile(script, []byte(`set pagination off
set startup-with-shell off
break done
run
printf "records=%lu\n", ((unsigned long *)&kprewrite_rt_stats)[6]
printf "rettramps=%lu\n", ((unsigned long *)&kprewrite_rt_stats)[4]
set $t = *(unsigned long **)&kprw_tblk_tab
set $n = 0
set $r = 0
set $i = 0
while $t != 0 && $i < 1024
  set $n = $n + $t[$i * 8 + 1]
  set $r = $r + $t[$i * 8 + 2]
  set $i = $i + 1
end
printf "pending=%lu\n", $n
printf "pendret=%lu\n", $r
kill
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("gdb", "-batch", "-nx", "-x", script, "--args", out)
	cmd.Env = append(cmd.Environ(), "KPREWRITE_TRACE="+tr)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(b), 3000))
	}
	num := func(name string) int {
		m := regexp.MustCompile(name + `=(\d+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("gdb printed no %s:\n%s", name, testprog.Clip(string(b), 3000))
		}
		v, _ := strconv.Atoi(string(m[1]))
		return v
	}
	records, pending, rettramps, pendret := num("records"), num("pending"), num("rettramps"), num("pendret")
	written := len(readTrace(t, tr, out))
	if want := 20000 + trams; written != want {
		t.Fatalf("%d records in the trace, want %d", written, want)
	}
	if records+pending != written {
		t.Errorf("kprewrite_rt_stats.records %d + %d in the threads' lines = %d, the trace holds %d", records, pending, records+pending, written)
	}
	if records < written-2*2731 {
		t.Errorf("kprewrite_rt_stats.records %d: the blocks the threads left (%d records at least) are not in it", records, written-2*2731)
	}
	if rettramps+pendret != trams || rettramps < trams-2*2731 {
		t.Errorf("kprewrite_rt_stats.rettramps %d, %d in the threads' lines: want %d together, and the blocks the threads left in the first", rettramps, pendret, trams)
	}
	t.Logf("records %d, pending in the threads' lines %d, in the trace %d; return trampolines %d + %d", records, pending, written, rettramps, pendret)
}
