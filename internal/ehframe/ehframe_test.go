package ehframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// --- byte builders for synthetic sections ---

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// sec builds an .eh_frame section entry by entry.
type sec struct{ b []byte }

// entry appends length+body and returns the entry's offset.
func (s *sec) entry(body []byte) int {
	off := len(s.b)
	s.b = append(s.b, le32(uint32(len(body)))...)
	s.b = append(s.b, body...)
	return off
}

func (s *sec) entry64(body []byte) int {
	off := len(s.b)
	s.b = append(s.b, 0xff, 0xff, 0xff, 0xff)
	s.b = append(s.b, le64(uint64(len(body)))...)
	s.b = append(s.b, body...)
	return off
}

// cieBody is a CIE (id 0) of the given version and augmentation.
func cieBody(version byte, aug string, augData []byte) []byte {
	b := cat(le32(0), []byte{version}, []byte(aug), []byte{0})
	if len(aug) >= 2 && aug[:2] == "eh" {
		b = append(b, le64(0)...)
		aug = aug[2:]
	}
	if version == 4 {
		b = append(b, 8, 0)
	}
	b = append(b, 1, 0x78) // code align 1, data align -8
	if version == 1 {
		b = append(b, 16)
	} else {
		b = append(b, uleb(16)...)
	}
	if len(aug) > 0 && aug[0] == 'z' {
		b = append(b, uleb(uint64(len(augData)))...)
		b = append(b, augData...)
	}
	return append(b, 0x0c, 7, 8) // DW_CFA_def_cfa rsp+8
}

// fde appends an FDE for cieOff whose content follows the CIE pointer.
// It returns the FDE offset; its pc_begin field is at offset+8.
func (s *sec) fde(cieOff int, content []byte) int {
	return s.entry(cat(le32(uint32(len(s.b)+4-cieOff)), content))
}

const ehAddr, textAddr, dataAddr = 0x40000, 0x1000, 0x80000

func mustParse(t *testing.T, b []byte) []FDE {
	t.Helper()
	fdes, err := Parse(b, ehAddr, textAddr, dataAddr)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return fdes
}

func TestPointerEncodings(t *testing.T) {
	type tc struct {
		name    string
		enc     byte
		begin   []byte // encoded pc_begin
		rng     []byte // encoded pc_range
		want    func(field uint64) (start, end uint64)
		pad     int // extra bytes before the FDE so alignment varies
		aligned bool
	}
	abs := func(s, e uint64) func(uint64) (uint64, uint64) {
		return func(uint64) (uint64, uint64) { return s, e }
	}
	cases := []tc{
		{"absptr", 0x00, le64(0x401000), le64(0x20), abs(0x401000, 0x401020), 0, false},
		{"udata2", 0x02, le16(0x1234), le16(0x10), abs(0x1234, 0x1244), 0, false},
		{"udata4", 0x03, le32(0x401000), le32(0x30), abs(0x401000, 0x401030), 0, false},
		{"udata8", 0x04, le64(0xffff_8000_0000_0000), le64(1), abs(0xffff_8000_0000_0000, 0xffff_8000_0000_0001), 0, false},
		{"uleb128", 0x01, uleb(0x401000), uleb(300), abs(0x401000, 0x401000+300), 0, false},
		{"signed", 0x08, le64(0x2000), le64(4), abs(0x2000, 0x2004), 0, false},
		{"sdata8", 0x0c, le64(0x3000), le64(4), abs(0x3000, 0x3004), 0, false},
		{"pcrel|sdata4", 0x1b, le32(uint32(0xfffff000)), le32(0x40),
			func(f uint64) (uint64, uint64) { return f - 0x1000, f - 0x1000 + 0x40 }, 0, false},
		{"pcrel|sdata2", 0x1a, le16(uint16(0xff00)), le16(8),
			func(f uint64) (uint64, uint64) { return f - 0x100, f - 0x100 + 8 }, 0, false},
		{"pcrel|sleb128", 0x19, sleb(-0x30000), uleb(8),
			func(f uint64) (uint64, uint64) { return f - 0x30000, f - 0x30000 + 8 }, 0, false},
		{"pcrel|udata4", 0x13, le32(0x100), le32(8),
			func(f uint64) (uint64, uint64) { return f + 0x100, f + 0x108 }, 0, false},
		{"textrel|udata4", 0x23, le32(0x10), le32(8), abs(textAddr+0x10, textAddr+0x18), 0, false},
		{"datarel|sdata4", 0x3b, le32(uint32(0xfffffff0)), le32(8), abs(dataAddr-0x10, dataAddr-8), 0, false},
		{"aligned", 0x50, nil, le64(0x10), abs(0x401000, 0x401010), 0, true},
		{"aligned+pad", 0x50, nil, le64(0x10), abs(0x401000, 0x401010), 1, true},
		{"aligned+pad3", 0x50, nil, le64(0x10), abs(0x401000, 0x401010), 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s sec
			ci := s.entry(cieBody(1, "zR", []byte{c.enc}))
			for i := 0; i < c.pad; i++ { // zero-length entries: skipped
				s.b = append(s.b, 0, 0, 0, 0)
			}
			var off int
			if c.aligned {
				// pc_begin at offset len+8, aligned up to 8 relative to ehAddr.
				field := len(s.b) + 8
				padN := (8 - (ehAddr+field)%8) % 8
				off = s.fde(ci, cat(make([]byte, padN), le64(0x401000), c.rng, uleb(0)))
			} else {
				off = s.fde(ci, cat(c.begin, c.rng, uleb(0)))
			}
			fdes := mustParse(t, s.b)
			if len(fdes) != 1 {
				t.Fatalf("got %d FDEs, want 1", len(fdes))
			}
			ws, we := c.want(ehAddr + uint64(off) + 8)
			f := fdes[0]
			if f.Start != ws || f.End != we || f.Offset != uint64(off) || f.CIE != uint64(ci) || f.LSDA != 0 {
				t.Errorf("got %+v, want start %#x end %#x offset %#x cie %#x", f, ws, we, off, ci)
			}
		})
	}
}

