package tests

// End-to-end tests of C handlers (`kprewrite rewrite --handlers FILE.c`): testdata/handled.c
// is compiled here and rewritten with testdata/handlers.c in each probe mode (k, b and o
// for the kprobes, r, rb and ro for the kretprobe), alone and together with an event
// definition at the same site, then run next to the original: the program's output shows
// the handlers' effects (registers seen and changed, redirection, missed re-entry, run-time
// disable/enable, return values injected, instance data), kprewrite_exit's report shows
// the counters, `kprewrite list` the kinds, `kprewrite trace` the trace_printk line. Bad
// handler files give a clear error and no output file. The examples of examples/ run with
// the one command docs/handlers.md gives (examples/run.sh).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// handledWant is what `handled all` prints when the handlers run (see handlers.c).
var handledWant = []string{
	"observe add=13 sub=7 seen=10003,10,10003",
	"change add=110 sub=-90 seen=10003,10,10003",
	"redirect add=13 sub=-7 seen=10003,10,10003",
	"reenter add=13 sub=7 seen=10003,10,42",
	"disable add=13 sub=7 seen=10003,10,0",
	"disabled add=13 sub=7 seen=0,0,10003",
	"enable add=13 sub=7 seen=0,0,0",
	"enabled add=13 sub=7 seen=10003,10,10003",
	"sum6=21",
	"inject=1006",
	"sum2=3",
}

// handledPlain is what it prints without probes.
var handledPlain = []string{
	"observe add=13 sub=7 seen=0,0,0",
	"change add=13 sub=7 seen=0,0,0",
	"redirect add=13 sub=7 seen=0,0,0",
	"reenter add=13 sub=7 seen=0,0,0",
	"disable add=13 sub=7 seen=0,0,0",
	"disabled add=13 sub=7 seen=0,0,0",
	"enable add=13 sub=7 seen=0,0,0",
	"enabled add=13 sub=7 seen=0,0,0",
	"sum6=21",
	"inject=21",
	"sum2=3",
}

func handledSource(t *testing.T) (prog, src string) {
	t.Helper()
	b, err := os.ReadFile("testdata/handled.c")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("testdata/handlers.c")
	if err != nil {
		t.Fatal(err)
	}
	return string(b), abs
}

