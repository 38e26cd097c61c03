package rewriter

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// TestRewriteOptimized: a jump-optimized point's table entry, detour and site jmp.
func TestRewriteOptimized(t *testing.T) {
	exe := buildSmall(t, "-fcf-protection=full", "-Wl,-z,shstk")
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	// add+4: add %edi,counter(%rip) (6 bytes, RIP-relative): optimized; twice+4 is
	// followed by a jmp 4 bytes on: boosted
	defs := []string{"p:g/add add a=%di:s32", "r:g/addr add $retval", "r:g/twice twice"}
	res, err := Rewrite(f, probes(t, f, defs...), Options{ImageName: "small.kp"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := elfio.Parse("small.kp", res.Image.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	im, err := tracefile.ReadImage(g)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, p := range im.Desc.Probes {
		kinds[im.Desc.Events[p.Event].Name] = p.Kind
	}
	if !reflect.DeepEqual(kinds, map[string]string{"add": "o", "addr": "ro", "twice": "rb"}) {
		t.Fatalf("kinds %v", kinds)
	}
	add, _ := f.Functions().ByName("add")
	pt := im.Points[0]
	if pt.Site != add.Addr+4 || pt.XMode != kprt.XOptimized || pt.InsnLen != 6 || pt.SlotLen != 6 || pt.NProbes != 2 {
		t.Fatalf("point %+v", pt)
	}
	orig, _ := f.Bytes(pt.Site, 6)
	if !bytes.Equal(pt.Orig[:6], orig) {
		t.Errorf("orig % x, want % x", pt.Orig[:6], orig)
	}
	tm, err := trampolines.OptTemplate()
	if err != nil {
		t.Fatal(err)
	}
	// the site: jmp to the detour's entry, int3 filler
	site, _ := g.Bytes(pt.Site, 6)
	j, err := x86dec.Decode(site, pt.Site)
	if err != nil || j.Kind != x86dec.KindJmp || j.Target != pt.Slot+uint64(tm.Entry) || site[5] != 0xcc {
		t.Fatalf("site % x", site)
	}
	// the detour: the template, the gate and index fields, the relocated add, jmp back
	dl, _ := trampolines.DetourLen(6)
	det, err := g.Bytes(pt.Slot, uint64(dl))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(det[:tm.Gate], tm.Code[:tm.Gate]) || binary.LittleEndian.Uint32(det[tm.Index:]) != 0 {
		t.Errorf("template or index field")
	}
	gate := pt.Slot + uint64(tm.Gate) + 4 + uint64(int64(int32(binary.LittleEndian.Uint32(det[tm.Gate:]))))
	syms := map[string]uint64{}
	for _, s := range g.Symbols {
		syms[s.Name] = s.Value
	}
	if want := syms[SymProbeState] + uint64(pt.FirstProbe)*kprt.ProbeStateSize + 20; gate != want {
		t.Errorf("gate field aims at %#x, want %#x", gate, want)
	}
	rel := len(tm.Code)
	in, err := x86dec.Decode(det[rel:], pt.Slot+uint64(rel))
	want, _ := x86dec.Decode(orig, pt.Site)
	if err != nil || !in.RIPRel || in.RIPTarget != want.RIPTarget {
		t.Errorf("relocated add: %+v %v", in, err)
	}
	back, err := x86dec.Decode(det[rel+6:], pt.Slot+uint64(rel+6))
	if err != nil || back.Kind != x86dec.KindJmp || back.Target != pt.Site+6 {
		t.Errorf("jmp back % x", det[rel+6:])
	}
	if syms[SymDetourPrefix+"add+0x4"] != pt.Slot {
		t.Errorf("detour symbol at %#x, detour at %#x", syms[SymDetourPrefix+"add+0x4"], pt.Slot)
	}
	// a detour may resume through iretq: the shadow-stack bit is cleared
	if feat, err := g.X86Features(); err != nil || feat&elfio.X86Feature1SHSTK != 0 {
		t.Errorf("x86 features %#x %v", feat, err)
	}
	// --no-optimize: the same probes are int3s
	res, err = Rewrite(f, probes(t, f, defs...), Options{NoOptimize: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Desc.Probes {
		if p.Kind == "o" || p.Kind == "ro" {
			t.Errorf("--no-optimize: kind %s", p.Kind)
		}
	}
}

// TestRewriteVerify: --verify-regions tables: the would-be-optimized point is XBoost
// with the whole relocated DCR as its slot; every inner byte is a PFInner point with
// one TVerify probe; the description lists them and survives a round trip.
func TestRewriteVerify(t *testing.T) {
	exe := buildSmall(t, "-fcf-protection=full")
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Rewrite(f, probes(t, f, "p:g/add add a=%di:s32", "r:g/twice twice"), Options{VerifyRegions: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := elfio.Parse("x", res.Image.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	im, err := tracefile.ReadImage(g)
	if err != nil {
		t.Fatal(err)
	}
	add, _ := f.Functions().ByName("add")
	site := add.Addr + 4
	// add+4, its 5 inner bytes, twice+4
	if len(im.Points) != 7 {
		t.Fatalf("%d points", len(im.Points))
	}
	pt := im.Points[0]
	if pt.Site != site || pt.XMode != kprt.XBoost || pt.PFlags != 0 || pt.SlotLen != 6 || pt.InsnLen != 6 {
		t.Fatalf("site point %+v", pt)
	}
	slot, _ := g.Bytes(pt.Slot, 11)
	if j, err := x86dec.Decode(slot[6:], pt.Slot+6); err != nil || j.Kind != x86dec.KindJmp || j.Target != site+6 {
		t.Errorf("verify slot % x", slot)
	}
	if b, _ := g.Bytes(site, 6); !bytes.Equal(b, bytes.Repeat([]byte{0xcc}, 6)) {
		t.Errorf("DCR bytes % x, want six int3", b)
	}
	for k, ip := range im.Points[1:6] {
		q := im.Probes[ip.FirstProbe]
		if ip.Site != site+uint64(k+1) || ip.PFlags != kprt.PFInner || ip.XMode != kprt.XBoost || ip.Target != site ||
			ip.NProbes != 1 || q.Type != kprt.TVerify || q.Event != kprt.NoEvent || ip.Slot != 0 || ip.SlotLen != 0 {
			t.Errorf("inner point %d: %+v %+v", k+1, ip, q)
		}
		dp := im.Desc.Probes[ip.FirstProbe]
		if dp.Kind != tracefile.KindVerify || dp.Site != ip.Site || dp.Addr != site || dp.Symbol != "add" || dp.Offset != uint64(4+k+1) {
			t.Errorf("inner desc %d: %+v", k+1, dp)
		}
	}
	if dp := im.Desc.Probes[im.Points[0].FirstProbe]; !dp.Verify || dp.Kind != "b" {
		t.Errorf("site desc %+v", dp)
	}
	// the compact JSON expands to the same list
	b, err := im.Desc.Marshal(im.Desc.TablesAddr())
	if err != nil {
		t.Fatal(err)
	}
	d2, err := tracefile.ParseDesc(b)
	if err != nil || !reflect.DeepEqual(d2.Probes, im.Desc.Probes) {
		t.Fatalf("round trip: %v", err)
	}
	js, err := tracefile.DescJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(js, []byte(`"kind":"verify"`)) != 0 || bytes.Count(js, []byte(`"verify":[{`)) != 1 {
		t.Errorf("verify probes are not compact: %s", js)
	}
}

func TestRewriteExclude(t *testing.T) {
	exe := buildSmall(t)
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	ps := probes(t, f, "p:g/add add", "p:g/twice twice")
	res, err := Rewrite(f, ps, Options{Exclude: []string{"tw*"}, SkipRefused: true})
	if err != nil || len(res.Refused) != 1 || len(res.Plan.Points) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	if _, err := Rewrite(f, ps, Options{Exclude: []string{"nothing*"}}); err == nil {
		t.Error("a glob matching nothing was accepted")
	}
}
