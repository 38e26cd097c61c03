package tests

// `kprewrite list TARGET` shows the probes C handlers have registered in the running
// program, as the kernel's kprobes/list shows modules' kprobes (issue 46, item 4 and
// 5): by name at a prepared site, at an unprepared one, declared, a jprobe (j).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

var userListSrc = livePhased(`__attribute__((noinline)) long do_work(long a, long b) { return a * 3 + b; }
__attribute__((noinline)) long other(long a) { return a + 1; }
__attribute__((noinline)) long third(long a) { return a ^ 5; }
__attribute__((noinline)) long fourth(long a) { return a - 2; }`,
	`s += do_work(i, 2 * i) + other(i) + third(i) + fourth(i);`)

const userListHandlers = `#include <kprewrite.h>
static struct kprobe kp = {.symbol_name = "do_work"};           /* by name, a prepared site */
static struct kretprobe rp = {.kp.symbol_name = "do_work"};     /* its return, by name */
static struct kprobe off = {.symbol_name = "other", .flags = KPROBE_FLAG_DISABLED};
static struct kprobe free3 = {.symbol_name = "third"};          /* an unprepared site */
static long seen, calls;
static long j_fourth(long a) { seen += a; calls++; jprobe_return(); return 0; }
DEFINE_JPROBE(jp, "fourth", j_fourth);
static int never(struct kprobe *p, struct pt_regs *regs) { return 0; }
DEFINE_KPROBE(unused, "fourth", .pre_handler = never);          /* declared, never registered */
DEFINE_KPROBE(later, "fourth", .pre_handler = never, .flags = KPROBE_FLAG_DISABLED); /* enabled in init */
static int pre(struct kprobe *p, struct pt_regs *regs) { return 0; }
static int ret(struct kretprobe_instance *ri, struct pt_regs *regs) { return 0; }
int kprewrite_init(void) {
	kp.pre_handler = off.pre_handler = free3.pre_handler = pre;
	rp.handler = ret;
	int r = register_kprobe(&kp) | register_kretprobe(&rp) | register_kprobe(&off) | register_kprobe(&free3) | register_jprobe(&jp);
	r |= register_kprobe(&later) | enable_kprobe(&later);
	printk("registered %d\n", r);
	return r;
}
void kprewrite_exit(void) {
	unregister_kprobe(&kp); unregister_kretprobe(&rp); unregister_kprobe(&off); unregister_kprobe(&free3); unregister_jprobe(&jp); unregister_kprobe(&later);
	printk("jprobe: %ld calls, arguments summed %ld\n", calls, seen);
}
`

