package ehframe

import (
	"debug/elf"
	"errors"
	"sort"
	"testing"
)

// TestParseHdrReal: the linker's search table of real libraries is exactly their
// .eh_frame FDEs (start, address), sorted; encoding it again gives the same bytes.
func TestParseHdrReal(t *testing.T) {
	n := 0
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/bin/python3.11"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		hs, es := f.Section(".eh_frame_hdr"), f.Section(".eh_frame")
		if hs == nil || es == nil {
			f.Close()
			continue
		}
		hb, err1 := hs.Data()
		eb, err2 := es.Data()
		f.Close()
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", p, err1, err2)
		}
		n++
		h, err := ParseHdr(hb, hs.Addr)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if h.EhFrame != es.Addr || len(h.Table) == 0 {
			t.Fatalf("%s: eh_frame_ptr %#x (want %#x), %d entries", p, h.EhFrame, es.Addr, len(h.Table))
		}
		fdes, err := Parse(eb, es.Addr, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var want []HdrEntry
		for _, fd := range fdes {
			want = append(want, HdrEntry{Loc: fd.Start, FDE: es.Addr + fd.Offset})
		}
		sort.SliceStable(want, func(i, j int) bool { return want[i].Loc < want[j].Loc })
		if len(want) != len(h.Table) {
			t.Fatalf("%s: %d table entries, %d FDEs", p, len(h.Table), len(want))
		}
		for i := range want {
			if want[i] != h.Table[i] {
				t.Fatalf("%s: entry %d is %+v, FDE says %+v", p, i, h.Table[i], want[i])
			}
		}
		again, err := EncodeHdr(hs.Addr, h.EhFrame, h.Table)
		if err != nil || string(again) != string(hb) {
			t.Fatalf("%s: re-encoded header differs (%v)", p, err)
		}
	}
	if n == 0 {
		t.Skip("no system library with .eh_frame_hdr")
	}
}

// TestEncodeHdr: entries are sorted, addresses are relative to the header, and what
// cannot be binary-searched is refused.
func TestEncodeHdr(t *testing.T) {
	const at = 0x10000
	b, err := EncodeHdr(at, 0x8000, []HdrEntry{{0x3000, 0x8100}, {0x1000, 0x8020}, {0x2000, 0x8060}})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 0x1b, 0x03, 0x3b,
		0xfc, 0x7f, 0xff, 0xff, // 0x8000 - 0x10004
		3, 0, 0, 0,
		0x00, 0x10, 0xff, 0xff, 0x20, 0x80, 0xff, 0xff,
		0x00, 0x20, 0xff, 0xff, 0x60, 0x80, 0xff, 0xff,
		0x00, 0x30, 0xff, 0xff, 0x00, 0x81, 0xff, 0xff}
	if string(b) != string(want) || HdrSize(3) != uint64(len(want)) {
		t.Fatalf("got % x\nwant % x", b, want)
	}
	h, err := ParseHdr(b, at)
	if err != nil || h.EhFrame != 0x8000 || len(h.Table) != 3 || h.Table[0] != (HdrEntry{0x1000, 0x8020}) || h.Table[2] != (HdrEntry{0x3000, 0x8100}) {
		t.Fatalf("parsed %+v, %v", h, err)
	}
	if _, err := EncodeHdr(at, 0x8000, []HdrEntry{{0x1000, 1}, {0x1000, 2}}); !errors.Is(err, ErrBadEntry) {
		t.Errorf("duplicate start: %v", err)
	}
	if _, err := EncodeHdr(at, 0x8000, []HdrEntry{{at + 1<<31, 1}}); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("far code: %v", err)
	}
	if _, err := EncodeHdr(1<<40, 0x8000, nil); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("far eh_frame: %v", err)
	}
}

// TestParseHdrNoTable: a header without a search table (or with one libgcc would not
// binary-search) gives eh_frame_ptr only; bad ones are errors, never panics.
func TestParseHdrNoTable(t *testing.T) {
	h, err := ParseHdr([]byte{1, 0x1b, 0xff, 0xff, 0x10, 0, 0, 0}, 0x1000)
	if err != nil || h.EhFrame != 0x1014 || h.Table != nil {
		t.Errorf("omitted table: %+v, %v", h, err)
	}
	h, err = ParseHdr([]byte{1, 0x1b, 0x03, 0x03, 0x10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0x1000)
	if err != nil || h.Table != nil {
		t.Errorf("udata4 table: %+v, %v", h, err)
	}
	for _, b := range [][]byte{nil, {1, 0x1b}, {2, 0x1b, 0x03, 0x3b, 0, 0, 0, 0}, {1, 0x9b, 0x03, 0x3b, 0, 0, 0, 0},
		{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 2, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, {1, 0x1b, 0x03, 0x3b, 0, 0}} {
		if _, err := ParseHdr(b, 0x1000); err == nil {
			t.Errorf("% x: no error", b)
		}
	}
}

func FuzzParseHdr(f *testing.F) {
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6"} {
		if fe, err := elf.Open(p); err == nil {
			if s := fe.Section(".eh_frame_hdr"); s != nil {
				if b, err := s.Data(); err == nil {
					f.Add(b[:min(len(b), 200)], s.Addr)
				}
			}
			fe.Close()
		}
	}
	f.Add([]byte{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, addr uint64) {
		h, err := ParseHdr(b, addr)
		if err != nil {
			return
		}
		if uint64(len(h.Table)) > uint64(len(b))/8 {
			t.Fatalf("%d entries from %d bytes", len(h.Table), len(b))
		}
	})
}
