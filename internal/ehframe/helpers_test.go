package ehframe

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Compiled test programs are shared between tests (C++ compiles are slow on
// this machine); buildCached keys them by name and compiler arguments.
var buildCache struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildCache.dir != "" {
		os.RemoveAll(buildCache.dir)
	}
	os.Exit(code)
}

func buildCached(t testing.TB, name, ext, src, compiler string, args ...string) string {
	t.Helper()
	buildCache.Lock()
	defer buildCache.Unlock()
	if buildCache.dir == "" {
		d, err := os.MkdirTemp("", "ehframe-test-")
		if err != nil {
			t.Fatal(err)
		}
		buildCache.dir, buildCache.bins = d, map[string]string{}
	}
	key := name + "\x00" + compiler + "\x00" + strings.Join(args, "\x00") + "\x00" + src
	if bin, ok := buildCache.bins[key]; ok {
		return bin
	}
	bin := build(t, buildCache.dir, fmt.Sprintf("%s-%d", name, len(buildCache.bins)), ext, src, compiler, args...)
	buildCache.bins[key] = bin
	return bin
}

// image holds the sections of one ELF file that this package reads.
type image struct {
	path                  string
	eh                    []byte
	ehAddr                uint64
	text, data            uint64
	except                []byte
	exceptAddr            uint64
	symbols               []elf.Symbol
	hasEhFrame, hasExcept bool
}

func loadImage(t testing.TB, path string) *image {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	im := &image{path: path}
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		if im.eh, err = s.Data(); err != nil {
			t.Fatalf("%s: .eh_frame: %v", path, err)
		}
		im.ehAddr, im.hasEhFrame = s.Addr, true
	}
	if s := f.Section(".gcc_except_table"); s != nil && s.Type != elf.SHT_NOBITS {
		if im.except, err = s.Data(); err != nil {
			t.Fatalf("%s: .gcc_except_table: %v", path, err)
		}
		im.exceptAddr, im.hasExcept = s.Addr, true
	}
	if s := f.Section(".text"); s != nil {
		im.text = s.Addr
	}
	for _, name := range []string{".got.plt", ".got"} {
		if s := f.Section(name); s != nil {
			im.data = s.Addr
			break
		}
	}
	im.symbols, _ = f.Symbols()
	return im
}

func (im *image) symbol(t testing.TB, name string) uint64 {
	t.Helper()
	for _, s := range im.symbols {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("%s: no symbol %q", im.path, name)
	return 0
}

type pcRange struct{ start, end uint64 }

// readelfFDEs runs `readelf --debug-dump=frames` (without following
// .gnu_debuglink: a separate debug file has a NOBITS .eh_frame) and returns the pc range of
// every FDE of .eh_frame (not .debug_frame), keyed by the FDE's offset.
func readelfFDEs(t testing.TB, path string) map[uint64]pcRange {
	t.Helper()
	cmd := exec.Command("readelf", "--debug-dump=frames,no-follow-links", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("readelf: %v", err)
	}
	res := make(map[uint64]pcRange)
	inEh := false
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("Contents of the ")) {
			inEh = bytes.HasPrefix(line, []byte("Contents of the .eh_frame section"))
			continue
		}
		if !inEh || len(line) == 0 || line[0] == ' ' || !bytes.Contains(line, []byte(" FDE cie=")) {
			continue
		}
		// 00000018 0000000000000024 0000001c FDE cie=00000000 pc=0000000000026000..0000000000026360
		fs := strings.Fields(string(line))
		if len(fs) < 6 || !strings.HasPrefix(fs[5], "pc=") {
			t.Fatalf("readelf: unexpected FDE line %q", line)
		}
		off, err1 := strconv.ParseUint(fs[0], 16, 64)
		a, b, ok := strings.Cut(strings.TrimPrefix(fs[5], "pc="), "..")
		start, err2 := strconv.ParseUint(a, 16, 64)
		end, err3 := strconv.ParseUint(b, 16, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("readelf: cannot parse FDE line %q", line)
		}
		res[off] = pcRange{start, end}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("readelf %s: %v", path, err)
	}
	return res
}

func needTool(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

func needFile(t testing.TB, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not present: %v", path, err)
	}
}

// build compiles src (its language chosen by ext: "c", "cc" or "s") with
// compiler and args into an executable in dir and returns its path.
func build(t testing.TB, dir, name, ext, src, compiler string, args ...string) string {
	t.Helper()
	srcPath := filepath.Join(dir, name+"."+ext)
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	argv := append(append([]string{}, args...), "-o", out, srcPath)
	if b, err := exec.Command(compiler, argv...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(argv, " "), err, b)
	}
	return out
}

// insnStarts returns the address of every instruction objdump decodes in the
// file's executable sections.
func insnStarts(t testing.TB, path string) (starts map[uint64]bool, calls map[uint64]bool) {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "-w", path).Output()
	if err != nil {
		t.Fatalf("objdump %s: %v", path, err)
	}
	starts, calls = make(map[uint64]bool), make(map[uint64]bool)
	for _, line := range strings.Split(string(out), "\n") {
		addr, rest, ok := strings.Cut(line, ":\t")
		if !ok || !strings.HasPrefix(addr, " ") {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimSpace(addr), 16, 64)
		if err != nil {
			continue
		}
		starts[a] = true
		if strings.HasPrefix(strings.TrimSpace(rest), "call") {
			calls[a] = true
		}
	}
	if len(starts) == 0 {
		t.Fatalf("objdump %s: no instructions found", path)
	}
	return starts, calls
}

// compareWithReadelf checks exact equality of the FDE pc ranges with readelf.
func compareWithReadelf(t *testing.T, path string) []FDE {
	t.Helper()
	im := loadImage(t, path)
	if !im.hasEhFrame {
		t.Fatalf("%s has no .eh_frame", path)
	}
	fdes, err := Parse(im.eh, im.ehAddr, im.text, im.data)
	if err != nil {
		t.Fatalf("%s: Parse: %v", path, err)
	}
	want := readelfFDEs(t, path)
	got := make(map[uint64]pcRange, len(fdes))
	for _, f := range fdes {
		if _, dup := got[f.Offset]; dup {
			t.Errorf("%s: FDE offset %#x returned twice", path, f.Offset)
		}
		got[f.Offset] = pcRange{f.Start, f.End}
	}
	bad := 0
	for off, w := range want {
		if g, ok := got[off]; !ok || g != w {
			if bad++; bad <= 10 {
				t.Errorf("%s: FDE at %#x: got %s, readelf says %#x..%#x", path, off, fmtRange(g, ok), w.start, w.end)
			}
		}
	}
	for off, g := range got {
		if _, ok := want[off]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("%s: FDE at %#x (%#x..%#x) not listed by readelf", path, off, g.start, g.end)
			}
		}
	}
	if bad > 10 {
		t.Errorf("%s: %d mismatches in total", path, bad)
	}
	if len(want) == 0 {
		t.Errorf("%s: readelf lists no FDE; test is vacuous", path)
	}
	return fdes
}

func fmtRange(r pcRange, ok bool) string {
	if !ok {
		return "nothing"
	}
	return fmt.Sprintf("%#x..%#x", r.start, r.end)
}
