package tests

// A thread paused between two instructions of a DCR when its jmp is written live: the
// safepoint must move it to the DCR's copy first (docs/runtime.md, "Threads inside a
// DCR"). The stress test meets that moment by chance; here a userfaultfd page holds the
// thread at the DCR's second instruction for as long as the test wants.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// liveParkSrc: work's DCR is lea + add (%rsi); a thread calls it with a pointer into a
// userfaultfd page, so its load faults and the thread waits at work+4 until main, told
// by a byte on stdin, supplies the page. Exit 77: no userfaultfd here.
var liveParkSrc = strings.Replace(liveParkMain, "WORK", "__attribute__((noinline)) long work(long a, long *p) { return a * 3 + *p; }", 1)

// liveParkMovedSrc: work's DCR is test, js rel8 and the load of *p (asm: the layout is
// the test's), so the load, where the thread waits (work+4), is at work+8 in the DCR's
// copy, whose js is a rel32: the safepoint must move the thread by the point's DCR map.
var liveParkMovedSrc = strings.Replace(liveParkMain, "WORK", `long work(long a, long *p);
__asm__(".text\n.globl work\n.type work,@function\nwork:\n"
	"\ttest %edi,%edi\n\tjs 1f\n\tmov (%rsi),%rax\n\tadd %rdi,%rax\n\tret\n"
	"1:\txor %eax,%eax\n\tret\n.size work,.-work\n");`, 1)

// liveParkLoopSrc: work's DCR is its whole loop, 22 bytes (the loop branches back into
// the first five), longer than the 16 bytes the runtime writes when it arms the point;
// the load of *p, where the thread waits, is at work+17, in the DCR's tail that keeps
// the original bytes, at work+21 in the copy (the jge's rel32 moves it). Left there,
// the thread would run on into the loop's jmp back to work+2, the middle of the jmp.
var liveParkLoopSrc = strings.Replace(liveParkMain, "WORK", `long work(long a, long *p);
__asm__(".text\n.globl work\n.type work,@function\nwork:\n"
	"\txor %eax,%eax\n1:\tcmp %edi,%eax\n\tjge 2f\n\tadd $1,%eax\n\tadd $0,%rcx\n\tadd $0,%rcx\n"
	"\tmov (%rsi),%rcx\n\tjmp 1b\n2:\tadd (%rsi),%rax\n\tret\n.size work,.-work\n");`, 1)

const liveParkMain = `#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
WORK
static long *page;
static long result;
static void *parked(void *arg) { (void)arg; result = work(5, page); return 0; }
int main(void) {
	long uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	struct uffdio_api api = {.api = UFFD_API};
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) { perror("userfaultfd"); return 77; }
	page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct uffdio_register reg = {.range = {(unsigned long)page, 4096}, .mode = UFFDIO_REGISTER_MODE_MISSING};
	if (ioctl(uffd, UFFDIO_REGISTER, &reg)) { perror("UFFDIO_REGISTER"); return 77; }
	pthread_t th;
	pthread_create(&th, 0, parked, 0);
	struct uffd_msg msg;
	if (read(uffd, &msg, sizeof msg) != sizeof msg) { perror("read"); return 2; }
	printf("parked\n");
	fflush(stdout);
	char c;
	if (read(0, &c, 1) != 1) return 3;
	static long src[512] = {7};
	struct uffdio_copy cp = {.dst = (unsigned long)page, .src = (unsigned long)src, .len = 4096};
	if (ioctl(uffd, UFFDIO_COPY, &cp)) { perror("UFFDIO_COPY"); return 4; }
	pthread_join(th, 0);
	printf("work(5, &7) = %ld\n", result);
	return 0;
}
`

// TestLiveJumpMovesParkedThread: a thread waits at work+4 (the oracle: its
// /proc/PID/task/TID/syscall says so) while `kprewrite enable` arms work's jump probe;
// the jmp is written, the thread resumes in the DCR's copy and the program's result is
// right. Before the safepoint signal carried its si_code where the kernel reads it, the
// kernel refused every one (EPERM), no thread was ever moved, and this thread resumed in
// the middle of the jmp.
func TestLiveJumpMovesParkedThread(t *testing.T) {
	parkAndArm(t, liveParkSrc, 4, "work(5, &7) = 22")
}

