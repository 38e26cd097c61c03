package gopclntab

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
)

// table builds a Go 1.20 table of functions at the given entry offsets, the text
// ending at end: the layout the linker writes (header, names, functab, _funcs).
func table(names []string, entries []uint32, end uint32) []byte {
	le := binary.LittleEndian
	var nametab []byte
	nameOffs := make([]uint32, len(names))
	for i, n := range names {
		nameOffs[i] = uint32(len(nametab))
		nametab = append(append(nametab, n...), 0)
	}
	hdr := make([]byte, headerSize)
	le.PutUint32(hdr, magic120)
	hdr[6], hdr[7] = 1, 8
	word := func(i int, v uint64) { le.PutUint64(hdr[8+8*i:], v) }
	word(0, uint64(len(names)))
	word(3, headerSize)
	pclnOff := uint64(headerSize + len(nametab))
	word(7, pclnOff)
	ftab := make([]byte, 8*(len(names)+1))
	var recs []byte
	for i := range names {
		le.PutUint32(ftab[8*i:], entries[i])
		le.PutUint32(ftab[8*i+4:], uint32(len(ftab)+len(recs)))
		r := make([]byte, funcSize)
		le.PutUint32(r, entries[i])
		le.PutUint32(r[4:], nameOffs[i])
		r[40], r[41] = uint8(i), 4
		recs = append(recs, r...)
	}
	le.PutUint32(ftab[8*len(names):], end)
	return append(append(append(hdr, nametab...), ftab...), recs...)
}

func TestParseBuilt(t *testing.T) {
	data := table([]string{"runtime.text", "main.main", "main.fib"}, []uint32{0, 0x40, 0x100}, 0x180)
	fns, err := Parse(data, 0x401000)
	if err != nil {
		t.Fatal(err)
	}
	want := []Func{{"runtime.text", 0x401000, 0x401040, 0, 4}, {"main.main", 0x401040, 0x401100, 1, 4}, {"main.fib", 0x401100, 0x401180, 2, 4}}
	if len(fns) != len(want) {
		t.Fatalf("got %+v, want %+v", fns, want)
	}
	for i := range want {
		if fns[i] != want[i] {
			t.Fatalf("function %d: got %+v, want %+v", i, fns[i], want[i])
		}
	}
}

// TestParseBad: each corruption is refused with the place and the reason.
func TestParseBad(t *testing.T) {
	good := func() []byte { return table([]string{"a", "b"}, []uint32{0, 0x10}, 0x20) }
	le := binary.LittleEndian
	cases := []struct {
		name, want string
		edit       func(d []byte) []byte
	}{
		{"short", "shorter than a header", func(d []byte) []byte { return d[:20] }},
		{"magic", "is not a Go function table's", func(d []byte) []byte { le.PutUint32(d, 0x12345678); return d }},
		{"go116", "Go 1.2-1.17 table", func(d []byte) []byte { le.PutUint32(d, magic116); return d }},
		{"ptrsize", "pointer size 4", func(d []byte) []byte { d[7] = 4; return d }},
		{"nfunc", "holds at most", func(d []byte) []byte { le.PutUint64(d[8:], 1<<40); return d }},
		{"offsets", "past the end", func(d []byte) []byte { le.PutUint64(d[8+7*8:], 1<<40); return d }},
		{"unsorted", "not sorted", func(d []byte) []byte {
			le.PutUint32(d[headerSize+4:], 0x30) // "a" now after "b"
			return d
		}},
		{"record", "past the end of the functab area", func(d []byte) []byte { le.PutUint32(d[headerSize+4+4:], 0xffff); return d }},
		{"entry", "the functab says", func(d []byte) []byte { le.PutUint32(d[len(d)-2*funcSize:], 7); return d }},
		{"name", "outside the name table", func(d []byte) []byte { le.PutUint32(d[len(d)-funcSize+4:], 1000); return d }},
		{"empty", "is empty or not NUL-terminated", func(d []byte) []byte { le.PutUint32(d[len(d)-funcSize+4:], 1); return d }},
	}
	for _, c := range cases {
		_, err := Parse(c.edit(good()), 0x1000)
		if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "at offset 0x") {
			t.Errorf("%s: got %v, want an ErrFormat at an offset saying %q", c.name, err, c.want)
		}
	}
}

// TestParseSelf reads this test binary's own table and compares it with debug/gosym's
// reading of it (an internally linked Go program: its text base is .text's start).
func TestParseSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	data, err := ef.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	text := ef.Section(".text").Addr
	fns, err := Parse(data, text)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != len(tab.Funcs) || len(fns) < 1000 {
		t.Fatalf("%d functions, debug/gosym reads %d", len(fns), len(tab.Funcs))
	}
	for i, g := range tab.Funcs {
		if fns[i].Name != g.Name || fns[i].Entry != g.Entry || fns[i].End != g.End {
			t.Fatalf("function %d: %+v, debug/gosym: %s %#x-%#x", i, fns[i], g.Name, g.Entry, g.End)
		}
	}
}

// FuzzParse: no input makes the reader panic or allocate past what the input holds;
// a table read has sorted, named functions.
func FuzzParse(f *testing.F) {
	f.Add(table([]string{"runtime.text", "main.main", "main.fib"}, []uint32{0, 0x40, 0x100}, 0x180), uint64(0x401000))
	f.Add(table([]string{"a"}, []uint32{0}, 1), uint64(0))
	f.Add([]byte{0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8}, uint64(1))
	f.Fuzz(func(t *testing.T, data []byte, text uint64) {
		fns, err := Parse(data, text)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error not ErrFormat: %v", err)
			}
			return
		}
		if uint64(len(fns)) > uint64(len(data))/8 {
			t.Fatalf("%d functions from %d bytes", len(fns), len(data))
		}
		for i, fn := range fns {
			if fn.Name == "" || fn.End-text < fn.Entry-text || i > 0 && fns[i-1].End != fn.Entry {
				t.Fatalf("function %d: %+v after %+v", i, fn, fns[max(i-1, 0)])
			}
		}
	})
}
