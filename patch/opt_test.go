package patch

import (
	"errors"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

func TestPlanOptimize(t *testing.T) {
	p := buildPlanBin(t)
	ret := p.req("f_plain", 0)
	ret.Return = true
	post := p.req("f_rip", 0)
	post.NeedPost = true
	reqs := []Request{
		p.req("f_plain", 0), // 0: push; mov; mov: 6-byte DCR, optimized
		ret,                 // 1: return probe on it: ro
		p.req("f_call", 0),  // 2: a DCR that is one call: optimized (push-jmp)
		post,                // 3: post handler: k
		p.req("f_jcc", 0),   // 4: test; je; mov: optimized
		p.req("f_endbr", 0), // 5: after endbr64, no room for a jmp: boosted
	}
	pl, err := MakePlan(p.b, reqs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for i := range reqs {
		kinds = append(kinds, pl.Kind(i))
	}
	if strings.Join(kinds, ",") != "o,ro,o,k,o,b" {
		t.Fatalf("kinds %v", kinds)
	}
	pt := &pl.Points[pl.PointOf[0]]
	if pt.XMode != kprt.XOptimized || pt.DCRLen != 6 || len(pt.DCR) != 3 || len(pt.DCRCode) != 6 || pt.NeedsSlot || !pt.Optimized() {
		t.Errorf("f_plain point %+v", pt)
	}
	if q := &pl.Points[pl.PointOf[2]]; q.DCRLen != 5 || !pl.Sites[2].Has(analysis.RuleCallRelocated) {
		t.Errorf("f_call point: DCR %d, reasons %v", q.DCRLen, pl.Sites[2].Reasons)
	}
	// edits: a DCR-long placeholder per optimized point, an int3 for the others
	for _, e := range pl.patcher.Edits() {
		var q *Point
		for i := range pl.Points {
			if pl.Points[i].Site == e.Addr {
				q = &pl.Points[i]
			}
		}
		if q == nil {
			t.Fatalf("edit at %#x belongs to no point", e.Addr)
		}
		if q.Optimized() && (len(e.New) != q.DCRLen || e.New[0] != 0xe9) || !q.Optimized() && (len(e.New) != 1 || e.New[0] != Int3) {
			t.Errorf("edit %+v for a %v point", e, q.Mode())
		}
	}
	pi := pl.PointOf[0]
	if err := pl.SetSiteJmp(pi, []byte{0xe9, 1, 2, 3, 4}); !errors.Is(err, ErrEdit) {
		t.Errorf("short site jmp accepted: %v", err)
	}
	if err := pl.SetSiteJmp(pl.PointOf[3], make([]byte, 6)); !errors.Is(err, ErrEdit) {
		t.Errorf("site jmp on an int3 point accepted: %v", err)
	}
	jmp := []byte{0xe9, 1, 2, 3, 4, 0xcc}
	if err := pl.SetSiteJmp(pi, jmp); err != nil {
		t.Fatal(err)
	}
	for _, e := range pl.patcher.Edits() {
		if e.Addr == pl.Points[pi].Site && string(e.New) != string(jmp) {
			t.Errorf("site jmp not recorded: % x", e.New)
		}
	}

	// --no-optimize: int3 everywhere
	pl, err = MakePlan(p.b, reqs, Options{NoOptimize: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"b", "rb", "b", "k", "b", "b"} {
		if k := pl.Kind(i); k != want {
			t.Errorf("--no-optimize: request %d kind %s, want %s", i, k, want)
		}
	}
}

// TestPlanProbesInOneDCR: two probes whose sites share a DCR.
func TestPlanProbesInOneDCR(t *testing.T) {
	p := buildPlanBin(t)
	// f_plain+0's DCR (6 bytes) holds f_plain+1: +0 stays an int3, +1 (mov %rsp,%rbp;
	// mov %edi,%eax: 5 bytes) is optimized; the int3's slot jumps back to +1, the
	// start of the jmp, never into it
	pl, err := MakePlan(p.b, []Request{p.req("f_plain", 0), p.req("f_plain", 1)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pl.Kind(0) != "b" || pl.Kind(1) != "o" {
		t.Fatalf("kinds %s %s", pl.Kind(0), pl.Kind(1))
	}
	a, b := &pl.Points[pl.PointOf[0]], &pl.Points[pl.PointOf[1]]
	if a.Site+uint64(len(a.Orig)) != b.Site || b.DCRLen != 5 {
		t.Errorf("int3 at %#x (len %d), jmp at %#x (%d bytes)", a.Site, len(a.Orig), b.Site, b.DCRLen)
	}
	if !pl.Sites[0].Has(analysis.RuleOtherProbe) {
		t.Errorf("f_plain+0: %v", pl.Sites[0].Reasons)
	}
	// a neighbour that is refused does not keep the probe from being optimized
	pl, err = MakePlan(p.b, []Request{p.req("f_plain", 0), p.req("f_plain", 2)}, Options{SkipRefused: true})
	if err != nil {
		t.Fatal(err)
	}
	if pl.Kind(0) != "o" || len(pl.Refused) != 1 {
		t.Errorf("with a refused neighbour: kind %s, %d refused", pl.Kind(0), len(pl.Refused))
	}
	// the invariant itself
	pl.Points = append(pl.Points, Point{Point: kprt.Point{Site: pl.Points[0].Site + 2}})
	if err := pl.checkRegions(); err == nil {
		t.Error("a point inside a DCR passed checkRegions")
	}
}

func TestPlanVerifyRegions(t *testing.T) {
	p := buildPlanBin(t)
	pl, err := MakePlan(p.b, []Request{p.req("f_plain", 0), p.req("f_endbr", 0)}, Options{VerifyRegions: true})
	if err != nil {
		t.Fatal(err)
	}
	pt := &pl.Points[pl.PointOf[0]]
	if !pt.Verify || pt.Mode() != ModeB || pt.XMode != kprt.XBoost || pt.NeedsSlot || pt.DCRLen != 6 || pl.Kind(0) != "b" {
		t.Fatalf("verify point %+v", pt)
	}
	if q := &pl.Points[pl.PointOf[1]]; q.Verify || q.XMode != kprt.XBoost || !q.NeedsSlot {
		t.Errorf("the boosted point is not a verify point: %+v", q)
	}
	// inner bytes 1..5; push (1) and mov %rsp,%rbp (3) end at 1 and 4
	if len(pl.Inner) != 5 {
		t.Fatalf("inner %+v", pl.Inner)
	}
	for i, in := range pl.Inner {
		if in.Off != i+1 || in.Addr != pt.Site+uint64(i+1) || in.Point != pl.PointOf[0] || !in.Int3 || in.Boundary != (in.Off == 1 || in.Off == 4) {
			t.Errorf("inner %d: %+v", i, in)
		}
	}
	edits := pl.patcher.Edits()
	if len(edits) != 1+5+1 {
		t.Fatalf("%d edits", len(edits))
	}
	for _, e := range edits {
		if len(e.New) != 1 || e.New[0] != Int3 {
			t.Errorf("edit %+v", e)
		}
	}
	// --no-optimize wins: no verify points
	pl, err = MakePlan(p.b, []Request{p.req("f_plain", 0)}, Options{VerifyRegions: true, NoOptimize: true})
	if err != nil || pl.Points[0].Verify || len(pl.Inner) != 0 {
		t.Errorf("verify with --no-optimize: %v %+v", err, pl.Points)
	}
}

func TestPlanExclude(t *testing.T) {
	p := buildPlanBin(t)
	fns := p.b.Funcs
	rs, err := ParseExcludes([]string{"f_pl*"}, fns)
	if err != nil || len(rs) != 1 || rs[0].Lo != p.syms["f_plain"] {
		t.Fatalf("%+v %v", rs, err)
	}
	_, err = MakePlan(p.b, []Request{p.req("f_plain", 1)}, Options{Exclude: rs})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), RuleExcluded) || !strings.Contains(err.Error(), "f_pl*") {
		t.Errorf("probe in excluded code: %v", err)
	}
	pl, err := MakePlan(p.b, []Request{p.req("f_plain", 1), p.req("f_call", 0)}, Options{Exclude: rs, SkipRefused: true})
	if err != nil || len(pl.Points) != 1 || len(pl.Refused) != 1 || pl.Refused[0].Request != 0 {
		t.Errorf("skip-refused with --exclude: %v %+v", err, pl)
	}
	// an optional request is left out without SkipRefused; the user's still fails
	opt := p.req("f_plain", 1)
	opt.Optional = true
	pl, err = MakePlan(p.b, []Request{opt, p.req("f_call", 0)}, Options{Exclude: rs})
	if err != nil || len(pl.Points) != 1 || len(pl.Refused) != 1 || pl.Refused[0].Request != 0 {
		t.Errorf("optional request in excluded code: %v %+v", err, pl)
	}
	if _, err = MakePlan(p.b, []Request{opt, p.req("f_plain", 1)}, Options{Exclude: rs}); !errors.Is(err, ErrRefused) {
		t.Errorf("the user's request beside an optional one, both refused: %v", err)
	}
	// an excluded range that a DCR would reach into: the probe stays an int3
	base := p.syms["f_plain"]
	rs = []Range{{Lo: base + 4, Hi: base + 5, Pattern: "x"}}
	pl, err = MakePlan(p.b, []Request{p.req("f_plain", 0)}, Options{Exclude: rs})
	if err != nil || pl.Kind(0) != "b" {
		t.Errorf("DCR into excluded code: %v kind %s", err, pl.Kind(0))
	}
}

func TestParseExcludes(t *testing.T) {
	fns := &elfio.Functions{List: []elfio.Func{
		{Name: "Builtins_A", Addr: 0x1000, Size: 0x10},
		{Name: "Builtins_B", Addr: 0x1010, Size: 0x10},
		{Name: "main", Aliases: []string{"alias_main"}, Addr: 0x2000, Size: 0x20},
	}}
	for _, c := range []struct {
		pats []string
		want []Range
	}{
		{[]string{"Builtins_*"}, []Range{{0x1000, 0x1020, "Builtins_*"}}},
		{[]string{"alias_*"}, []Range{{0x2000, 0x2020, "alias_*"}}},
		{[]string{"0x3000-0x3100", "0x3080+0x100"}, []Range{{0x3000, 0x3180, "0x3000-0x3100"}}},
	} {
		got, err := ParseExcludes(c.pats, fns)
		if err != nil || len(got) != len(c.want) {
			t.Fatalf("%v: %+v %v", c.pats, got, err)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%v: %+v, want %+v", c.pats, got[i], c.want[i])
			}
		}
	}
	for _, bad := range []string{"nomatch_*", "[", "0x10-0x5", "0x10", "0xzz-0x20", "", "0x10+0xffffffffffffffff"} {
		if _, err := ParseExcludes([]string{bad}, fns); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	rs, _ := ParseExcludes([]string{"Builtins_*", "main"}, fns)
	for _, c := range []struct {
		lo, hi uint64
		in     bool
	}{{0x1000, 0x1001, true}, {0x101f, 0x1020, true}, {0x1020, 0x1030, false}, {0xff0, 0x1000, false}, {0xff0, 0x1001, true}, {0x2010, 0x2011, true}, {0x3000, 0x3001, false}} {
		if _, ok := excludedBy(rs, c.lo, c.hi); ok != c.in {
			t.Errorf("%#x-%#x: excluded %v", c.lo, c.hi, ok)
		}
	}
}

// FuzzParseExcludes: --exclude patterns never panic, and what they give is sorted,
// disjoint and non-empty.
func FuzzParseExcludes(f *testing.F) {
	for _, s := range []string{"Builtins_*", "0x1000-0x2000", "0x1000+0x10", "[", "0x10-0x5", "main", "*", "0xffffffffffffffff+2"} {
		f.Add(s)
	}
	fns := &elfio.Functions{List: []elfio.Func{
		{Name: "Builtins_A", Addr: 0x1000, Size: 0x10},
		{Name: "main", Aliases: []string{"alias"}, Addr: 0x2000, Size: 0x20},
		{Name: "empty", Addr: 0x3000},
	}}
	f.Fuzz(func(t *testing.T, pat string) {
		rs, err := ParseExcludes([]string{pat, "main"}, fns)
		if err != nil {
			return
		}
		for i, r := range rs {
			if r.Hi <= r.Lo || i > 0 && rs[i-1].Hi >= r.Lo {
				t.Fatalf("%q: ranges %+v", pat, rs)
			}
		}
		if _, ok := excludedBy(rs, 0x2000, 0x2001); !ok {
			t.Fatalf("%q: main is not excluded: %+v", pat, rs)
		}
	})
}
