package tests

// Return events at functions no rewrite prepared (issue 46): `kprewrite probe` places
// an r: event at a free return point, an int3 at the function's entry whose kretprobe
// hooks the return address; and `rewrite --live-points N`.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestLiveProbeUnpreparedReturn: r: events added to a running program at two
// functions none prepared record, call for call, what the same definitions given at
// rewrite time record; removing them puts the original bytes back.
func TestLiveProbeUnpreparedReturn(t *testing.T) {
	prog := testprog.Build(t, liveFreeSrc, "c", "-O2")
	defs := []string{"r:t/r work $retval:s64", "r:t/q other $retval:s64"}
	dir := t.TempDir()

	ref := filepath.Join(dir, "ref.kp")
	rewriteWith(t, prog, ref, defs, "--no-optimize")
	p := startPhased(t, ref)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	for phase := 1; phase < 4; phase++ {
		p.next(t, phase)
	}
	p.finish(t, "sum 39300")
	want := readTrace(t, ref+".trace", ref)

	bin := filepath.Join(dir, "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare")
	workAddr, workOrig := siteOf(t, prog, "work")
	otherAddr, otherOrig := siteOf(t, prog, "other")
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	pid := q.cmd.Process.Pid
	q.step(t, 0)
	kpOK(t, append([]string{"probe", fmt.Sprint(pid)}, defs...)...)
	waitByte(t, pid, bin, workAddr, 0xcc)
	waitByte(t, pid, bin, otherAddr, 0xcc)
	if out := kpOK(t, "list", tr); strings.Count(out, "[LIVE]") != 2 || !strings.Contains(out, "work+0x0") || !strings.Contains(out, "other+0x0") {
		t.Fatalf("list %s: %q, want t/r at work and t/q at other, [LIVE]", tr, out)
	}
	q.next(t, 1) // 100 calls of each
	kpOK(t, "probe", tr, "-:t/r", "-:t/q")
	waitByte(t, pid, bin, workAddr, workOrig)
	waitByte(t, pid, bin, otherAddr, otherOrig)
	q.next(t, 2)
	q.next(t, 3)
	q.finish(t, "sum 39300")
	got := readTrace(t, tr, bin)
	for _, ev := range []string{"r", "q"} {
		g, w := eventLines(got, ev), eventLines(want, ev)
		if len(g) != 100 || len(w) != 175 {
			t.Fatalf("t/%s: %d live records and %d at rewrite time, want 100 and 175", ev, len(g), len(w))
		}
		for i, l := range g { // (the same addresses but the load base: pages' offsets compared)
			if pageOffsets(l.Head)+l.EA() != pageOffsets(w[i].Head)+w[i].EA() {
				t.Fatalf("t/%s record %d: live %q, rewrite time %q", ev, i, l.Head+l.EA(), w[i].Head+w[i].EA())
			}
		}
	}
}

// pageOffsets is s with each hex address cut to its offset in its page.
func pageOffsets(s string) string {
	return hexAddrRE.ReplaceAllStringFunc(s, func(a string) string {
		v, _ := strconv.ParseUint(a[2:], 16, 64)
		return fmt.Sprintf("+%#x", v&0xfff)
	})
}

var hexAddrRE = regexp.MustCompile(`0x[0-9a-f]+`)

// eventLines are the lines of event ev (its name without the group).
func eventLines(ls []traceLine, ev string) []traceLine {
	var out []traceLine
	for _, l := range ls {
		if l.Event == ev {
			out = append(out, l)
		}
	}
	return out
}

// liveSlowSrc calls slow(), which blocks in read() until the test lets it return,
// twice, then other() ten times.
const liveSlowSrc = `#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long slow(long a) {
	char c;
	printf("in slow\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return -1;
	return a * 2;
}
__attribute__((noinline)) long other(long a) { return a + 1; }
__attribute__((noinline)) long prepare(long a) { return a - 1; }
int main(void) {
	char c;
	long s = 0;
	printf("phase 0\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 2;
	printf("slow %ld\n", slow(21));
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 2;
	printf("slow %ld\n", slow(50));
	for (int i = 0; i < 10; i++)
		s += other(i);
	printf("sum %ld\n", prepare(s));
	return 0;
}
`

