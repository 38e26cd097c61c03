package kprt_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

// sigGuardOf finds the GOT words of the signal functions in f, as the rewriter does
// (internal/rewriter.SigGuardSlots, which the runtime package cannot import).
func sigGuardOf(t testing.TB, f *elf.File) *SigGuard {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil // static
	}
	word := func(addr uint64) uint64 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+8 <= p.Vaddr+p.Filesz {
				var b [8]byte
				if _, err := p.ReadAt(b[:], int64(addr-p.Vaddr)); err != nil {
					t.Fatal(err)
				}
				return binary.LittleEndian.Uint64(b[:])
			}
		}
		t.Fatalf("GOT word %#x not in the file", addr)
		return 0
	}
	g := &SigGuard{}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || int(s.Link) >= len(f.Sections) || f.Sections[s.Link].Type != elf.SHT_DYNSYM {
			continue
		}
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+24 <= len(data); off += 24 {
			addr, info := binary.LittleEndian.Uint64(data[off:]), binary.LittleEndian.Uint64(data[off+8:])
			typ, si := elf.R_X86_64(info&0xffffffff), int(info>>32)
			if (typ != elf.R_X86_64_JMP_SLOT && typ != elf.R_X86_64_GLOB_DAT) || si == 0 || si > len(syms) {
				continue
			}
			fn, ok := SigGuardFuncs[syms[si-1].Name]
			if !ok {
				continue
			}
			gs := GotSlot{Slot: addr, Name: syms[si-1].Name, Func: fn}
			if typ == elf.R_X86_64_JMP_SLOT {
				gs.Lazy = word(addr)
			}
			g.Slots = append(g.Slots, gs)
		}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_RELRO {
			g.Relro, g.RelroSize = p.Vaddr, p.Memsz
		}
	}
	if v, err := f.DynValue(elf.DT_PLTGOT); err == nil && len(v) > 0 {
		g.PLTGOT = v[0]
	}
	if len(g.Slots) == 0 {
		return nil
	}
	return g
}

var sigGuardSpecs = []pointSpec{
	{site: "t_add_s0", xmode: XSStep, probes: []probeSpec{kprobe("pre_add", "post_add")}},
	{site: "t_mul_s0", xmode: XBoost, probes: []probeSpec{kprobe("pre_mul", "")}},
}