func TestHandlersModes(t *testing.T) {
	testprog.Need(t, "gcc")
	src, handlers := handledSource(t)
	for _, m := range []struct {
		name    string
		flags   []string
		add     string // kind of kp_add (it has a post handler: single-stepped, k)
		sub     string // kind of kp_sub
		sum     string // kind of rp_sum
		subOpt  string // kp_sub.flags: KPROBE_FLAG_OPTIMIZED (4) on an o site
		link    []string
		withDef bool // an event definition on sub2 as well
	}{
		{"k", []string{"--no-optimize", "--no-boost"}, "k", "k", "r", "0", nil, false},
		{"b", []string{"--no-optimize"}, "k", "b", "rb", "0", nil, false},
		{"o", nil, "k", "o", "ro", "4", nil, false},
		{"o-static", nil, "k", "o", "ro", "4", []string{"-static"}, false},
		{"o-mixed", nil, "k", "o", "ro", "4", []string{"-no-pie"}, true},
		{"b-mixed", []string{"--no-optimize"}, "k", "b", "rb", "0", nil, true},
	} {
		t.Run(m.name, func(t *testing.T) {
			prog := testprog.Build(t, src, "c", append([]string{"-O2"}, m.link...)...)
			out := filepath.Join(t.TempDir(), "handled.kp")
			args := append([]string{"rewrite", "--handlers", handlers, "-o", out}, m.flags...)
			if m.withDef {
				args = append(args, "-e", "p:kpw/sub sub2 a=%di:s64 b=%si:s64")
			}
			code, stdout, stderr := kp(append(args, prog)...)
			if code != 0 {
				t.Fatalf("kprewrite %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
			}
			// the kinds, as `kprewrite list` prints them
			code, list, stderr := kp("list", out)
			if code != 0 {
				t.Fatalf("list: %s", stderr)
			}
			for sym, kind := range map[string]string{"add2+0x0": m.add, "sub2+0x0": m.sub, "sum+0x0": m.sum} {
				re := regexp.MustCompile(`(?m)^[0-9a-f]+\s+(\S+)\s+` + regexp.QuoteMeta(sym) + `\s`)
				var kinds []string
				for _, mm := range re.FindAllStringSubmatch(list, -1) {
					kinds = append(kinds, mm[1])
				}
				wantKind := "k"
				if strings.HasPrefix(kind, "r") {
					wantKind = "r"
				}
				if len(kinds) == 0 || kinds[0] != wantKind {
					t.Errorf("list: %s is %v, want %s:\n%s", sym, kinds, wantKind, list)
				}
			}
			checkKinds(t, out, map[string]string{"kp_add": m.add, "kp_sub": m.sub, "rp_sum": m.sum})

			orig := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"all"}})
			if got := strings.Split(strings.TrimSpace(orig.Stdout), "\n"); strings.Join(got, "\n") != strings.Join(handledPlain, "\n") {
				t.Fatalf("original prints:\n%s", orig.Stdout)
			}
			trace := filepath.Join(t.TempDir(), "handled.trace")
			r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"all"}, Extra: []string{"KPREWRITE_TRACE=" + trace}})
			if r.Exit != 0 {
				t.Fatalf("rewritten: %s", r)
			}
			sameLines(t, strings.Split(strings.TrimSpace(r.Stdout), "\n"), handledWant)
			for _, want := range []string{
				"exit: add_pre=6 add_post=6 sub_pre=8 add_faults=0 bad=0 add_nmissed=1\n",
				"exit: entries=11 returns=11 data_bad=0 rp_nmissed=6 maxactive=4 flags=0," + m.subOpt + "\n",
			} {
				if !strings.Contains(r.Stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
				}
			}
			// trace_printk's line, and the event's lines when there is one
			code, text, stderr := kp("trace", "--no-header", "-b", out, trace)
			if code != 0 || stderr != "" {
				t.Fatalf("trace: exit %d: %s", code, stderr)
			}
			if !regexp.MustCompile(`(?m)^\s*handled\.kp-\d+\s+\[\d+\]\s+\d+\.\d+: pre_sub: sub2\(10, 3\) from handled\.kp$`).MatchString(text) {
				t.Errorf("trace lacks the trace_printk line:\n%s", text)
			}
			if m.withDef {
				// the handler probe was declared after the -e definition, so it runs
				// first (the newest first, as the kernel runs aggregated probes): its
				// register change shows in the event, and the call it redirects skips
				// the event, as a non-zero pre_handler skips the rest in the kernel
				if n := strings.Count(text, " sub: ("); n != 7 {
					t.Errorf("%d event lines, want 7:\n%s", n, text)
				}
				if strings.Count(text, "a=10 b=3\n") != 6 || strings.Count(text, "a=10 b=100\n") != 1 {
					t.Errorf("event lines are not six a=10 b=3 and one a=10 b=100:\n%s", text)
				}
			}
			// profile: hits and misses per handler probe
			p := profile(t, trace, out)
			if p["kp_add"] != [2]uint64{6, 1} || p["kp_sub"] != [2]uint64{8, 0} || p["rp_sum"] != [2]uint64{11, 6} {
				t.Errorf("profile %v", p)
			}
		})
	}
}

