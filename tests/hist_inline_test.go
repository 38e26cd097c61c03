package tests

// Inline histogram updates (trampolines.InlineHist, "Inline histograms" in
// kprewrite_abi.h): a switched-off event whose one trigger is a plain histogram is
// added to inside its detour when the key already has its entry. The histograms must be
// exactly those the runtime's own path makes: the same program rewritten so that the
// runtime updates them (the events switched on, and int3 probes) is the reference.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// inlineHistSrc calls w1..w6, each with arguments of every size and signedness in the
// six argument registers, from four threads, each a deterministic sequence of its own,
// so the histograms do not depend on the threads' interleaving. Built without PIE, so
// that the return address (the word at %sp, read by the events too) is the same in
// every run.
const inlineHistSrc = `
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#define W(n) __attribute__((noinline)) long w##n(long a, int b, short c, signed char d, unsigned u, long e, long g) \
	{ __asm__ volatile("" ::: "memory"); return a + b + c + d + u + e + g + n; }
W(1) W(2) W(3) W(4) W(5) W(6)
static int n;
static void *run(void *arg) {
	unsigned long x = 0x9E3779B97F4A7C15ull * ((unsigned long)arg + 1);
	long s = 0;
	for (int i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		long a = (long)(x % 100000) >> (x >> 60);
		int b = (int)((x >> 8) % 61) - 30;
		short c = (short)((x >> 16) % 200) - 100;
		signed char d = (signed char)(x >> 24) % 5;
		unsigned u = (unsigned)(x >> 32) % 7;
		long e = (long)(x >> 40) - (1l << 23);
		long g = (long)((x >> 33) % 9) - 4;
		s += w1(a, b, c, d, u, e, g) + w2(a, b, c, d, u, e, g) + w3(a, b, c, d, u, e, g) +
		     w4(a, b, c, d, u, e, g) + w5(a, b, c, d, u, e, g) + w6(a, b, c, d, u, e, g);
	}
	return (void *)s;
}
int main(int argc, char **argv) {
	n = argc > 1 ? atoi(argv[1]) : 1000;
	pthread_t t[4];
	for (long k = 0; k < 4; k++) pthread_create(&t[k], 0, run, (void *)k);
	long s = 0;
	for (int k = 0; k < 4; k++) { void *r; pthread_join(t[k], &r); s += (long)r; }
	printf("%ld\n", s);
	return 0;
}
`

// inlineHistEvents and their histograms: the keys and values in pushed registers
// (%rdi %rsi %rdx %rcx), others (%r8 %r9), the word at %sp, signed and unsigned of 1,
// 2, 4 and 8 bytes, .log2 keys of positive and negative numbers.
var inlineHistEvents = []struct{ ev, hist string }{
	{"w1", "hist:keys=a.log2:vals=b,c,d,u"},
	{"w2", "hist:keys=b:vals=e,ra"},
	{"w3", "hist:keys=d:vals=a,c"},
	{"w4", "hist:keys=c.hex:vals=u,b"},
	{"w5", "hist:keys=ra16:vals=e"},
	{"w6", "hist:keys=e.log2:vals=d,ra16"},
}

func inlineHistRewrite(t *testing.T, prog, out string, flags ...string) {
	t.Helper()
	var defs []string
	for _, e := range inlineHistEvents {
		defs = append(defs, fmt.Sprintf("p:ih/%s %s a=%%di b=%%si:s32 c=%%dx:s16 d=%%cx:s8 u=%%r8:u32 e=%%r9:s64 ra=+0(%%sp):u64 ra16=+0(%%sp):u16", e.ev, e.ev))
		flags = append(flags, "--trigger", "ih/"+e.ev+":"+e.hist)
	}
	rewriteWith(t, prog, out, defs, flags...)
}