func TestAugmentations(t *testing.T) {
	var s sec
	// zPLR: personality indirect|pcrel|sdata4, LSDA pcrel|sdata4, FDE pcrel|sdata4.
	c1 := s.entry(cieBody(1, "zPLR", cat([]byte{0x9b}, le32(0x1234), []byte{0x1b, 0x1b})))
	f1 := s.fde(c1, cat(le32(0x100), le32(0x20), uleb(4), le32(0x2000)))
	f1null := s.fde(c1, cat(le32(0x200), le32(0x20), uleb(4), le32(0))) // raw 0: no LSDA
	// zLR with funcrel LSDA, and S (signal frame), version 3.
	c2 := s.entry(cieBody(3, "zLRS", []byte{0x43, 0x1b}))
	f2 := s.fde(c2, cat(le32(0x300), le32(0x40), uleb(4), le32(0x18)))
	// Indirect LSDA (pointer to a slot), B and G markers, version 4.
	c3 := s.entry(cieBody(4, "zRLBG", []byte{0x1b, 0x9b}))
	f3 := s.fde(c3, cat(le32(0x400), le32(0x40), uleb(4), le32(0x50)))
	// Unknown letter after 'z': the rest of the augmentation data is skipped.
	c4 := s.entry(cieBody(1, "zRX", []byte{0x1b, 0xaa, 0xbb}))
	f4 := s.fde(c4, cat(le32(0x500), le32(0x10), uleb(0)))
	// Old "eh" augmentation and an empty one: absptr, no augmentation data.
	c5 := s.entry(cieBody(1, "eh", nil))
	f5 := s.fde(c5, cat(le64(0x600), le64(0x10)))
	c6 := s.entry(cieBody(1, "", nil))
	f6 := s.fde(c6, cat(le64(0x700), le64(0x10)))
	// FDE augmentation data longer than the LSDA pointer (allowed: skipped).
	f7 := s.fde(c1, cat(le32(0x800), le32(0x20), uleb(6), le32(0x3000), []byte{0, 0}))
	s.b = append(s.b, 0, 0, 0, 0) // terminator

	fdes := mustParse(t, s.b)
	pc := func(off int, v uint64) uint64 { return ehAddr + uint64(off) + 8 + v }
	lsdaField := func(off int) uint64 { return ehAddr + uint64(off) + 8 + 4 + 4 + 1 }
	want := []FDE{
		{Start: pc(f1, 0x100), End: pc(f1, 0x120), LSDA: lsdaField(f1) + 0x2000, Offset: uint64(f1), CIE: uint64(c1)},
		{Start: pc(f1null, 0x200), End: pc(f1null, 0x220), Offset: uint64(f1null), CIE: uint64(c1)},
		{Start: pc(f2, 0x300), End: pc(f2, 0x340), LSDA: pc(f2, 0x300) + 0x18, Offset: uint64(f2), CIE: uint64(c2), SignalFrame: true},
		{Start: pc(f3, 0x400), End: pc(f3, 0x440), LSDA: lsdaField(f3) + 0x50, LSDAIndirect: true, Offset: uint64(f3), CIE: uint64(c3)},
		{Start: pc(f4, 0x500), End: pc(f4, 0x510), Offset: uint64(f4), CIE: uint64(c4)},
		{Start: 0x600, End: 0x610, Offset: uint64(f5), CIE: uint64(c5)},
		{Start: 0x700, End: 0x710, Offset: uint64(f6), CIE: uint64(c6)},
		{Start: pc(f7, 0x800), End: pc(f7, 0x820), LSDA: lsdaField(f7) + 0x3000, Offset: uint64(f7), CIE: uint64(c1)},
	}
	if len(fdes) != len(want) {
		t.Fatalf("got %d FDEs, want %d: %+v", len(fdes), len(want), fdes)
	}
	for i := range want {
		if fdes[i] != want[i] {
			t.Errorf("FDE %d:\n got  %+v\n want %+v", i, fdes[i], want[i])
		}
	}
}

