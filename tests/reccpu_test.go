package tests

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// reccpuSrc pins each of its threads to one CPU after another (every CPU its affinity
// allows, at most 8) and calls work(cpu, i) there: each record's CPU column must be the
// CPU its thread was pinned to. Two threads (main and one made by pthread_create), so
// that a thread's rseq area, not the first thread's, gives its CPU.
const reccpuSrc = `
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
__attribute__((noinline)) long work(long cpu, long i) { __asm__ volatile(""); return cpu + i; }
static cpu_set_t allowed;
static void *run(void *arg) {
	long s = 0, seen = 0;
	for (int c = 0; c < CPU_SETSIZE && seen < 8; c++) {
		if (!CPU_ISSET(c, &allowed))
			continue;
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(c, &one);
		if (sched_setaffinity(0, sizeof one, &one) != 0 || sched_getcpu() != c)
			return (void *)1;
		for (long i = 0; i < 1000; i++)
			s += work(c, i);
		seen++;
	}
	return (void *)(s == 42);
}
int main(void) {
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		return 2;
	pthread_t t;
	void *r1 = run(0), *r2;
	if (pthread_create(&t, 0, run, 0) != 0 || pthread_join(t, &r2) != 0)
		return 3;
	printf("%d\n", CPU_COUNT(&allowed) < 8 ? CPU_COUNT(&allowed) : 8);
	return r1 || r2;
}
`

// TestRecordCPU: a record's CPU is the CPU its thread ran on, on every path the CPU
// number takes (rdpid, the thread's rseq area, lsl), in every thread, directly and under
// record.
func TestRecordCPU(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, reccpuSrc, "c", "-O2", "-pthread")
	out := filepath.Join(t.TempDir(), "cpu.kp")
	rewriteWith(t, prog, out, []string{"p:c/w work cpu=%di:s64 i=%si:s64"})
	re := regexp.MustCompile(`^ cpu=(\d+) i=(\d+)$`)
	check := func(name, file string, ncpu int) {
		t.Helper()
		lines := readTrace(t, file)
		if len(lines) != 2*1000*ncpu {
			t.Fatalf("%s: %d records, want %d", name, len(lines), 2*1000*ncpu)
		}
		for _, l := range lines {
			m := re.FindStringSubmatch(l.Args)
			if m == nil {
				t.Fatalf("%s: unexpected line %+v", name, l)
			}
			if cpu, _ := strconv.Atoi(m[1]); l.CPU != cpu {
				t.Fatalf("%s: record on CPU %d, its thread pinned to %d: %+v", name, l.CPU, cpu, l)
			}
		}
	}
	for _, env := range [][]string{nil, {"KPREWRITE_NO_RSEQ=1"}} {
		file := filepath.Join(t.TempDir(), "d.trace")
		r := testprog.Run(t, testprog.Cmd{Path: out, Env: append([]string{"KPREWRITE_TRACE=" + file}, env...)})
		ncpu, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
		if r.Exit != 0 || err != nil {
			t.Fatalf("direct run %v: %s", env, r)
		}
		check("direct "+fmtEnv(env), file, ncpu)
	}
	rec := filepath.Join(t.TempDir(), "r.trace")
	code, stdout, stderr := kp("record", "-q", "-o", rec, "--", out)
	ncpu, err := strconv.Atoi(strings.TrimSpace(stdout))
	if code != 0 || err != nil {
		t.Fatalf("record: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	check("record", rec, ncpu)
}

func fmtEnv(env []string) string {
	if len(env) == 0 {
		return "(default)"
	}
	return env[0]
}
