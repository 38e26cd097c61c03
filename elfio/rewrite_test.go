package elfio

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var testVariants = map[string]testELF{
	"exec-bare":          {},
	"exec-sections":      {sections: true},
	"exec-full":          {phdr: true, data: true, bss: 0x3000, sections: true, symtab: true},
	"exec-emit-relocs":   {phdr: true, sections: true, symtab: true, rela: true},
	"pie-full":           {pie: true, phdr: true, data: true, bss: 0x100, sections: true, symtab: true},
	"pie-stripped":       {pie: true, phdr: true, data: true, sections: true},
	"exec-bigbss-nophdr": {data: true, bss: 8 << 20, sections: true, symtab: true},
	"pie-shared-strtab":  {pie: true, phdr: true, sections: true, symtab: true, shared: true, rela: true},
	"exec-cet":           {phdr: true, data: true, sections: true, x86Feat: X86Feature1IBT | X86Feature1SHSTK},
	"pie-ehhdr":          {pie: true, phdr: true, data: true, sections: true, symtab: true, ehHdr: true},
	"exec-ehhdr-nosecs":  {phdr: true, ehHdr: true},
}

// TestRewriteEHFrameHdr: with room planned for a new .eh_frame_hdr, PT_GNU_EH_FRAME
// (added when there was none) and the .eh_frame_hdr section (likewise) point at it,
// in the read-only segment; everything else is as in a null rewrite, and it runs.
func TestRewriteEHFrameHdr(t *testing.T) {
	for name, o := range testVariants {
		t.Run(name, func(t *testing.T) {
			f := mustParse(t, name, o.build())
			a := nullAddition(t, f)
			hdr := []byte{1, 0x1b, 0x03, 0x3b, 0xf0, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0xee}
			l, err := f.PlanLayoutEH(32, 40, 24, 4096, uint64(len(hdr)+3))
			if err != nil {
				t.Fatal(err)
			}
			if l.EHHdrAddr%8 != 0 || l.EHHdrAddr < l.RodataAddr+l.RodataSize || l.EHHdrAddr+l.EHHdrSize > l.TextAddr ||
				l.EHPhdrAdded != !o.ehHdr || l.PhdrNum != len(f.Progs)+3+map[bool]int{true: 1}[l.EHPhdrAdded] {
				t.Fatalf("layout %+v", l)
			}
			a.Layout, a.EHFrameHdr, a.Entry = l, hdr, &l.TextAddr
			a.Text = jmpStub(l.TextAddr, f.Entry)
			out, err := rewriteBytes(f, a)
			if err != nil {
				t.Fatal(err)
			}
			g := mustParse(t, name+".out", out)
			checkRewritten(t, f, g, a)
			n := 0
			for _, p := range g.Progs {
				if p.Type == elf.PT_GNU_EH_FRAME {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d PT_GNU_EH_FRAME headers, want 1", n)
			}
			if s := g.Section(".eh_frame_hdr"); o.sections && s == nil {
				t.Error("no .eh_frame_hdr section")
			}
			runExit42(t, out)
			a.EHFrameHdr = nil
			if _, err := f.Rewrite(a); err == nil {
				t.Error("planned .eh_frame_hdr left empty: no error")
			}
			a.EHFrameHdr = make([]byte, l.EHHdrSize+1)
			if _, err := f.Rewrite(a); err == nil {
				t.Error("oversized .eh_frame_hdr: no error")
			}
		})
	}
}

// nullAddition is an entry stub that jumps to the original entry, plus data and
// symbols: the rewritten program must behave exactly like the original.
func nullAddition(t testing.TB, f *File) *Addition {
	t.Helper()
	l, err := f.PlanLayout(32, 40, 24, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return &Addition{
		Layout: l,
		Text:   jmpStub(l.TextAddr, f.Entry),
		Rodata: []byte("kprewrite rodata\x00"),
		Data:   []byte{1, 2, 3, 4, 5, 6, 7, 8},
		BSS:    64,
		Symbols: []NewSymbol{
			{Name: "kprewrite_entry", Section: SecText, Size: 5, Func: true},
			{Name: "kprewrite_ro", Section: SecRodata, Offset: 0, Size: 17},
			{Name: "kprewrite_state", Section: SecData, Offset: 0, Size: 8, Global: true},
			{Name: "kprewrite_trace", Section: SecBSS, Offset: 0, Size: 64},
		},
		Entry: &l.TextAddr,
	}
}

func jmpStub(from, to uint64) []byte {
	b := []byte{0xe9, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(int32(int64(to)-int64(from+5))))
	return b
}

func mustParse(t testing.TB, name string, data []byte) *File {
	t.Helper()
	f, err := Parse(name, data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRewriteNull(t *testing.T) {
	for name, o := range testVariants {
		t.Run(name, func(t *testing.T) {
			in := o.build()
			inSum := sha256.Sum256(in)
			f := mustParse(t, name, in)
			a := nullAddition(t, f)
			out, err := rewriteBytes(f, a)
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(in) != inSum {
				t.Fatal("Rewrite modified its input")
			}
			again, err := rewriteBytes(f, a)
			if err != nil || !bytes.Equal(out, again) {
				t.Fatalf("second rewrite differs (err %v)", err)
			}
			g := mustParse(t, name+".out", out)
			checkRewritten(t, f, g, a)
			if _, err := elf.NewFile(bytes.NewReader(out)); err != nil {
				t.Errorf("debug/elf rejects output: %v", err)
			}
			runExit42(t, out)
		})
	}
}

// checkRewritten checks the structure of a rewritten file g against its input f.
func checkRewritten(t *testing.T, f, g *File, a *Addition) {
	t.Helper()
	l := a.Layout
	if g.Entry != *a.Entry {
		t.Errorf("entry %#x, want %#x", g.Entry, *a.Entry)
	}
	if g.Phoff != l.PhdrOff || len(g.Progs) != l.PhdrNum {
		t.Errorf("phoff %#x phnum %d, want %#x %d", g.Phoff, len(g.Progs), l.PhdrOff, l.PhdrNum)
	}
	// Old program headers in order, new PT_LOADs right after the last old one.
	var lastVaddr uint64
	j := 0
	for _, p := range g.Progs {
		if p.Type == elf.PT_LOAD {
			if p.Vaddr < lastVaddr {
				t.Errorf("PT_LOAD at %#x after one at %#x", p.Vaddr, lastVaddr)
			}
			lastVaddr = p.Vaddr
			if p.Align > 1 && p.Off%p.Align != p.Vaddr%p.Align {
				t.Errorf("PT_LOAD at %#x: offset %#x not congruent modulo %#x", p.Vaddr, p.Off, p.Align)
			}
			if p.Flags&elf.PF_W != 0 && p.Flags&elf.PF_X != 0 {
				t.Errorf("PT_LOAD at %#x is writable and executable", p.Vaddr)
			}
		}
		if p.Vaddr >= l.PhdrAddr && p.Type == elf.PT_LOAD {
			continue // a new one
		}
		if p.Type == elf.PT_GNU_EH_FRAME && l.EHHdrSize > 0 {
			if p.Vaddr != l.EHHdrAddr || p.Off != l.EHHdrAddr-(l.PhdrAddr-l.PhdrOff) || p.Filesz != uint64(len(a.EHFrameHdr)) ||
				p.Memsz != p.Filesz || p.Flags != elf.PF_R {
				t.Errorf("PT_GNU_EH_FRAME %+v, want the new .eh_frame_hdr at %#x+%d", p, l.EHHdrAddr, len(a.EHFrameHdr))
			}
			if b, err := g.Bytes(p.Vaddr, p.Filesz); err != nil || !bytes.Equal(b, a.EHFrameHdr) {
				t.Errorf("PT_GNU_EH_FRAME holds % x (%v), want % x", b, err, a.EHFrameHdr)
			}
			if s := g.Section(".eh_frame_hdr"); s == nil || s.Addr != p.Vaddr || s.Off != p.Off || s.Size != p.Filesz {
				t.Errorf(".eh_frame_hdr section %+v does not match PT_GNU_EH_FRAME %+v", s, p)
			}
			if l.EHPhdrAdded {
				continue // a new one
			}
			j++
			continue
		}
		old := f.Progs[j]
		j++
		if p.Type != old.Type || p.Flags != old.Flags || p.Align != old.Align {
			t.Errorf("program header %d changed: %+v -> %+v", j-1, old, p)
		}
		if p.Type == elf.PT_PHDR {
			if p.Off != l.PhdrOff || p.Vaddr != l.PhdrAddr || p.Filesz != uint64(l.PhdrNum)*56 {
				t.Errorf("PT_PHDR not moved: %+v", p)
			}
		} else if p.Off != old.Off || p.Vaddr != old.Vaddr || p.Filesz != old.Filesz || p.Memsz != old.Memsz {
			t.Errorf("program header %d moved: %+v -> %+v", j-1, old, p)
		}
	}
	if j != len(f.Progs) {
		t.Errorf("%d old program headers in output, want %d", j, len(f.Progs))
	}
	// Every loaded section lies inside one PT_LOAD, at the matching file offset.
	for _, s := range g.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Size == 0 {
			continue
		}
		in := false
		for _, p := range g.Progs {
			if p.Type == elf.PT_LOAD && s.Addr >= p.Vaddr && s.Addr+s.Size <= p.Vaddr+p.Memsz &&
				(s.Type == elf.SHT_NOBITS || s.Addr+s.Size <= p.Vaddr+p.Filesz && s.Off-p.Off == s.Addr-p.Vaddr) {
				in = true
			}
		}
		if !in {
			t.Errorf("section %s (%#x+%#x at offset %#x) is not inside a PT_LOAD", s.Name, s.Addr, s.Size, s.Off)
		}
	}
	// The new program header table is loaded.
	if _, err := g.FileOffset(l.PhdrAddr, uint64(l.PhdrNum)*56); err != nil {
		t.Errorf("new program header table not loaded: %v", err)
	}
	// Old sections unchanged (except moved tables), new ones present and in segments.
	for i, s := range f.Sections {
		o := g.Sections[i]
		if s.Name == ".eh_frame_hdr" && l.EHHdrSize > 0 {
			continue // checked with PT_GNU_EH_FRAME
		}
		if o.Name != s.Name || o.Type != s.Type || o.Addr != s.Addr || o.Flags != s.Flags {
			t.Errorf("section %d changed: %+v -> %+v", i, s, o)
		}
		if s.Type != elf.SHT_SYMTAB && s.Type != elf.SHT_STRTAB && s.Type != elf.SHT_RELA && o.Off != s.Off {
			t.Errorf("section %s moved", s.Name)
		}
		if s.Type == elf.SHT_RELA || s.Type == elf.SHT_STRTAB {
			if s.Type == elf.SHT_STRTAB && !bytes.HasPrefix(g.SectionData(&o), f.SectionData(&s)) {
				t.Errorf("string table %s lost old contents", s.Name)
			}
		}
	}
	for name, want := range map[string][]byte{SecText: a.Text, SecRodata: a.Rodata, SecData: a.Data} {
		s := g.Section(name)
		if s == nil {
			t.Errorf("no section %s", name)
			continue
		}
		b, err := g.Bytes(s.Addr, s.Size)
		if err != nil {
			t.Errorf("section %s not loaded: %v", name, err)
			continue
		}
		if !bytes.HasPrefix(b, want) || !bytes.Equal(b, g.SectionData(s)) {
			t.Errorf("section %s holds % x, want prefix % x", name, b, want)
		}
	}
	if s := g.Section(SecBSS); s == nil || s.Type != elf.SHT_NOBITS || s.Addr != l.BSSAddr {
		t.Errorf("bad %s section: %+v", SecBSS, s)
	}
	// Symbols: old ones kept, new ones present, locals first.
	have := map[string]Symbol{}
	for _, s := range g.Symbols {
		if !s.Dynamic {
			have[s.Name] = s
		}
	}
	for _, s := range f.Symbols {
		if h, ok := have[s.Name]; !s.Dynamic && (!ok || h.Value != s.Value || h.Bind != s.Bind) {
			t.Errorf("old symbol %s lost or changed", s.Name)
		}
	}
	for _, ns := range a.Symbols {
		s, ok := have[ns.Name]
		if !ok {
			t.Errorf("new symbol %s missing", ns.Name)
			continue
		}
		sec := g.Sections[s.Shndx]
		if sec.Name != ns.Section || s.Value != sec.Addr+ns.Offset || s.Size != ns.Size {
			t.Errorf("new symbol %s = %+v in %s", ns.Name, s, sec.Name)
		}
	}
	st := g.Section(".symtab")
	if st == nil {
		t.Fatal("no .symtab")
	}
	n := int(st.Size / 24)
	for i := 1; i < n; i++ {
		bind := elf.ST_BIND(g.Data[st.Off+uint64(i)*24+4])
		if (bind == elf.STB_LOCAL) != (i < int(st.Info)) {
			t.Errorf("symbol %d has binding %v but sh_info is %d", i, bind, st.Info)
		}
	}
}

// runExit42 runs a rewritten test program, which must exit with status 42.
func runExit42(t *testing.T, image []byte) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Log("not running: needs linux/amd64")
		return
	}
	path := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(path, image, 0o755); err != nil {
		t.Fatal(err)
	}
	err := exec.Command(path).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 {
		t.Fatalf("rewritten program: %v, want exit status 42", err)
	}
}

func TestOriginalTestProgramsRun(t *testing.T) {
	for name, o := range testVariants {
		t.Run(name, func(t *testing.T) { runExit42(t, o.build()) })
	}
}

func TestLayout(t *testing.T) {
	f := mustParse(t, "full", testVariants["exec-full"].build())
	l, err := f.PlanLayout(100, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.TextAddr%pageSize != 0 || l.TextAddr < f.ImageEnd() || l.PhdrAddr < f.ImageEnd() {
		t.Errorf("text at %#x, image ends at %#x", l.TextAddr, f.ImageEnd())
	}
	if l.DataSize != 0 || l.BSSSize != 0 || l.RodataSize != 0 || l.PhdrNum != len(f.Progs)+2 {
		t.Errorf("unexpected layout %+v", l)
	}
	if !l.PhdrAtOldBias || l.PhdrAddr-l.PhdrOff != 0x400000 {
		t.Errorf("small-bss layout should keep the first segment's vaddr-offset: %+v", l)
	}
	// Old symbol and section tables at the end are dropped, not copied twice.
	if st := f.Section(".symtab"); l.keep != st.Off {
		t.Errorf("keep %#x, want .symtab offset %#x", l.keep, st.Off)
	}
	big := mustParse(t, "bigbss", testVariants["exec-bigbss-nophdr"].build())
	bl, err := big.PlanLayout(100, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if bl.PhdrAtOldBias || bl.FileOff > 0x3000 {
		t.Errorf("8 MiB .bss must not be padded into the file: %+v", bl)
	}
	// Determinism and validation of a forged layout.
	l2, _ := f.PlanLayout(100, 0, 0, 0)
	if l2 != l {
		t.Error("PlanLayout is not deterministic")
	}
	forged := l
	forged.TextAddr += 0x1000
	if _, err := f.Rewrite(&Addition{Layout: forged}); err == nil || !strings.Contains(err.Error(), "not planned") {
		t.Errorf("forged layout: %v", err)
	}
	if _, err := f.PlanLayout(maxAreaSize+1, 0, 0, 0); err == nil {
		t.Error("huge text accepted")
	}
}

// TestLayoutHuge: a new segment of at least hugeMin bytes starts on a 2 MiB page of
// memory and file and covers whole ones (the kernel can then map it with 2 MiB pages),
// a smaller one stays page-aligned and unpadded; the rewritten program still runs.
func TestLayoutHuge(t *testing.T) {
	f := mustParse(t, "full", testVariants["exec-full"].build())
	l, err := f.PlanLayout(hugeMin, hugeMin, 24, 4096)
	if err != nil {
		t.Fatal(err)
	}
	segs := l.segments()
	if len(segs) != 3 {
		t.Fatalf("segments %+v", segs)
	}
	for _, s := range segs[:2] {
		if s.vaddr%hugePage != 0 || s.off%hugePage != 0 || s.filesz%hugePage != 0 || s.memsz != s.filesz {
			t.Errorf("segment %+v is not on whole 2 MiB pages", s)
		}
	}
	if l.TextSize != hugePage || l.RodataSize != hugeMin || l.TextAddr != segs[1].vaddr || segs[0].filesz != hugePage {
		t.Errorf("layout %+v", l)
	}
	out, err := rewriteBytes(f, &Addition{Layout: l, Rodata: make([]byte, hugeMin), Data: make([]byte, 24)})
	if err != nil {
		t.Fatal(err)
	}
	runExit42(t, out)
	small, err := f.PlanLayout(hugeMin-1, 4096, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if small.TextSize != hugeMin-1 || small.rEnd != 0 || small.Align != pageSize {
		t.Errorf("small layout padded: %+v", small)
	}
}

func TestLayoutOutOfReach(t *testing.T) {
	// A 3 GiB .bss after the code puts any new segment out of rel32 reach.
	f := mustParse(t, "huge", testELF{data: true, bss: 3 << 30, sections: true}.build())
	_, err := f.PlanLayout(16, 0, 0, 0)
	if err == nil || !strings.Contains(err.Error(), "rel32") || !strings.Contains(err.Error(), "huge") {
		t.Fatalf("got %v, want an out-of-reach error naming the file", err)
	}
}

func TestAlreadyRewritten(t *testing.T) {
	f := mustParse(t, "in", testVariants["exec-full"].build())
	out, err := rewriteBytes(f, nullAddition(t, f))
	if err != nil {
		t.Fatal(err)
	}
	g := mustParse(t, "out", out)
	if _, err := g.PlanLayout(16, 0, 0, 0); !errors.Is(err, ErrRewritten) {
		t.Fatalf("got %v, want ErrRewritten", err)
	}
}

func TestEmitRelocsRenumbered(t *testing.T) {
	f := mustParse(t, "relocs", testVariants["exec-emit-relocs"].build())
	a := nullAddition(t, f)
	out, err := rewriteBytes(f, a)
	if err != nil {
		t.Fatal(err)
	}
	g := mustParse(t, "out", out)
	rel := g.Section(".rela.text")
	st := g.Section(".symtab")
	d := g.SectionData(rel)
	var got []string
	for i := 0; i+24 <= len(d); i += 24 {
		sym := binary.LittleEndian.Uint64(d[i+8:]) >> 32
		name := ""
		if sym != 0 {
			e := g.Data[st.Off+sym*24:]
			str := g.Sections[st.Link]
			name, _ = g.cstring(str, uint64(binary.LittleEndian.Uint32(e)))
		}
		got = append(got, name)
	}
	if strings.Join(got, ",") != "local_thing,_start," {
		t.Errorf("relocations point at %q, want local_thing,_start,", got)
	}
}

func TestPatches(t *testing.T) {
	o := testVariants["pie-full"]
	f := mustParse(t, "p", o.build())
	base := o.base()
	code := base + testCodeOff
	for _, c := range []struct {
		name    string
		patches []Patch
		want    string
	}{
		{"overlap", []Patch{{code, []byte{1, 2}}, {code + 1, []byte{3}}}, "overlap"},
		{"bss", []Patch{{base + testDataOff + 32, []byte{1}}}, "not in any loaded segment's file image"},
		{"past segment", []Patch{{code + uint64(len(exit42)) - 1, []byte{1, 2}}}, "runs past"},
		{"unmapped", []Patch{{0x7000000, []byte{1}}}, "not in any loaded"},
		{"header", []Patch{{base + 8, []byte{1}}}, "ELF header"},
		{"empty", []Patch{{code, nil}}, "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := nullAddition(t, f)
			a.Patches = c.patches
			_, err := f.Rewrite(a)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "p: rewrite") {
				t.Fatalf("got %v, want error containing %q", err, c.want)
			}
		})
	}
	// A good patch: exit(43) instead of 42, through the entry stub.
	a := nullAddition(t, f)
	a.Patches = []Patch{{code + 1, []byte{43}}, {base + testDataOff, []byte("K")}}
	out, err := rewriteBytes(f, a)
	if err != nil {
		t.Fatal(err)
	}
	g := mustParse(t, "out", out)
	if b, _ := g.Bytes(code, 2); !bytes.Equal(b, []byte{0xbf, 43}) {
		t.Errorf("patched code is % x", b)
	}
	if b, _ := g.Bytes(base+testDataOff, 2); string(b) != "Kp" {
		t.Errorf("patched data is %q", b)
	}
}

func TestAdditionErrors(t *testing.T) {
	f := mustParse(t, "a", testVariants["exec-full"].build())
	for _, c := range []struct {
		name string
		edit func(a *Addition)
		want string
	}{
		{"text too big", func(a *Addition) { a.Text = make([]byte, 33) }, "do not fit"},
		{"bss too big", func(a *Addition) { a.BSS = 5000 }, "do not fit"},
		{"entry outside", func(a *Addition) { e := uint64(0x10); a.Entry = &e }, "entry point"},
		{"entry in padding", func(a *Addition) { e := a.Layout.TextAddr + 10; a.Entry = &e }, "entry point"},
		{"symbol past end", func(a *Addition) {
			a.Symbols = append(a.Symbols, NewSymbol{Name: "x", Section: SecText, Offset: 30, Size: 3})
		}, "runs past"},
		{"symbol bad section", func(a *Addition) { a.Symbols = append(a.Symbols, NewSymbol{Name: "x", Section: ".text"}) }, "unknown section"},
		{"symbol no name", func(a *Addition) { a.Symbols = append(a.Symbols, NewSymbol{Section: SecText}) }, "empty"},
		{"nil", nil, "no addition"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var a *Addition
			if c.edit != nil {
				a = nullAddition(t, f)
				c.edit(a)
			}
			_, err := f.Rewrite(a)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want error containing %q", err, c.want)
			}
		})
	}
	// A symbol in a section that was not planned.
	l, _ := f.PlanLayout(16, 0, 0, 0)
	_, err := f.Rewrite(&Addition{Layout: l, Symbols: []NewSymbol{{Name: "d", Section: SecData}}})
	if err == nil || !strings.Contains(err.Error(), "no space planned") {
		t.Errorf("got %v", err)
	}
}

