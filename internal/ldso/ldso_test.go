package ldso

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// lddMap runs ldd on prog: needed name -> path (resolved links), the oracle.
func lddMap(t *testing.T, prog string) map[string]string {
	t.Helper()
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", prog, err)
	}
	m := map[string]string{}
	re := regexp.MustCompile(`^\s*(\S+) => (\S+) \(0x`)
	for _, line := range strings.Split(string(out), "\n") {
		if g := re.FindStringSubmatch(line); g != nil {
			m[g[1]] = realpath(t, g[2])
		}
	}
	return m
}

func realpath(t *testing.T, p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestClosureMatchesLdd: the NEEDED closure of real programs, and Find by name, give
// the libraries ldd (the loader itself) names.
func TestClosureMatchesLdd(t *testing.T) {
	if _, err := exec.LookPath("ldd"); err != nil {
		t.Skip("no ldd on this machine: it is the oracle")
	}
	n := 0
	for _, prog := range []string{"/usr/bin/python3.11", "/usr/bin/git", "/usr/bin/zstd", "/usr/bin/sqlite3", "/usr/bin/node", "/usr/bin/gdb"} {
		if _, err := os.Stat(prog); err != nil {
			continue
		}
		n++
		want := lddMap(t, prog)
		s, err := New(prog)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Missing()) != 0 {
			t.Errorf("%s: missing %v", prog, s.Missing())
		}
		got := map[string]string{}
		for _, o := range s.Closure() {
			got[o.Name] = realpath(t, o.Path)
		}
		// ldd lists the loader itself apart (its PT_INTERP path, no "=>")
		const interp = "ld-linux-x86-64.so.2"
		if p, ok := got[interp]; ok {
			if p != realpath(t, "/lib64/"+interp) {
				t.Errorf("%s: %s at %s", prog, interp, p)
			}
			delete(got, interp)
		}
		for name, p := range want {
			if got[name] != p {
				t.Errorf("%s: %s => %q, ldd says %q", prog, name, got[name], p)
			}
			if f, err := s.Find(name); err != nil || realpath(t, f) != p {
				t.Errorf("%s: Find(%s) = %q, %v; ldd says %q", prog, name, f, err, p)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d libraries, ldd lists %d:\n%v\n%v", prog, len(got), len(want), got, want)
		}
	}
	if n == 0 {
		t.Skip("none of the real programs is installed")
	}
}

// TestOriginRunpathRpath: a program finds its own library through $ORIGIN in
// DT_RUNPATH and in DT_RPATH; a library only the program's search path names is found
// for a library that needs it with RPATH (inherited), not with RUNPATH, as the loader
// does; dlopen from the program finds it in both.
func TestOriginRunpathRpath(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(filepath.Join(dir, "lib"), 0o755)
	os.MkdirAll(filepath.Join(dir, "deep"), 0o755)
	os.WriteFile(filepath.Join(dir, "b.c"), []byte("int b(void) { return 2; }\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.c"), []byte("int b(void); int a(void) { return b() + 1; }\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "m.c"), []byte("int a(void); int main(void) { return a() - 3; }\n"), 0o644)
	gcc("-shared", "-fPIC", "-o", filepath.Join(dir, "deep", "libb.so"), filepath.Join(dir, "b.c"))
	// liba needs libb and has no search path of its own
	gcc("-shared", "-fPIC", "-o", filepath.Join(dir, "lib", "liba.so"), filepath.Join(dir, "a.c"), "-L"+filepath.Join(dir, "deep"), "-lb")
	for _, c := range []struct {
		name, tags string
		findsB     bool
	}{{"rpath", "--disable-new-dtags", true}, {"runpath", "--enable-new-dtags", false}} {
		prog := filepath.Join(dir, "m-"+c.name)
		gcc("-o", prog, filepath.Join(dir, "m.c"), "-L"+filepath.Join(dir, "lib"), "-L"+filepath.Join(dir, "deep"), "-la",
			"-Wl,-rpath-link,"+filepath.Join(dir, "deep"), "-Wl,"+c.tags+",-rpath,$ORIGIN/lib:$ORIGIN/deep")
		s, err := NewWithCache(prog, Cache{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Find("liba.so")
		if err != nil || realpath(t, p) != realpath(t, filepath.Join(dir, "lib", "liba.so")) {
			t.Errorf("%s: liba.so at %q, %v", c.name, p, err)
		}
		// start-up: liba's request for libb finds it only through the program's RPATH
		foundB := len(s.Missing()) == 0
		if foundB != c.findsB {
			t.Errorf("%s: closure %v, missing %v; want libb found %v", c.name, s.Closure(), s.Missing(), c.findsB)
		}
		// dlopen("libb.so") from the program finds it either way
		if pb, err := s.Find("libb.so"); err != nil || realpath(t, pb) != realpath(t, filepath.Join(dir, "deep", "libb.so")) {
			t.Errorf("%s: Find(libb.so) = %q, %v", c.name, pb, err)
		}
		// the loader agrees: the program runs (exit 0) only where libb is found
		err = exec.Command(prog).Run()
		if (err == nil) != c.findsB {
			t.Errorf("%s: the program ran: %v, want %v", c.name, err, c.findsB)
		}
	}
}

// TestParseCache reads this machine's cache (libc is in it) and a hand-made one with
// an old-format part first; truncated caches are errors.
func TestParseCache(t *testing.T) {
	if b, err := os.ReadFile(CachePath); err == nil {
		c, err := ParseCache(b)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := c["libc.so.6"]; !ok || !strings.HasSuffix(p, "/libc.so.6") {
			t.Errorf("libc.so.6 in the cache: %q", p)
		}
	}
	b := makeCache(map[string]string{"libx.so.1": "/opt/x/libx.so.1"})
	old := append([]byte(oldMagic+"\x00"), 0, 0, 0, 0) // no old entries
	for _, in := range [][]byte{b, append(old, b...)} {
		c, err := ParseCache(in)
		if err != nil || c["libx.so.1"] != "/opt/x/libx.so.1" {
			t.Errorf("parsed %v, %v", c, err)
		}
	}
	for n := 0; n < len(b); n += 7 {
		if _, err := ParseCache(b[:n]); err == nil && n < newHdrSize+entrySize {
			t.Errorf("a cache cut at %d bytes parsed", n)
		}
	}
}

// makeCache writes a new-format cache of x86-64 entries.
func makeCache(m map[string]string) []byte {
	var hdr, ents, strs bytes.Buffer
	n := len(m)
	base := newHdrSize + n*entrySize
	le := binary.LittleEndian
	hdr.WriteString(newMagic)
	binary.Write(&hdr, le, uint32(n))
	for k, v := range m {
		ko := base + strs.Len()
		strs.WriteString(k + "\x00")
		vo := base + strs.Len()
		strs.WriteString(v + "\x00")
		binary.Write(&ents, le, [4]uint32{flagsX8664, uint32(ko), uint32(vo), 0})
		binary.Write(&ents, le, uint64(0))
	}
	binary.Write(&hdr, le, uint32(strs.Len()))
	hdr.Write(make([]byte, newHdrSize-hdr.Len()))
	return append(append(hdr.Bytes(), ents.Bytes()...), strs.Bytes()...)
}

func FuzzParseCache(f *testing.F) {
	f.Add(makeCache(map[string]string{"a": "/b"}))
	f.Add([]byte(oldMagic + "\x00\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCache(b)
		if err == nil && c == nil {
			t.Fatal("nil cache without an error")
		}
	})
}
