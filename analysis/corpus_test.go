package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

const corpusC = `
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

int g;

__attribute__((noinline)) int sw(unsigned x) {
	switch (x) {
	case 0: return g + 1;
	case 1: return g * 3;
	case 2: return g - 7;
	case 3: return g ^ 5;
	case 4: return g / 3;
	case 5: return 11;
	case 7: return g << 2;
	default: return -1;
	}
}

__attribute__((noinline)) int sw_signed(int x) {
	switch (x) {
	case 10: g = 1; break;
	case 11: g = 5; break;
	case 12: g = 9; break;
	case 13: g = 12; break;
	case 15: g = 0; break;
	case 16: g = 77; break;
	default: g = 2;
	}
	return g;
}

__attribute__((cold, noinline)) void note_neg(int v) { fprintf(stderr, "neg %d\n", v); }

/* At -O2 the negative path goes to hot.cold, which jumps back into hot. */
__attribute__((noinline)) int hot(int *a, int n) {
	int s = 0;
	for (int i = 0; i < n; i++) {
		if (a[i] < 0) {
			note_neg(a[i]);
			s -= a[i] * 3;
			continue;
		}
		s += a[i];
	}
	return s;
}

static void *worker(void *p) {
	int *v = p;
	*v = sw((unsigned)*v) + sw_signed(*v + 10);
	return NULL;
}

int main(int argc, char **argv) {
	(void)argv;
	pthread_t th;
	int v = argc;
	pthread_create(&th, NULL, worker, &v);
	pthread_join(th, NULL);
	int a[4] = {1, -2, argc, 4};
	printf("%d %d\n", v, hot(a, 4));
	return 0;
}
`

const corpusCXX = `
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

struct Guard {
	std::string name;
	explicit Guard(const char *n) : name(n) {}
	~Guard() { std::printf("~%s\n", name.c_str()); }
};

struct Shape {
	virtual ~Shape() {}
	virtual int area() const = 0;
};
struct Sq : Shape {
	int s;
	explicit Sq(int v) : s(v) {}
	int area() const override { return s * s; }
};

__attribute__((noinline)) int may_throw(int v) {
	if (v > 3) throw std::runtime_error("too big");
	return v * 2;
}

__attribute__((noinline)) int catcher(int v) {
	Guard g("catcher");
	try {
		std::vector<int> xs(v, 1);
		return may_throw(v) + (int)xs.size();
	} catch (const std::runtime_error &e) {
		std::printf("caught %s\n", e.what());
		return -1;
	}
}

__attribute__((noinline)) int total(const std::vector<Shape *> &v) {
	int t = 0;
	for (auto *s : v) t += s->area();
	return t;
}

int main(int argc, char **) {
	Sq a(argc), b(3);
	std::vector<Shape *> v{&a, &b};
	return catcher(argc + 4) + total(v) == 0;
}
`

type corpusBuild struct {
	name, lang, src string
	flags           []string
}

func corpusBuilds() []corpusBuild {
	var out []corpusBuild
	for _, opt := range []string{"-O0", "-O2", "-Os"} {
		for _, pie := range [][]string{{"-fPIE", "-pie"}, {"-fno-pie", "-no-pie"}} {
			fl := append([]string{opt, "-fcf-protection", "-pthread"}, pie...)
			out = append(out, corpusBuild{fmt.Sprintf("c%s%s", opt, pie[1]), "c", corpusC, fl})
		}
		out = append(out, corpusBuild{"cxx" + opt, "c++", corpusCXX, []string{opt, "-fcf-protection"}})
	}
	out = append(out, corpusBuild{"c-static", "c", corpusC, []string{"-O2", "-static", "-pthread"}})
	out = append(out, corpusBuild{"c-nocet", "c", corpusC, []string{"-O2", "-fcf-protection=none", "-pthread"}})
	return out
}

// TestCorpus compiles C and C++ programs in many configurations and checks
// hand-verified facts about specific functions, plus invariants on every
// instruction boundary cross-checked against objdump.
func TestCorpus(t *testing.T) {
	need(t, "gcc", "g++", "objdump")
	for _, cb := range corpusBuilds() {
		t.Run(cb.name, func(t *testing.T) {
			if testing.Short() && cb.name == "c-static" {
				t.Skip("static build in -short")
			}
			path := build(t, cb.src, cb.lang, cb.flags...)
			b := analyzeFile(t, path, Options{})
			t.Logf("%s: %+v", cb.name, b.Stats)
			if cb.lang == "c" {
				checkCorpusC(t, b, cb)
			} else {
				checkCorpusCXX(t, b)
			}
			checkAgainstObjdump(t, b, path, cb.name != "c-static")
		})
	}
}

