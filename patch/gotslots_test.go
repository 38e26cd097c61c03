package patch

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// buildSig compiles testdata/sig.c with gcc and flags.
func buildSig(t testing.TB, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not on PATH")
	}
	dir := t.TempDir()
	src, exe := "testdata/sig.c", filepath.Join(dir, "sig")
	if out, err := exec.Command("gcc", append([]string{"-O2", "-pthread", "-o", exe, src}, flags...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

func TestSigGuardSlots(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		plt   bool // calls through the PLT: JUMP_SLOT words with a lazy value
	}{
		{"pie", []string{"-Wl,-z,lazy"}, true},
		{"nopie", []string{"-no-pie", "-Wl,-z,lazy"}, true},
		{"noplt", []string{"-fno-plt", "-Wl,-z,now"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := elfio.Open(buildSig(t, c.flags...))
			if err != nil {
				t.Fatal(err)
			}
			g, err := SigGuardSlots(f)
			if err != nil || g == nil {
				t.Fatalf("%v, %+v", err, g)
			}
			got := map[string]int{}
			plt := f.Section(".plt")
			for i, s := range g.Slots {
				got[s.Name]++
				if s.Func != kprt.SigGuardFuncs[s.Name] {
					t.Errorf("%s: function %d", s.Name, s.Func)
				}
				if i > 0 && s.Slot <= g.Slots[i-1].Slot {
					t.Errorf("slots not sorted")
				}
				// a lazy value points into .plt (its stub), or is 0 (GLOB_DAT)
				if s.Lazy != 0 && (plt == nil || s.Lazy < plt.Addr || s.Lazy >= plt.Addr+plt.Size) {
					t.Errorf("%s: lazy value %#x outside .plt", s.Name, s.Lazy)
				}
				if (s.Lazy != 0) != c.plt && s.Name != "sigaction" {
					t.Errorf("%s: lazy value %#x", s.Name, s.Lazy)
				}
			}
			for _, name := range []string{"pthread_sigmask", "sigprocmask", "sigaction", "signal"} {
				if got[name] == 0 {
					t.Errorf("no GOT word of %s in %+v", name, g.Slots)
				}
			}
			if got["sigfillset"] != 0 || got["printf"] != 0 {
				t.Errorf("unwanted words: %v", got)
			}
			if g.PLTGOT == 0 || g.RelroSize == 0 {
				t.Errorf("pltgot %#x relro %#x+%#x", g.PLTGOT, g.Relro, g.RelroSize)
			}
		})
	}
	f, err := elfio.Open(buildSig(t, "-static"))
	if err != nil {
		t.Fatal(err)
	}
	if g, err := SigGuardSlots(f); err != nil || g != nil {
		t.Errorf("static: %v, %+v", err, g)
	}
}

func FuzzSigGuardSlots(f *testing.F) {
	if _, err := exec.LookPath("gcc"); err == nil {
		// small seeds (stripped, no separate code pages): the fuzzer minimizes each new
		// input byte by byte, which on a 16 KiB program took the whole run
		small := []string{"-Os", "-s", "-Wl,-z,noseparate-code", "-Wl,--build-id=none"}
		for _, flags := range [][]string{{"-Wl,-z,lazy"}, {"-fno-plt", "-no-pie"}} {
			b, err := os.ReadFile(buildSig(f, append(flags, small...)...))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := elfio.Parse("fuzz", data)
		if err != nil {
			return
		}
		g, err := SigGuardSlots(ef)
		if err != nil || g == nil {
			return
		}
		for _, s := range g.Slots {
			if s.Func < 1 || s.Func > kprt.SGMax || s.Name == "" {
				t.Fatalf("bad slot %+v", s)
			}
		}
	})
}
