package kprt_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

// TestObjectRelocations checks that the object is position-independent the way the
// rewriter's linker needs: only PC-relative relocations, nothing undefined, the
// exported symbols present.
func TestObjectRelocations(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(Object))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != elf.ET_REL || f.Machine != elf.EM_X86_64 {
		t.Fatalf("object type %v machine %v", f.Type, f.Machine)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	globals := map[string]bool{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF && s.Name != "" {
			t.Errorf("undefined symbol %s", s.Name)
		}
		if elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
			globals[s.Name] = true
		}
	}
	exported := append([]string{SymEntry, SymLibEntry, SymRelocEntry, SymLibFini, SymInit, SymHdrRel, SymRetTramp, SymStats, SymOptCall, SymOptBody, SymOptTemplate, SymOptTemplateEnd, SymEHFrame,
		SymRseqOff, SymRseqCount, SymRseqShardtab, SymPFCtlGen, SymTrigBase, SymRseqFix, SymRT, SymTctxTab, SymTblkTab,
		SymWordBody[0][0], SymWordBody[0][1], SymWordBody[1][0], SymWordBody[1][1]},
		HandlerAPI...)
	for _, name := range exported {
		if !globals[name] {
			t.Errorf("symbol %s is not global", name)
		}
	}
	if len(globals) != len(exported) {
		t.Errorf("global symbols %v, want exactly the %d exported ones", globals, len(exported))
	}
	allowed := map[elf.R_X86_64]bool{elf.R_X86_64_PC32: true, elf.R_X86_64_PLT32: true, elf.R_X86_64_GOTPCREL: true,
		elf.R_X86_64_GOTPCRELX: true, elf.R_X86_64_REX_GOTPCRELX: true}
	n := 0
	for _, s := range f.Sections {
		switch {
		case s.Type == elf.SHT_REL:
			t.Errorf("REL section %s", s.Name)
		case s.Type == elf.SHT_RELA:
			data, err := s.Data()
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+24 <= len(data); i += 24 {
				typ := elf.R_X86_64(f.ByteOrder.Uint64(data[i+8:]) & 0xffffffff)
				if !allowed[typ] {
					t.Errorf("%s: relocation %v at %#x", s.Name, typ, f.ByteOrder.Uint64(data[i:]))
				}
				n++
			}
		case s.Flags&elf.SHF_TLS != 0 || s.Name == ".init_array" || s.Name == ".fini_array" || s.Name == ".eh_frame":
			t.Errorf("unexpected section %s", s.Name)
		}
	}
	if n == 0 {
		t.Error("no relocations at all?")
	}
	sum := sha256.Sum256(Object)
	if got := hex.EncodeToString(sum[:]); got != ObjectSHA256 {
		t.Errorf("embedded object SHA-256 %s, zz_generated.go says %s", got, ObjectSHA256)
	}
}

// TestObjectReproducible rebuilds the object and requires identical bytes (CI also
// runs go generate and diffs).
func TestObjectReproducible(t *testing.T) {
	needGCC(t)
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not installed")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "build.sh")
	cmd.Env = append(os.Environ(), "KPREWRITE_RT_OUT="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "kprewrite_rt.o"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, Object) {
		t.Errorf("rebuilt object differs from the committed one (%d vs %d bytes): run go generate ./runtime", len(got), len(Object))
	}
}

// TestStackUsage bounds the stack the signal handler and the return trampoline use,
// from gcc's -fstack-usage (stack_usage.txt) over the object's call graph. User
// handlers (called through pointers) come on top, and so does the kernel's signal
// frame for SIGTRAP.
func TestStackUsage(t *testing.T) {
	if _, err := exec.LookPath("objdump"); err != nil {
		t.Skip("objdump not installed")
	}
	su, err := os.ReadFile("stack_usage.txt")
	if err != nil {
		t.Fatal(err)
	}
	frame := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(su)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 || (f[2] != "static" && f[2] != "dynamic,bounded") {
			t.Fatalf("stack_usage.txt: %q is not a bounded frame", line)
		}
		name := f[0][strings.LastIndex(f[0], ":")+1:]
		name = strings.Split(name, ".")[0] // .isra, .constprop
		n, _ := strconv.Atoi(f[1])
		frame[name] = max(frame[name], n)
	}
	dir := t.TempDir()
	obj := filepath.Join(dir, "rt.o")
	if err := os.WriteFile(obj, Object, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("objdump", "-dr", obj).Output()
	if err != nil {
		t.Fatal(err)
	}
	// calls[f][g]: f calls g (g's frames below f's); tails[f][g]: f ends in a jmp to g,
	// its own frame popped first (a sibling call: g's frames in place of f's)
	calls := map[string]map[string]bool{}
	tails := map[string]map[string]bool{}
	fn := regexp.MustCompile(`^[0-9a-f]+ <([^>]+)>:$`)
	rel := regexp.MustCompile(`R_X86_64_PLT32\s+([A-Za-z_][A-Za-z0-9_.]*)`)
	// a call or tail jump to a hidden function of the same section has no relocation
	// (only the runtime's own names: a static name may be another file's too)
	direct := regexp.MustCompile(`\s(call|jmp)\s+[0-9a-f]+ <(kprw_[A-Za-z0-9_]*)>$`)
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := fn.FindStringSubmatch(sc.Text()); m != nil {
			cur = strings.Split(m[1], ".")[0]
			calls[cur] = map[string]bool{}
			tails[cur] = map[string]bool{}
		} else if m := rel.FindStringSubmatch(sc.Text()); m != nil && cur != "" {
			calls[cur][strings.Split(m[1], ".")[0]] = true
		} else if m := direct.FindStringSubmatch(sc.Text()); m != nil && cur != "" && m[2] != cur {
			if m[1] == "jmp" {
				tails[cur][m[2]] = true
			} else {
				calls[cur][m[2]] = true
			}
		}
	}
	var depth func(f string, seen map[string]bool) int
	depth = func(f string, seen map[string]bool) int {
		if seen[f] {
			t.Errorf("recursion through %s", f)
			return 0
		}
		seen[f] = true
		defer delete(seen, f)
		deepest, sibling := 0, 0
		for c := range calls[f] {
			deepest = max(deepest, depth(c, seen))
		}
		for c := range tails[f] {
			sibling = max(sibling, depth(c, seen))
		}
		return max(frame[f]+deepest, sibling)
	}
	sig := depth("kprw_sigtrap", map[string]bool{})
	// a detour: 128 bytes of red zone, pt_regs, alignment, the call's return address
	opt := depth("kprewrite_rt_optcall", map[string]bool{}) + 128 + 168 + 8 + 8
	ret := depth("kprw_rethook", map[string]bool{}) + 168 + 16 + 8 // pt_regs, alignment, return address
	entry := depth("kprewrite_rt_init", map[string]bool{}) + 128 + 16
	t.Logf("max stack: SIGTRAP handler %d bytes, detour %d bytes, return trampoline %d bytes, start-up %d bytes (plus user handlers)", sig, opt, ret, entry)
	if sig < 300 || sig > 1536 || opt < 400 || opt > 1536 || ret > 1536 || entry > 2048 {
		t.Errorf("stack use out of the documented budget: handler %d, detour %d, trampoline %d, start-up %d", sig, opt, ret, entry)
	}
}