func checkCorpusC(t *testing.T, b *Binary, cb corpusBuild) {
	opt := cb.flags[0]
	cet := strings.Contains(strings.Join(cb.flags, " "), "-fcf-protection ") || cb.flags[1] == "-fcf-protection"
	for _, name := range []string{"sw", "sw_signed", "hot", "main", "worker"} {
		s := entry(t, b, name, SiteRequest{})
		wantVerdict(t, s, Optimize)
		if cet && (s.Offset != 4 || !s.Has(RuleEndbrSkip)) {
			t.Errorf("%s: -fcf-protection entry at offset %d, want 4 after endbr64", name, s.Offset)
		}
		if !cet && s.Offset != 0 {
			t.Errorf("%s: offset %d without endbr64", name, s.Offset)
		}
	}
	// The switches' jump tables are resolved, with the right sizes.
	wantEntries := map[string]int{"sw": 8, "sw_signed": 7}
	for name, n := range wantEntries {
		f := fn(t, b, name)
		var got []IndirectJump
		for _, ij := range b.IndirectJumps() {
			if ij.Addr >= f.Addr && ij.Addr < f.End() {
				got = append(got, ij)
			}
		}
		if len(got) != 1 || got[0].Class != "jump table" || !strings.Contains(got[0].Detail, fmt.Sprintf(" with %d ", n)) {
			t.Errorf("%s: indirect jumps %+v, want one jump table of %d entries", name, got, n)
			continue
		}
		kind := "int32 entries relative to" // PIC code, also in -static links of -fPIE objects
		if strings.Contains(strings.Join(cb.flags, " "), "-fno-pie") {
			kind = "absolute 8-byte entries"
		}
		if !strings.Contains(got[0].Detail, kind) {
			t.Errorf("%s: %s, want %s", name, got[0].Detail, kind)
		}
		if s := entry(t, b, name, SiteRequest{}); !s.Has(RuleJumpTable) {
			t.Errorf("%s: no jump-table note: %s", name, s.String())
		}
	}
	if opt != "-O2" {
		return
	}
	// hot.cold jumps back into hot: every site whose region covers that
	// target must say so and name the jmp in hot.cold.
	cold := fn(t, b, "hot.cold")
	h := fn(t, b, "hot")
	code := b.code(cold.Addr, cold.Size)
	var src, dst uint64
	for off := 0; off < len(code); {
		in, err := x86dec.Decode(code[off:], cold.Addr+uint64(off))
		if err != nil {
			t.Fatal(err)
		}
		if in.Kind == x86dec.KindJmp && in.Target > h.Addr && in.Target < h.End() {
			src, dst = cold.Addr+uint64(off), in.Target
		}
		off += in.Len
	}
	if src == 0 {
		t.Fatal("hot.cold does not jump back into hot")
	}
	checked := 0
	for _, a := range boundaries(t, b, h) {
		if a >= dst || dst-a >= jmpLen {
			continue
		}
		s := b.Check(SiteRequest{Addr: a, NoRedirect: true})
		if s.DCRLen > 0 && a+uint64(s.DCRLen) <= dst && (s.Has(RuleDCRPastJmp) || s.Has(RuleDCRCrossesFunc)) {
			continue
		}
		// with redirects, the site is optimized only by redirecting that jmp
		if sr := b.Check(SiteRequest{Addr: a}); sr.Verdict == Optimize && !slices.ContainsFunc(sr.Redirects, func(r Redirect) bool { return r.From == src && r.To == dst }) {
			t.Errorf("site %#x optimized, but hot.cold's jmp at %#x is not redirected: %v", a, src, sr.Redirects)
		}
		checked++
		r := reason(t, s, RuleJumpIntoDCR)
		if !strings.Contains(r.Detail, "(in hot.cold)") {
			t.Errorf("site %#x: the reason should name hot.cold's jmp at %#x: %v", a, src, r)
		}
		if s.Verdict == Optimize {
			t.Errorf("site %#x optimized although hot.cold jumps to %#x", a, dst)
		}
	}
	if checked == 0 {
		t.Errorf("no site covers hot+%#x", dst-h.Addr)
	}
}