// checkKinds reads `kprewrite list -v` and checks the kind of each handler probe.
func checkKinds(t *testing.T, bin string, want map[string]string) {
	t.Helper()
	code, list, stderr := kp("list", "-v", bin)
	if code != 0 {
		t.Fatalf("list -v: %s", stderr)
	}
	for name, kind := range want {
		line := ""
		for _, l := range strings.Split(list, "\n") {
			if strings.Contains(l, "handlers/"+name+" ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("list -v has no handlers/%s:\n%s", name, list)
			continue
		}
		boosted := strings.Contains(line, "[BOOSTED]")
		optimized := strings.Contains(line, "[OPTIMIZED]")
		got := map[bool]string{true: "b", false: "k"}[boosted]
		if optimized {
			got = "o"
		}
		if strings.HasPrefix(kind, "r") {
			got = "r" + strings.TrimPrefix(got, "k")
		}
		if got != kind {
			t.Errorf("handlers/%s is %s, want %s: %s", name, got, kind, line)
		}
	}
}

func TestHandlersFault(t *testing.T) {
	testprog.Need(t, "gcc")
	src, handlers := handledSource(t)
	prog := testprog.Build(t, src, "c", "-O2")
	out := filepath.Join(t.TempDir(), "handled.kp")
	if code, stdout, stderr := kp("rewrite", "--handlers", handlers, "-o", out, prog); code != 0 {
		t.Fatalf("rewrite: %s%s", stdout, stderr)
	}
	r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"fault"}, Extra: []string{"KPREWRITE_TRACE="}})
	if r.Exit != 0 || strings.TrimSpace(r.Stdout) != "fault add=3 again=4" {
		t.Fatalf("run: %s", r)
	}
	for _, want := range []string{
		"fault_add: add2 trap 14\n",
		"kprewrite: a C handler faulted: SIGSEGV (trap 14, address 0x8)",
		"in the pre_handler of the probe at add2; the handler is abandoned and the program goes on\n",
		"add_faults=1",
	} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.Stderr)
		}
	}
}

