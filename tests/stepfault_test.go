package tests

// The fault_handler of a C handler's struct kprobe is called for a fault of the probed
// instruction while it is single-stepped (kprobes.txt of 2.6): a program whose probed
// load faults every third call and recovers with its own SIGSEGV handler and
// siglongjmp runs as the original does when the fault_handler returns 0, and sees the
// fault at its own instruction; one returning 1 after moving ip past the load handles it.
// A struct kprobe registered by name at a prepared site has its fault_handler called too.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// stepFaultSrc loads through a bad pointer every third call of load(); its SIGSEGV
// handler notes where the fault was and siglongjmps back.
const stepFaultSrc = `#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

static sigjmp_buf jb;
static volatile unsigned long fault_ip;

static void onsegv(int sig, siginfo_t *si, void *ctx)
{
	(void)sig; (void)si;
	fault_ip = ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
	siglongjmp(jb, 1);
}

__attribute__((noinline)) long load(long *p) { return *p; }

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 30;
	struct sigaction sa = {0};
	sa.sa_sigaction = onsegv;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, 0);
	long x = 5, sum = 0;
	int faults = 0, elsewhere = 0;
	for (volatile int i = 0; i < n; i++) {
		long *p = i % 3 == 0 ? (long *)8 : &x;
		if (sigsetjmp(jb, 1) == 0) {
			sum += load(p);
		} else {
			faults++;
			elsewhere += fault_ip != (unsigned long)load;
		}
	}
	printf("sum=%ld faults=%d elsewhere=%d\n", sum, faults, elsewhere);
	return 0;
}
`

// stepFaultHandlers counts load's hits and the faults its fault_handler sees (trap 14 at
// the probed instruction, which is mov (%rdi),%rax: 3 bytes); with skip it handles them:
// load returns -1.
func stepFaultHandlers(skip bool) string {
	handle := "return 0;"
	if skip {
		handle = "regs->ax = (unsigned long)-1; regs->ip += 3; return 1;"
	}
	return fmt.Sprintf(`#include <kprewrite.h>
static int pres, faults, bad;
static int pre(struct kprobe *p, struct pt_regs *regs) { (void)p; (void)regs; pres++; return 0; }
static int fault(struct kprobe *p, struct pt_regs *regs, int trapnr)
{
	faults++;
	if (trapnr != 14 || regs->ip != (unsigned long)p->addr || regs->di != 8)
		bad++;
	%s
}
DEFINE_KPROBE(kp, "load", .pre_handler = pre, .fault_handler = fault);
void kprewrite_exit(void) { pr_info("pres=%%d faults=%%d bad=%%d\n", pres, faults, bad); }
`, handle)
}

// stepFaultRegistered is stepFaultHandlers' counting with a plain struct kprobe
// registered by name in kprewrite_init, at a prepared site.
const stepFaultRegistered = `#include <kprewrite.h>
static int pres, faults, bad;
static int pre(struct kprobe *p, struct pt_regs *regs) { (void)p; (void)regs; pres++; return 0; }
static int fault(struct kprobe *p, struct pt_regs *regs, int trapnr)
{
	faults++;
	if (trapnr != 14 || regs->ip != (unsigned long)p->addr || regs->di != 8)
		bad++;
	return 0;
}
static struct kprobe kp = {.symbol_name = "load", .pre_handler = pre, .fault_handler = fault};
int kprewrite_init(void) { return register_kprobe(&kp); }
void kprewrite_exit(void) { unregister_kprobe(&kp); pr_info("pres=%d faults=%d bad=%d\n", pres, faults, bad); }
`

func TestHandlersStepFault(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, stepFaultSrc, "c", "-O2")
	orig := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"30"}})
	if orig.Exit != 0 || strings.TrimSpace(orig.Stdout) != "sum=100 faults=10 elsewhere=0" {
		t.Fatalf("the original: %s", orig)
	}
	for _, m := range []struct {
		name  string
		flags []string
	}{
		{"tf", []string{"--no-optimize", "--no-boost"}},
		{"int3", []string{"--no-optimize", "--no-boost", "--single-step", "int3"}},
		{"registered", []string{"--no-optimize", "--no-boost", "--single-step", "int3", "--prepare", "load"}},
	} {
		for _, skip := range []bool{false, true} {
			registered := m.name == "registered"
			if registered && skip {
				continue
			}
			t.Run(fmt.Sprintf("%s/skip=%v", m.name, skip), func(t *testing.T) {
				dir := t.TempDir()
				h := filepath.Join(dir, "h.c")
				src := stepFaultHandlers(skip)
				if registered {
					src = stepFaultRegistered
				}
				if err := os.WriteFile(h, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(dir, "sf.kp")
				args := append([]string{"rewrite", "--handlers", h, "-o", out}, m.flags...)
				if code, stdout, stderr := kp(append(args, prog)...); code != 0 {
					t.Fatalf("rewrite: %s%s", stdout, stderr)
				}
				env := []string{"KPREWRITE_TRACE="}
				if registered { // (armed by the live-probe thread, which needs a trace file)
					env = []string{"KPREWRITE_QUIET=1"}
				} else {
					checkKinds(t, out, map[string]string{"kp": "k"})
				}
				r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"30"}, Extra: env})
				want, wantExit := orig.Stdout, "pres=30 faults=10 bad=0"
				if skip { // handled: load returned -1 ten times, the program saw no fault
					want = "sum=90 faults=0 elsewhere=0\n"
				}
				if r.Exit != 0 || r.Stdout != want || !strings.Contains(r.Stderr, wantExit) {
					t.Fatalf("run: %s\nwant stdout %q and %q on stderr", r, want, wantExit)
				}
			})
		}
	}
}