// TestListUserRegistrations: while the program runs, `list TARGET` shows its C
// handlers' registered probes (a kprobe and a kretprobe by name at a prepared site,
// one registered disabled, one at an unprepared site, a jprobe as j, a declared one
// registered disabled and enabled since) and not a declared probe that was never
// registered; `disable FILE all` marks them all
// [DISABLED]; once the program has unregistered them at its exit, or was killed,
// none is shown. The jprobe's entry saw every call's argument.
func TestListUserRegistrations(t *testing.T) {
	dir := t.TempDir()
	prog := testprog.Build(t, userListSrc, "c", "-O2")
	h := filepath.Join(dir, "h.c")
	if err := os.WriteFile(h, []byte(userListHandlers), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ul.kp")
	tr := bin + ".trace"
	kpOK(t, "rewrite", "--prepare", "do_work", "--prepare", "other", "--handlers", h, "-o", bin, prog)
	if out := kpOK(t, "list", bin); !regexp.MustCompile(`(?m)^[0-9a-f]+  j  fourth\+0x0 `).MatchString(out) {
		t.Errorf("list %s: no jprobe line (j) at fourth:\n%s", bin, out)
	}
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	want := []string{
		`  k  do_work\+0x0  ul\.kp \[OPTIMIZED\]$`,
		`  r  do_work\+0x0  ul\.kp \[OPTIMIZED\]$`,
		`  k  other\+0x0  ul\.kp \[OPTIMIZED\]\[DISABLED\]$`,
		`  k  third\+0x0  ul\.kp \[BOOSTED\]$`,
		`  k  fourth\+0x0  ul\.kp \[OPTIMIZED\]$`, // declared registered disabled, enabled since
		`  j  fourth\+0x0  ul\.kp \[OPTIMIZED\]$`,
	}
	checkList := func(when string, want []string) {
		t.Helper()
		out := strings.TrimSpace(kpOK(t, "list", tr))
		lines := strings.Split(out, "\n")
		if out == "" {
			lines = nil
		}
		if len(lines) != len(want) {
			t.Fatalf("%s: list %s:\n%s\nwant %d lines", when, tr, out, len(want))
		}
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^[0-9a-f]{16}` + w).MatchString(out) {
				t.Errorf("%s: list %s has no line like %q:\n%s", when, tr, w, out)
			}
		}
	}
	checkList("registered", want)
	kpOK(t, "disable", tr, "all")
	var off []string
	for _, w := range want {
		off = append(off, strings.Replace(strings.Replace(w, `\[DISABLED\]`, "", 1), `\]$`, `\]\[DISABLED\]$`, 1))
	}
	checkList("disable all", off)
	kpOK(t, "enable", tr, "all")
	checkList("enable all", want)
	p.next(t, 1)
	p.next(t, 2)
	p.next(t, 3)
	orig := testprog.Run(t, testprog.Cmd{Path: prog, Stdin: "xxxx"})
	p.stdin.Write([]byte{'x'})
	p.stdin.Close()
	if !p.lines.Scan() || !strings.HasSuffix(orig.Stdout, "\n"+p.lines.Text()+"\n") {
		t.Errorf("the program's result: %q, the original's %q", p.lines.Text(), orig.Stdout)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("the program: %v, stderr %q", err, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "jprobe: 175 calls, arguments summed 6475") {
		t.Errorf("stderr %q: want the jprobe's entry called 175 times with i = 0..99, 0..49, 0..24", p.stderr.String())
	}
	checkList("after the exit", nil)

	// killed before it could unregister: its registrations are not shown either
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	q.step(t, 0)
	checkList("a second run", want)
	q.cmd.Process.Signal(syscall.SIGKILL)
	q.cmd.Wait()
	checkList("killed", nil)
}

const userExecSrc = `#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long do_work(long a, long b) { return a * 3 + b; }
int main(void) {
	char c;
	printf("ready %ld\n", do_work(1, 2));
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 2;
	execl("/bin/sleep", "sleep", "30", (char *)0);
	return 3;
}
`

// TestListUserRegistrationsExec: a program whose C handler registered a probe, then
// exec'd another program (same pid, no kprewrite_exit): `list TARGET` no longer shows
// the registration (the pid no longer maps the trace file).
func TestListUserRegistrationsExec(t *testing.T) {
	if _, err := os.Stat("/bin/sleep"); err != nil {
		t.Skip("no /bin/sleep")
	}
	dir := t.TempDir()
	prog := testprog.Build(t, userExecSrc, "c", "-O2")
	h := filepath.Join(dir, "h.c")
	src := "#include <kprewrite.h>\nstatic struct kprobe kp = {.symbol_name = \"do_work\"};\n" +
		"static int pre(struct kprobe *p, struct pt_regs *regs) { return 0; }\n" +
		"int kprewrite_init(void) { kp.pre_handler = pre; return register_kprobe(&kp); }\n" +
		"void kprewrite_exit(void) { unregister_kprobe(&kp); }\n"
	if err := os.WriteFile(h, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ex.kp")
	tr := bin + ".trace"
	kpOK(t, "rewrite", "--prepare", "do_work", "--handlers", h, "-o", bin, prog)
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.say(t, "ready 5")
	if out := kpOK(t, "list", tr); !regexp.MustCompile(`(?m)^[0-9a-f]{16}  k  do_work\+0x0  ex\.kp \[OPTIMIZED\]$`).MatchString(out) {
		t.Fatalf("list %s before the exec: %q, want do_work's kprobe", tr, out)
	}
	p.stdin.Write([]byte{'x'})
	exe := ""
	for try := 0; try < 500 && exe != "/usr/bin/sleep" && exe != "/bin/sleep"; try++ {
		time.Sleep(2 * time.Millisecond)
		exe, _ = os.Readlink(fmt.Sprintf("/proc/%d/exe", p.cmd.Process.Pid))
	}
	if exe != "/usr/bin/sleep" && exe != "/bin/sleep" {
		t.Fatalf("the program did not exec sleep (exe %q)", exe)
	}
	if out := strings.TrimSpace(kpOK(t, "list", tr)); out != "" {
		t.Errorf("list %s after the exec: %q, want nothing", tr, out)
	}
}
