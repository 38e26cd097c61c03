package patch

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// The probed functions are assembly, so the instruction at each site is known.
const planSrc = `
int counter;
__asm__(
	".text\n"
	".globl f_plain\n.type f_plain,@function\nf_plain:\n"
	"  push %rbp\n  mov %rsp,%rbp\n  mov %edi,%eax\n  pop %rbp\n  ret\n.size f_plain,.-f_plain\n"
	".globl f_call\n.type f_call,@function\nf_call:\n"
	"  call f_plain\n  ret\n.size f_call,.-f_call\n"
	".globl f_jcc\n.type f_jcc,@function\nf_jcc:\n"
	"  test %edi,%edi\n  je 1f\n  mov $1,%eax\n  ret\n1:\n  xor %eax,%eax\n  ret\n.size f_jcc,.-f_jcc\n"
	".globl f_loop\n.type f_loop,@function\nf_loop:\n"
	"  mov %edi,%ecx\n  xor %eax,%eax\n2:\n  add $1,%eax\n  loop 2b\n  ret\n.size f_loop,.-f_loop\n"
	".globl f_pushf\n.type f_pushf,@function\nf_pushf:\n"
	"  pushf\n  pop %rax\n  ret\n.size f_pushf,.-f_pushf\n"
	".globl f_rip\n.type f_rip,@function\nf_rip:\n"
	"  mov counter(%rip),%eax\n  ret\n.size f_rip,.-f_rip\n"
	".globl f_ret\n.type f_ret,@function\nf_ret:\n"
	"  ret $0\n.size f_ret,.-f_ret\n"
	".globl f_int3\n.type f_int3,@function\nf_int3:\n"
	"  int3\n  ret\n.size f_int3,.-f_int3\n"
	".globl f_endbr\n.type f_endbr,@function\nf_endbr:\n"
	"  endbr64\n  mov %edi,%eax\n  ret\n.size f_endbr,.-f_endbr\n"
	".globl f_sys\n.type f_sys,@function\nf_sys:\n"
	"  syscall\n  ret\n.size f_sys,.-f_sys\n"
);
int f_plain(int), f_call(int), f_jcc(int), f_loop(int), f_pushf(void), f_rip(void), f_endbr(int);
int main(int argc, char **argv) { return f_jcc(argc) + f_call(argc) + f_loop(3); }
`

type planBin struct {
	b    *analysis.Binary
	syms map[string]uint64
}

