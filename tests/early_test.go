package tests

// Probes that fire before the entry point or DT_INIT (issue 14, item 5): in a
// dynamically linked glibc image the runtime starts while the dynamic loader relocates
// the image (elfio.EarlyStart), so a program's own malloc called by the C library and by
// .preinit_array, a library's IFUNC resolver, and a library called from another
// library's constructor before its own DT_INIT are all probed, in every probe mode.

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// earlyModes are the probe modes of these tests.
var earlyModes = []struct {
	name  string
	flags []string
	env   []string
}{
	{"optimize", nil, nil},
	{"boost", []string{"--no-optimize"}, nil},
	{"single-step", []string{"--no-optimize", "--no-boost"}, nil},
	{"count-only", []string{"--count-only"}, nil},
	// glibc registers no rseq area: the area the runtime took on trust at relocation
	// (before glibc registers it) is given up at the entry point, counts stay exact
	{"count-only-no-rseq", []string{"--count-only"}, []string{"GLIBC_TUNABLES=glibc.pthread.rseq=0"}},
}

// hookCounts is one COUNTS line of testdata/mallochook.c.
type hookCounts struct {
	malloc, free, calloc, realloc, early uint64
}

var countsRe = regexp.MustCompile(`(?m)^COUNTS (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$`)

// parseHookCounts returns the counts of the parent (the process that counted calls
// before main) and of its fork child, and the output with the pids taken out.
func parseHookCounts(t *testing.T, out string) (parent, child hookCounts, norm string) {
	t.Helper()
	ms := countsRe.FindAllStringSubmatch(out, -1)
	if len(ms) != 2 {
		t.Fatalf("want two COUNTS lines, got %q", out)
	}
	for _, m := range ms {
		var v [5]uint64
		for i := range v {
			v[i], _ = strconv.ParseUint(m[i+2], 10, 64)
		}
		c := hookCounts{v[0], v[1], v[2], v[3], v[4]}
		if c.early > 0 {
			parent = c
		} else {
			child = c
		}
	}
	if parent.early == 0 {
		t.Fatalf("no process counted calls before main: %q", out)
	}
	return parent, child, countsRe.ReplaceAllString(out, "COUNTS pid $2 $3 $4 $5 $6")
}

// TestMallocHookEarly: a program that defines malloc, free, calloc and realloc on top
// of __libc_malloc and friends (the C library, the dynamic loader's dlsym,
// .preinit_array and a constructor call them before main; threads and a fork child
// after), with an entry and a return event on every function: it behaves as the
// original, and every call it counts itself is a hit of its event, the ones before
// the entry point too.
func TestMallocHookEarly(t *testing.T) {
	src, err := os.ReadFile("testdata/mallochook.c")
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			prog := testprog.Build(t, string(src), "c", opt, "-pthread", "-ldl")
			orig := testprog.Run(t, testprog.Cmd{Path: prog})
			if orig.Exit != 0 {
				t.Fatalf("original: %s", orig)
			}
			_, _, wantOut := parseHookCounts(t, orig.Stdout)
			for _, m := range earlyModes {
				t.Run(m.name, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "mh.kp")
					rewriteWith(t, prog, out, nil, append([]string{"--calls", "*"}, m.flags...)...)
					// the trace file from the environment: the start-up at relocation
					// reads it from /proc/self/environ
					tr := filepath.Join(dir, "elsewhere.trace")
					got := testprog.Run(t, testprog.Cmd{Path: out, Extra: append([]string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_DEBUG=1"}, m.env...)})
					if got.Exit != 0 || got.Signal != "" {
						t.Fatalf("rewritten: %s", got)
					}
					parent, child, gotOut := parseHookCounts(t, got.Stdout)
					if gotOut != wantOut {
						t.Errorf("output differs:\n%s\nwant:\n%s", gotOut, wantOut)
					}
					if !strings.Contains(got.Stderr, "probes live since the image's relocation") {
						t.Errorf("the runtime did not start at relocation: %q", got.Stderr)
					}
					// count-only detours count per CPU when glibc registers the rseq area,
					// although it does so after the runtime started
					if wantRseq := m.name == "count-only"; strings.HasPrefix(m.name, "count-only") &&
						strings.Contains(got.Stderr, "counted per CPU (rseq)") != wantRseq {
						t.Errorf("per-CPU counting %v, want %v: %q", !wantRseq, wantRseq, got.Stderr)
					}
					prof := profile(t, tr, out)
					for _, c := range []struct {
						fn   string
						want uint64
					}{
						{"malloc", parent.malloc + child.malloc},
						{"free", parent.free + child.free},
						{"calloc", parent.calloc + child.calloc},
						{"realloc", parent.realloc + child.realloc},
						{"preinit", 1}, // run by the dynamic loader before the entry point
						{"ctor", 1},
					} {
						for _, ev := range []string{c.fn, c.fn + "__return"} {
							if h := prof[ev]; h[0] != c.want || h[1] != 0 {
								t.Errorf("%s: %d hits, %d missed; the program counted %d calls", ev, h[0], h[1], c.want)
							}
						}
					}
				})
			}
		})
	}
}

