package trampolines

import (
	"bytes"
	"testing"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

func TestBuildSlot(t *testing.T) {
	site := uint64(0x401234)
	code := hx(t, "48 8b 05 10 20 00 00 90")
	s, err := BuildSlot(code, site, 0x900000, SlotOptions{JmpBack: true, Step: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.CopyLen != 7 || s.InsnLen != 7 || len(s.Code) != 12 || s.End() != 0x90000c {
		t.Fatalf("slot %+v", s)
	}
	in, err := x86dec.Decode(s.Code, s.Addr)
	if err != nil || in.RIPTarget != site+7+0x2010 {
		t.Fatalf("copy: %+v %v", in, err)
	}
	j, err := x86dec.Decode(s.Code[s.CopyLen:], s.Addr+uint64(s.CopyLen))
	if err != nil || j.Kind != x86dec.KindJmp || j.Target != site+7 {
		t.Fatalf("jmp back: %+v %v", j, err)
	}
	if n, err := SlotLen(code, site, SlotOptions{JmpBack: true}); err != nil || n != 12 {
		t.Fatalf("SlotLen %d %v", n, err)
	}
	// no jmp back
	s, err = BuildSlot(code, site, 0x900000, SlotOptions{Step: true})
	if err != nil || len(s.Code) != 7 {
		t.Fatalf("%+v %v", s, err)
	}
	// a loop cannot be stepped out of line, but can be boosted as a sandwich
	loop := hx(t, "e2 f0")
	if _, err := BuildSlot(loop, site, 0x900000, SlotOptions{JmpBack: true, Step: true}); err == nil {
		t.Fatal("single-step slot for loop accepted")
	}
	s, err = BuildSlot(loop, site, 0x900000, SlotOptions{JmpBack: true})
	if err != nil || s.Form != FormSandwich || len(s.Code) != 9+5 {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestSlotArea(t *testing.T) {
	var a SlotArea
	sites := []struct {
		code string
		site uint64
	}{
		{"55", 0x401000},
		{"74 05", 0x401010},
		{"48 8d 3d f0 ff ff ff", 0x401020},
		{"e8 00 01 00 00", 0x401030},
	}
	for i, s := range sites {
		n, err := a.Add(hx(t, s.code), s.site, SlotOptions{JmpBack: true, Step: true})
		if err != nil || n != i {
			t.Fatalf("Add: %d %v", n, err)
		}
	}
	if a.Size() != 16*3+5+5 {
		t.Fatalf("size %d", a.Size())
	}
	if err := a.Place(0x900008); err == nil {
		t.Fatal("unaligned area accepted")
	}
	if err := a.Place(0x900000); err != nil {
		t.Fatal(err)
	}
	b := a.Bytes()
	for i, s := range sites {
		sl := a.Slot(i)
		if sl.Addr != 0x900000+uint64(16*i) || a.Offset(i) != uint64(16*i) || !bytes.Equal(b[16*i:16*i+len(sl.Code)], sl.Code) {
			t.Fatalf("slot %d at %#x", i, sl.Addr)
		}
		orig := hx(t, s.code)
		in, _ := x86dec.Decode(orig, s.site)
		r := Relocated{Code: sl.Code[:sl.CopyLen], Form: sl.Form, Inst: in, Single: true}
		checkRelocated(t, orig, s.site, sl.Addr, Options{}, r)
		j, err := x86dec.Decode(sl.Code[sl.CopyLen:], sl.Addr+uint64(sl.CopyLen))
		if err != nil || j.Target != s.site+uint64(in.Len) {
			t.Fatalf("slot %d jmp back %+v %v", i, j, err)
		}
	}
	if b[7] != 0xcc {
		t.Fatalf("padding is %#x, want int3", b[7])
	}
	if _, err := a.Add(hx(t, "55"), 0x401040, SlotOptions{}); err == nil {
		t.Fatal("Add after Place accepted")
	}
}

func TestBuildSlotInt3End(t *testing.T) {
	site := uint64(0x401234)
	code := hx(t, "48 8b 05 10 20 00 00 90")
	s, err := BuildSlot(code, site, 0x900000, SlotOptions{Step: true, Int3End: true})
	if err != nil {
		t.Fatal(err)
	}
	// the relocated copy, then the int3 where the step ends
	if s.CopyLen != 7 || len(s.Code) != 8 || s.Code[7] != 0xcc || !s.Int3End {
		t.Fatalf("slot %+v", s)
	}
	if n, err := SlotLen(code, site, SlotOptions{Step: true, Int3End: true}); err != nil || n != 8 {
		t.Fatalf("SlotLen %d %v", n, err)
	}
	// only copies that fall through; never with a jmp back
	for _, c := range []struct {
		code string
		opt  SlotOptions
	}{
		{"e8 00 01 00 00", SlotOptions{Step: true, Int3End: true}},
		{"74 05", SlotOptions{Step: true, Int3End: true}},
		{"c3", SlotOptions{Step: true, Int3End: true}},
		{"ff d0", SlotOptions{Step: true, Int3End: true}},
		{"e2 f0", SlotOptions{Int3End: true}},
		{"55", SlotOptions{JmpBack: true, Int3End: true}},
	} {
		if _, err := SlotLen(hx(t, c.code), site, c.opt); err == nil {
			t.Errorf("%s %+v: an int3-ended slot accepted", c.code, c.opt)
		}
	}
}