// sgRun runs a mode of testdata/sigguard.c with KPREWRITE_DEBUG=1.
func sgRun(t *testing.T, b *probedBin, mode string) (*runResult, string) {
	t.Helper()
	cmd := exec.Command(b.path, mode)
	cmd.Env = []string{"KPREWRITE_DEBUG=1"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := &runResult{out: stdout.String(), vals: map[string]string{}}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.status = ee.Sys().(syscall.WaitStatus)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(r.out) {
		if k, v, ok := strings.Cut(f, "="); ok {
			r.vals[k] = v
		}
	}
	return r, stderr.String()
}

// TestSigGuard: programs that block SIGTRAP, install their own SIGTRAP handler, or reset
// it in a fork child keep their int3 probes (k: two SIGTRAPs per hit, b: one), and their
// own SIGTRAPs reach their handler or the default action.
func TestSigGuard(t *testing.T) {
	for _, link := range []struct {
		name  string
		flags []string
		lazy  bool // lazy binding: the wrapped functions are looked up
	}{
		{"pie-lazy", []string{"-Wl,-z,lazy"}, true},
		{"pie-now", []string{"-Wl,-z,now,-z,relro"}, false},
		{"nopie-lazy", []string{"-no-pie", "-Wl,-z,lazy"}, true},
		{"nopie-now", []string{"-no-pie", "-Wl,-z,now,-z,relro"}, false},
		{"musl", []string{"musl"}, false},
	} {
		t.Run(link.name, func(t *testing.T) {
			var sg *SigGuard
			b := buildRewritten(t, "testdata/sigguard.c", link.flags, sigGuardSpecs, func(tabs *Tables, f *elf.File) {
				sg = sigGuardOf(t, f)
				tabs.SigGuard = sg
			})
			if sg == nil || len(sg.Slots) < 5 {
				t.Fatalf("signal guard %+v: want the GOT words of sigaction, sigprocmask, pthread_sigmask, signal, syscall...", sg)
			}
			r, stderr := sgRun(t, b, "block")
			if r.status != 0 {
				t.Fatalf("block: %v\n%s", r.status, stderr)
			}
			// the mask the program reads back is the kernel's: SIGTRAP never in it
			r.want(t, "thread", "1", "main", "1", "seen_blocked", "0", "usr1", "1", "usr1_mask_has_trap", "0", "syscall", "1")
			r.want(t, "n_pre_add", "5", "n_post_add", "5", "n_pre_mul", "5")
			t.Logf("%d GOT words; start-up: %s", len(sg.Slots), stderr)
			wrapped := strings.Contains(stderr, "lazily, looked up), 0 not")
			lazy := !strings.Contains(stderr, "(0 bound lazily")
			if !wrapped || lazy != link.lazy {
				t.Errorf("start-up report %q: want every word wrapped, lazy look-ups %v", stderr, link.lazy)
			}

			r, stderr = sgRun(t, b, "handler")
			if r.status != 0 {
				t.Fatalf("handler: %v\n%s", r.status, stderr)
			}
			// raise() reaches the program's handler with SI_TKILL, its own int3 with
			// SI_KERNEL and the ip after it; SIG_IGN drops a raised one; SA_RESETHAND
			// leaves SIG_DFL; the probes fired in the handler and around it
			r.want(t, "raised", "1", "raised_code", "-6", "int3", "1", "int3_code", "128", "ip_ok", "1", "readback", "1",
				"prev_is_handler", "1", "after_ign", "1", "reset_to_dfl", "1")
			r.want(t, "n_pre_add", "5", "n_post_add", "5", "n_pre_mul", "5")

			r, stderr = sgRun(t, b, "fork")
			if r.status != 0 {
				t.Fatalf("fork: %v\n%s", r.status, stderr)
			}
			r.want(t, "child_exit", "7", "child_signal", "0")

			r, stderr = sgRun(t, b, "suspend")
			if r.status != 0 {
				t.Fatalf("suspend: %v\n%s", r.status, stderr)
			}
			r.want(t, "sigsuspend", "1", "ppoll", "1", "n_pre_add", "2", "n_pre_mul", "2")

			// SIG_DFL and an int3 of its own: death by SIGTRAP, as without the runtime
			r, _ = sgRun(t, b, "dfl")
			if !r.status.Signaled() || r.status.Signal() != syscall.SIGTRAP || strings.Contains(r.out, "survived") {
				t.Errorf("dfl: status %v, output %q: want death by SIGTRAP", r.status, r.out)
			}
		})
	}
}

// TestSigGuardStatic: a static program has no GOT words to wrap; without the entry
// redirections the rewriter adds (GSEntry, tested end to end in tests/sigguard_test.go),
// which these hand-made tables lack (as a stripped static program's do), blocking
// SIGTRAP still kills it at the next int3 probe hit (loudly: death by SIGTRAP).
func TestSigGuardStatic(t *testing.T) {
	b := buildRewritten(t, "testdata/sigguard.c", []string{"-static"}, sigGuardSpecs, func(tabs *Tables, f *elf.File) {
		if sg := sigGuardOf(t, f); sg != nil {
			t.Errorf("a static program has GOT words of signal functions: %+v", sg)
		}
	})
	r, _ := sgRun(t, b, "block")
	if !r.status.Signaled() || r.status.Signal() != syscall.SIGTRAP {
		t.Errorf("static, SIGTRAP blocked: status %v, want death by SIGTRAP", r.status)
	}
	r, _ = sgRun(t, b, "fork")
	if r.status != 0 || r.vals["child_signal"] != "5" {
		t.Errorf("static fork: status %v, output %q: want the child killed by SIGTRAP", r.status, r.out)
	}
}