func checkCorpusCXX(t *testing.T, b *Binary) {
	if b.Stats.LandingPads == 0 {
		t.Fatal("no landing pads found in a C++ program with try/catch")
	}
	for _, name := range []string{"main", "_Z5totalRKSt6vectorIP5ShapeSaIS1_EE"} {
		wantVerdict(t, entry(t, b, name, SiteRequest{}), Optimize)
	}
	// Every site whose region covers a landing pad says so.
	n := 0
	for _, p := range b.pads {
		fi := b.funcAt(p.addr)
		if fi < 0 {
			t.Errorf("landing pad %#x outside every function", p.addr)
			continue
		}
		for _, a := range boundaries(t, b, &b.Funcs.List[fi]) {
			if a >= p.addr || p.addr-a >= jmpLen {
				continue
			}
			s := b.Check(SiteRequest{Addr: a})
			if s.DCRLen > 0 && a+uint64(s.DCRLen) <= p.addr {
				continue
			}
			n++
			if r := reason(t, s, RuleLandingPad); r.Addr != p.addr {
				t.Errorf("site %#x: landing pad %#x reported as %#x", a, p.addr, r.Addr)
			}
		}
	}
	// GCC puts a jmp or a call before each pad, so a DCR rarely reaches one;
	// rule 5 is made to fire by TestRule5.
	t.Logf("%d landing pads, %d sites whose region would cover one", len(b.pads), n)
	// catcher has a catch clause: its pads come from its own LSDA.
	c := fn(t, b, "_Z7catcheri")
	if len(b.padsIn(c.Addr, c.End())) == 0 {
		t.Errorf("catcher has no landing pad")
	}
}

// boundaries returns the instruction starts of a function.
func boundaries(t testing.TB, b *Binary, f interface{ End() uint64 }) []uint64 {
	t.Helper()
	fi := b.funcAt(f.End() - 1)
	fn := &b.Funcs.List[fi]
	code := b.code(fn.Addr, fn.Size)
	var out []uint64
	for off := 0; off < len(code); {
		n, err := x86dec.Length(code[off:])
		if err != nil || n == 0 {
			break
		}
		out = append(out, fn.Addr+uint64(off))
		off += n
	}
	return out
}

// checkAgainstObjdump checks every instruction boundary of every function
// (or only entries): an optimized site must have whole instructions in its
// DCR, and no branch target objdump sees and no landing pad inside it.
func checkAgainstObjdump(t *testing.T, b *Binary, path string, all bool) {
	targets := objdumpTargets(t, path)
	var dsts []uint64
	for d := range targets {
		dsts = append(dsts, d)
	}
	sort.Slice(dsts, func(i, j int) bool { return dsts[i] < dsts[j] })
	var sites []Site
	if all {
		for i := range b.Funcs.List {
			for _, a := range boundaries(t, b, &b.Funcs.List[i]) {
				sites = append(sites, b.check(i, SiteRequest{Addr: a}))
			}
		}
	} else {
		sites = b.EntrySites()
	}
	opt := 0
	for _, s := range sites {
		if s.Verdict != Optimize {
			continue
		}
		opt++
		if s.DCRLen < jmpLen {
			t.Errorf("%s: DCR of %d bytes", s.String(), s.DCRLen)
		}
		end := s.Addr
		for _, in := range s.DCR {
			if in.Addr != end {
				t.Errorf("%s: DCR not contiguous at %#x", s.String(), in.Addr)
			}
			end += uint64(in.Len)
		}
		lo, hi := s.Addr+1, s.Addr+uint64(s.DCRLen)
		// every branch objdump sees into the DCR is one the rewrite redirects, or, in a
		// region grown over a loop, one of the region's own
		for i := sort.Search(len(dsts), func(i int) bool { return dsts[i] >= lo }); i < len(dsts) && dsts[i] < hi; i++ {
			for _, src := range targets[dsts[i]] {
				if s.Has(RuleDCRGrown) && src >= s.Addr && src < hi {
					continue
				}
				if dst := dsts[i]; !slices.ContainsFunc(s.Redirects, func(r Redirect) bool { return r.From == src && r.To == dst }) {
					t.Errorf("%s: objdump sees a branch from %#x to %#x inside the DCR", s.String(), src, dsts[i])
				}
			}
		}
		// and the bytes a redirected jmp rel8 grows into are no branch target
		for _, r := range s.Redirects {
			i := sort.Search(len(dsts), func(i int) bool { return dsts[i] > r.From })
			if i < len(dsts) && dsts[i] < r.From+uint64(r.Edit) {
				t.Errorf("%s: objdump sees a branch to %#x, inside the redirected jump at %#x", s.String(), dsts[i], r.From)
			}
		}
		if len(b.padsIn(lo, hi)) > 0 {
			t.Errorf("%s: landing pad inside the DCR", s.String())
		}
	}
	t.Logf("%d sites checked against objdump, %d optimized", len(sites), opt)
}

