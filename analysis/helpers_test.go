package analysis

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
)

// buildDir holds the programs compiled by the tests of this package; builds
// are shared between tests (same source and flags, same binary).
var (
	buildDir   string
	buildMu    sync.Mutex
	buildCache = map[string]string{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "analysis-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	buildDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

func need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not on PATH", tool)
		}
	}
}

// build compiles src (lang "c" or "c++") with flags and returns the path of
// the executable. (tests/internal/testprog does the same for the end-to-end
// tests, but Go's internal rule keeps it out of reach of this package.)
func build(t testing.TB, src, lang string, flags ...string) string {
	t.Helper()
	compiler, ext := "gcc", ".c"
	if lang == "c++" {
		compiler, ext = "g++", ".cc"
	}
	need(t, compiler)
	h := sha256.Sum256([]byte(lang + "\x00" + src + "\x00" + strings.Join(flags, "\x00")))
	key := hex.EncodeToString(h[:8])
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildCache[key]; ok {
		return p
	}
	srcPath := filepath.Join(buildDir, key+ext)
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(buildDir, key)
	args := append([]string{"-o", out, srcPath}, flags...)
	if b, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, b)
	}
	buildCache[key] = out
	return out
}

// analyzeFile opens and analyses path.
func analyzeFile(t testing.TB, path string, opt Options) *Binary {
	t.Helper()
	f, err := elfio.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze(f, opt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fn returns the named function.
func fn(t testing.TB, b *Binary, name string) *elfio.Func {
	t.Helper()
	f, ok := b.Funcs.ByName(name)
	if !ok {
		t.Fatalf("no function %s in %s", name, b.File.Path)
	}
	return f
}

// sym returns the address of a symbol (any type), for labels in asm blocks.
func symAddr(t testing.TB, b *Binary, name string) uint64 {
	t.Helper()
	for _, s := range b.File.Symbols {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s in %s", name, b.File.Path)
	return 0
}

// entry checks the entry site of the named function.
func entry(t testing.TB, b *Binary, name string, req SiteRequest) Site {
	t.Helper()
	req.Addr = fn(t, b, name).Addr
	return b.Check(req)
}

// reason returns the first reason with the rule id, failing the test if none.
func reason(t testing.TB, s Site, rule string) Reason {
	t.Helper()
	for _, r := range s.Reasons {
		if r.Rule == rule {
			return r
		}
	}
	t.Fatalf("site %s: no reason %q", s.String(), rule)
	return Reason{}
}

func wantVerdict(t testing.TB, s Site, v Verdict) {
	t.Helper()
	if s.Verdict != v {
		t.Fatalf("verdict %s, want %s:\n%s", s.Verdict, v, s.String())
	}
}

// objdumpTargets runs objdump -d on path and returns every direct branch
// target it prints (jmp, jcc, call, loop, jrcxz, xbegin), with the source.
func objdumpTargets(t testing.TB, path string) map[uint64][]uint64 {
	t.Helper()
	need(t, "objdump")
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "-w", path).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	re := regexp.MustCompile(`^\s*([0-9a-f]+):\s+(?:(?:bnd|notrack|rex\.\w+|data16|cs|ds)\s+)*(j[a-z]+|call|loop[a-z]*|xbegin)\s+([0-9a-f]+)(?:\s|$)`)
	targets := map[uint64][]uint64{}
	for _, line := range strings.Split(string(out), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		src, _ := strconv.ParseUint(m[1], 16, 64)
		dst, _ := strconv.ParseUint(m[3], 16, 64)
		targets[dst] = append(targets[dst], src)
	}
	return targets
}
