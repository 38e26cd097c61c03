package tests

// The 2.6 kprobes API's break_handler: a hit of a probe while its own handler runs on
// the thread (the handler calls the probed function) is offered to it; non-zero, the
// hit is taken, else it counts in nmissed (issue 46, item 5).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const breakSrc = `#include <stdio.h>
__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return a * 2; }
int main(void) {
	long s = 0;
	for (long i = 0; i < 10; i++)
		s += work(i);
	printf("sum %ld\n", s);
	return 0;
}
`

const breakHandlers = `#include <kprewrite.h>
extern long work(long);
KPREWRITE_PROGRAM_SYMBOL(work);
static long breaks, hits;
static int brk(struct kprobe *p, struct pt_regs *regs) { breaks++; return regs->di == 7; }
static int pre(struct kprobe *p, struct pt_regs *regs)
{
	hits++;
	if (regs->di == 1) { /* two hits of this probe from its own handler */
		work(7);
		work(8);
	}
	return 0;
}
DEFINE_KPROBE(kp, "work", .pre_handler = pre, .break_handler = brk);
void kprewrite_exit(void) { printk("hits %ld, breaks %ld, nmissed %lu\n", hits, breaks, kp.nmissed); }
`

// TestBreakHandler: work's pre handler calls work twice at its hit with a = 1; each
// nested hit goes to the break_handler, which takes a = 7 and not a = 8: 10 hits, 2
// breaks, 1 missed, on a jump-optimized site and on a single-stepped int3 alike; the
// program's result is the original's.
func TestBreakHandler(t *testing.T) {
	prog := testprog.Build(t, breakSrc, "c", "-O2")
	dir := t.TempDir()
	h := filepath.Join(dir, "brk.c")
	if err := os.WriteFile(h, []byte(breakHandlers), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		flags []string
		kind  string
	}{
		{"optimized", nil, "[OPTIMIZED]"},
		{"int3", []string{"--no-optimize", "--no-boost"}, "k  work+0x0  brk.kp \n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "brk.kp")
			kpOK(t, append([]string{"rewrite", "--handlers", h, "-o", bin}, append(c.flags, prog)...)...)
			if out := kpOK(t, "list", bin); !strings.Contains(out+"\n", c.kind) {
				t.Fatalf("list: %q, want %q", out, c.kind)
			}
			r := testprog.Run(t, testprog.Cmd{Path: bin, Extra: []string{"KPREWRITE_QUIET=1"}})
			if r.Exit != 0 || r.Stdout != "sum 90\n" {
				t.Fatalf("the program: %s", r)
			}
			if !strings.Contains(r.Stderr, "hits 10, breaks 2, nmissed 1\n") {
				t.Errorf("stderr %q: want 10 hits, 2 breaks, 1 missed", r.Stderr)
			}
		})
	}
}