// TestLiveJumpMovesParkedThreadMoved: the same with a DCR whose copy moves the
// instruction the thread waits at (a js rel8 before it copied as a rel32): the thread
// resumes at that instruction's place in the copy (the point's DCR map), not at its
// offset, which in the copy is the middle of the js.
func TestLiveJumpMovesParkedThreadMoved(t *testing.T) {
	parkAndArm(t, liveParkMovedSrc, 4, "work(5, &7) = 12")
}

// TestLiveJumpMovesParkedThreadTail: the same with a DCR longer than the bytes the
// runtime writes (work's whole loop, 22 bytes) and the thread waiting at work+17, past
// them: moved to the copy all the same.
func TestLiveJumpMovesParkedThreadTail(t *testing.T) {
	parkAndArm(t, liveParkLoopSrc, 17, "work(5, &7) = 12")
}

// parkAndArm runs src rewritten with a live event at work, parks a thread at work+at,
// arms the event, lets the thread go on and checks the program's result line.
func parkAndArm(t *testing.T, src string, at uint64, want string) {
	prog := testprog.Build(t, src, "c", "-O2", "-pthread")
	bin := filepath.Join(t.TempDir(), "park.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, "--disable", "t/w")
	if _, list, _ := kp("list", bin); !strings.Contains(list, "[OPTIMIZED][DISABLED][LIVE]") {
		t.Fatalf("list: %q, want work's probe jump-optimized and live", list)
	}
	addr, _ := siteOf(t, bin, "work")
	cmd := exec.Command(bin)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "parked" {
		cmd.Wait()
		if cmd.ProcessState.ExitCode() == 77 {
			t.Skipf("no userfaultfd on this machine: %s", stderr.String())
		}
		t.Fatalf("the program: %q, stderr %q", lines.Text(), stderr.String())
	}
	pid := cmd.Process.Pid
	base := imageBase(t, pid, bin)
	if tid := threadAt(t, pid, base+addr+at); tid == 0 {
		t.Fatalf("no thread of %d waits at work+%d", pid, at)
	}
	if code, o, e := kp("enable", tr, "t/w"); code != 0 {
		t.Fatalf("enable: %d %s%s", code, o, e)
	}
	waitByte(t, pid, bin, addr, 0xe9)
	if tid := threadAt(t, pid, base+addr+at); tid != 0 {
		t.Fatalf("thread %d still waits at work+%d with the jmp written", tid, at)
	}
	stdin.Write([]byte{'x'})
	stdin.Close()
	if !lines.Scan() || lines.Text() != want {
		cmd.Wait()
		t.Fatalf("the program: %q, %v, stderr %q; want %s", lines.Text(), cmd.ProcessState, stderr.String(), want)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program: %v, stderr %q", err, stderr.String())
	}
}

// imageBase is where the PIE bin is mapped in pid.
func imageBase(t *testing.T, pid int, bin string) uint64 {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(bin)
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.HasSuffix(line, " "+abs) {
			lo, _, _ := strings.Cut(line, "-")
			base, _ := strconv.ParseUint(lo, 16, 64)
			return base
		}
	}
	t.Fatalf("%s is not mapped in %d", abs, pid)
	return 0
}

// threadAt is the thread of pid stopped outside a system call at ip (its
// /proc/PID/task/TID/syscall: "-1 SP IP"), 0 for none.
func threadAt(t *testing.T, pid int, ip uint64) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, _ := os.ReadFile(filepath.Join(dir, task.Name(), "syscall"))
		f := strings.Fields(string(b))
		if len(f) == 3 && f[0] == "-1" && f[2] == fmt.Sprintf("%#x", ip) {
			tid, _ := strconv.Atoi(task.Name())
			return tid
		}
	}
	return 0
}