func TestBadInputs(t *testing.T) {
	good := testVariants["exec-full"].build()
	le := binary.LittleEndian
	edit := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), good...)) }
	shoff := le.Uint64(good[40:])
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not an ELF file"},
		{"truncated header", good[:40], "shorter than an ELF64 header"},
		{"bad magic", edit(func(b []byte) []byte { b[1] = 'X'; return b }), "not an ELF file"},
		{"elf32", edit(func(b []byte) []byte { b[elf.EI_CLASS] = byte(elf.ELFCLASS32); return b }), "ELF64 only"},
		{"big endian", edit(func(b []byte) []byte { b[elf.EI_DATA] = byte(elf.ELFDATA2MSB); return b }), "little-endian"},
		{"arm64", edit(func(b []byte) []byte { le.PutUint16(b[18:], uint16(elf.EM_AARCH64)); return b }), "x86-64 only"},
		{"relocatable", edit(func(b []byte) []byte { le.PutUint16(b[16:], uint16(elf.ET_REL)); return b }), "not an executable"},
		{"no phdrs", edit(func(b []byte) []byte { le.PutUint16(b[56:], 0); return b }), "no program headers"},
		{"phentsize", edit(func(b []byte) []byte { le.PutUint16(b[54:], 32); return b }), "program header size"},
		{"phdrs past EOF", edit(func(b []byte) []byte { le.PutUint64(b[32:], uint64(len(b))-8); return b }), "program headers at offset"},
		{"truncated phdrs", good[:100], "run past end of file"},
		{"load past EOF", edit(func(b []byte) []byte { le.PutUint64(b[64+56+32:], 1<<40); return b }), "runs past end of file"},
		{"memsz < filesz", edit(func(b []byte) []byte { le.PutUint64(b[64+56+40:], 1); return b }), "smaller than filesz"},
		{"shdrs past EOF", edit(func(b []byte) []byte { le.PutUint64(b[40:], uint64(len(b))-64); return b }), "section headers at offset"},
		{"shentsize", edit(func(b []byte) []byte { le.PutUint16(b[58:], 40); return b }), "section header size"},
		{"shstrndx", edit(func(b []byte) []byte { le.PutUint16(b[62:], 99); return b }), "section name table index"},
		{"section past EOF", edit(func(b []byte) []byte { le.PutUint64(b[shoff+64+32:], 1<<50); return b }), "section 1: file range"},
		{"name offset", edit(func(b []byte) []byte { le.PutUint32(b[shoff+64:], 1<<20); return b }), "section 1 name"},
		{"symtab link", edit(func(b []byte) []byte {
			le.PutUint32(b[shoff+4*64+40:], 77) // .symtab is section 4
			return b
		}), "string table index 77 out of range"},
		{"null strtab past EOF", edit(func(b []byte) []byte {
			sh := b[shoff+5*64:] // .strtab becomes SHT_NULL with a huge range
			le.PutUint32(sh[4:], uint32(elf.SHT_NULL))
			le.PutUint64(sh[24:], 1<<40)
			return b
		}), "runs past end of file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.elf", c.data)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "bad.elf: ") {
				t.Fatalf("got %q, want ErrFormat naming bad.elf and %q", err, c.want)
			}
		})
	}
	// A symtab whose sh_info is past its symbols parses but cannot be rewritten.
	bad := edit(func(b []byte) []byte { le.PutUint32(b[shoff+4*64+44:], 9); return b })
	f := mustParse(t, "info", bad)
	if _, err := f.PlanLayout(16, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "sh_info") {
		t.Errorf("got %v", err)
	}
}