// earlyFirst is a library whose constructor calls libearly's early_add: libearly
// needs it, so the loader runs this constructor before libearly's DT_INIT.
const earlyFirst = `
#define _GNU_SOURCE
#include <dlfcn.h>
long first_seen;
__attribute__((constructor)) static void first_ctor(void)
{
	long (*add)(long, long) = (long (*)(long, long))dlsym(RTLD_DEFAULT, "early_add");
	first_seen = add ? add(20, 22) : -1;
}
`

// earlyLib has an IFUNC whose resolver the loader calls while it relocates the
// library (an R_X86_64_IRELATIVE of its own).
const earlyLib = `
#include <stdlib.h>
extern long first_seen;
static int resolved;
__attribute__((noinline)) long early_add(long a, long b) { volatile long x = a; return x + b; }
static long twice_impl(long a) { return a * 2; }
__attribute__((noinline)) static long (*resolve_twice(void))(long) { resolved++; return twice_impl; }
static long twice(long) __attribute__((ifunc("resolve_twice")));
long early_twice(long a) { return twice(a) + resolved * 1000; }
long early_first(void) { return first_seen + (getenv("EARLY_NEVER_SET") != NULL); }
`

const earlyMain = `
#include <stdio.h>
long early_add(long, long); long early_twice(long); long early_first(void);
int main(void) { printf("%ld %ld %ld\n", early_first(), early_add(1, 2), early_twice(5)); return 0; }
`