const gotoSrc = `
#include <stdio.h>
__attribute__((noinline)) int interp(const unsigned char *code) {
	static void *labels[] = {&&op_inc, &&op_dec, &&op_dbl, &&op_end};
	int acc = 0;
	goto *labels[*code++];
op_inc:
	acc++;
	goto *labels[*code++];
op_dec:
	acc--;
	goto *labels[*code++];
op_dbl:
	acc *= 2;
	goto *labels[*code++];
op_end:
	return acc;
}
int main(int argc, char **argv) {
	(void)argv;
	unsigned char prog[] = {0, 0, 2, 1, (unsigned char)argc, 3};
	prog[4] = 3;
	printf("%d\n", interp(prog));
	return 0;
}
`

// TestComputedGoto checks that label addresses stored in data (raw words in
// a non-PIE, RELATIVE relocations or RELR in a PIE) are address-taken edges,
// and that the interpreter's jmps are pointer jumps.
func TestComputedGoto(t *testing.T) {
	for _, flags := range [][]string{
		{"-O2", "-fno-pie", "-no-pie"},
		{"-O2", "-fPIE", "-pie"},
		{"-O2", "-fPIE", "-pie", "-Wl,-z,pack-relative-relocs"},
		{"-O0", "-fPIE", "-pie"},
	} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			path := build(t, gotoSrc, "c", flags...)
			b := analyzeFile(t, path, Options{})
			var table uint64
			for _, s := range b.File.Symbols {
				if strings.HasPrefix(s.Name, "labels.") {
					table = s.Value
				}
			}
			if table == 0 {
				t.Fatal("no labels table symbol")
			}
			labels := map[uint64]edgeKind{}
			for _, c := range b.edges.chunks {
				for _, e := range c {
					if (e.kind == ekData || e.kind == ekReloc) && e.src >= table && e.src < table+32 {
						labels[e.dst] = e.kind
					}
				}
			}
			if len(labels) != 4 {
				t.Fatalf("found %d label addresses in the table, want 4: %v", len(labels), labels)
			}
			want := ekData // raw words in a non-PIE
			if b.File.IsPIE() {
				want = ekReloc // RELATIVE or RELR relocations
			}
			for l, k := range labels {
				if k != want {
					t.Errorf("label %#x found as a %v edge, want %v", l, k, want)
				}
			}
			if strings.Contains(strings.Join(flags, " "), "pack-relative-relocs") && b.File.Section(".relr.dyn") == nil {
				t.Error("no .relr.dyn: the RELR path is not exercised")
			}
			f := fn(t, b, "interp")
			for _, ij := range b.IndirectJumps() {
				if ij.Addr >= f.Addr && ij.Addr < f.End() && ij.Class == "unresolved" {
					if flags[0] == "-O0" && strings.Contains(ij.Detail, "stack slot") {
						continue // -O0 reloads everything from the stack
					}
					t.Errorf("interp jmp %+v", ij)
				}
			}
			covered := 0
			for l := range labels {
				for _, a := range boundaries(t, b, f) {
					if a >= l || l-a >= jmpLen {
						continue
					}
					s := b.Check(SiteRequest{Addr: a})
					if s.DCRLen > 0 && a+uint64(s.DCRLen) <= l {
						continue
					}
					covered++
					if s.Verdict == Optimize {
						t.Errorf("site %#x optimized over the label %#x", a, l)
					}
					reason(t, s, RuleAddrTakenInDCR)
				}
			}
			t.Logf("%d label addresses, %d sites over them", len(labels), covered)
		})
	}
}
