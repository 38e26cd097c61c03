package tests

// Live probes (issue 46): an int3 probe rewritten --disable'd keeps the original byte at
// its site, in the file and in the running program; `kprewrite enable` arms it in the
// running program (the runtime's live-probe thread writes the int3) and `disable` puts
// the byte back; a stress run arms and disarms under eight threads and a signal timer.

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/internal/tracectl"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// livePhasedSrc calls work() a number of times per phase, reports the phase and waits
// for a byte on stdin before the next; it prints its own sum at the end.
var livePhasedSrc = livePhased(`__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }`,
	`s += work(i, phase);`)

// livePhased is a C program of the live tests: funcs, then a main that runs call (with i
// and phase) 0, 100, 50 and 25 times in phases 0 to 3, adding to s, says "phase N" after
// each and waits for a byte on stdin before the next, and ends printing "sum S".
func livePhased(funcs, call string) string {
	return `#include <stdio.h>
#include <unistd.h>
` + funcs + `
int main(void) {
	static const int calls[] = {0, 100, 50, 25};
	long s = 0;
	char c;
	for (int phase = 0; phase < 4; phase++) {
		for (int i = 0; i < calls[phase]; i++) {
			` + call + `
		}
		printf("phase %d\n", phase);
		fflush(stdout);
		if (read(0, &c, 1) != 1)
			return 2;
	}
	printf("sum %ld\n", s);
	return 0;
}
`
}

// siteOf is work's address and its first byte in the ELF file at path.
func siteOf(t *testing.T, path, fn string) (addr uint64, b byte) {
	t.Helper()
	addr, code := siteBytes(t, path, fn, 1)
	return addr, code[0]
}

// siteBytes is fn's address and its first n bytes in the ELF file at path.
func siteBytes(t *testing.T, path, fn string, n int) (addr uint64, code []byte) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols() // (a library's functions are there)
	for _, s := range append(syms, dyn...) {
		if s.Name != fn || s.Value == 0 {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				buf := make([]byte, n)
				if _, err := p.ReadAt(buf, int64(s.Value-p.Vaddr)); err != nil {
					t.Fatal(err)
				}
				return s.Value, buf
			}
		}
	}
	t.Fatalf("%s: no %s", path, fn)
	return 0, nil
}

