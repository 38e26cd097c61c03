package kprt

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestEncodeSites: the functions sorted by name, their sites in order, each name and
// refusal once and NUL-terminated inside the table (the runtime's sound() checks it).
func TestEncodeSites(t *testing.T) {
	refused := "uprobes-refuses at 0x1175: syscall cannot run out of line"
	b, err := EncodeSites([]SiteFunc{
		{Name: "work", Addr: 0x11c0, Size: 73, Sites: []Site{{RawSite: RawSite{Off: 0, InsnLen: 10, XMode: XBoost, Flags: SiteSlot}}, {RawSite: RawSite{Off: 10, InsnLen: 7, Disp: 3}, Refusal: refused}}},
		{Name: "myid", Addr: 0x1170, Size: 8, Sites: []Site{{RawSite: RawSite{Off: 5, InsnLen: 2}, Refusal: refused}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var h RawSites
	r := bytes.NewReader(b)
	binary.Read(r, binary.LittleEndian, &h)
	fs := make([]RawSiteFunc, h.NFuncs)
	binary.Read(r, binary.LittleEndian, fs)
	ss := make([]RawSite, h.NSites)
	binary.Read(r, binary.LittleEndian, ss)
	if h.NFuncs != 2 || h.NSites != 3 || int(h.Size) != len(b) || b[len(b)-1] != 0 {
		t.Fatalf("header %+v, %d bytes", h, len(b))
	}
	str := func(off uint32) string { e := bytes.IndexByte(b[off:], 0); return string(b[off : int(off)+e]) }
	if str(fs[0].Name) != "myid" || str(fs[1].Name) != "work" || fs[1].First != 1 || fs[1].NSites != 2 || fs[0].Addr != 0x1170 {
		t.Errorf("functions %+v", fs)
	}
	if ss[0].Why == 0 || ss[0].Why != ss[2].Why || str(ss[0].Why) != refused || ss[1].Why != 0 || ss[1].InsnLen != 10 || ss[2].Disp != 3 {
		t.Errorf("sites %+v", ss)
	}
	if want := SitesSize + 2*SiteFuncSize + 3*SiteSize + len("myid\x00work\x00") + len(refused) + 1; len(b) != want {
		t.Errorf("%d bytes, want %d (each string once)", len(b), want)
	}
}
