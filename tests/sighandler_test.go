package tests

// Events hit in a signal handler that interrupted a handler of ours on the same thread
// (the program's SIGCHLD or SIGALRM handler, while its main thread is inside an event's
// detour): the kernel's uprobes record them, since the program's handler runs after the
// probe's; so does kprewrite for an event alone at a jump-optimized point. Before,
// they were missed (a hit inside one of our handlers), which the C library corpus
// showed as a few missed waitpid and __errno_location calls of a SIGCHLD handler.

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// sigEventsSrc calls work() in a tight loop while an interval timer's SIGALRM handler
// calls tick(); it stops after a number of ticks (work, not time, bounds the run) and
// prints how many calls of each it made.
const sigEventsSrc = `
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
static volatile long ticks;
__attribute__((noinline)) long tick(long n) { __asm__ volatile("" ::: "memory"); return n; }
__attribute__((noinline)) long work(long a) { __asm__ volatile("" ::: "memory"); return a + 1; }
static void on_alarm(int sig) { int e = errno; (void)sig; tick(++ticks); errno = e; }
int main(void) {
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, 0);
	struct itimerval it = {{0, 200}, {0, 200}};
	setitimer(ITIMER_REAL, &it, 0);
	long calls = 0, s = 0;
	while (ticks < 300)
		s += work(calls++);
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, 0);
	printf("work %ld tick %ld sum %ld\n", calls, ticks, s);
	return 0;
}
`

func TestEventsInSignalHandlers(t *testing.T) {
	prog := testprog.Build(t, sigEventsSrc, "c", "-O2")
	dir := t.TempDir()
	out := filepath.Join(dir, "sig.kp")
	// work's filter refuses all but its first calls: its handler still runs each time
	// (where the signals land), with no record to write
	rewriteWith(t, prog, out, []string{"p:s/work work a=%di", "p:s/tick tick n=%di"}, "--filter", "s/work:a < 3")
	if l := listFlags(t, out); !strings.Contains(l["work+0x0"], "[OPTIMIZED]") || !strings.Contains(l["tick+0x0"], "[OPTIMIZED]") {
		t.Fatalf("want both probes jump-optimized: %v", l)
	}
	tr := filepath.Join(dir, "sig.trace")
	res := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + tr}})
	m := regexp.MustCompile(`^work (\d+) tick (\d+) sum`).FindStringSubmatch(res.Stdout)
	if res.Exit != 0 || m == nil {
		t.Fatalf("rewritten: %s", res)
	}
	calls, _ := strconv.ParseUint(m[1], 10, 64)
	ticks, _ := strconv.ParseUint(m[2], 10, 64)
	prof := profile(t, tr, out)
	if got := prof["work"]; got != [2]uint64{calls, 0} {
		t.Errorf("work: %d hits, %d missed; the program made %d calls", got[0], got[1], calls)
	}
	if got := prof["tick"]; got != [2]uint64{ticks, 0} {
		t.Errorf("tick (the SIGALRM handler's): %d hits, %d missed; the handler ran %d times", got[0], got[1], ticks)
	}
	// the handler's calls, in order, are all in the trace
	var n uint64
	for _, l := range readTrace(t, tr, out) {
		if l.Event == "tick" {
			n++
			if want := " n=0x" + strconv.FormatUint(n, 16); l.Args != want {
				t.Fatalf("tick record %d: %q, want %q", n, l.Args, want)
			}
		}
	}
	if n != ticks {
		t.Errorf("%d tick records, want %d", n, ticks)
	}
	if _, err := os.Stat(tr); err != nil {
		t.Fatal(err)
	}
}