func buildPlanBin(t *testing.T) *planBin {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not on PATH")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	exe := filepath.Join(dir, "p")
	if err := os.WriteFile(src, []byte(planSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-fcf-protection=none", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	b, err := analysis.Analyze(f, analysis.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	syms := map[string]uint64{}
	for _, s := range f.Symbols {
		if s.Type == elf.STT_FUNC {
			syms[s.Name] = s.Value
		}
	}
	return &planBin{b: b, syms: syms}
}

func (p *planBin) req(name string, off uint64) Request {
	return Request{Name: name, Addr: p.syms[name] + off}
}

func TestPlanModes(t *testing.T) {
	p := buildPlanBin(t)
	ret := p.req("f_plain", 0)
	ret.Return = true
	post := p.req("f_rip", 0)
	post.NeedPost = true
	reqs := []Request{
		p.req("f_plain", 0), // 0: push: boosted
		p.req("f_call", 0),  // 1: call: emulated
		p.req("f_jcc", 2),   // 2: je rel8: emulated
		p.req("f_loop", 7),  // 3: loop: emulated (even in k)
		p.req("f_pushf", 0), // 4: pushf: k, PFPushf
		post,                // 5: post handler: k
		p.req("f_ret", 0),   // 6: ret imm16: emulated
		ret,                 // 7: return probe on f_plain: aggregated with 0
		p.req("f_plain", 0), // 8: a third probe at f_plain
		p.req("f_endbr", 0), // 9: moved after endbr64
		p.req("f_endbr", 4), // 10: the same point
		p.req("f_rip", 0),   // 11: aggregated with the post-handler probe: k
		p.req("f_jcc", 0),   // 12: test: boosted
		p.req("f_plain", 1), // 13: mov %rsp,%rbp: boosted
	}
	pl, err := MakePlan(p.b, reqs, Options{NoOptimize: true})
	if err != nil {
		t.Fatal(err)
	}
	pt := func(i int) *Point { return &pl.Points[pl.PointOf[i]] }
	check := func(i int, mode Mode, xmode kprt.XMode, emu kprt.EmuOp) {
		t.Helper()
		q := pt(i)
		if q.Mode() != mode || q.XMode != xmode || q.EmuOp != emu {
			t.Errorf("request %d (%s): mode %v xmode %d emu %d, want %v %d %d", i, reqs[i].Name, q.Mode(), q.XMode, q.EmuOp, mode, xmode, emu)
		}
		if q.NeedsSlot != (xmode != kprt.XEmulate) {
			t.Errorf("request %d: slot %v", i, q.NeedsSlot)
		}
	}
	check(0, ModeB, kprt.XBoost, 0)
	check(1, ModeB, kprt.XEmulate, kprt.EmuCall)
	check(2, ModeB, kprt.XEmulate, kprt.EmuJcc)
	check(3, ModeB, kprt.XEmulate, kprt.EmuLoop)
	check(4, ModeK, kprt.XSStep, 0)
	check(5, ModeK, kprt.XSStep, 0)
	check(6, ModeB, kprt.XEmulate, kprt.EmuRet)
	check(9, ModeB, kprt.XBoost, 0)
	check(12, ModeB, kprt.XBoost, 0)
	if q := pt(1); q.Target != p.syms["f_plain"] {
		t.Errorf("call target %#x", q.Target)
	}
	if q := pt(2); q.EmuCC != 4 || q.Target != p.syms["f_jcc"]+10 {
		t.Errorf("je: cc %d target %#x", q.EmuCC, q.Target)
	}
	if q := pt(4); q.PFlags&kprt.PFPushf == 0 || q.PFlags&kprt.PFNoBoost == 0 {
		t.Errorf("pushf flags %#x", q.PFlags)
	}
	// aggregation
	if pl.PointOf[0] != pl.PointOf[7] || pl.PointOf[0] != pl.PointOf[8] || !reflect.DeepEqual(pt(0).Requests, []int{0, 7, 8}) {
		t.Errorf("f_plain point: %v", pt(0).Requests)
	}
	if pt(9).Site != p.syms["f_endbr"]+4 || pl.PointOf[9] != pl.PointOf[10] {
		t.Errorf("endbr: site %#x, points %d %d", pt(9).Site, pl.PointOf[9], pl.PointOf[10])
	}
	if pl.PointOf[5] != pl.PointOf[11] || pt(11).Mode() != ModeK {
		t.Errorf("a post handler makes the whole point k")
	}
	if got := []string{pl.Kind(0), pl.Kind(7), pl.Kind(5)}; !reflect.DeepEqual(got, []string{"b", "rb", "k"}) {
		t.Errorf("kinds %v", got)
	}
	// sorted, one int3 per point
	edits := pl.patcher.Edits()
	if len(edits) != len(pl.Points) {
		t.Fatalf("%d edits for %d points", len(edits), len(pl.Points))
	}
	for i, e := range edits {
		if e.Addr != pl.Points[i].Site || len(e.New) != 1 || e.New[0] != Int3 || e.Orig[0] != pl.Points[i].Orig[0] {
			t.Errorf("edit %d: %+v for point at %#x", i, e, pl.Points[i].Site)
		}
		if i > 0 && pl.Points[i-1].Site >= pl.Points[i].Site {
			t.Errorf("points not sorted")
		}
	}

	// --no-boost: every point single-steps; branches use relocated copies, loop is emulated
	pl, err = MakePlan(p.b, reqs, Options{NoBoost: true, NoOptimize: true})
	if err != nil {
		t.Fatal(err)
	}
	check(0, ModeK, kprt.XSStep, 0)
	check(1, ModeK, kprt.XSStep, 0)
	check(2, ModeK, kprt.XSStep, 0)
	check(3, ModeK, kprt.XEmulate, kprt.EmuLoop)
	check(6, ModeK, kprt.XSStep, 0)
	if q := pt(1); q.PFlags != kprt.PFCall|kprt.PFBranch|kprt.PFNoBoost {
		t.Errorf("k call flags %#x", q.PFlags)
	}
	if q := pt(2); q.PFlags != kprt.PFBranch {
		t.Errorf("k jcc flags %#x", q.PFlags)
	}
	if got := []string{pl.Kind(0), pl.Kind(7)}; !reflect.DeepEqual(got, []string{"k", "r"}) {
		t.Errorf("kinds %v", got)
	}

	// the same requests give the same plan
	again, err := MakePlan(p.b, reqs, Options{NoBoost: true, NoOptimize: true})
	if err != nil || !reflect.DeepEqual(again.Points, pl.Points) || !reflect.DeepEqual(again.patcher.Edits(), pl.patcher.Edits()) {
		t.Errorf("plans differ (%v)", err)
	}
}

func TestPlanRefuses(t *testing.T) {
	p := buildPlanBin(t)
	for _, c := range []struct {
		req  Request
		rule string
	}{
		{p.req("f_int3", 0), analysis.RuleExistingInt3},
		{p.req("f_sys", 0), analysis.RuleUprobesRefuses},
		{p.req("f_plain", 2), analysis.RuleNotBoundary},
		{Request{Name: "ret", Addr: p.syms["f_plain"] + 1, Return: true}, analysis.RuleRetprobeEntry},
	} {
		_, err := MakePlan(p.b, []Request{p.req("f_plain", 0), c.req}, Options{})
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.rule) || !strings.HasPrefix(err.Error(), c.req.Name+": ") {
			t.Errorf("%s: err %v, want a refusal naming %s", c.req.Name, err, c.rule)
		}
		pl, err := MakePlan(p.b, []Request{p.req("f_plain", 0), c.req}, Options{SkipRefused: true})
		if err != nil || len(pl.Points) != 1 || len(pl.Refused) != 1 || pl.Refused[0].Request != 1 || pl.PointOf[1] != -1 {
			t.Errorf("%s with SkipRefused: %v %+v", c.req.Name, err, pl)
		}
	}
}

func TestPatcher(t *testing.T) {
	mem := map[uint64]byte{0x1000: 0x55, 0x1001: 0x48, 0x1002: 0x89, 0x1003: 0xe5, 0x1004: 0xcc}
	read := func(addr, n uint64) ([]byte, error) {
		var b []byte
		for i := uint64(0); i < n; i++ {
			c, ok := mem[addr+i]
			if !ok {
				return nil, errors.New("not in the file")
			}
			b = append(b, c)
		}
		return b, nil
	}
	p := NewPatcher(read)
	if err := p.Int3(0x1001); err != nil {
		t.Fatal(err)
	}
	if err := p.Int3(0x1004); !errors.Is(err, ErrEdit) {
		t.Errorf("int3 over an int3: %v", err)
	}
	if err := p.Write(0x1000, []byte{1, 2}); !errors.Is(err, ErrEdit) {
		t.Errorf("overlapping edit: %v", err)
	}
	if err := p.Write(0x1003, []byte{1, 2, 3}); !errors.Is(err, ErrEdit) {
		t.Errorf("edit past the file: %v", err)
	}
	if err := p.Int3(0x1001); !errors.Is(err, ErrEdit) {
		t.Errorf("second int3 at the same address: %v", err)
	}
	if err := p.Int3(0x1000); err != nil {
		t.Fatal(err)
	}
	if err := p.Undo(0x1001); err != nil {
		t.Fatal(err)
	}
	if err := p.Undo(0x1001); !errors.Is(err, ErrEdit) {
		t.Errorf("double undo: %v", err)
	}
	if err := p.Write(0x1001, []byte{0x90, 0x90}); err != nil {
		t.Fatal(err)
	}
	edits := p.Edits()
	if len(edits) != 2 || edits[0].Addr != 0x1000 || edits[0].Orig[0] != 0x55 || edits[1].Addr != 0x1001 ||
		string(edits[1].Orig) != "\x48\x89" {
		t.Fatalf("edits %+v", edits)
	}
	ps := p.Commit()
	if len(ps) != 2 || ps[0].Addr != 0x1000 || ps[0].Bytes[0] != Int3 || string(ps[1].Bytes) != "\x90\x90" {
		t.Fatalf("patches %+v", ps)
	}
	if err := p.Undo(0x1000); !errors.Is(err, ErrEdit) {
		t.Errorf("undo after commit: %v", err)
	}
	if err := p.Int3(0x1002); !errors.Is(err, ErrEdit) {
		t.Errorf("edit after commit: %v", err)
	}
}

// TestPlanExitAtEntry: a function whose only exit site starts at its entry (f_rip:
// mov, ret) is counted at that exit when only its return is probed; with an entry
// probe on it too, the entry probe stays there and the return probe hooks its return
// address instead, decided before any point is placed (it once took a whole second
// planning per such function: 49 s for python3.11 with both probes on every function).
func TestPlanExitAtEntry(t *testing.T) {
	p := buildPlanBin(t)
	opt := Options{CountExits: true}
	ret := Request{Name: "r", Addr: p.syms["f_rip"], Return: true}
	pl, err := MakePlan(p.b, []Request{ret}, opt)
	if err != nil {
		t.Fatal(err)
	}
	pt := pl.Points[pl.PointOf[0]]
	if !pt.Exit || pt.Site != p.syms["f_rip"] || !pt.Optimized() {
		t.Fatalf("the return probe alone: point %#x exit=%v mode=%v, want the exit at the entry %#x", pt.Site, pt.Exit, pt.Mode(), p.syms["f_rip"])
	}
	both := []Request{p.req("f_rip", 0), ret}
	pl, err = MakePlan(p.b, both, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Points) != 1 || pl.Points[0].Exit || pl.Kind(0) != "o" || pl.Kind(1) != "ro" {
		t.Fatalf("entry and return: %d points, exit=%v, kinds %q %q; want one jump-optimized entry point holding both", len(pl.Points), pl.Points[0].Exit, pl.Kind(0), pl.Kind(1))
	}
	// --exits-only refuses the return probe, saying why
	opt.ExitsOnly, opt.SkipRefused = true, true
	pl, err = MakePlan(p.b, both, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Refused) != 1 || pl.Refused[0].Request != 1 || !strings.Contains(pl.Refused[0].Err.Error(), RuleNotExits) {
		t.Fatalf("--exits-only: refused %+v", pl.Refused)
	}
}

// TestPlanGoReturn: a Go function's return probe (Request.Go) is recorded at its
// exits without TraceExits or ExitsOnly, and refused, saying why, where it would hook
// its return address: beside an entry probe whose region covers its exit, with
// NoOptimize, with a fetch at the entry (NoExit).
func TestPlanGoReturn(t *testing.T) {
	p := buildPlanBin(t)
	ret := Request{Name: "r", Addr: p.syms["f_plain"], Return: true, Go: true}
	pl, err := MakePlan(p.b, []Request{ret}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pt := pl.Points[pl.PointOf[0]]; !pt.Exit || !pt.Optimized() || pl.Kind(0) != "ro" {
		t.Fatalf("point %#x exit=%v kind %q, want a jump-optimized exit", pt.Site, pt.Exit, pl.Kind(0))
	}
	noExit := ret
	noExit.NoExit = "it fetches at the function's entry ($argN)"
	rip := Request{Name: "r", Addr: p.syms["f_rip"], Return: true, Go: true}
	for _, c := range []struct {
		name string
		reqs []Request
		opt  Options
		why  string
	}{
		{"entry probe over the exit", []Request{p.req("f_rip", 0), rip}, Options{}, whyExitTaken},
		{"no-optimize", []Request{ret}, Options{NoOptimize: true}, "--no-optimize"},
		{"entry fetch", []Request{noExit}, Options{}, "$argN"},
	} {
		c.opt.SkipRefused = true
		pl, err := MakePlan(p.b, c.reqs, c.opt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		r := len(c.reqs) - 1
		if len(pl.Refused) != 1 || pl.Refused[0].Request != r || pl.PointOf[r] >= 0 ||
			!strings.Contains(pl.Refused[0].Err.Error(), "a Go function, whose return address is never hooked") ||
			!strings.Contains(pl.Refused[0].Err.Error(), c.why) {
			t.Errorf("%s: refused %+v, want the return probe, saying %q", c.name, pl.Refused, c.why)
		}
	}
}