// TestLibraryEarlyHits: a library rewritten on its own records the hits of its IFUNC
// resolver (called while the loader relocates it) and of a call made by another
// library's constructor before its own DT_INIT, in every probe mode; its new DT_RELA
// table has the runtime's IRELATIVE relocation before its other IRELATIVE ones.
func TestLibraryEarlyHits(t *testing.T) {
	dir, o, orig := buildEarlyLibs(t)
	defs := []string{"p:e/resolve resolve_twice", "p:e/add early_add a=%di b=%si", "r:e/add_ret early_add $retval"}
	for _, m := range earlyModes {
		t.Run(m.name, func(t *testing.T) {
			r := filepath.Join(t.TempDir(), "r")
			os.Mkdir(r, 0o755)
			lib := filepath.Join(r, "libearly.so")
			rewriteWith(t, filepath.Join(o, "libearly.so"), lib, defs, m.flags...)
			copyFile(t, filepath.Join(o, "libfirst.so"), filepath.Join(r, "libfirst.so"))
			checkEarlyRela(t, lib)
			got := testprog.Run(t, testprog.Cmd{Path: filepath.Join(dir, "prog"), Extra: append([]string{"LD_LIBRARY_PATH=" + r}, m.env...)})
			if d := orig.Diff(got); d != "" {
				t.Fatalf("with the rewritten library: %s", d)
			}
			tr := lib + ".trace"
			prof := profile(t, tr, lib)
			for ev, want := range map[string]uint64{"resolve": 1, "add": 2, "add_ret": 2} {
				if h := prof[ev]; h[0] != want || h[1] != 0 {
					t.Errorf("%s: %d hits, %d missed, want %d", ev, h[0], h[1], want)
				}
			}
			if strings.HasPrefix(m.name, "count-only") {
				return
			}
			want := []string{"resolve", "add a=0x14 b=0x16", "add_ret arg1=0x2a", "add a=0x1 b=0x2", "add_ret arg1=0x3"}
			if got := eventsOf(readTrace(t, tr, lib)); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("trace:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// earlyHandlers are C handlers on libearly's early_add: a pre handler that says its
// arguments, and a kprewrite_exit() that says how many calls it saw.
const earlyHandlers = `
#include <kprewrite.h>
static atomic_t calls = ATOMIC_INIT(0);
static int pre(struct kprobe *p, struct pt_regs *regs)
{
	(void)p;
	atomic_inc(&calls);
	pr_info("add(%ld, %ld)\n", (long)regs->di, (long)regs->si);
	return 0;
}
DEFINE_KPROBE(addp, "SITE", .pre_handler = pre);
void kprewrite_exit(void) { pr_info("exit: %d calls\n", atomic_read(&calls)); }
`

// TestLibraryHandlers: C handlers in a library, rewritten on its own and as the copy a
// program's rewrite makes for a LIB:SITE probe: a probe declared without
// kprewrite_init() runs for the call another library's constructor makes before the
// library's DT_INIT, and kprewrite_exit() runs at exit from the library's DT_FINI. A
// set of handler files whose probes are in the program and a library is refused.
func TestLibraryHandlers(t *testing.T) {
	dir, o, orig := buildEarlyLibs(t)
	want := "add(20, 22)\nadd(1, 2)\nexit: 2 calls\n"
	handlerFile := func(t *testing.T, site string) string {
		p := filepath.Join(t.TempDir(), "h.c")
		if err := os.WriteFile(p, []byte(strings.Replace(earlyHandlers, "SITE", site, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"optimize", nil}, {"int3", []string{"--no-optimize"}}} {
		t.Run("own/"+mode.name, func(t *testing.T) {
			r := t.TempDir()
			lib := filepath.Join(r, "libearly.so")
			rewriteWith(t, filepath.Join(o, "libearly.so"), lib, nil, append([]string{"--handlers", handlerFile(t, "early_add")}, mode.flags...)...)
			copyFile(t, filepath.Join(o, "libfirst.so"), filepath.Join(r, "libfirst.so"))
			got := testprog.Run(t, testprog.Cmd{Path: filepath.Join(dir, "prog"), Extra: []string{"LD_LIBRARY_PATH=" + r}})
			if got.Stdout != orig.Stdout || got.Exit != 0 || got.Stderr != want {
				t.Errorf("got %s, want stderr %q", got, want)
			}
		})
		t.Run("copy/"+mode.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "prog.kp")
			rewriteWith(t, filepath.Join(dir, "prog"), out, nil, append([]string{"--handlers", handlerFile(t, filepath.Join(o, "libearly.so")+":early_add")}, mode.flags...)...)
			got := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"LD_LIBRARY_PATH=" + o}})
			if got.Stdout != orig.Stdout || got.Exit != 0 || got.Stderr != want {
				t.Errorf("got %s, want stderr %q", got, want)
			}
		})
	}
	t.Run("two-images", func(t *testing.T) {
		h := handlerFile(t, filepath.Join(o, "libearly.so")+":early_add")
		src, _ := os.ReadFile(h)
		os.WriteFile(h, append(src, []byte("DEFINE_KPROBE(mainp, \"main\", .pre_handler = pre);\n")...), 0o644)
		out := filepath.Join(t.TempDir(), "prog.kp")
		code, _, stderr := kp("rewrite", "--handlers", h, "-o", out, filepath.Join(dir, "prog"))
		if code != 1 || !strings.Contains(stderr, "the C handlers' probes are in more than one image") {
			t.Errorf("exit %d: %s", code, stderr)
		}
		if entries, _ := filepath.Glob(out + "*"); len(entries) != 0 {
			t.Errorf("left behind: %v", entries)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil || os.WriteFile(to, b, 0o755) != nil {
		t.Fatalf("copying %s to %s: %v", from, to, err)
	}
}

// buildEarlyLibs builds dir/o/libfirst.so, dir/o/libearly.so (which needs libfirst.so)
// and dir/prog (linked with libearly.so, no run path), and runs prog: its result.
func buildEarlyLibs(t *testing.T) (dir, o string, orig testprog.Result) {
	t.Helper()
	testprog.Need(t, "gcc")
	dir = t.TempDir()
	o = filepath.Join(dir, "o")
	os.Mkdir(o, 0o755)
	for name, src := range map[string]string{"first.c": earlyFirst, "early.c": earlyLib, "main.c": earlyMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"-O2", "-shared", "-fPIC", "-Wl,-soname,libfirst.so", "-o", filepath.Join(o, "libfirst.so"), filepath.Join(dir, "first.c"), "-ldl"},
		{"-O2", "-shared", "-fPIC", "-Wl,-soname,libearly.so", "-o", filepath.Join(o, "libearly.so"), filepath.Join(dir, "early.c"), filepath.Join(o, "libfirst.so")},
		{"-O2", "-o", filepath.Join(dir, "prog"), filepath.Join(dir, "main.c"), "-L" + o, "-learly", "-Wl,-rpath-link," + o},
	} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	orig = testprog.Run(t, testprog.Cmd{Path: filepath.Join(dir, "prog"), Extra: []string{"LD_LIBRARY_PATH=" + o}})
	if orig.Exit != 0 || orig.Stdout != "42 3 1010\n" {
		t.Fatalf("original: %s", orig)
	}
	return dir, o, orig
}

// checkEarlyRela checks the rewritten image's DT_RELA table: the original's
// R_X86_64_RELATIVE relocations, then one R_X86_64_IRELATIVE to the runtime's
// kprewrite_rt_reloc_entry, then the original's others.
func checkEarlyRela(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	var resolver uint64
	for _, s := range syms {
		if s.Name == "kprewrite_rt_reloc_entry" {
			resolver = s.Value
		}
	}
	rela, err1 := f.DynValue(elf.DT_RELA)
	size, err2 := f.DynValue(elf.DT_RELASZ)
	if err1 != nil || err2 != nil || len(rela) != 1 || len(size) != 1 || resolver == 0 {
		t.Fatalf("%s: DT_RELA %v, DT_RELASZ %v, resolver %#x", path, rela, size, resolver)
	}
	var table []byte
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && rela[0] >= p.Vaddr && rela[0]+size[0] <= p.Vaddr+p.Filesz {
			table = make([]byte, size[0])
			p.ReadAt(table, int64(rela[0]-p.Vaddr))
		}
	}
	if table == nil {
		t.Fatalf("%s: DT_RELA %#x not in a loaded segment", path, rela[0])
	}
	seenOther := false
	for i := 0; i+24 <= len(table); i += 24 {
		typ := elf.R_X86_64(f.ByteOrder.Uint64(table[i+8:]) & 0xffffffff)
		addend := f.ByteOrder.Uint64(table[i+16:])
		switch {
		case typ == elf.R_X86_64_RELATIVE && !seenOther:
		case typ == elf.R_X86_64_IRELATIVE && addend == resolver && !seenOther:
			return
		default:
			seenOther = true
		}
	}
	t.Errorf("%s: no IRELATIVE to kprewrite_rt_reloc_entry (%#x) right after the RELATIVE relocations of DT_RELA", path, resolver)
}
