package tests

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// retireSrc: the main thread calls work() argv[1] times, then a second thread calls
// late(k) for k = 0..99 (its records in a block of its own, past the first 2 MiB of the
// file), then the main thread calls work() argv[2] times more (the runtime gives back
// the file's pages far behind it, the second thread's block among them: the main
// thread waits, at most 2,000 looks 5 ms apart, for less than half of them to be in the
// page cache, which a loaded machine's scheduler may take a while to let the runtime's
// thread do), then the second thread calls late(k) for k = 100..1099 into the same
// block: its page comes back with what it held
const retireSrc = `
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
__attribute__((noinline)) long late(long k) { __asm__ volatile(""); return k; }
static volatile int step;
static void *slow(void *arg) {
	long s = 0;
	while (step < 1) ;
	for (long k = 0; k < 100; k++) s += late(k);
	step = 2;
	while (step < 3) ;
	for (long k = 100; k < 1100; k++) s += late(k);
	return (void *)s;
}
int main(int argc, char **argv) {
	long n1 = atol(argv[1]), n2 = atol(argv[2]), s = 0;
	pthread_t th;
	pthread_create(&th, 0, slow, 0);
	for (long i = 0; i < n1; i++) s += work(1, i);
	step = 1;
	while (step < 2) ;
	for (long i = 0; i < n2; i++) s += work(1, i);
	int fd = open(getenv("KPREWRITE_TRACE"), O_RDONLY);
	struct stat st;
	fstat(fd, &st);
	void *m = mmap(0, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	long pages = (st.st_size + 4095) / 4096, res = pages;
	unsigned char *vec = malloc(pages);
	for (int k = 0; k < 2000 && res * 4096 > (n1 + n2) * 16; k++) {
		if (k)
			usleep(5000);
		mincore(m, st.st_size, vec);
		res = 0;
		for (long p = 0; p < pages; p++)
			res += vec[p] & 1;
	}
	step = 3;
	void *r;
	pthread_join(th, &r);
	printf("%ld\n", (s + (long)r) & 1);
	return 0;
}
`

// TestDirectRunGivesBackPages: a program run directly writes 160 MB of records; the
// runtime writes back and drops the file's pages far behind its writers, so the page
// cache holds a fraction of the trace when it ends (the build before held all of it:
// new memory, which a VM may make slowly), and a thread that writes again into an old
// block whose pages were dropped finds its earlier records there: every record is in
// the trace, the late thread's 1,100 in order.
func TestDirectRunGivesBackPages(t *testing.T) {
	testprog.Need(t, "gcc")
	bin := testprog.Build(t, retireSrc, "c", "-O2", "-pthread")
	dir := t.TempDir()
	prog := filepath.Join(dir, "retire.kp")
	rewriteWith(t, bin, prog, []string{recordDef, "p:b/l late k=%di"})
	const n1, n2 = 1000000, 4000000 // 32 MB, then 128 MB
	file := filepath.Join(dir, "r.trace")
	r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{strconv.Itoa(n1), strconv.Itoa(n2)},
		Env: []string{"KPREWRITE_TRACE=" + file, "KPREWRITE_TRACE_SIZE=200M", "KPREWRITE_QUIET=1"}})
	if r.Exit != 0 {
		t.Fatalf("run directly: %s", r)
	}
	written := int64(n1+n2) * 32
	if res := residentBytes(t, file); res > written/2 {
		t.Errorf("%d MiB of the trace file in the page cache after the run, want at most half of the %d MiB of records", res>>20, written>>20)
	}
	hits := map[string]string{}
	for _, l := range strings.Split(kpOK(t, "profile", "-b", prog, file), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			hits[f[0]] = f[1]
		}
	}
	if hits["w"] != strconv.Itoa(n1+n2) || hits["l"] != "1100" {
		t.Errorf("profile: %v, want w %d and l 1100 hits", hits, n1+n2)
	}
	lines := readTraceArgs(t, "--event", "b/l", "-b", prog, file)
	if len(lines) != 1100 {
		t.Fatalf("%d records of late, want 1100", len(lines))
	}
	for k, l := range lines {
		if want := " k=0x" + strconv.FormatInt(int64(k), 16); l.Args != want || l.PID != lines[0].PID {
			t.Fatalf("late's record %d: %+v, want%s", k, l, want)
		}
	}
}

// residentBytes is how much of file is in the page cache (mincore of a mapping of it)
func residentBytes(t *testing.T, file string) int64 {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		t.Fatalf("%s: %v, size %d", file, err, st.Size())
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	vec := make([]byte, (len(m)+4095)/4096)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	var n int64
	for _, v := range vec {
		n += int64(v & 1)
	}
	return n * 4096
}
