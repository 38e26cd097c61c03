package ehframe

import (
	"errors"
	"os"
	"testing"
)

// realSeeds returns small slices of real sections: a prefix of .eh_frame
// (CIEs and FDEs as linkers lay them out) and some LSDAs.
type lsdaSeed struct {
	table           []byte
	tableAddr, lsda uint64
	funcStart       uint64
}

func realSeeds(t testing.TB) (eh [][]byte, ehAddrs []uint64, lsdas []lsdaSeed) {
	for _, p := range []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/bin/python3.11",
	} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		im := loadImage(t, p)
		if !im.hasEhFrame {
			continue
		}
		n := min(len(im.eh), 2048)
		eh = append(eh, im.eh[:n])
		ehAddrs = append(ehAddrs, im.ehAddr)
		fdes, _ := Parse(im.eh, im.ehAddr, im.text, im.data)
		k := 0
		for _, f := range fdes {
			if f.LSDA == 0 || f.LSDAIndirect || f.LSDA < im.exceptAddr || f.LSDA-im.exceptAddr >= uint64(len(im.except)) {
				continue
			}
			off := f.LSDA - im.exceptAddr
			end := min(off+256, uint64(len(im.except)))
			lsdas = append(lsdas, lsdaSeed{im.except[off:end], f.LSDA, f.LSDA, f.Start})
			if k++; k == 8 {
				break
			}
		}
	}
	return eh, ehAddrs, lsdas
}

func FuzzParse(f *testing.F) {
	eh, addrs, _ := realSeeds(f)
	for i := range eh {
		f.Add(eh[i], addrs[i], uint64(0), uint64(0))
	}
	// Synthetic sections covering the less common encodings.
	var s sec
	c1 := s.entry(cieBody(1, "zPLR", []byte{0x9b, 1, 2, 3, 4, 0x1b, 0x1b}))
	s.fde(c1, []byte{0, 1, 0, 0, 0x20, 0, 0, 0, 4, 0x10, 0, 0, 0})
	c2 := s.entry64(cieBody(4, "zRLSBG", []byte{0x50, 0x9b}))
	s.fde(c2, make([]byte, 30))
	c3 := s.entry(cieBody(3, "eh", nil))
	s.fde(c3, make([]byte, 16))
	s.b = append(s.b, 0, 0, 0, 0)
	f.Add(s.b, uint64(0x40000), uint64(0x1000), uint64(0x80000))
	f.Add([]byte{}, uint64(0), uint64(0), uint64(0))
	if b, err := os.ReadFile("testdata/debug_frame.bin"); err == nil {
		f.Add(b, uint64(0), uint64(0), uint64(0))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ^uint64(0), uint64(0), uint64(0))

	f.Fuzz(func(t *testing.T, data []byte, ehAddr, textAddr, dataAddr uint64) {
		fdes, err := Parse(data, ehAddr, textAddr, dataAddr)
		for _, fd := range fdes {
			if fd.Offset >= uint64(len(data)) || fd.CIE >= fd.Offset || fd.End < fd.Start {
				t.Fatalf("inconsistent FDE %+v for %d bytes", fd, len(data))
			}
			// the call frame machine runs on whatever the parser accepted
			if fd.End > fd.Start {
				_, _ = CFAAt(data, ehAddr, textAddr, dataAddr, fd, fd.Start)
				_, _ = CFAAt(data, ehAddr, textAddr, dataAddr, fd, fd.End-1)
			}
		}
		if err != nil {
			var errs *Errors
			if !errors.As(err, &errs) || len(errs.List) == 0 || err.Error() == "" {
				t.Fatalf("error %v is not a non-empty *Errors", err)
			}
			for _, e := range errs.List {
				if e.Offset >= uint64(len(data)) {
					t.Fatalf("error offset %#x past %d bytes: %v", e.Offset, len(data), e)
				}
			}
		}
		// the same bytes as .debug_frame: its FDEs' CIEs may follow them
		dfdes, _ := ParseDebugFrame(data)
		for _, fd := range dfdes {
			if fd.Offset >= uint64(len(data)) || fd.CIE >= uint64(len(data)) || fd.End < fd.Start || !fd.Debug {
				t.Fatalf("inconsistent .debug_frame FDE %+v for %d bytes", fd, len(data))
			}
			if fd.End > fd.Start {
				_, _ = CFAAt(data, 0, 0, 0, fd, fd.Start)
				_, _ = CFAAt(data, 0, 0, 0, fd, fd.End-1)
			}
		}
		// Reuse the bytes as an exception table too.
		pads, _ := LandingPads(fdes, data, ehAddr)
		for i := 1; i < len(pads); i++ {
			if pads[i] <= pads[i-1] {
				t.Fatalf("landing pads not sorted and unique: %#x", pads)
			}
		}
	})
}

func FuzzParseLSDA(f *testing.F) {
	_, _, lsdas := realSeeds(f)
	for _, l := range lsdas {
		f.Add(l.table, l.tableAddr, l.lsda, l.funcStart)
	}
	f.Add([]byte{0xff, 0xff, 0x01, 4, 0x10, 0x08, 0x20, 0x00}, uint64(0x5000), uint64(0x5000), uint64(0x1000))
	f.Add([]byte{0x00, 1, 2, 3, 4, 5, 6, 7, 8, 0x9b, 0x10, 0x03, 16, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 1}, uint64(0x5000), uint64(0x5000), uint64(0x1000))
	f.Add([]byte{0x1b, 0xf0, 0xff, 0xff, 0xff, 0xff, 0x0b, 7, 1, 0, 2, 0, 3, 0, 0}, uint64(0x5000), uint64(0x5000), ^uint64(0))

	f.Fuzz(func(t *testing.T, table []byte, tableAddr, lsda, funcStart uint64) {
		l, err := DecodeLSDA(table, tableAddr, lsda, funcStart)
		if err != nil {
			var ee *EntryError
			if !errors.As(err, &ee) || ee.Section != ".gcc_except_table" || err.Error() == "" {
				t.Fatalf("error %v is not an *EntryError", err)
			}
			return
		}
		for _, cs := range l.CallSites {
			if cs.End < cs.Start || cs.Start < funcStart {
				t.Fatalf("bad call site %+v (function %#x)", cs, funcStart)
			}
		}
		sites, err := ParseLSDA(table, tableAddr, lsda, funcStart)
		if err != nil || len(sites) != len(l.CallSites) {
			t.Fatalf("ParseLSDA disagrees with DecodeLSDA: %v", err)
		}
	})
}