// TestLiveProbeReturnInFlight: an r: event removed while its function is in flight
// (blocked in read), and its free return point (the only one: --live-points 4) placed
// at another function meanwhile: the call returns to its caller with its value, no
// record of it is written (the kernel's orphaned instance), and the new event records
// its own calls only.
func TestLiveProbeReturnInFlight(t *testing.T) {
	prog := testprog.Build(t, liveSlowSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "slow.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare", "--live-points", "4")
	slowAddr, slowOrig := siteOf(t, prog, "slow")
	otherAddr, _ := siteOf(t, prog, "other")
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	pid := q.cmd.Process.Pid
	q.step(t, 0)
	kpOK(t, "probe", fmt.Sprint(pid), "r:t/s slow $retval:s64")
	waitByte(t, pid, bin, slowAddr, 0xcc)
	q.stdin.Write([]byte{'x'})
	q.say(t, "in slow")
	q.stdin.Write([]byte{'x'})
	q.say(t, "slow 42") // recorded
	q.stdin.Write([]byte{'x'})
	q.say(t, "in slow") // in flight: its return address hooked
	kpOK(t, "probe", tr, "-:t/s")
	kpOK(t, "probe", tr, "r:t/o other $retval:s64") // the same free return point
	waitByte(t, pid, bin, slowAddr, slowOrig)
	waitByte(t, pid, bin, otherAddr, 0xcc)
	q.stdin.Write([]byte{'x'})
	q.say(t, "slow 100")
	q.finish(t, "sum 54")
	got := readTrace(t, tr, bin)
	s, o := eventLines(got, "s"), eventLines(got, "o")
	if len(s) != 1 || !strings.HasSuffix(s[0].Args, "=42") {
		t.Errorf("t/s: %d records %v, want one, of the call that returned 42 before it was removed", len(s), s)
	}
	if len(o) != 10 {
		t.Fatalf("t/o: %d records %v, want the 10 calls of other", len(o), o)
	}
	for i, l := range o {
		if !strings.HasSuffix(l.Args, fmt.Sprintf("=%d", i+1)) {
			t.Errorf("t/o record %d: %q, want other's value %d (not slow's return)", i, l.Args, i+1)
		}
	}
}

// say waits for the program to print line.
func (p *phased) say(t *testing.T, line string) {
	t.Helper()
	if !p.lines.Scan() || p.lines.Text() != line {
		t.Fatalf("the program said %q, want %q (%s)", p.lines.Text(), line, p.stderr.String())
	}
}

// TestLivePointsOption: `rewrite --live-points 2` reserves two free live points and one
// free return point: a third entry event, or a second return event, at unprepared
// sites is refused naming the option, nothing added; a removed event's point takes the
// next one; --live-points 0 reserves none; a count out of range is a usage error.
func TestLivePointsOption(t *testing.T) {
	prog := testprog.Build(t, liveFreeSrc, "c", "-O2")
	dir := t.TempDir()
	bin := filepath.Join(dir, "two.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare", "--live-points", "2")
	offs := insnOffsets(t, prog, "work", 3)
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	pid := fmt.Sprint(q.cmd.Process.Pid)
	q.step(t, 0)
	kpOK(t, "probe", pid, fmt.Sprintf("p:t/a work+%d", offs[1]), "p:t/b other", "r:t/r work $retval:s64")
	code, _, stderr := kp("probe", pid, fmt.Sprintf("p:t/c work+%d", offs[2]))
	if code != 1 || !strings.Contains(stderr, "every one of the 2 free live points") || !strings.Contains(stderr, "--live-points") {
		t.Errorf("a third entry event: exit %d, %q; want 1 and the pool's size and option", code, stderr)
	}
	code, _, stderr = kp("probe", pid, "r:t/s main $retval:s64")
	if code != 1 || !strings.Contains(stderr, "every one of the 1 free return points") || !strings.Contains(stderr, "--live-points") {
		t.Errorf("a second return event: exit %d, %q; want 1 and the pool's size and option", code, stderr)
	}
	code, _, stderr = kp("probe", pid, "r:t/s other $retval:s64")
	if code != 1 || !strings.Contains(stderr, "p:t/b other added live already") {
		t.Errorf("a return event where an entry event added live is: exit %d, %q; want 1 and why", code, stderr)
	}
	if out := kpOK(t, "probe", tr); strings.Count(out, "\n") != 3 || strings.Contains(out, "t/c") || strings.Contains(out, "t/s") {
		t.Errorf("after the refusals the file lists %q, want t/a, t/b and t/r only", out)
	}
	q.next(t, 1)
	kpOK(t, "probe", tr, "-:t/b", "-:t/r")
	kpOK(t, "probe", pid, fmt.Sprintf("p:t/c work+%d", offs[2]), "r:t/s other $retval:s64")
	q.next(t, 2)
	q.next(t, 3)
	q.finish(t, "sum 39300")
	got := readTrace(t, tr, bin)
	for ev, n := range map[string]int{"a": 175, "c": 75, "s": 75} {
		if g := len(eventLines(got, ev)); g != n {
			t.Errorf("t/%s: %d records, want %d", ev, g, n)
		}
	}

	none := filepath.Join(dir, "none.kp")
	rewriteWith(t, prog, none, nil, "--prepare", "prepare", "--live-points", "0")
	exec.Command(none).Run() // (its trace file, the image described; stdin closed: it ends)
	code, _, stderr = kp("probe", "-b", none, none+".trace", "p:t/b other")
	if code != 1 || !strings.Contains(stderr, "no free live points") {
		t.Errorf("--live-points 0: exit %d, %q; want 1, no free live points", code, stderr)
	}
	code, _, stderr = kp("rewrite", "-o", filepath.Join(dir, "bad.kp"), "--prepare", "prepare", "--live-points", "5000", prog)
	if code == 0 || !strings.Contains(stderr, "--live-points 5000") {
		t.Errorf("--live-points 5000: exit %d, %q; want an error naming it", code, stderr)
	}
}

