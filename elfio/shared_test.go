package elfio

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestIsSharedLibrary: programs of every linking mode are not shared libraries; a
// gcc -shared object, libc.so.6 (which can also run), libz and the dynamic loader are;
// and a file offset maps back to the address it came from.
func TestIsSharedLibrary(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	os.WriteFile(src, []byte("int f(int x) { return x + 1; }\nint main(void) { return f(-1); }\n"), 0o644)
	want := map[string]bool{}
	for name, flags := range map[string][]string{
		"pie": {"-pie", "-fPIE"}, "nopie": {"-no-pie"}, "static": {"-static"}, "static-pie": {"-static-pie", "-fPIE"}, "shared": {"-shared", "-fPIC"},
	} {
		out := filepath.Join(dir, name)
		if b, err := exec.Command("gcc", append([]string{"-O1", "-o", out, src}, flags...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", name, err, b)
		}
		want[out] = name == "shared"
	}
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libz.so.1", "/lib64/ld-linux-x86-64.so.2"} {
		if _, err := os.Stat(p); err == nil {
			want[p] = true
		}
	}
	for p, lib := range want {
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.IsSharedLibrary() != lib {
			t.Errorf("%s: IsSharedLibrary %v, want %v", p, !lib, lib)
		}
		for _, s := range f.ExecSections() {
			off, err := f.FileOffset(s.Addr, 1)
			if err != nil {
				t.Fatal(err)
			}
			if a, err := f.Addr(off); err != nil || a != s.Addr {
				t.Errorf("%s: Addr(%#x) = %#x, %v; want %#x", p, off, a, err, s.Addr)
			}
		}
		f.Close()
	}
}