func TestLengthsAndTerminators(t *testing.T) {
	var s sec
	c1 := s.entry64(cieBody(1, "zR", []byte{0x03}))
	s.b = append(s.b, 0, 0, 0, 0) // zero terminator in the middle
	// 64-bit FDE: length escape, then a 4-byte CIE pointer (LSB).
	f1 := len(s.b)
	s.entry64(cat(le32(uint32(f1+12-c1)), le32(0x1000), le32(0x10), uleb(0)))
	s.b = append(s.b, 0, 0, 0, 0, 0, 0, 0, 0)
	f2 := s.fde(c1, cat(le32(0x2000), le32(0x20), uleb(0)))
	s.b = append(s.b, 0, 0, 0, 0) // final terminator
	fdes := mustParse(t, s.b)
	want := []FDE{
		{Start: 0x1000, End: 0x1010, Offset: uint64(f1), CIE: uint64(c1)},
		{Start: 0x2000, End: 0x2020, Offset: uint64(f2), CIE: uint64(c1)},
	}
	if len(fdes) != 2 || fdes[0] != want[0] || fdes[1] != want[1] {
		t.Fatalf("got %+v, want %+v", fdes, want)
	}
	if fdes, err := Parse(nil, 0, 0, 0); err != nil || len(fdes) != 0 {
		t.Errorf("empty section: %v, %v", fdes, err)
	}
}