// TestLiveListState: `kprewrite list TARGET` shows the state of each live event's site
// in the running program: [PENDING] while the program (stopped) has not applied the
// events, then armed; a prepared jump site armed as an int3 (optimize off) without
// [OPTIMIZED], with it again once optimization is back on; [DISARMED] while every
// probe is (disable TARGET all).
func TestLiveListState(t *testing.T) {
	prog := testprog.Build(t, liveFreeSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "state.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "work")
	workAddr, _ := siteOf(t, prog, "work")
	otherAddr, _ := siteOf(t, prog, "other")
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	pid := q.cmd.Process.Pid
	q.step(t, 0)
	if err := q.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	kp("probe", tr, "p:t/n work a=%di:s64", "r:t/r other $retval:s64") // (returns after 2 s, unapplied)
	lines := func() map[string]string {
		t.Helper()
		m := map[string]string{}
		for _, l := range strings.Split(kpOK(t, "list", tr), "\n") {
			for _, fn := range []string{"work", "other"} {
				if strings.Contains(l, fn+"+0x0") && strings.Contains(l, "[LIVE]") {
					m[fn] = l
				}
			}
		}
		return m
	}
	stopped := lines()
	if len(stopped) != 2 {
		t.Fatalf("list, the program stopped: %q, want t/n at work and t/r at other", stopped)
	}
	for fn, l := range stopped {
		if !strings.Contains(l, "[LIVE][PENDING]") || strings.Contains(l, "[OPTIMIZED]") {
			t.Errorf("%s, the program stopped: %q, want [LIVE][PENDING]", fn, l)
		}
	}
	if err := q.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitByte(t, pid, bin, workAddr, 0xe9)
	waitByte(t, pid, bin, otherAddr, 0xcc)
	waitList := func(want func(map[string]string) bool, what string) {
		t.Helper()
		var m map[string]string
		for try := 0; try < 100; try++ {
			if m = lines(); want(m) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("list: %q, want %s", m, what)
	}
	waitList(func(m map[string]string) bool {
		return len(m) == 2 && strings.HasSuffix(m["work"], "[OPTIMIZED][LIVE]") && strings.HasSuffix(m["other"], "[BOOSTED][LIVE]")
	}, "work [OPTIMIZED][LIVE] and other [BOOSTED][LIVE]")
	kpOK(t, "optimize", tr, "off")
	waitByte(t, pid, bin, workAddr, 0xcc)
	waitList(func(m map[string]string) bool { return strings.HasSuffix(m["work"], " [LIVE]") }, "work [LIVE] (an int3)")
	kpOK(t, "optimize", tr, "on")
	waitByte(t, pid, bin, workAddr, 0xe9)
	waitList(func(m map[string]string) bool { return strings.HasSuffix(m["work"], "[OPTIMIZED][LIVE]") }, "work [OPTIMIZED][LIVE]")
	kpOK(t, "disable", tr, "all")
	waitList(func(m map[string]string) bool {
		return strings.Contains(m["work"], "[LIVE][DISARMED]") && strings.Contains(m["other"], "[LIVE][DISARMED]")
	}, "both [LIVE][DISARMED]")
	kpOK(t, "enable", tr, "all")
	waitList(func(m map[string]string) bool {
		return strings.HasSuffix(m["work"], "[OPTIMIZED][LIVE]") && strings.HasSuffix(m["other"], "[BOOSTED][LIVE]")
	}, "both armed again")
	q.next(t, 1)
	q.next(t, 2)
	q.next(t, 3)
	q.finish(t, "sum 39300")
}

// TestLiveProbeReturnGo: a return event added live at a Go function no rewrite
// prepared is refused naming the rule (its return address is never hooked), nothing
// added; an entry event there is taken.
func TestLiveProbeReturnGo(t *testing.T) {
	prog := buildGoProg(t)
	out := filepath.Join(t.TempDir(), "go.kp")
	tr := out + ".trace"
	rewriteWith(t, prog, out, nil, "--prepare", "main.leaf")
	testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
	code, _, stderr := kp("probe", "-b", out, tr, "r:g/r main.fib $retval")
	if code != 1 || !strings.Contains(stderr, "is a Go function") || !strings.Contains(stderr, "return address is never hooked") {
		t.Errorf("r: at a Go function: exit %d, %q; want 1 and the rule", code, stderr)
	}
	if o := kpOK(t, "probe", tr); strings.Contains(o, "g/r") {
		t.Errorf("after the refusal the file lists %q", o)
	}
	kpOK(t, "probe", "-b", out, tr, "p:g/e main.fib n=%ax:s64")
}

// liveSelfPatchSrc rewrites the first two bytes of patched() (nop; nop) into a
// two-byte nop through /proc/self/mem before it says phase 0: code the binary's
// analysis did not see.
const liveSelfPatchSrc = `#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
long patched(long);
__asm__(".text\n.globl patched\n.type patched, @function\npatched:\n\tnop\n\tnop\n\tmov %rdi, %rax\n\tret\n.size patched, .-patched\n");
__attribute__((noinline)) long prepare(long a) { return a - 1; }
int main(void) {
	static const unsigned char nop2[2] = {0x66, 0x90};
	char c;
	long s = 0;
	int fd = open("/proc/self/mem", O_RDWR);
	if (fd < 0 || pwrite(fd, nop2, 2, (long)(void *)patched) != 2)
		return 3;
	close(fd);
	printf("phase 0\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 2;
	for (int i = 0; i < 10; i++)
		s += patched(i);
	printf("sum %ld\n", prepare(s));
	return 0;
}
`

// TestLiveProbeUnplaced: an event at an unprepared site whose bytes in the running
// program are not the binary's (the program patched its own code) is not armed: the
// program says so on its stderr, probe says so, list shows [LIVE][UNPLACED], and the
// program runs its own code.
func TestLiveProbeUnplaced(t *testing.T) {
	prog := testprog.Build(t, liveSelfPatchSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "self.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare")
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	q.step(t, 0)
	code, _, stderr := kp("probe", fmt.Sprint(q.cmd.Process.Pid), "p:t/p patched a=%di:s64")
	if code != 0 || !strings.Contains(stderr, "t/p: the program refused its point") {
		t.Errorf("probe at a site the program changed: exit %d, %q; want 0 and that it is not armed", code, stderr)
	}
	if out := kpOK(t, "list", tr); !strings.Contains(out, "patched+0x0") || !strings.Contains(out, "[LIVE][UNPLACED]") {
		t.Errorf("list: %q, want patched+0x0 [LIVE][UNPLACED]", out)
	}
	q.stdin.Write([]byte{'x'})
	q.stdin.Close()
	q.say(t, "sum 44")
	if err := q.cmd.Wait(); err != nil || !strings.Contains(q.stderr.String(), "cannot be placed") {
		t.Errorf("the program: %v, stderr %q; want it to say the event cannot be placed", err, q.stderr.String())
	}
	if n := len(readTrace(t, tr, bin)); n != 0 {
		t.Errorf("%d records of an event not armed", n)
	}
}

// TestLiveProbeReturnReuse adds and removes return events at two functions four
// threads call, one after the other, through the image's only free return point
// (--live-points 2), which therefore moves between them while the threads run: the
// program computes right throughout, every event is armed, every hit counted is a
// record, and each function's records carry its own call site's return address. (A
// call in flight across a move is TestLiveProbeReturnInFlight's: calls here are too
// short to outlive the removal and the next placement.)
func TestLiveProbeReturnReuse(t *testing.T) {
	prog := testprog.Build(t, liveFreeStressSrc, "c", "-O2", "-pthread")
	bin := filepath.Join(t.TempDir(), "reuse.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare", "--live-points", "2")
	recs, hits, nev := cycleLive(t, bin, tr, 20, func(i int) (string, string) {
		name := fmt.Sprintf("t/r%d", i)
		return name, fmt.Sprintf("r:%s %s $retval:s64", name, []string{"many", "manyCheck"}[i%2])
	})
	// one call site each in loop(): a return recorded under the other function's event
	// (an instance of the point's old place) shows the other return address
	rets := [2]map[string]bool{{}, {}}
	for _, l := range recs {
		var k int
		fmt.Sscanf(l.Event, "r%d", &k)
		ret, _, _ := strings.Cut(strings.TrimPrefix(l.Head, "("), " <- ")
		rets[k%2][ret] = true
	}
	if len(rets[0]) != 1 || len(rets[1]) != 1 {
		t.Errorf("return addresses of many's events %v and of manyCheck's %v, want one each", rets[0], rets[1])
	}
	t.Logf("%d return events added and removed, %d hits recorded", nev, hits)
}
