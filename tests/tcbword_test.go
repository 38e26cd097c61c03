package tests

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// tcbWordSrc runs work 1,000 times in a glibc thread and in a thread a raw clone made
// with a TLS block of its own: the thread pointer at its first word, its tid where
// glibc's TCB keeps it (0x2d0), a pattern everywhere else. It prints whether the glibc
// thread's TCB names a context (the runtime's word, %fs:0x278) and how many bytes of
// the raw block changed.
const tcbWordSrc = `#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a) { return a + 1; }
static unsigned char block[8192] __attribute__((aligned(64)));
static unsigned char stack[65536] __attribute__((aligned(64)));
static long bad, named;
static int raw(void *base) {
	long tid;
	__asm__ volatile("syscall" : "=a"(tid) : "a"(SYS_gettid) : "rcx", "r11", "memory"); /* (no libc call) */
	*(int *)((unsigned char *)base + 0x2d0) = (int)tid;
	for (long i = 0; i < 1000; i++)
		if (work(i) != i + 1) bad++;
	return 0;
}
static void *glibc_thread(void *arg) {
	for (long i = 0; i < 1000; i++)
		if (work(i) != i + 1) bad++;
	long w;
	__asm__ volatile("movq %%fs:0x278, %0" : "=r"(w));
	named = w != 0;
	return arg;
}
int main(void) {
	pthread_t th;
	pthread_create(&th, 0, glibc_thread, 0);
	pthread_join(th, 0);
	unsigned char *base = block + 4096;
	memset(block, 0xab, sizeof block);
	*(unsigned char **)base = base;
	static volatile pid_t ctid = 1;
	int f = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS | CLONE_CHILD_CLEARTID;
	if (clone(raw, stack + sizeof stack, f, base, 0, base, &ctid) < 0) { perror("clone"); return 1; }
	while (ctid != 0) usleep(1000);
	long changed = 0;
	for (long i = 0; i < (long)sizeof block; i++) {
		long o = i - 4096;
		if (block[i] != 0xab && !(o >= 0 && o < 8) && !(o >= 0x2d0 && o < 0x2d4)) changed++;
	}
	printf("bad=%ld named=%ld changed=%ld\n", bad, named, changed);
	return 0;
}
`

// TestTCBWordGlibcOnly: a glibc thread's TCB names its context after its first hits (the
// one-load lookup of the fast paths, issue 49), and a thread whose TLS block is not
// glibc's TCB (a raw clone's, the tid where glibc keeps it but no self pointer at 0x10)
// has its hits recorded and nothing of its block written.
func TestTCBWordGlibcOnly(t *testing.T) {
	prog := testprog.Build(t, tcbWordSrc, "c", "-O2", "-pthread")
	bin := filepath.Join(t.TempDir(), "tcb.kp")
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di"})
	for _, c := range []struct{ key, named string }{{"", "1"}, {"hash", "0"}} {
		r := testprog.Run(t, testprog.Cmd{Path: bin, Extra: []string{"KPREWRITE_THREADKEY=" + c.key}})
		if want := "bad=0 named=" + c.named + " changed=0"; r.Exit != 0 || strings.TrimSpace(r.Stdout) != want {
			t.Fatalf("KPREWRITE_THREADKEY=%q: %s\nwant stdout %q", c.key, r, want)
		}
		tids := map[int]int{}
		for _, l := range readTrace(t, bin+".trace", bin) {
			tids[l.PID]++ // (the TASK-PID column: the thread)
		}
		if len(tids) != 2 {
			t.Errorf("KPREWRITE_THREADKEY=%q: records by thread %v, want 1000 from each of two", c.key, tids)
		}
		for tid, n := range tids {
			if n != 1000 {
				t.Errorf("KPREWRITE_THREADKEY=%q: thread %d has %d records, want 1000", c.key, tid, n)
			}
		}
	}
}