// TestInlineHist: the inline updates give the runtime's histograms exactly, under four
// threads at once, and handle the first hit of each key (the runtime adds its entry)
// and a change at run time (the event switched on: records; the table paused: no
// update) by going to the full path.
func TestInlineHist(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // switched between runs: the second run adds to the file
	prog := testprog.Build(t, inlineHistSrc, "c", "-O2", "-pthread", "-no-pie")
	const n = 4000
	want := testprog.MustRun(t, prog, strconv.Itoa(n))
	var disable []string
	for _, e := range inlineHistEvents {
		disable = append(disable, "--disable", "ih/"+e.ev)
	}
	dir := t.TempDir()
	kinds := []struct {
		name   string
		flags  []string
		inline bool
	}{
		{"inline", disable, true},
		{"runtime, events on", nil, false},
		{"runtime, int3", append([]string{"--no-optimize"}, disable...), false},
	}
	var ref []histBlock
	for _, k := range kinds {
		out := filepath.Join(dir, strings.NewReplacer(" ", "", ",", "-").Replace(k.name))
		inlineHistRewrite(t, prog, out, k.flags...)
		for _, e := range inlineHistEvents {
			if got := hasSymbolPrefix(t, out, "kprewrite_hist."+e.ev+"+"); got != k.inline {
				t.Fatalf("%s: an inline update of %s: %v", k.name, e.ev, got)
			}
		}
		if got := testprog.MustRun(t, out, strconv.Itoa(n)); got != want {
			t.Fatalf("%s: the rewritten program printed %q, the original %q", k.name, got, want)
		}
		bs := histOf(t, out+".trace")
		if len(bs) != len(inlineHistEvents) {
			t.Fatalf("%s: %d histograms, want %d", k.name, len(bs), len(inlineHistEvents))
		}
		for i, b := range bs {
			if b.Hits != 4*n || b.Dropped != 0 {
				t.Errorf("%s: %s: %d hits, %d dropped, want %d and 0", k.name, b.Info, b.Hits, b.Dropped, 4*n)
			}
			if ref != nil && (b.Info != ref[i].Info || !reflect.DeepEqual(b.Entries, ref[i].Entries) || b.Total != ref[i].Total) {
				t.Errorf("%s: %s differs from the inline one's:\n%v\n%v", k.name, b.Info, b.Entries, ref[i].Entries)
			}
		}
		if ref == nil {
			ref = bs
		}
	}

	// run-time changes: w1 switched on records (the inline code sees its switch), w2's
	// table paused stays as it is (the inline code sees the paused bit)
	out := filepath.Join(dir, "inline")
	tr := out + ".trace"
	if code, _, e := kp("enable", tr, "ih/w1"); code != 0 {
		t.Fatalf("kprewrite enable: %s", e)
	}
	if code, _, e := kp("trigger", tr, "ih/w2", "hist:keys=b:vals=e,ra:pause"); code != 0 {
		t.Fatalf("kprewrite trigger ...:pause: %s", e)
	}
	testprog.MustRun(t, out, strconv.Itoa(n))
	w1 := 0
	for _, l := range readTrace(t, tr) {
		if l.Event == "w1" {
			w1++
		} else {
			t.Fatalf("a record of %s, switched off", l.Event)
		}
	}
	bs := histOf(t, tr)
	if w1 != 4*n || bs[0].Hits != 8*n || bs[1].Hits != 4*n || !reflect.DeepEqual(bs[1].Entries, ref[1].Entries) || bs[2].Hits != 8*n {
		t.Errorf("after w1 switched on and w2 paused: %d records of w1 (want %d), hits %d %d %d (want %d %d %d)",
			w1, 4*n, bs[0].Hits, bs[1].Hits, bs[2].Hits, 8*n, 4*n, 8*n)
	}
}

// TestInlineHistTaken: the inline path really takes the hits: in a run of the inline
// rewrite, the runtime's detour entry (kprewrite_rt_optcall, counted by gdb) runs for
// the first hit of each key and a few more, not for every hit.
func TestInlineHistTaken(t *testing.T) {
	testprog.Need(t, "gdb")
	for _, pie := range []string{"-no-pie", "-pie"} { // the count's inline rseq form, and its call form
		t.Run(pie, func(t *testing.T) {
			prog := testprog.Build(t, inlineHistSrc, "c", "-O2", "-pthread", pie)
			var flags []string
			for _, e := range inlineHistEvents {
				flags = append(flags, "--disable", "ih/"+e.ev)
			}
			out := filepath.Join(t.TempDir(), "inline")
			inlineHistRewrite(t, prog, out, flags...)
			const n = 2000
			cmd := exec.Command("gdb", "-batch", "-nx", "-ex", "set pagination off", "-ex", "set startup-with-shell off",
				"-ex", "break kprewrite_rt_optcall", "-ex", "ignore 1 100000000", "-ex", "run", "-ex", "info breakpoints",
				"--args", out, strconv.Itoa(n))
			cmd.Env = append(cmd.Environ(), "KPREWRITE_TRACE="+out+".gdb.trace")
			b, err := cmd.CombinedOutput()
			m := regexp.MustCompile(`breakpoint already hit (\d+) time`).FindSubmatch(b)
			if err != nil || m == nil {
				t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(b), 3000))
			}
			calls, _ := strconv.Atoi(string(m[1]))
			keys := uint64(0)
			hits := uint64(0)
			for _, h := range histOf(t, out+".gdb.trace") {
				keys += h.Total
				hits += h.Hits
			}
			t.Logf("%d hits, %d keys, %d runtime calls", hits, keys, calls)
			// the first hit of each key (of each thread, when their first hits race), and
			// every hit of the few keys whose bucket another key took first
			if hits != uint64(len(inlineHistEvents))*4*n || uint64(calls) >= hits/10 {
				t.Errorf("%d hits, %d keys, %d runtime calls: the inline path took too few", hits, keys, calls)
			}
			// and the hits are counted (the count-only detour after the inline update)
			for ev, c := range profile(t, out+".gdb.trace") {
				if c[0] != 4*n || c[1] != 0 {
					t.Errorf("profile: %s %d hits %d missed, want %d and 0", ev, c[0], c[1], 4*n)
				}
			}
		})
	}
}