// TestErrorPolicy checks that bad entries are reported with their offset and
// kind and do not hide the good ones.
func TestErrorPolicy(t *testing.T) {
	type tc struct {
		name    string
		build   func(s *sec, c int) (badOff int)
		kind    string
		sentinl error
	}
	cases := []tc{
		{"cie pointer before section", func(s *sec, c int) int {
			return s.entry(cat(le32(0x100000), le32(0), le32(0)))
		}, "FDE", ErrBadEntry},
		{"cie pointer to the FDE itself", func(s *sec, c int) int {
			return s.entry(cat(le32(4), le32(0), le32(0)))
		}, "FDE", ErrBadEntry},
		{"cie pointer into the FDE header", func(s *sec, c int) int {
			return s.entry(cat(le32(2), le32(0), le32(0)))
		}, "FDE", ErrBadEntry},
		{"cie pointer to an FDE", func(s *sec, c int) int {
			prev := c + 4 + int(binary.LittleEndian.Uint32(s.b[c:])) // the first good FDE
			off := len(s.b)
			s.entry(cat(le32(uint32(off+4-prev)), le32(0), le32(0)))
			return off
		}, "FDE", ErrBadEntry},
		{"bad fde encoding", func(s *sec, c int) int {
			c2 := s.entry(cieBody(1, "zR", []byte{0x07}))
			s.fde(c2, cat(le32(0), le32(0), uleb(0)))
			return c2
		}, "CIE", ErrBadEncoding},
		{"unknown augmentation without z", func(s *sec, c int) int {
			c2 := s.entry(cieBody(1, "Q", nil))
			s.fde(c2, cat(le64(0), le64(0)))
			return c2
		}, "CIE", ErrUnsupported},
		{"cie version 2", func(s *sec, c int) int {
			return s.entry(cieBody(2, "zR", []byte{0x1b}))
		}, "CIE", ErrUnsupported},
		{"funcrel pc_begin", func(s *sec, c int) int {
			c2 := s.entry(cieBody(1, "zR", []byte{0x43}))
			return s.fde(c2, cat(le32(0), le32(0), uleb(0)))
		}, "FDE", ErrUnsupported},
		{"indirect pc_begin", func(s *sec, c int) int {
			c2 := s.entry(cieBody(1, "zR", []byte{0x9b}))
			return s.fde(c2, cat(le32(0), le32(0), uleb(0)))
		}, "FDE", ErrUnsupported},
		{"pc_begin truncated", func(s *sec, c int) int {
			return s.fde(c, le16(0))
		}, "FDE", ErrTruncated},
		{"augmentation length too long", func(s *sec, c int) int {
			return s.fde(c, cat(le32(0), le32(0), uleb(50)))
		}, "FDE", ErrTruncated},
		{"range wraps", func(s *sec, c int) int {
			c2 := s.entry(cieBody(1, "zR", []byte{0x04}))
			return s.fde(c2, cat(le64(^uint64(0)-4), le64(0x10), uleb(0)))
		}, "FDE", ErrBadEntry},
		{"entry too short", func(s *sec, c int) int {
			return s.entry([]byte{1, 2})
		}, "entry", ErrBadEntry},
		{"cie augmentation string unterminated", func(s *sec, c int) int {
			return s.entry(cat(le32(0), []byte{1, 'z', 'R'}))
		}, "CIE", ErrTruncated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s sec
			ci := s.entry(cieBody(1, "zR", []byte{0x03}))
			good1 := s.fde(ci, cat(le32(0x1000), le32(0x10), uleb(0)))
			bad := c.build(&s, ci)
			good2 := s.fde(ci, cat(le32(0x2000), le32(0x10), uleb(0)))
			fdes, err := Parse(s.b, ehAddr, 0, 0)
			if len(fdes) != 2 || fdes[0].Offset != uint64(good1) || fdes[1].Offset != uint64(good2) {
				t.Errorf("good FDEs lost: %+v", fdes)
			}
			var ee *EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("error %v is not an *EntryError", err)
			}
			if ee.Offset != uint64(bad) || ee.Kind != c.kind || ee.Section != ".eh_frame" {
				t.Errorf("error %v: got %s at %#x, want %s at %#x", err, ee.Kind, ee.Offset, c.kind, bad)
			}
			if !errors.Is(err, c.sentinl) {
				t.Errorf("error %v does not wrap %v", err, c.sentinl)
			}
			if where := fmt.Sprintf(".eh_frame %s at offset %#x", c.kind, bad); !strings.Contains(err.Error(), where) {
				t.Errorf("error %q does not say %q", err, where)
			}
		})
	}

	// A length running past the end stops parsing but keeps what came before.
	var s sec
	ci := s.entry(cieBody(1, "zR", []byte{0x03}))
	s.fde(ci, cat(le32(0x1000), le32(0x10), uleb(0)))
	trunc := len(s.b)
	s.b = append(s.b, le32(100)...)
	fdes, err := Parse(s.b, ehAddr, 0, 0)
	var ee *EntryError
	if len(fdes) != 1 || !errors.As(err, &ee) || ee.Offset != uint64(trunc) || !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated tail: got %d FDEs, err %v", len(fdes), err)
	}

	// The error list is bounded.
	s = sec{}
	for i := 0; i < 1000; i++ {
		s.entry(cat(le32(0x100000), le32(0), le32(0)))
	}
	_, err = Parse(s.b, ehAddr, 0, 0)
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) != maxErrors || errs.Dropped != 1000-maxErrors {
		t.Errorf("error list not bounded: %v", err)
	}
}

