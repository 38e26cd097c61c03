package rewriter

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/atomicfile"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

const smallSrc = `
#include <stdio.h>
int counter;
__attribute__((noinline)) int add(int a, int b) { counter += a; return a + b; }
__attribute__((noinline)) int twice(int a) { return add(a, a); }
int main(int argc, char **argv) { printf("%d\n", twice(argc) + add(argc, 2)); return counter; }
`

func buildSmall(t *testing.T, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not on PATH")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "small.c")
	exe := filepath.Join(dir, "small")
	os.WriteFile(src, []byte(smallSrc), 0o644)
	args := append([]string{"-O2", "-o", exe, src}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

func probes(t *testing.T, f *elfio.File, defs ...string) []probedefs.Probe {
	t.Helper()
	fns := f.Functions()
	var ps []probedefs.Probe
	for i, d := range defs {
		p, err := eventdef.Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		fn, ok := fns.ByName(p.Symbol)
		if !ok {
			t.Fatalf("no function %s", p.Symbol)
		}
		ps = append(ps, probedefs.Probe{Origin: "-e #" + string(rune('1'+i)), Def: p, Addr: fn.Addr + p.Offset})
	}
	return ps
}

func TestRewrite(t *testing.T) {
	exe := buildSmall(t, "-fcf-protection=full", "-Wl,-z,shstk", "-Wl,-z,ibt")
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defs := []string{"p:g/add add a=%di:s32", "p:g/add2 add", "r:g/twice twice $retval", "p:g/tw1 twice+4"}
	res, err := Rewrite(f, probes(t, f, defs...), Options{TracePath: "/tmp/t.trace", ImageName: "small.kp", NoOptimize: true})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Rewrite(f, probes(t, f, defs...), Options{TracePath: "/tmp/t.trace", ImageName: "small.kp", NoOptimize: true})
	if err != nil || !bytes.Equal(res.Image.Bytes(), again.Image.Bytes()) {
		t.Fatalf("a second rewrite differs (%v)", err)
	}
	out := filepath.Join(t.TempDir(), "small.kp")
	if err := atomicfile.WriteFile(out, res.Image, 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := elfio.Open(out)
	if err != nil {
		t.Fatal(err)
	}

	// the entry is the runtime's
	syms := map[string]elfio.Symbol{}
	for _, s := range g.Symbols {
		if !s.Dynamic {
			syms[s.Name] = s
		}
	}
	if e, ok := syms[kprt.SymEntry]; !ok || g.Entry != e.Value {
		t.Errorf("entry %#x, %s at %#x", g.Entry, kprt.SymEntry, e.Value)
	}
	for _, n := range []string{SymDesc, SymTables, SymProbeState, kprt.SymRetTramp, kprt.SymHdrRel} {
		if _, ok := syms[n]; !ok {
			t.Errorf("no symbol %s", n)
		}
	}
	// return probes clear the shadow-stack bit, keep IBT
	if feat, err := g.X86Features(); err != nil || feat != elfio.X86Feature1IBT {
		t.Errorf("x86 features %#x (%v), want IBT only", feat, err)
	}

	// the tables as the runtime will read them
	im, err := tracefile.ReadImage(g)
	if err != nil {
		t.Fatal(err)
	}
	h := im.Header
	if h.NPoints != 2 || h.NProbes != 4 || h.NEvents != 4 || h.OrigEntry != f.Entry || h.ImageID != im.Desc.ImageID || h.ImageID == 0 {
		t.Fatalf("header %+v", h)
	}
	hdrRel := syms[kprt.SymHdrRel]
	word, _ := g.Bytes(hdrRel.Value, 8)
	if int64(le64(word)) != kprt.HdrRel(hdrRel.Value, syms[SymTables].Value) {
		t.Errorf("%s holds %#x", kprt.SymHdrRel, le64(word))
	}
	fns := f.Functions()
	add, _ := fns.ByName("add")
	twice, _ := fns.ByName("twice")
	// add and twice start with endbr64: the int3 goes after it, and the entry probe
	// tw1 at twice+4 shares the return probe's point
	for i, pt := range im.Points {
		wantSite := []uint64{add.Addr + 4, twice.Addr + 4}[i]
		if pt.Site != wantSite {
			t.Errorf("point %d at %#x, want %#x", i, pt.Site, wantSite)
		}
		b, _ := g.Bytes(pt.Site, 1)
		orig, _ := f.Bytes(pt.Site, uint64(pt.InsnLen))
		if b[0] != 0xcc || !bytes.Equal(orig, pt.Orig[:pt.InsnLen]) {
			t.Errorf("point %d: byte %#x, orig % x vs % x", i, b[0], pt.Orig[:pt.InsnLen], orig)
		}
		if pt.XMode != kprt.XEmulate {
			// the slot: the copy, then jmp back to the next instruction
			slot, err := g.Bytes(pt.Slot, uint64(pt.SlotLen)+5)
			if err != nil {
				t.Fatal(err)
			}
			in, err := x86dec.Decode(slot[pt.SlotLen:], pt.Slot+uint64(pt.SlotLen))
			if err != nil || in.Kind != x86dec.KindJmp || in.Target != pt.Site+uint64(pt.InsnLen) {
				t.Errorf("point %d: slot % x does not jmp back to %#x", i, slot, pt.Site+uint64(pt.InsnLen))
			}
			name := SymSlotPrefix + []string{"add+0x4", "twice+0x4"}[i]
			if s, ok := syms[name]; !ok || s.Value != pt.Slot || s.Type != elf.STT_FUNC {
				t.Errorf("slot symbol %s: %+v", name, s)
			}
		}
	}
	d := im.Desc
	if d.Image != "small.kp" || d.Input != "small" || !d.PIE || d.TracePath != "/tmp/t.trace" || len(d.Events) != 4 {
		t.Errorf("desc %+v", d)
	}
	kinds := map[string]string{}
	for i, p := range d.Probes {
		e := d.Events[p.Event]
		kinds[e.Name] = p.Kind
		if im.Probes[i].Event != uint32(p.Event) || (im.Probes[i].Type == kprt.TKretprobe) != e.Return {
			t.Errorf("probe %d: tables %+v, desc %+v", i, im.Probes[i], p)
		}
	}
	if kinds["add"] != "b" || kinds["add2"] != "b" || kinds["twice"] != "rb" || kinds["tw1"] != "b" {
		t.Errorf("kinds %v", kinds)
	}
	// newest definition first at a point, as the kernel runs aggregated probes
	if n := d.Events[d.Probes[0].Event].Name; n != "add2" {
		t.Errorf("first probe at add is %s, want add2", n)
	}

	// --no-boost: k and r; a post handler and a disabled event
	res, err = Rewrite(f, probes(t, f, defs...), Options{NoBoost: true, NoOptimize: true, Disable: []string{"g/add2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Desc.Probes {
		e := res.Desc.Events[p.Event]
		want := map[bool]string{false: "k", true: "r"}[e.Return]
		if p.Kind != want || e.Disabled != (e.Name == "add2") {
			t.Errorf("no-boost %s: kind %s disabled %v", e.Name, p.Kind, e.Disabled)
		}
	}
}

func TestRewriteNoProbes(t *testing.T) {
	exe := buildSmall(t)
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Rewrite(f, nil, Options{})
	if err != nil || res.Plan != nil || res.Desc != nil {
		t.Fatalf("%v %+v", err, res)
	}
	g, err := elfio.Parse("x", res.Image.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tracefile.ReadImage(g); err == nil {
		t.Error("a probe-less rewrite has an image description")
	}
	stub, _ := g.Bytes(g.Entry, 5)
	in, err := x86dec.Decode(stub, g.Entry)
	if err != nil || in.Kind != x86dec.KindJmp || in.Target != f.Entry {
		t.Errorf("entry stub % x", stub)
	}
}

func TestRewriteRefused(t *testing.T) {
	exe := buildSmall(t)
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	ps := probes(t, f, "p:g/a add", "p:g/b add+1")
	if _, err := Rewrite(f, ps, Options{}); err == nil || !strings.Contains(err.Error(), "-e #2") {
		t.Errorf("refused probe: %v", err)
	}
	res, err := Rewrite(f, ps, Options{SkipRefused: true})
	if err != nil || len(res.Refused) != 1 || len(res.Desc.Events) != 1 || res.Desc.Events[0].Name != "a" {
		t.Fatalf("skip refused: %v %+v", err, res)
	}
	if _, err := Rewrite(f, ps[1:], Options{SkipRefused: true}); err == nil || !strings.Contains(err.Error(), "every probe was refused") {
		t.Errorf("all refused: %v", err)
	}
	if _, err := Rewrite(f, []probedefs.Probe{{Origin: "x"}}, Options{}); err == nil {
		t.Error("a probe without a definition was accepted")
	}
	_ = patch.ErrRefused
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestImageIDIsContent: the image id is a hash of what the rewrite writes, so rewrites
// that differ in any option that changes the output (ExitsOnly and Debug included,
// which a hand-kept list of options once missed) get different ids, and the same
// rewrite the same id.
func TestImageIDIsContent(t *testing.T) {
	exe := buildSmall(t)
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defs := []string{"p:g/add add a=%di:s32", "r:g/twice twice $retval"}
	variants := map[string]Options{
		"default":     {},
		"again":       {},
		"no-boost":    {NoBoost: true, NoOptimize: true},
		"count-only":  {CountOnly: true},
		"exits-only":  {CountOnly: true, ExitsOnly: true, SkipRefused: true},
		"debug":       {Debug: true},
		"trace-path":  {TracePath: "/tmp/x.trace"},
		"image-name":  {ImageName: "other"},
		"disable-all": {Disable: []string{"all"}},
	}
	ids := map[string]uint64{}
	imgs := map[string][]byte{}
	for name, opt := range variants {
		res, err := Rewrite(f, probes(t, f, defs...), opt)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ids[name], imgs[name] = res.Desc.ImageID, res.Image.Bytes()
	}
	if ids["default"] != ids["again"] || !bytes.Equal(imgs["default"], imgs["again"]) {
		t.Errorf("the same rewrite twice: ids %#x %#x", ids["default"], ids["again"])
	}
	for a := range variants {
		for b := range variants {
			if a < b && !(a == "again" || b == "again") && ids[a] == ids[b] {
				t.Errorf("%s and %s write different images with the same id %#x", a, b, ids[a])
			}
		}
	}
}
