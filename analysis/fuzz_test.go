package analysis

import (
	"os"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
)

// fuzzSrc has a 512-byte function whose bytes the fuzzer replaces, a jump
// table in .rodata pointing into it, and a data word pointing into it.
const fuzzSrc = `
extern int fz_target(int);
int main(int argc, char **argv) { (void)argv; return fz_target(argc); }
__asm__(
".text\n"
".p2align 4\n"
".globl fz_target\n.type fz_target,@function\nfz_target:\n"
"  .fill 512,1,0x90\n"
".size fz_target,.-fz_target\n"
".p2align 4\n"
".globl fz_after\n.type fz_after,@function\nfz_after:\n"
"  ret\n"
".size fz_after,.-fz_after\n"
".section .rodata\n"
".p2align 3\n"
"fz_tab:\n  .long fz_target+16-fz_tab, fz_target+40-fz_tab\n"
"fz_ptr:\n  .quad fz_target+64\n"
".text\n");
`

// fuzzTemplate returns the template executable and the file offset and size
// of fz_target.
func fuzzTemplate(t testing.TB) ([]byte, uint64, uint64) {
	path := build(t, fuzzSrc, "c", "-O1", "-no-pie", "-fcf-protection=none")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elfio.Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	fs := f.Functions()
	fn, ok := fs.ByName("fz_target")
	if !ok {
		t.Fatal("no fz_target")
	}
	for _, p := range f.Loads() {
		if fn.Addr >= p.Vaddr && fn.Addr+fn.Size <= p.Vaddr+p.Filesz {
			return data, p.Off + fn.Addr - p.Vaddr, fn.Size
		}
	}
	t.Fatal("fz_target not file-backed")
	return nil, 0, 0
}

// FuzzAnalyzeCode puts arbitrary bytes in a function of a real executable and
// checks that the analysis never panics and keeps its invariants.
func FuzzAnalyzeCode(f *testing.F) {
	data, off, size := fuzzTemplate(f)
	// Seeds: real code (switch dispatch, endbr, calls, loops) and edge cases.
	f.Add([]byte{0xf3, 0x0f, 0x1e, 0xfa, 0x83, 0xff, 0x07, 0x77, 0x10, 0x48, 0x8d, 0x15, 0, 0, 0, 0, 0x89, 0xff,
		0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0x3e, 0xff, 0xe0, 0xc3})
	f.Add([]byte{0x53, 0x31, 0xc0, 0x01, 0xf8, 0xff, 0xcf, 0x75, 0xfa, 0x5b, 0xc3})
	f.Add([]byte{0x67, 0xc4, 0x61, 0xf9, 0x7e, 0xe8, 0x06, 0xcc, 0xe4, 0x60, 0xff, 0x28, 0xe3, 0x00, 0xc3})
	f.Add([]byte{0x48, 0x8b, 0x47, 0x08, 0xff, 0xe0, 0xe8, 0, 0, 0, 0, 0xff, 0x25, 0, 0, 0, 0})
	if libc, err := os.ReadFile("/lib/x86_64-linux-gnu/libc.so.6"); err == nil {
		if lf, err := elfio.Parse("libc", libc); err == nil {
			if s := lf.Section(".text"); s != nil {
				text := lf.SectionData(s)
				// short pieces: the fuzzer minimizes every new input byte by byte, and
				// 512-byte seeds kept it minimizing most of a run
				for i := 0; i+96 <= len(text) && i < 32*4096; i += 4096 {
					f.Add(append([]byte(nil), text[i:i+96]...))
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		img := append([]byte(nil), data...)
		fill := img[off : off+size]
		for i := range fill {
			fill[i] = 0x90
		}
		copy(fill, code)
		ef, err := elfio.Parse("fuzz", img)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Analyze(ef, Options{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, b, b.EntrySites())
		fn, _ := b.Funcs.ByName("fz_target")
		var sites []Site
		for a := fn.Addr; a < fn.End() && a < fn.Addr+64; a++ {
			sites = append(sites, b.Check(SiteRequest{Addr: a, OtherProbes: []uint64{a + 3}}))
			sites = append(sites, b.Check(SiteRequest{Addr: a, Return: a == fn.Addr, NeedPostHandler: a%2 == 0}))
		}
		checkInvariants(t, b, sites)
		_ = b.IndirectJumps()
		// return sites: each an optimizable site inside the function or a fragment,
		// ending at or before an exit
		for _, g := range []uint64{fn.Addr, fn.Addr + 1} {
			exits, why := b.Exits(g, func(uint64) []uint64 { return nil })
			if why == "" && len(exits) == 0 {
				t.Fatalf("Exits(%#x): no sites and no reason", g)
			}
			for _, e := range exits {
				if e.Verdict != Optimize || e.Func == nil || len(e.DCR) == 0 {
					t.Fatalf("Exits(%#x): bad site %s", g, e.String())
				}
			}
			checkInvariants(t, b, exits)
		}
		_ = b.Referenced(fn.Addr)
	})
}

// FuzzParseAndAnalyze feeds arbitrary files to Parse + Analyze.
func FuzzParseAndAnalyze(f *testing.F) {
	data, _, _ := fuzzTemplate(f)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Fuzz(func(t *testing.T, in []byte) {
		ef, err := elfio.Parse("fuzz", in)
		if err != nil {
			return
		}
		b, err := Analyze(ef, Options{Workers: 1})
		if err != nil {
			return
		}
		checkInvariants(t, b, b.EntrySites())
		for _, s := range ef.ExecSections() {
			b.Check(SiteRequest{Addr: s.Addr + s.Size/2})
		}
		for _, fn := range b.Funcs.List {
			b.Exits(fn.Addr, nil)
		}
	})
}

func checkInvariants(t *testing.T, b *Binary, sites []Site) {
	t.Helper()
	for _, s := range sites {
		switch s.Verdict {
		case Optimize:
			if s.DCRLen < jmpLen || len(s.Blocking()) > 0 {
				t.Fatalf("optimized site breaks invariants: %s (DCR %d)", s.String(), s.DCRLen)
			}
		case Refuse, SingleStep, Boost:
			if len(s.Blocking()) == 0 {
				t.Fatalf("verdict %s without a reason: %s", s.Verdict, s.String())
			}
		default:
			t.Fatalf("bad verdict %d", s.Verdict)
		}
		for _, r := range s.Reasons {
			if r.Rule == "" || r.Detail == "" {
				t.Fatalf("empty reason in %s", s.String())
			}
		}
	}
}