// TestCorruptRealSection breaks single FDEs of libc's .eh_frame and checks
// that exactly those are lost.
func TestCorruptRealSection(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	needFile(t, libc)
	im := loadImage(t, libc)
	orig, err := Parse(im.eh, im.ehAddr, im.text, im.data)
	if err != nil || len(orig) < 100 {
		t.Fatalf("Parse: %d FDEs, %v", len(orig), err)
	}
	broken := []FDE{orig[10], orig[len(orig)/2], orig[len(orig)-1]}
	eh := slices.Clone(im.eh)
	for _, f := range broken {
		// A CIE pointer reaching before the section start.
		binary.LittleEndian.PutUint32(eh[f.Offset+4:], uint32(f.Offset+1000))
	}
	fdes, err := Parse(eh, im.ehAddr, im.text, im.data)
	if len(fdes) != len(orig)-len(broken) {
		t.Errorf("got %d FDEs, want %d", len(fdes), len(orig)-len(broken))
	}
	var errs *Errors
	if !errors.As(err, &errs) || len(errs.List) != len(broken) {
		t.Fatalf("want %d entry errors, got %v", len(broken), err)
	}
	for i, e := range errs.List {
		if e.Offset != broken[i].Offset || e.Kind != "FDE" || !errors.Is(e, ErrBadEntry) {
			t.Errorf("error %d: %v, want FDE at %#x", i, e, broken[i].Offset)
		}
	}
}

// --- comparison with readelf on real binaries ---

const cSource = `
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <setjmp.h>
static jmp_buf jb;
static void cleanup_free(char **p) { free(*p); }
__attribute__((noinline)) static int sum(int n, ...) {
	va_list ap; va_start(ap, n); int s = 0;
	for (int i = 0; i < n; i++) s += va_arg(ap, int);
	va_end(ap); return s;
}
__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline, cold)) void fail(const char *m) { fprintf(stderr, "%s\n", m); exit(2); }
__attribute__((noinline)) int with_cleanup(int n) {
	__attribute__((cleanup(cleanup_free))) char *p = malloc(n + 16);
	snprintf(p, n + 16, "%d", n);
	return puts(p);
}
__attribute__((noinline)) int big_frame(int n) {
	char buf[8192]; memset(buf, n, sizeof buf);
	if (setjmp(jb)) return 1;
	return buf[n & 0xff] + (int)strlen(buf);
}
int main(int argc, char **argv) {
	if (argc > 5) fail(argv[0]);
	printf("%d %d %d\n", fib(argc + 10), sum(3, 1, 2, argc), big_frame(argc));
	return with_cleanup(argc) < 0;
}
`

const cxxSource = `
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>
struct Guard {
	const char *n;
	explicit Guard(const char *n) : n(n) {}
	~Guard() { std::printf("~%s\n", n); }
};
extern "C" __attribute__((noinline)) void thrower(int x) {
	if (x > 0) throw std::runtime_error("positive");
	if (x < 0) throw x;
}
extern "C" __attribute__((noinline)) int catch_one(int x) {
	try { thrower(x); } catch (const std::exception &e) { return 1; }
	return 0;
}
extern "C" __attribute__((noinline)) int catch_two(int x) {
	try { thrower(x); } catch (int i) { return 2 + i; } catch (...) { return 3; }
	return 0;
}
extern "C" __attribute__((noinline)) int raii_only(int x) {
	Guard g("raii");
	thrower(x);
	return 0;
}
extern "C" __attribute__((noinline)) int nested(int x) {
	try {
		Guard g("nested");
		try { thrower(x); } catch (int) { throw std::runtime_error("rethrown"); }
	} catch (std::exception &) { return 4; }
	return 0;
}
extern "C" __attribute__((noinline)) int many(int x) {
	int r = 0;
	for (int i = 0; i < 3; i++) {
		try { Guard g("many"); thrower(x + i); } catch (...) { r++; }
	}
	std::vector<std::string> v;
	try { v.push_back(std::string(40, 'a')); thrower(-x); } catch (const std::runtime_error &) { r += 10; }
	return r;
}
extern "C" __attribute__((noinline)) int rare(int x) {
	if (__builtin_expect(x == 12345, 0)) {
		try { Guard g("rare"); thrower(x); } catch (...) { return -1; }
	}
	return x;
}
int main(int argc, char **) {
	int r = catch_one(argc) + catch_two(-argc) + catch_two(0) + nested(-argc) + many(-2) + rare(argc);
	try { raii_only(argc); } catch (const std::exception &e) { r += 100; }
	std::printf("%d\n", r);
	return r == 0;
}
`

