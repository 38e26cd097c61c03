package rewriter

import (
	"bytes"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// buildSigWith compiles patch/testdata/sig.c with cc (gcc or musl-gcc), skipping when it is missing.
func buildSigWith(t testing.TB, cc string, flags ...string) *elfio.File {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip(cc + " not on PATH")
	}
	dir := t.TempDir()
	src, exe := "../../patch/testdata/sig.c", filepath.Join(dir, "sig")
	if out, err := exec.Command(cc, append([]string{"-O2", "-pthread", "-o", exe, src}, flags...)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	f, err := elfio.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sigStubs returns the redirected functions of a rewritten image (its
// kprewrite_sigguard_stub.* symbols) with the stubs' addresses.
func sigStubs(t *testing.T, img []byte) (*elfio.File, map[string]uint64) {
	t.Helper()
	g, err := elfio.Parse("rewritten", img)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range g.Symbols {
		if name, ok := strings.CutPrefix(s.Name, SymSigStubPrefix); ok {
			out[name] = s.Value
		}
	}
	return g, out
}

func keys(m map[string]uint64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestStaticSigGuard: in a static program with int3 probes the entries of the C library's
// functions that make the signal system calls jump to stubs through words in
// .kprewrite.bss, and the copies of their first instructions jump back after them.
func TestStaticSigGuard(t *testing.T) {
	for _, c := range []struct {
		name, cc string
		flags    []string
		want     []string
		fallback []string // with __libc_sigaction excluded
	}{
		{"glibc", "gcc", []string{"-static"}, []string{"__libc_sigaction", "__pthread_sigmask"}, []string{"__pthread_sigmask", "__sigaction"}},
		{"glibc-pie", "gcc", []string{"-static-pie"}, []string{"__libc_sigaction", "__pthread_sigmask"}, []string{"__pthread_sigmask", "__sigaction"}},
		{"musl", "musl-gcc", []string{"-static"}, []string{"__block_all_sigs", "__block_app_sigs", "__libc_sigaction", "pthread_sigmask"},
			[]string{"__block_all_sigs", "__block_app_sigs", "__sigaction", "pthread_sigmask"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := buildSigWith(t, c.cc, c.flags...)
			res, err := Rewrite(f, probes(t, f, "p:g/main main"), Options{NoOptimize: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Warnings) != 0 {
				t.Errorf("warnings: %q", res.Warnings)
			}
			g, stubs := sigStubs(t, res.Image.Bytes())
			if got := keys(stubs); !slices.Equal(got, c.want) {
				t.Fatalf("redirected %v, want %v", got, c.want)
			}
			bss := g.Section(".kprewrite.bss")
			le := binary.LittleEndian
			for name, stub := range stubs {
				fn, ok := f.Functions().ByName(name)
				if !ok {
					t.Fatalf("no function %s", name)
				}
				// entry: jmp rel32 to the stub, int3 filler
				e, _ := g.Bytes(fn.Addr, 5)
				if e[0] != 0xe9 || fn.Addr+5+uint64(int32(le.Uint32(e[1:]))) != stub {
					t.Errorf("%s: entry % x does not jump to its stub %#x", name, e, stub)
				}
				// stub: jmp *word(%rip), the word in .kprewrite.bss
				b, _ := g.Bytes(stub, 6)
				word := stub + 6 + uint64(int32(le.Uint32(b[2:])))
				if b[0] != 0xff || b[1] != 0x25 || word < bss.Addr || word+8 > bss.Addr+bss.Size {
					t.Errorf("%s: stub % x, word %#x outside .kprewrite.bss", name, b, word)
				}
				// copy: the relocated DCR, then a jmp back to the first byte after it
				var cp *elfio.Symbol
				for i := range g.Symbols {
					if g.Symbols[i].Name == SymSigCopyPrefix+name {
						cp = &g.Symbols[i]
					}
				}
				if cp == nil || cp.Value != stub+hookStubLen {
					t.Fatalf("%s: no copy after the stub", name)
				}
				jb, _ := g.Bytes(cp.Value+cp.Size-5, 5)
				back := cp.Value + cp.Size + uint64(int32(le.Uint32(jb[1:])))
				filler, _ := g.Bytes(fn.Addr+5, back-fn.Addr-5)
				orig, _ := f.Bytes(back, 1)
				now, _ := g.Bytes(back, 1)
				if jb[0] != 0xe9 || back < fn.Addr+5 || back > fn.Addr+16 || len(bytes.Trim(filler, "\xcc")) != 0 || orig[0] != now[0] {
					t.Errorf("%s: copy ends with % x: back to %#x (entry %#x)", name, jb, back, fn.Addr)
				}
			}

			// an int3 probe on a redirected entry stays; its point jumps to the stub
			res, err = Rewrite(f, probes(t, f, "p:g/main main", "p:g/sa __libc_sigaction"), Options{NoOptimize: true})
			if err != nil {
				t.Fatal(err)
			}
			g, stubs = sigStubs(t, res.Image.Bytes())
			fn, _ := f.Functions().ByName("__libc_sigaction")
			if b, _ := g.Bytes(fn.Addr, 1); b[0] != 0xcc {
				t.Errorf("probed entry: % x, want the int3", b)
			}
			for _, pt := range res.Plan.Points {
				if pt.Site == fn.Addr && (pt.XMode != kprt.XEmulate || pt.EmuOp != kprt.EmuJmp || pt.Target != stubs["__libc_sigaction"]) {
					t.Errorf("probed entry: point %+v, want an emulated jmp to %#x", pt, stubs["__libc_sigaction"])
				}
			}

			// __libc_sigaction cannot be redirected: sigaction, which calls it, is
			res, err = Rewrite(f, probes(t, f, "p:g/main main"), Options{NoOptimize: true, Exclude: []string{"__libc_sigaction"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, stubs = sigStubs(t, res.Image.Bytes()); !slices.Equal(keys(stubs), c.fallback) {
				t.Errorf("__libc_sigaction excluded: redirected %v, want %v", keys(stubs), c.fallback)
			}
			if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "not guarded: __libc_sigaction (its entry is in code excluded") {
				t.Errorf("__libc_sigaction excluded: warnings %q", res.Warnings)
			}

			// no int3 probe: no guard
			res, err = Rewrite(f, probes(t, f, "p:g/main main"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, stubs = sigStubs(t, res.Image.Bytes()); len(stubs) != 0 || res.Plan.Points[0].XMode != kprt.XOptimized {
				t.Errorf("optimized only: redirected %v", keys(stubs))
			}
		})
	}
	// a dynamically linked program has its GOT words wrapped instead
	f := buildSigWith(t, "gcc")
	res, err := Rewrite(f, probes(t, f, "p:g/main main"), Options{NoOptimize: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, stubs := sigStubs(t, res.Image.Bytes()); len(stubs) != 0 {
		t.Errorf("dynamic program: redirected %v", keys(stubs))
	}
}

// TestFastReadFlag: events whose fetch programs read memory get kprt.HFFastRead and
// the signal guard (GOT words, or a static program's redirected entries) even with
// jump-optimized probes only; register-only fetches and --count-only get neither; a
// static program the guard cannot cover gets a warning instead of the flag.
func TestFastReadFlag(t *testing.T) {
	flags := func(t *testing.T, img []byte) kprt.HeaderFlags {
		t.Helper()
		g, err := elfio.Parse("rewritten", img)
		if err != nil {
			t.Fatal(err)
		}
		im, err := tracefile.ReadImage(g)
		if err != nil {
			t.Fatal(err)
		}
		return im.Header.Flags
	}
	const reg, mem = "p:g/main main a=%di:s32", "p:g/main main a=%di:s32 s=+0(%si):u64"
	for _, c := range []struct {
		name, cc string
		flags    []string
	}{
		{"glibc", "gcc", []string{"-static"}},
		{"musl", "musl-gcc", []string{"-static"}},
		{"dynamic", "gcc", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := buildSigWith(t, c.cc, c.flags...)
			static := patch.IsStatic(f)
			for _, k := range []struct {
				def  string
				opt  Options
				fast bool
			}{
				{reg, Options{}, false},
				{mem, Options{}, true},
				{mem, Options{CountOnly: true}, false},
				{mem, Options{NoOptimize: true}, true},
			} {
				res, err := Rewrite(f, probes(t, f, k.def), k.opt)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Warnings) != 0 {
					t.Errorf("%s %+v: warnings %q", k.def, k.opt, res.Warnings)
				}
				if got := flags(t, res.Image.Bytes())&kprt.HFFastRead != 0; got != k.fast {
					t.Errorf("%s %+v: HFFastRead %v, want %v", k.def, k.opt, got, k.fast)
				}
				_, stubs := sigStubs(t, res.Image.Bytes())
				int3 := k.opt.NoOptimize
				if want := static && (k.fast || int3); (len(stubs) != 0) != want {
					t.Errorf("%s %+v: redirected %v", k.def, k.opt, keys(stubs))
				}
			}
			if !static {
				return
			}
			// sigaction cannot be covered: no flag, and rewrite says why
			res, err := Rewrite(f, probes(t, f, mem), Options{Exclude: []string{"__libc_sigaction", "__sigaction", "sigaction"}})
			if err != nil {
				t.Fatal(err)
			}
			if flags(t, res.Image.Bytes())&kprt.HFFastRead != 0 || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "system-call read") {
				t.Errorf("sigaction excluded: flags %#x, warnings %q", flags(t, res.Image.Bytes()), res.Warnings)
			}
		})
	}
}