func TestHandlersBadFiles(t *testing.T) {
	testprog.Need(t, "gcc")
	src, _ := handledSource(t)
	prog := testprog.Build(t, src, "c", "-O2")
	dir := t.TempDir()
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"syntax", "#include <kprewrite.h>\nstatic int pre(struct kprobe *p, struct pt_regs *r)\n{\n\treturn 0\n}\nDEFINE_KPROBE(kp, \"add2\", .pre_handler = pre);\n",
			[]string{"syntax.c:4:", "error: expected ';'"}},
		{"libc", "#include <kprewrite.h>\nint printf(const char *, ...);\nstatic int pre(struct kprobe *p, struct pt_regs *r) { printf(\"hi\\n\"); return 0; }\n" +
			"DEFINE_KPROBE(kp, \"add2\", .pre_handler = pre);\n",
			[]string{"libc.c: calls or uses printf, which is not available to handlers"}},
		{"nosymbol", "#include <kprewrite.h>\nDEFINE_KPROBE(kp, \"no_such_function\");\n",
			[]string{"nosymbol.c:2 (kp): bad probe definition", "Invalid probed address or symbol (no symbol no_such_function in"}},
		{"noextern", "#include <kprewrite.h>\nextern int nope;\nKPREWRITE_PROGRAM_SYMBOL(nope);\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { return nope; }\nDEFINE_KPROBE(kp, \"add2\", .pre_handler = pre);\n",
			[]string{"nope", "not found in"}},
		{"notinfunc", "#include <kprewrite.h>\nDEFINE_KRETPROBE(rp, \"add2+3\");\n", []string{"notinfunc.c:2 (rp):", "function entry"}},
		// before: a warning, then the rewritten program died of SIGSEGV at the first hit
		{"bigstack", "#include <kprewrite.h>\nstatic int pre(struct kprobe *p, struct pt_regs *r)\n{ volatile char b[1 << 20]; b[r->di & 0xfffff] = 1; (void)p; return b[9]; }\n" +
			"DEFINE_KPROBE(kp, \"add2\", .pre_handler = pre);\n",
			[]string{"bigstack.c:2: handler function pre needs 10485", "more than the 8192 a handler may use"}},
		{"recursion", "#include <kprewrite.h>\nstatic __attribute__((noinline)) long depth(long n) { return n > 1 ? depth(n - 1) + depth(n - 2) : n; }\n" +
			"static int pre(struct kprobe *p, struct pt_regs *r) { (void)p; return depth((long)r->di) == 3; }\n" +
			"DEFINE_KPROBE(kp, \"add2\", .pre_handler = pre);\n",
			[]string{"recursion.c:3: handler function pre has no stack bound: it can recurse without bound: depth → depth"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := filepath.Join(dir, c.name+".c")
			if err := os.WriteFile(h, []byte(c.src), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, c.name+".kp")
			code, stdout, stderr := kp("rewrite", "--handlers", h, "-o", out, prog)
			if code != 1 {
				t.Errorf("exit %d, want 1\n%s%s", code, stdout, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("output file exists after the error: %v", err)
			}
			if entries, _ := filepath.Glob(filepath.Join(dir, "*.kp*")); len(entries) != 0 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

// TestHandlersExamples runs each example of examples/ with the one command its README
// gives (sh examples/run.sh NAME), with KPREWRITE naming a kprewrite built here.
func TestHandlersExamples(t *testing.T) {
	testprog.Need(t, "gcc", "go", "sh")
	bin := filepath.Join(t.TempDir(), "kprewrite")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/kprewrite").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"kprobe", []string{
			"kprobe_init: Planted kprobe at 0000",
			"handler_pre: <handle_request> p->addr = 0x",
			"handler_pre: <handle_request> id (di) = 2, name (si) = 0x",
			"handler_pre: <handle_request> name starts with 'k'",
			"handler_post: <handle_request> p->addr = 0x",
			"handler_fault: p->addr = 0x0000",
			", trap #14, at ip 0x",
			"kprewrite: a C handler faulted: SIGSEGV (trap 14, address 0x0)",
			"request 2: hello, kprobes",
			"request 3: returned -1",
			"kprobe_exit: kprobe at 0000",
		}},
		{"kretprobe", []string{
			"Planted return probe at lookup: 0000",
			"(maxactive 4)",
			"lookup(depth 0) returned -20 (ENOTDIR) and took ",
			"lookup(depth 6) returned -2 (ENOENT) and took ",
			"lookup(/usr/share, no-such-file.kp, 6) = -2",
			"Missed probing 3 instances of lookup (maxactive 4)",
		}},
		{"faultinject", []string{
			"fail_malloc: call #3: malloc(64) = 0000",
			"record 3: out of memory, skipped",
			"record 9: out of memory, skipped",
			"7 records made, 3 allocations failed",
			"fail_malloc: 3 of 10 malloc() calls failed",
		}},
		{"faultinject-libc", []string{
			"fail_malloc: call #3: malloc(64) = 0000",
			"record 3: out of memory, skipped",
			"record 9: out of memory, skipped",
			"7 records made, 3 allocations failed",
			"fail_malloc: 3 of 10 malloc() calls failed",
		}},
		{"latency", []string{
			"work(): 1100 calls, average ",
			"nsecs : count    distribution",
			"|****************************************|",
			"missed: 0 (maxactive 64)",
			"done",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("sh", "../examples/run.sh", c.name)
			cmd.Env = append(os.Environ(), "KPREWRITE="+bin, "OUT="+t.TempDir())
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("run.sh %s: %v\n%s", c.name, err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestHandlersDeterministic: the same input and handler file give the same bytes.
func TestHandlersDeterministic(t *testing.T) {
	testprog.Need(t, "gcc")
	src, handlers := handledSource(t)
	prog := testprog.Build(t, src, "c", "-O2")
	dir := t.TempDir()
	var sums []string
	for i := 0; i < 2; i++ {
		out := filepath.Join(dir, fmt.Sprint(i), "h.kp") // the name is part of the image
		if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if code, stdout, stderr := kp("rewrite", "--handlers", handlers, "--trace", "/tmp/same.trace", "-o", out, prog); code != 0 {
			t.Fatalf("rewrite: %s%s", stdout, stderr)
		}
		sums = append(sums, testprog.HashFile(t, out))
	}
	if sums[0] != sums[1] {
		t.Errorf("two rewrites differ: %v", sums)
	}
}

// TestHandlersInclude: `kprewrite include` prints the header handler files include, and
// -o DIR writes it where another compiler finds it.
func TestHandlersInclude(t *testing.T) {
	code, stdout, stderr := kp("include")
	if code != 0 || !strings.Contains(stdout, "#ifndef KPREWRITE_H") || !strings.Contains(stdout, "#define DEFINE_KPROBE(") {
		t.Fatalf("include: exit %d, %d bytes: %s", code, len(stdout), stderr)
	}
	dir := filepath.Join(t.TempDir(), "inc")
	if code, _, stderr := kp("include", "-o", dir); code != 0 {
		t.Fatalf("include -o: %s", stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "kprewrite.h"))
	if err != nil || string(b) != stdout {
		t.Errorf("include -o wrote %d bytes (%v), want the printed header", len(b), err)
	}
	if code, _, _ := kp("include", "extra"); code != 2 {
		t.Errorf("include with an argument: exit %d, want 2", code)
	}
	testprog.Need(t, "gcc")
	// a hosted compile with every warning sees a clean header
	c := filepath.Join(dir, "h.c")
	if err := os.WriteFile(c, []byte("#include <kprewrite.h>\nDEFINE_KPROBE(kp, \"main\");\nint main(void) { return kp.offset; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-I", dir, "-c", "-o", filepath.Join(dir, "h.o"), c).CombinedOutput(); err != nil {
		t.Errorf("gcc with the written header: %v\n%s", err, out)
	}
}

// TestHandlersStackNearLimit: a handler whose measured chain is close to the limit
// (a 7000-byte buffer, snprintf, pr_info) is accepted and runs at every hit: on the main
// thread, on a thread with a 64 KiB stack, and with int3 probes on a thread whose
// 16 KiB sigaltstack takes the SIGTRAP frame.
func TestHandlersStackNearLimit(t *testing.T) {
	testprog.Need(t, "gcc")
	const prog = `#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return a * 3 + 1; }
static void *thr(void *arg) {
	long alt = (long)arg, s = 0;
	if (alt) {
		stack_t ss = {.ss_sp = malloc(16384), .ss_size = 16384};
		if (sigaltstack(&ss, 0)) { perror("sigaltstack"); exit(2); }
	}
	for (long i = 0; i < 100; i++) s += work(i);
	return (void *)s;
}
int main(void) {
	long s = 0;
	for (long i = 0; i < 100; i++) s += work(i);
	for (long alt = 0; alt < 2; alt++) {
		pthread_attr_t a; pthread_t t; void *r;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 65536);
		if (pthread_create(&t, &a, thr, (void *)alt)) { perror("pthread_create"); return 2; }
		pthread_join(t, &r);
		s += (long)r;
	}
	printf("sum=%ld\n", s);
	return 0;
}
`
	const handler = `#include <kprewrite.h>
static int hits, longest;
static int pre(struct kprobe *p, struct pt_regs *r)
{
	char buf[7000];
	int n = snprintf(buf, sizeof buf, "%s(%lu) %*s", p->symbol_name, r->di, 6000, "|");
	if (n > longest)
		longest = n;
	__atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED);
	if (r->di == 99)
		pr_info("%.12s\n", buf);
	return 0;
}
DEFINE_KPROBE(kp, "work", .pre_handler = pre);
void kprewrite_exit(void) { pr_info("hits=%d longest=%d\n", hits, longest); }
`
	bin := testprog.Build(t, prog, "c", "-O2", "-pthread")
	dir := t.TempDir()
	h := filepath.Join(dir, "near.c")
	if err := os.WriteFile(h, []byte(handler), 0o644); err != nil {
		t.Fatal(err)
	}
	want := testprog.Run(t, testprog.Cmd{Path: bin}).Stdout
	for _, mode := range [][]string{{"--no-optimize", "--no-boost"}, {"--no-optimize"}, nil} {
		out := filepath.Join(dir, "near.kp")
		args := append(append([]string{"rewrite", "--handlers", h, "-o", out}, mode...), bin)
		if code, stdout, stderr := kp(args...); code != 0 || stderr != "" {
			t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE="}})
		if r.Exit != 0 || r.Stdout != want {
			t.Fatalf("%v: %s\nwant stdout %q", mode, r, want)
		}
		if strings.Count(r.Stderr, "work(99)    ") != 3 || !strings.Contains(r.Stderr, "hits=300 longest=6009") {
			t.Errorf("%v: stderr %q", mode, r.Stderr)
		}
	}
}

// TestHandlersShortSignalStack: int3 hits run their C handlers in the SIGTRAP handler,
// on the thread's sigaltstack when it has one. On one with less room than the handlers'
// measured stack (here 8 KiB, the traditional SIGSTKSZ, with a guard page under it) the
// handler is skipped and counted in nmissed, with one line on stderr; before, it ran
// past the stack's end and the program died of SIGSEGV. Jump-optimized hits do not use
// the signal stack and run every handler.
func TestHandlersShortSignalStack(t *testing.T) {
	testprog.Need(t, "gcc")
	const prog = `#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
__attribute__((noinline)) long work(long a) { __asm__ volatile(""); return a * 3 + 1; }
static void *thr(void *arg) {
	long s = 0;
	char *m = mmap(0, 4096 + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE)) { perror("mmap"); return 0; }
	stack_t ss = {.ss_sp = m + 4096, .ss_size = 8192};
	if (sigaltstack(&ss, 0)) { perror("sigaltstack"); return 0; }
	for (long i = 0; i < 50; i++) s += work(i);
	(void)arg;
	return (void *)s;
}
int main(void) {
	long s = 0;
	void *r;
	pthread_t t;
	for (long i = 0; i < 50; i++) s += work(i);
	if (pthread_create(&t, 0, thr, 0)) { perror("pthread_create"); return 2; }
	pthread_join(t, &r);
	printf("sum=%ld\n", s + (long)r);
	return 0;
}
`
	const handler = `#include <kprewrite.h>
static int hits;
static int pre(struct kprobe *p, struct pt_regs *r)
{
	char buf[6000];
	snprintf(buf, sizeof buf, "%lu %*s", r->di, 5900, "|");
	(void)p;
	__atomic_fetch_add(&hits, buf[0] != 0, __ATOMIC_RELAXED);
	return 0;
}
DEFINE_KPROBE(kp, "work", .pre_handler = pre);
void kprewrite_exit(void) { pr_info("hits=%d nmissed=%lu\n", hits, kp.nmissed); }
`
	bin := testprog.Build(t, prog, "c", "-O2", "-pthread")
	dir := t.TempDir()
	h := filepath.Join(dir, "short.c")
	if err := os.WriteFile(h, []byte(handler), 0o644); err != nil {
		t.Fatal(err)
	}
	want := testprog.Run(t, testprog.Cmd{Path: bin}).Stdout
	for _, m := range []struct {
		flags  []string
		report string
		said   bool
	}{
		{[]string{"--no-optimize", "--no-boost"}, "hits=50 nmissed=50", true},
		{[]string{"--no-optimize"}, "hits=50 nmissed=50", true},
		{nil, "hits=100 nmissed=0", false},
	} {
		out := filepath.Join(dir, "short.kp")
		args := append(append([]string{"rewrite", "--handlers", h, "-o", out}, m.flags...), bin)
		if code, stdout, stderr := kp(args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, stdout, stderr)
		}
		r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE="}})
		if r.Exit != 0 || r.Stdout != want {
			t.Fatalf("%v: %s\nwant stdout %q", m.flags, r, want)
		}
		said := strings.Count(r.Stderr, "thread's signal stack has less room left")
		if !strings.Contains(r.Stderr, m.report) || (said == 1) != m.said || said > 1 {
			t.Errorf("%v: stderr %q, want %q", m.flags, r.Stderr, m.report)
		}
	}
}