func TestParseMatchesReadelf(t *testing.T) {
	needTool(t, "readelf")
	t.Run("system", func(t *testing.T) {
		for _, p := range []string{
			"/usr/bin/python3.11",
			"/lib/x86_64-linux-gnu/libc.so.6",
			"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
			"/usr/bin/node",
		} {
			t.Run(filepath.Base(p), func(t *testing.T) {
				needFile(t, p)
				compareWithReadelf(t, p)
			})
		}
	})
	t.Run("compiled", func(t *testing.T) {
		needTool(t, "gcc", "g++")
		type variant struct {
			name, ext, src, cc string
			args               []string
		}
		vs := []variant{
			{"c-O2", "c", cSource, "gcc", []string{"-O2"}},
			{"c-O0-nopie", "c", cSource, "gcc", []string{"-O0", "-no-pie"}},
			{"c-noasync", "c", cSource, "gcc", []string{"-O2", "-fno-asynchronous-unwind-tables"}},
			{"c-noasync-g", "c", cSource, "gcc", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables"}},
			{"c-fexceptions", "c", cSource, "gcc", []string{"-O2", "-fexceptions"}},
			{"c-static", "c", cSource, "gcc", []string{"-O2", "-static"}},
			{"c-static-pie", "c", cSource, "gcc", []string{"-O2", "-static-pie"}},
			{"c-shared", "c", cSource, "gcc", []string{"-O2", "-shared", "-fPIC"}},
			{"cxx-O2", "cc", cxxSource, "g++", []string{"-O2"}},
			{"cxx-noasync", "cc", cxxSource, "g++", []string{"-O2", "-fno-asynchronous-unwind-tables"}},
			// The -no-pie builds are the ones TestLandingPadsCxx runs.
			{"cxx", "cc", cxxSource, "g++", []string{"-O0", "-no-pie"}},
			{"cxx", "cc", cxxSource, "g++", []string{"-O2", "-no-pie"}},
			{"cxx", "cc", cxxSource, "g++", []string{"-O2", "-freorder-blocks-and-partition", "-no-pie"}},
			{"cxx-static", "cc", cxxSource, "g++", []string{"-O2", "-static"}},
		}
		for _, v := range vs {
			name := v.name
			if name == "cxx" { // the same source under several option sets
				name += strings.Join(v.args, "")
			}
			t.Run(name, func(t *testing.T) {
				bin := buildCached(t, v.name, v.ext, v.src, v.cc, v.args...)
				fdes := compareWithReadelf(t, bin)
				im := loadImage(t, bin)
				// Functions compiled here must be covered by an FDE,
				// except in the no-unwind-tables C build.
				for _, name := range []string{"fib", "main", "catch_one", "many"} {
					addr, ok := lookup(im, name)
					if !ok || v.name == "c-noasync" || v.name == "c-noasync-g" {
						continue
					}
					if !covered(fdes, addr) {
						t.Errorf("%s: no FDE starts at %s (%#x)", v.name, name, addr)
					}
				}
			})
		}
	})
}

func lookup(im *image, name string) (uint64, bool) {
	for _, s := range im.symbols {
		if s.Name == name && s.Value != 0 {
			return s.Value, true
		}
	}
	return 0, false
}

func covered(fdes []FDE, addr uint64) bool {
	for _, f := range fdes {
		if f.Start == addr {
			return true
		}
	}
	return false
}

// TestParseNodeSpeed guards the performance requirement in plain `go test`.
func TestParseNodeSpeed(t *testing.T) {
	const node = "/usr/bin/node"
	needFile(t, node)
	im := loadImage(t, node)
	best := time.Hour
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
		if d := time.Since(t0); d < best {
			best = d
		}
		if err != nil || len(fdes) < 10000 {
			t.Fatalf("node: %d FDEs, %v", len(fdes), err)
		}
	}
	t.Logf("node: Parse of %d bytes of .eh_frame in %v", len(im.eh), best)
	if best > 100*time.Millisecond {
		t.Errorf("Parse on node took %v, want well under 100ms", best)
	}
}

func BenchmarkParseNode(b *testing.B) {
	const node = "/usr/bin/node"
	needFile(b, node)
	im := loadImage(b, node)
	b.SetBytes(int64(len(im.eh)))
	b.ReportAllocs()
	var n int
	for b.Loop() {
		fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
		if err != nil {
			b.Fatal(err)
		}
		n = len(fdes)
	}
	b.ReportMetric(float64(n), "FDEs")
}
