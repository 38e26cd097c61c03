package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// lostSrc has two threads call work(i, 1), leaf(i), gen(i) and tiny(i) n times each.
const lostSrc = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
/* room for its exit's jmp before the ret: an exit point (a word record), not a hooked
 * return address */
__attribute__((noinline)) long leaf(long a) {
	long r = a * 3;
	__asm__ volatile("nop; nop; nop; nop; nop" : "+r"(r));
	return r ^ 5;
}
__attribute__((noinline)) long gen(long a) { __asm__ volatile(""); return a - 1; }
/* too short for its exit's jmp: its return address is hooked (a CALL line, the
 * trampoline's return record) */
__attribute__((noinline)) long tiny(long a) { return a * 2; }
static long n;
static void *loop(void *arg) {
	long s = 0;
	for (long i = 0; i < n; i++)
		s += work(i, 1) + leaf(i) + gen(i) + tiny(i);
	return (void *)s;
}
int main(int argc, char **argv) {
	n = atol(argv[1]);
	pthread_t t;
	pthread_create(&t, 0, loop, 0);
	long s = (long)loop(0);
	void *r;
	pthread_join(t, &r);
	printf("%ld\n", s + (long)r);
	return 0;
}
`

// TestLostRecordsCounted: a trace file whose record area is used up (4 KiB, run
// directly) loses the records after it, and counts them: two threads' 2 x 100,000 hits
// of a two-register event (.Lseq), of one that reads %bx (the general path), of a
// function traced as calls (its entry's and its exit's word records) and of one whose
// return address is hooked (its entry's record, its frame pushed all the same; the
// trampoline's record) are each a hit of the profile, and the records in the file and
// those it lost add up to them. optprobe.S counts such a record lost without the C
// path (.Llost_placed, .Lcall_lost_placed, .Lrlost_placed): fails when it forgets the
// hit (the profile then has only the hits of the records kept) or the lost count.
func TestLostRecordsCounted(t *testing.T) {
	prog := testprog.Build(t, lostSrc, "c", "-O2", "-pthread")
	bin := filepath.Join(t.TempDir(), "lost")
	rewriteWith(t, prog, bin, []string{"p:l/w work a=%di b=%si", "p:l/g gen x=%bx a=%di"}, "--calls", "leaf", "--calls", "tiny")
	const n = 100000
	r := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{fmt.Sprint(n)},
		Env: []string{"KPREWRITE_QUIET=1", "KPREWRITE_TRACE_SIZE=4K", "KPREWRITE_TRACE=" + bin + ".trace"}})
	if r.Exit != 0 {
		t.Fatalf("rewritten program: %s", r)
	}
	p := profile(t, bin+".trace", bin)
	var hits uint64
	for _, ev := range []string{"w", "g", "leaf", "leaf__return", "tiny", "tiny__return"} {
		if got := p[ev]; got != [2]uint64{2 * n, 0} {
			t.Errorf("%s: %d hits, %d missed; want %d, 0", ev, got[0], got[1], 2*n)
		}
		hits += p[ev][0]
	}
	code, out, stderr := kp("trace", "-b", bin, bin+".trace")
	if code != 0 {
		t.Fatalf("kprewrite trace: exit %d: %s", code, stderr)
	}
	m := regexp.MustCompile(`entries-in-buffer/entries-written: (\d+)/(\d+)\n(?:.*\n)*?# lost: (\d+) records`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no entries or lost line in the trace's header:\n%s", testprog.Clip(out, 600))
	}
	kept, _ := strconv.ParseUint(m[1], 10, 64)
	written, _ := strconv.ParseUint(m[2], 10, 64)
	lost, _ := strconv.ParseUint(m[3], 10, 64)
	if written != hits || kept+lost != hits || kept == 0 || lost < hits/2 {
		t.Errorf("entries %d kept of %d written, %d lost; want %d hits in all, most of them lost", kept, written, lost, hits)
	}
}

// TestTraceFileFullSaid: a program run directly whose trace file's record area fills
// says so once on stderr (both threads lose records), with how to make room, and says
// nothing more under KPREWRITE_QUIET=1; before, a run that outgrew the default 64 MiB
// ended silently with most of its trace missing.
func TestTraceFileFullSaid(t *testing.T) {
	prog := testprog.Build(t, lostSrc, "c", "-O2", "-pthread")
	bin := filepath.Join(t.TempDir(), "lost")
	rewriteWith(t, prog, bin, []string{"p:l/w work a=%di b=%si"})
	for _, c := range []struct{ quiet, size, shown string }{{"0", "64K", "64 KiB"}, {"0", "1M", "1 MiB"}, {"1", "64K", ""}} {
		// 2 threads x 40,000 records of 32 bytes: more than 1 MiB
		r := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{"40000"},
			Env: []string{"KPREWRITE_QUIET=" + c.quiet, "KPREWRITE_TRACE_SIZE=" + c.size, "KPREWRITE_TRACE=" + bin + ".trace"}})
		if r.Exit != 0 {
			t.Fatalf("rewritten program: %s", r)
		}
		want := 0
		if c.shown != "" {
			want = 1
		}
		line := "kprewrite: trace file " + bin + ".trace is full (" + c.shown + " of records): later records are lost, counted; KPREWRITE_TRACE_SIZE=SIZE (or rewrite --trace-size, or kprewrite record) keeps them\n"
		if n := strings.Count(r.Stderr, "is full ("); n != want || want == 1 && !strings.Contains(r.Stderr, line) {
			t.Errorf("KPREWRITE_QUIET=%s, %s: stderr %q, want %d line(s) %q", c.quiet, c.size, r.Stderr, want, line)
		}
	}
}