func TestClearShadowStack(t *testing.T) {
	f := mustParse(t, "cet", testVariants["exec-cet"].build())
	if bits, err := f.X86Features(); err != nil || bits != X86Feature1IBT|X86Feature1SHSTK {
		t.Fatalf("features %#x, %v", bits, err)
	}
	ps, err := f.ClearShadowStack()
	if err != nil || len(ps) != 1 {
		t.Fatalf("patches %v, %v (the note is in PT_NOTE and PT_GNU_PROPERTY: one patch)", ps, err)
	}
	a := nullAddition(t, f)
	a.Patches = ps
	out, err := rewriteBytes(f, a)
	if err != nil {
		t.Fatal(err)
	}
	g := mustParse(t, "out", out)
	if bits, err := g.X86Features(); err != nil || bits != X86Feature1IBT {
		t.Fatalf("after clearing: features %#x, %v", bits, err)
	}
	if ps, _ := g.ClearShadowStack(); len(ps) != 0 {
		t.Errorf("nothing left to clear, got %v", ps)
	}
	plain := mustParse(t, "plain", testVariants["exec-full"].build())
	if ps, err := plain.ClearShadowStack(); err != nil || len(ps) != 0 {
		t.Errorf("no property note: %v, %v", ps, err)
	}
	// A property running past its note is an error, not a panic.
	b := testVariants["exec-cet"].build()
	binary.LittleEndian.PutUint32(b[testNoteOff+20:], 64)
	if _, err := mustParse(t, "bad", b).X86Features(); err == nil || !strings.Contains(err.Error(), "runs past") {
		t.Errorf("got %v", err)
	}
}

