package stackuse

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/objlink"
)

// compile builds src with the handlers' kind of flags (-fno-plt: calls of other objects'
// functions go through the GOT) and returns the unit.
func compile(t *testing.T, name, src string) Unit {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	c := filepath.Join(dir, name)
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	o := strings.TrimSuffix(c, ".c") + ".o"
	cmd := exec.Command("gcc", "-O2", "-fPIC", "-fno-plt", "-mno-red-zone", "-fstack-usage", "-fno-asynchronous-unwind-tables", "-c", c, "-o", o)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	data, err := os.ReadFile(o)
	if err != nil {
		t.Fatal(err)
	}
	su, err := os.ReadFile(strings.TrimSuffix(o, ".o") + ".su")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := objlink.ParseObject(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return Unit{Name: name, Object: obj, Frames: ParseSU(su)}
}

func bound(t *testing.T, g *Graph, name string) Bound {
	t.Helper()
	id, ok := g.Lookup(-1, name)
	if !ok {
		t.Fatalf("no function %s", name)
	}
	return g.Bound(id)
}

// TestBound checks the graph against what the code does: calls of static functions of
// the same section (no relocation), tail calls, calls of another object's functions
// through the GOT, calls by pointer, recursion direct and mutual, and externs.
func TestBound(t *testing.T) {
	a := compile(t, "a.c", `
extern long ext(long);
long other(long);
static __attribute__((noinline)) long leaf(long x) { volatile char b[1000]; b[x & 511] = 1; return b[3]; }
static __attribute__((noinline)) long mid(long x) { volatile char b[200]; b[x & 127] = 2; return leaf(x) + b[1]; }
long top(long x) { return mid(x) + 1; }
long tail(long x) { return other(x); }
long callext(long x) { return ext(x) + 1; }
static __attribute__((noinline)) long fib(long n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
long rec(long x) { return fib(x); }
long (*volatile fp)(long);
long viaptr(long x) { return fp(x) + 1; }
long setptr(long x) { fp = top; return x; }
`)
	b := compile(t, "b.c", `
long other(long x) { volatile char b[3000]; b[x & 1023] = 1; return b[7]; }
long ping(long);
long pong(long n) { return n ? ping(n - 1) * 3 + 1 : 0; }
`)
	c := compile(t, "c.c", `
long pong(long);
long ping(long n) { return n ? pong(n - 1) * 5 + 2 : 1; }
`)
	g := Build([]Unit{a, b, c}, Options{FollowPointers: true, Extern: func(name string) (Bound, bool) {
		if name == "ext" {
			return Bound{Bytes: 5000, Path: []Step{{Function: "ext", Bytes: 5000}}}, true
		}
		return Bound{}, false
	}})
	fr := func(u Unit, f string) int { return u.Frames[f].Bytes }

	top := bound(t, g, "top")
	if want := fr(a, "top") + fr(a, "mid") + fr(a, "leaf"); top.Problem != "" || top.Bytes != want || !strings.HasPrefix(top.PathString(), "top ") ||
		!strings.Contains(top.PathString(), "mid") || !strings.Contains(top.PathString(), "leaf") || fr(a, "leaf") < 1000 {
		t.Errorf("top: %+v, want %d bytes through mid and leaf", top, want)
	}
	if tail := bound(t, g, "tail"); tail.Bytes < 3000 || !strings.Contains(tail.PathString(), "other") {
		t.Errorf("tail (a tail call into another object): %+v", tail)
	}
	if e := bound(t, g, "callext"); e.Bytes != fr(a, "callext")+5000 || !strings.HasSuffix(e.PathString(), "ext 5000") {
		t.Errorf("callext: %+v", e)
	}
	if r := bound(t, g, "rec"); !strings.Contains(r.Problem, "fib → fib") {
		t.Errorf("rec: %+v", r)
	}
	if p := bound(t, g, "ping"); !strings.Contains(p.Problem, "recurse without bound") || !strings.Contains(p.Problem, "pong") {
		t.Errorf("ping: %+v", p)
	}
	// viaptr may reach top (setptr takes its address) and nothing recursive
	if v := bound(t, g, "viaptr"); v.Problem != "" || v.Bytes < top.Bytes || !strings.Contains(v.PathString(), "top (by pointer)") {
		t.Errorf("viaptr: %+v", v)
	}
	// without following pointers, viaptr is its own frame
	g2 := Build([]Unit{a}, Options{})
	if v := bound(t, g2, "viaptr"); v.Bytes != fr(a, "viaptr") {
		t.Errorf("viaptr without pointers: %+v", v)
	}
	// an unknown extern is reported, not guessed
	if o := bound(t, g2, "tail"); o.Problem != "" || strings.Join(o.Unmeasured, ",") != "other" {
		t.Errorf("tail alone: %+v", o)
	}
}

func TestParseSU(t *testing.T) {
	got := ParseSU([]byte("x.c:3:5:f\t48\tstatic\nx.c:9:13:g.constprop\t64\tstatic\nx.c:9:13:g.isra\t80\tstatic\n" +
		"d.c:1:1:h\t16\tdynamic\nd.c:2:1:k\t32\tdynamic,bounded\nnonsense\nx.c:1:1:z\tnan\tstatic\n"))
	want := map[string]Frame{
		"f": {Bytes: 48, File: "x.c", Line: 3},
		"g": {Bytes: 80, File: "x.c", Line: 9},
		"h": {Bytes: 16, Dynamic: true, File: "d.c", Line: 1},
		"k": {Bytes: 32, File: "d.c", Line: 2},
	}
	if len(got) != len(want) {
		t.Errorf("got %+v", got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
}

// FuzzBound: any object objlink accepts and any .su text give a graph and bounds
// without a panic or a hang.
func FuzzBound(f *testing.F) {
	f.Add([]byte{}, []byte("x.c:1:1:f\t8\tstatic\n"))
	if _, err := exec.LookPath("gcc"); err == nil {
		// a small object (about 1 KiB, so the fuzzer mutates it quickly) with a local call,
		// a recursion, a call by pointer and a call through the GOT
		dir := f.TempDir()
		src := filepath.Join(dir, "s.c")
		os.WriteFile(src, []byte("long g(long);\nstatic __attribute__((noinline)) long r(long n) { return n < 2 ? n : r(n-1) + r(n-2); }\n"+
			"long (*p)(long);\nlong f(long x) { return g(x) + r(x) + p(x); }\n"), 0o644)
		o := filepath.Join(dir, "s.o")
		if exec.Command("gcc", "-O2", "-fPIC", "-fno-plt", "-fstack-usage", "-fno-asynchronous-unwind-tables", "-c", src, "-o", o).Run() == nil {
			obj, _ := os.ReadFile(o)
			su, _ := os.ReadFile(filepath.Join(dir, "s.su"))
			f.Add(obj, su)
		}
	}
	f.Fuzz(func(t *testing.T, obj, su []byte) {
		o, err := objlink.ParseObject("f.o", obj)
		if err != nil {
			return
		}
		g := Build([]Unit{{Name: "f.o", Object: o, Frames: ParseSU(su)}}, Options{FollowPointers: true})
		for id := range g.nodes {
			g.Bound(id)
		}
	})
}