// memByte reads the byte at link-time address addr of the PIE image bin in process pid.
func memByte(t *testing.T, pid int, bin string, addr uint64) byte {
	t.Helper()
	base := imageBase(t, pid, bin)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	b := make([]byte, 1)
	if _, err := mem.ReadAt(b, int64(base+addr)); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// waitByte waits, a bounded number of looks, until the site holds want.
func waitByte(t *testing.T, pid int, bin string, addr uint64, want byte) {
	t.Helper()
	for try := 0; try < 1000; try++ {
		if memByte(t, pid, bin, addr) == want {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("the site %#x still holds %#x, want %#x", addr, memByte(t, pid, bin, addr), want)
}

// liveKinds are the two kinds of live probe: the rewrite flags, the kind list shows,
// and the site's first byte when armed.
var liveKinds = []struct {
	name  string
	flags []string
	list  string
	armed byte
}{
	{"int3", []string{"--no-optimize"}, "[BOOSTED]", 0xcc},
	{"jump", nil, "[OPTIMIZED]", 0xe9},
}

func TestLiveProbeArmDisarm(t *testing.T) {
	prog := testprog.Build(t, livePhasedSrc, "c", "-O2")
	for _, k := range liveKinds {
		t.Run(k.name, func(t *testing.T) { testLiveArmDisarm(t, prog, k.flags, k.list, k.armed) })
	}
}

func testLiveArmDisarm(t *testing.T, prog string, flags []string, kind string, armed byte) {
	bin := filepath.Join(t.TempDir(), "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64 b=%si:s64"}, append(flags, "--disable", "t/w")...)
	if _, list, _ := kp("list", bin); !strings.Contains(list, kind+"[DISABLED][LIVE]") {
		t.Fatalf("list: %q, want %s[DISABLED][LIVE]", list, kind)
	}
	addr, orig := siteOf(t, prog, "work")
	if _, b := siteOf(t, bin, "work"); b != orig {
		t.Fatalf("the rewritten file holds %#x at work, want the original %#x", b, orig)
	}
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	cmd, stdin, lines, pid := p.cmd, p.stdin, p.lines, p.cmd.Process.Pid
	stderr := &p.stderr
	step := func(phase int) { t.Helper(); p.step(t, phase) }
	run := func(args ...string) {
		t.Helper()
		if code, o, e := kp(args...); code != 0 {
			t.Fatalf("kprewrite %v: exit %d\n%s%s", args, code, o, e)
		}
	}
	records := func() int { return len(readTrace(t, tr, bin)) }

	listed := func(want string) {
		t.Helper()
		if _, out, _ := kp("list", tr); !strings.Contains(out, want) {
			t.Fatalf("list %s: %q, want %q", tr, out, want)
		}
	}
	step(0)
	if b := memByte(t, pid, bin, addr); b != orig {
		t.Fatalf("disarmed: the running program holds %#x at work, want the original %#x", b, orig)
	}
	listed(kind + "[DISABLED][LIVE]")
	run("enable", tr, "t/w")
	listed(kind + "[LIVE]")
	waitByte(t, pid, bin, addr, armed)
	stdin.Write([]byte{'x'})
	step(1) // 100 calls armed
	if n := records(); n != 100 {
		t.Fatalf("armed for 100 calls: %d records", n)
	}
	run("disable", tr, "t/w")
	waitByte(t, pid, bin, addr, orig)
	stdin.Write([]byte{'x'})
	step(2) // 50 calls disarmed
	if n := records(); n != 100 {
		t.Fatalf("disarmed for 50 calls: %d records, want the 100 before", n)
	}
	run("enable", tr, "t/w")
	waitByte(t, pid, bin, addr, armed)
	stdin.Write([]byte{'x'})
	step(3) // 25 calls armed again
	lastArgs := readTrace(t, tr, bin)
	if len(lastArgs) != 125 || strings.TrimSpace(lastArgs[124].Args) != "a=24 b=3" {
		t.Fatalf("%d records, the last %+v; want 125, the last a=24 b=3", len(lastArgs), lastArgs[len(lastArgs)-1])
	}
	stdin.Write([]byte{'x'})
	stdin.Close()
	if !lines.Scan() || lines.Text() != "sum 19700" {
		t.Errorf("the program's result: %q, want sum 19700", lines.Text())
	}
	if err := cmd.Wait(); err != nil || stderr.Len() > 0 {
		t.Errorf("the program: %v, stderr %q", err, stderr.String())
	}
}

// liveStressSrc: eight threads call work() in a tight loop, until standard input
// ends, while a timer's signal handler calls it too and a ninth thread forks children
// that call it; each thread and child checks every result.
const liveStressSrc = `#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }
static volatile long sigsum;
static volatile int stop;
static void on_alarm(int sig) { (void)sig; sigsum += work(1, 1); }
static void *loop(void *arg) {
	long id = (long)arg, n = 0;
	for (long i = 0; !stop; i++, n++) {
		long r = work(i, id);
		if (r != i * 3 + id) { fprintf(stderr, "work(%ld, %ld) = %ld\n", i, id, r); exit(3); }
		for (volatile int k = 0; k < 20000; k++) /* tens of us a call: the trace stays small */
			;
	}
	return (void *)n;
}
static void *forker(void *arg) {
	long n = 0;
	while (!stop) {
		if (n >= 3000) { /* bounded: each child's blocks take ~68 KiB of the trace */
			usleep(1000);
			continue;
		}
		n++;
		pid_t pid = fork();
		if (pid == 0) {
			for (long i = 0; i < 1000; i++)
				if (work(i, 9) != i * 3 + 9) _exit(5);
			_exit(0);
		}
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "child %d: status %#x\n", pid, st);
			exit(6);
		}
	}
	return (void *)n;
}
int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, 0);
	struct itimerval it = {{0, 500}, {0, 500}};
	setitimer(ITIMER_REAL, &it, 0);
	pthread_t th[8], fk;
	for (long i = 0; i < 8; i++) pthread_create(&th[i], 0, loop, (void *)i);
	pthread_create(&fk, 0, forker, 0);
	char c;
	while (read(0, &c, 1) > 0)
		;
	stop = 1;
	long total = 0;
	for (int i = 0; i < 8; i++) { void *r; pthread_join(th[i], &r); total += (long)r; }
	void *forks;
	pthread_join(fk, &forks);
	printf("ok %s %s\n", total > 0 ? "calls" : "none", (long)forks > 0 ? "forks" : "none");
	return 0;
}
`

// liveStressMovedSrc is liveStressSrc with a work whose DCR's copy moves its third
// instruction (test, js rel8, lea: the js copied as a rel32), so that threads the
// safepoint finds there are moved by the point's DCR map.
var liveStressMovedSrc = strings.Replace(liveStressSrc,
	"__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }", `long work(long a, long b);
__asm__(".text\n.globl work\n.type work,@function\nwork:\n\ttest %edi,%edi\n\tjs 1f\n"
	"\tlea (%rdi,%rdi,2),%rax\n\tadd %rsi,%rax\n\tret\n"
	"1:\tlea (%rdi,%rdi,2),%rax\n\tadd %rsi,%rax\n\tret\n.size work,.-work\n");`, 1)

// TestLiveProbeStressMoved: the jump kind's stress test on a DCR whose copy moves an
// instruction.
func TestLiveProbeStressMoved(t *testing.T) {
	if !strings.Contains(liveStressMovedSrc, "js 1f") {
		t.Fatal("liveStressSrc's work changed: liveStressMovedSrc has nothing to replace")
	}
	prog := testprog.Build(t, liveStressMovedSrc, "c", "-O2", "-pthread")
	probe := filepath.Join(t.TempDir(), "map.kp")
	rewriteWith(t, prog, probe, []string{"p:t/w work a=%di:s64"}, "--disable", "t/w")
	if im := idleImage(t, probe); im.Points[0].Aux == 0 || im.Points[0].DFlags&kprt.DFLive == 0 {
		t.Fatalf("work's point: dflags %#x, DCR map %#x; want a live jump point with a map", im.Points[0].DFlags, im.Points[0].Aux)
	}
	testLiveStress(t, prog, nil)
}

// TestLiveProbeStress arms and disarms the site 10,000 times while eight threads, a
// signal handler and forked children run through it, for each kind: the program's own
// checks pass, and every hit of the armed probe is a record.
func TestLiveProbeStress(t *testing.T) {
	prog := testprog.Build(t, liveStressSrc, "c", "-O2", "-pthread")
	for _, k := range liveKinds {
		t.Run(k.name, func(t *testing.T) { testLiveStress(t, prog, k.flags) })
	}
}

func testLiveStress(t *testing.T, prog string, flags []string) {
	bin := filepath.Join(t.TempDir(), "stress.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, append(flags, "--disable", "t/w")...)
	cmd := exec.Command(bin)
	// the toggles take as long as the machine makes them: a record area larger than
	// what the bounded forks and the rate-limited threads can fill in that time
	cmd.Env = append(os.Environ(), "KPREWRITE_TRACE_SIZE=1G")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var f *tracectl.File
	for try := 0; f == nil && try < 1000; try++ { // the trace file appears at start-up
		if g, err := tracectl.Open(tr); err == nil {
			if evs, err := g.Events("t/w"); err == nil && len(evs) == 1 {
				f = g
				break
			}
			g.Close()
		}
		time.Sleep(time.Millisecond)
	}
	if f == nil {
		t.Fatal("no trace file with t/w")
	}
	defer f.Close()
	evs, _ := f.Events("t/w")
	const toggles = 10000
	for i := 0; i < toggles; i++ {
		select {
		case err := <-done:
			t.Fatalf("the program ended after %d toggles: %v, stderr %q", i, err, stderr.String())
		default:
		}
		if err := f.SetEnabled(evs[0], i%2 == 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Microsecond)
	}
	stdin.Close()
	if err := <-done; err != nil || strings.TrimSpace(stdout.String()) != "ok calls forks" {
		t.Fatalf("the program: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	p := profile(t, tr, bin)
	n := len(readTrace(t, tr, bin))
	if hits := p["w"][0]; hits == 0 || uint64(n) != hits {
		_, head, _ := kp("trace", "-b", bin, tr)
		t.Errorf("%d records for %d hits (%d missed)\n%s", n, hits, p["w"][1], testprog.Clip(head, 600))
	}
	t.Logf("%d toggles, %d hits recorded", toggles, n)
}

// liveForkMidSrc forks once; the child waits (a bounded number of yields) until its
// live-probe thread has put work's site in the state the child's controls want (its
// first byte no longer an int3), then checks 1,000 calls of work.
const liveForkMidSrc = `#include <sched.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }
int main(void) {
	pid_t pid = fork();
	if (pid == 0) {
		volatile unsigned char *site = (volatile unsigned char *)work;
		for (long k = 0; k < 10000000 && *site == 0xcc; k++)
			sched_yield();
		if (*site == 0xcc)
			_exit(4);
		for (long i = 0; i < 1000; i++)
			if (work(i, 9) != i * 3 + 9)
				_exit(5);
		_exit(0);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	printf("child status %#x\n", st);
	return 0;
}
`

// TestLiveForkMidWrite: a fork that copies the process while its live-probe thread is
// between writing a jump point's bytes and noting the state they make (the thread
// writes the bytes first) leaves the child's copy with bytes its noted state does not
// describe. gdb stops the child where it starts its own live-probe thread and gives it
// that copy: the int3 and the jmp's tail written (the parent's agent was arming the
// site, its int3 left by a safepoint that had failed), the state still "int3 before the
// original tail". The child's event is off, so its thread disarms the site: from the
// noted state it would write the original first byte before the jmp's tail (garbage
// code: the stress test's forked child that died of SIGSEGV); the child reads its bytes
// first and works.
func TestLiveForkMidWrite(t *testing.T) {
	testprog.Need(t, "gcc", "gdb")
	prog := testprog.Build(t, liveForkMidSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "fork.kp")
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, "--disable", "t/w")
	im := idleImage(t, bin)
	var work uint64
	for _, sym := range elfSymbols(t, bin) {
		if sym.Name == "work" {
			work = sym.Value
		}
	}
	i := 0
	for i < len(im.Points) && im.Points[i].Site != work {
		i++
	}
	if i == len(im.Points) {
		t.Fatalf("no point at work (%#x)", work)
	}
	pt := im.Points[i]
	if pt.XMode != kprt.XOptimized || pt.DFlags&kprt.DFLive == 0 || pt.InsnLen < 6 {
		t.Fatalf("work's point: xmode %v, dflags %#x, DCR %d bytes; want a live jump point of more than a jmp", pt.XMode, pt.DFlags, pt.InsnLen)
	}
	// the child's copy: an int3, the jmp's rel32, int3s to the DCR's end (set_jump's)
	rel := uint32(pt.Slot - pt.Site - 5)
	var b strings.Builder
	b.WriteString("set pagination off\nset startup-with-shell off\nset follow-fork-mode child\n")
	b.WriteString("break kprw_live_child\nrun\nset $s = (unsigned char *)&work\n")
	for k := 0; k < int(pt.InsnLen) && k < 16; k++ {
		v := byte(0xcc)
		if k >= 1 && k <= 4 {
			v = byte(rel >> (8 * (k - 1)))
		}
		fmt.Fprintf(&b, "set var $s[%d] = %d\n", k, v)
	}
	// live_armed[i] = LIVE_INT3, changing = i (the point the agent was at), cold = 0
	// (the parent's agent had applied a change: the child's applies its controls)
	fmt.Fprintf(&b, "set var (*(unsigned char **)&live_armed)[%d] = 1\nset var *(unsigned int *)&changing = %d\n", i, i)
	b.WriteString("set var *(int *)&cold = 0\ncontinue\n")
	script := filepath.Join(t.TempDir(), "fork.gdb")
	if err := os.WriteFile(script, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("gdb", "-batch", "-nx", "-x", script, "--args", bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(out), 3000))
	}
	if !strings.Contains(string(out), "Breakpoint 1, ") {
		t.Fatalf("gdb did not stop the child in kprw_live_child:\n%s", testprog.Clip(string(out), 3000))
	}
	if !strings.Contains(string(out), "child status 0\n") || !strings.Contains(string(out), "exited normally") {
		t.Fatalf("the forked child did not work (4: its site never left the int3, 5: work computed wrong):\n%s", testprog.Clip(string(out), 3000))
	}
}

// liveLibSrc calls malloc a number of times per phase, reporting each phase and waiting
// for a byte on stdin before the next.
const liveLibSrc = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void *volatile sink;
int main(void) {
	static const int calls[] = {0, 100, 50};
	char c;
	for (int phase = 0; phase < 3; phase++) {
		for (int i = 0; i < calls[phase]; i++) {
			sink = malloc(1000 + i);
			free(sink);
		}
		printf("phase %d\n", phase);
		fflush(stdout);
		if (read(0, &c, 1) != 1)
			return 2;
	}
	return 0;
}
`

// TestLiveProbeLibrary: a live event in a library the program's definitions name
// (libc.so.6:malloc): the copy in OUT.libs keeps malloc's original bytes, and the
// library's runtime arms and disarms it as the program's would.
func TestLiveProbeLibrary(t *testing.T) {
	prog := testprog.Build(t, liveLibSrc, "c", "-O2")
	for _, k := range liveKinds {
		t.Run(k.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "lib.kp")
			tr := bin + ".trace"
			rewriteWith(t, prog, bin, []string{"p:lib/malloc libc.so.6:malloc size=%di:u64"}, append(k.flags, "--disable", "lib/malloc")...)
			libc := strings.TrimSpace(testprog.MustRun(t, "sh", "-c", "ldd "+prog+" | awk '/libc.so.6/ {print $3}'"))
			_, orig := siteOf(t, libc, "malloc")
			if _, b := siteOf(t, filepath.Join(bin+".libs", "libc.so.6"), "malloc"); b != orig {
				t.Fatalf("the library's copy holds %#x at malloc, want the original %#x", b, orig)
			}
			p := startPhased(t, bin)
			defer p.cmd.Process.Kill()
			cmd, stdin := p.cmd, p.stdin
			step := func(phase int) { t.Helper(); p.step(t, phase) }
			sizes := func() []string {
				var got []string
				for _, l := range readTrace(t, tr) {
					if strings.Contains(l.Args, "size=") && !strings.HasPrefix(strings.TrimSpace(l.Args), "size=1") {
						continue // (stdio's own mallocs)
					}
					got = append(got, strings.TrimSpace(l.Args))
				}
				return got
			}
			step(0)
			if code, o, e := kp("enable", tr, "lib/malloc"); code != 0 {
				t.Fatalf("enable: %d %s%s", code, o, e)
			}
			time.Sleep(200 * time.Millisecond) // the switch is asynchronous
			stdin.Write([]byte{'x'})
			step(1)
			on := sizes()
			if code, o, e := kp("disable", tr, "lib/malloc"); code != 0 {
				t.Fatalf("disable: %d %s%s", code, o, e)
			}
			time.Sleep(200 * time.Millisecond)
			stdin.Write([]byte{'x'})
			step(2)
			if n := len(sizes()); len(on) < 100 || n != len(on) || on[0] != "size=1000" || on[99] != "size=1099" {
				t.Fatalf("armed: %d records (first %v), disarmed: %d; want 100 from size=1000 to size=1099, none after", len(on), on[:min(len(on), 3)], n)
			}
			stdin.Close()
			cmd.Wait()
		})
	}
}

// liveForkSrc forks at once; the child runs livePhasedSrc's phases (it reads the
// shared stdin) after printing its pid, and the parent waits for it.
const liveForkSrc = `#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a, long b) { return a * 3 + b; }
int main(void) {
	pid_t pid = fork();
	if (pid > 0) {
		int st;
		waitpid(pid, &st, 0);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 9;
	}
	static const int calls[] = {0, 100, 50};
	long s = 0;
	char c;
	printf("child %d\n", getpid());
	for (int phase = 0; phase < 3; phase++) {
		for (int i = 0; i < calls[phase]; i++)
			s += work(i, phase);
		printf("phase %d\n", phase);
		fflush(stdout);
		if (read(0, &c, 1) != 1)
			return 2;
	}
	printf("sum %ld\n", s);
	return 0;
}
`

// TestLiveProbeForkChild: a child forked before the event is switched on arms and
// disarms its own sites (the signal guard's fork wrapper starts its live-probe thread).
func TestLiveProbeForkChild(t *testing.T) {
	prog := testprog.Build(t, liveForkSrc, "c", "-O2")
	for _, k := range liveKinds {
		t.Run(k.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "fork.kp")
			tr := bin + ".trace"
			rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"}, append(k.flags, "--disable", "t/w")...)
			addr, orig := siteOf(t, prog, "work")
			p := startPhased(t, bin)
			defer p.cmd.Process.Kill()
			cmd, stdin, lines := p.cmd, p.stdin, p.lines
			var child int
			if !lines.Scan() || func() bool { _, err := fmt.Sscanf(lines.Text(), "child %d", &child); return err != nil }() {
				t.Fatalf("the program said %q", lines.Text())
			}
			defer syscall.Kill(child, syscall.SIGKILL)
			step := func(phase int) { t.Helper(); p.step(t, phase) }
			step(0)
			if code, o, e := kp("enable", tr, "t/w"); code != 0 {
				t.Fatalf("enable: %d %s%s", code, o, e)
			}
			waitByte(t, child, bin, addr, k.armed)
			stdin.Write([]byte{'x'})
			step(1)
			if code, o, e := kp("disable", tr, "t/w"); code != 0 {
				t.Fatalf("disable: %d %s%s", code, o, e)
			}
			waitByte(t, child, bin, addr, orig)
			stdin.Write([]byte{'x'})
			step(2)
			if n := len(readTrace(t, tr, bin)); n != 100 {
				t.Fatalf("%d records, want the 100 of the child's armed phase", n)
			}
			stdin.Write([]byte{'x'})
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// phased is a program of these tests running under their control: it reports each
// phase on stdout and waits for a byte on stdin before the next.
type phased struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr strings.Builder
}

// startPhased starts bin; the caller defers p.cmd.Process.Kill().
func startPhased(t *testing.T, bin string) *phased {
	t.Helper()
	return startCmd(t, exec.Command(bin))
}

// startCmd starts cmd under the tests' control (its stdin, stdout lines and stderr);
// the caller defers p.cmd.Process.Kill().
func startCmd(t *testing.T, cmd *exec.Cmd) *phased {
	t.Helper()
	p := &phased{cmd: cmd}
	p.stdin, _ = p.cmd.StdinPipe()
	out, _ := p.cmd.StdoutPipe()
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.lines = bufio.NewScanner(out)
	return p
}

// step waits for the program to report the phase.
func (p *phased) step(t *testing.T, phase int) {
	t.Helper()
	if !p.lines.Scan() || p.lines.Text() != fmt.Sprintf("phase %d", phase) {
		t.Fatalf("phase %d: the program said %q (%s)", phase, p.lines.Text(), p.stderr.String())
	}
}