// Every combination of empty and non-empty areas gives a runnable file with exactly the
// segments and sections that hold something.
func TestRewriteShapes(t *testing.T) {
	o := testVariants["pie-full"]
	f := mustParse(t, "shapes", o.build())
	for mask := 0; mask < 16; mask++ {
		sz := func(bit int, n uint64) uint64 {
			if mask&(1<<bit) != 0 {
				return n
			}
			return 0
		}
		text, ro, data, bss := sz(0, 5), sz(1, 100), sz(2, 8), sz(3, 0x2000)
		l, err := f.PlanLayout(text, ro, data, bss)
		if err != nil {
			t.Fatal(err)
		}
		a := &Addition{Layout: l, Rodata: make([]byte, ro), Data: make([]byte, data), BSS: bss}
		wantLoads, wantSecs := 1, 0
		if text > 0 {
			a.Text = jmpStub(l.TextAddr, f.Entry)
			a.Entry = &l.TextAddr
			wantLoads++
			wantSecs++
		}
		if data+bss > 0 {
			wantLoads++
		}
		for _, n := range []uint64{ro, data, bss} {
			if n > 0 {
				wantSecs++
			}
		}
		out, err := rewriteBytes(f, a)
		if err != nil {
			t.Fatalf("mask %04b: %v", mask, err)
		}
		g := mustParse(t, "out", out)
		if got := len(g.Loads()) - len(f.Loads()); got != wantLoads {
			t.Errorf("mask %04b: %d new PT_LOADs, want %d", mask, got, wantLoads)
		}
		if got := len(g.Sections) - len(f.Sections); got != wantSecs {
			t.Errorf("mask %04b: %d new sections, want %d", mask, got, wantSecs)
		}
		if bss > 0 {
			if s := g.Section(SecBSS); s == nil || s.Addr+s.Size > l.End || s.Addr < l.DataAddr {
				t.Errorf("mask %04b: bss %+v outside the RW segment [%#x, %#x)", mask, s, l.DataAddr, l.End)
			}
		}
		runExit42(t, out)
	}
}
