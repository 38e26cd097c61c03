package tests

// End-to-end tests of jump-optimized probes (kinds o and ro) and --verify-regions:
// testdata/optforms.c holds one DCR per relocation form, whose emitted detours are
// decoded back and compared with the original instructions, and which runs
// identically in int3, optimized and verify modes; a violation inside an instruction
// in --verify-regions mode; --exclude. The probes corpus in optimized and verify
// modes, probes sharing a DCR and a violation at an instruction boundary are cases:
// tests/cases/probes-basic-*, opt-shared-dcr, opt-verify-violation.

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/rewriter"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
	"github.com/kprewrite/kprewrite/trampolines"
)

// listFlags returns `kprewrite list` as SYMBOL+OFF -> type and flags of its probes.
func listFlags(t *testing.T, bin string) map[string]string {
	t.Helper()
	code, stdout, stderr := kp("list", bin)
	if code != 0 {
		t.Fatalf("list: %s", stderr)
	}
	re := regexp.MustCompile(`^[0-9a-f]{16}  ([kr])  (\S+)  \S+ ?(\S*)$`)
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("list line %q", l)
		}
		out[m[2]] += m[1] + m[3] + " "
	}
	return out
}

// formDefs probe every function of testdata/optforms.c.
var formDefs = []string{
	"p:opt/riprel o_riprel a=%di:s32 c=@counter2:s32",
	"r:opt/riprel_ret o_riprel ret=$retval:s32",
	"p:opt/imm o_riprel_imm a=%di:s32",
	"p:opt/vex o_vex a=%di:s32",
	"p:opt/veximm o_vex_imm a=%di:s32",
	"p:opt/evex o_evex a=%di:s32",
	"p:opt/eveximm o_evex_imm a=%di:s32",
	"p:opt/jcc o_jcc8 di=%di:u32",
	"p:opt/jrcxz o_jrcxz di=%di:u32",
	"p:opt/loop o_loop+4 cx=%cx:u32 ax=%ax:u32",
	"p:opt/jmp o_jmp_end a=%di:s32",
	"p:opt/call o_call_end a=%di:s64",
	"p:opt/callind o_callind_end a=%di:s64",
	"p:opt/callrip o_callrip_end a=%di:s64",
	"p:opt/pad o_pad a=%di:s32",
	"p:opt/victim o_victim a=%di:s64",
	"r:opt/leaf o_leaf ret=$retval:s64",
}

// formSites are the functions (and offsets) formDefs probe, each with its DCR.
var formSites = []struct {
	fn  string
	off uint64
}{
	{"o_riprel", 0}, {"o_riprel_imm", 0}, {"o_vex", 0}, {"o_vex_imm", 0}, {"o_evex", 0}, {"o_evex_imm", 0},
	{"o_jcc8", 0}, {"o_jrcxz", 0}, {"o_loop", 4}, {"o_jmp_end", 0}, {"o_call_end", 0}, {"o_callind_end", 0},
	{"o_callrip_end", 0}, {"o_pad", 0}, {"o_victim", 0}, {"o_leaf", 0},
}

func optformsSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("testdata/optforms.c")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// TestOptForms: every relocation form, rewritten, decoded back and run; the traces of
// int3, optimized and verify modes agree.
func TestOptForms(t *testing.T) {
	src := optformsSource(t)
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"pie", []string{"-O2"}},
		{"nopie", []string{"-O2", "-no-pie"}},
		{"static-pie", []string{"-O2", "-static-pie"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, src, "c", build.flags...)
			dir := t.TempDir()
			traces := map[string][]string{}
			for _, mode := range []string{"int3", "optimize", "verify"} {
				out := filepath.Join(dir, mode, "optforms")
				os.MkdirAll(filepath.Dir(out), 0o755)
				var flags []string
				switch mode {
				case "int3":
					flags = []string{"--no-optimize"}
				case "verify":
					flags = []string{"--verify-regions"}
				}
				rewriteWith(t, prog, out, formDefs, flags...)
				tr := filepath.Join(dir, mode+".trace")
				res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"forms", "3"}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
				if !strings.Contains(res.Stdout, "call=ok callind=ok") {
					t.Fatalf("%s: %s", mode, res)
				}
				traces[mode] = eas(readTrace(t, tr, out))
				list := listFlags(t, out)
				for _, s := range formSites {
					key := fmt.Sprintf("%s+%#x", s.fn, s.off)
					want := map[string]string{"int3": "[BOOSTED]", "optimize": "[OPTIMIZED]", "verify": "[VERIFY]"}[mode]
					if !strings.Contains(list[key], want) {
						t.Errorf("%s: %s is %q, want %s", mode, key, list[key], want)
					}
				}
				if mode == "optimize" {
					checkDetours(t, prog, out)
				}
				if mode == "verify" {
					if p := profile(t, tr, out); p["(violations)"] != [2]uint64{0, 0} {
						t.Errorf("violations %v", p["(violations)"])
					}
				}
			}
			// 17 events; o_loop+4 fires 3 times per call: 3 rounds of 16 + 2*3 lines;
			// the program calls the EVEX functions only where the CPU has AVX-512F
			perRound := 17 + 2
			if !cpuHasFlag(t, "avx512f") {
				perRound -= 2
			}
			if len(traces["int3"]) != 3*perRound {
				t.Errorf("int3 trace has %d lines:\n%s", len(traces["int3"]), strings.Join(traces["int3"], "\n"))
			}
			sameLines(t, traces["optimize"], traces["int3"])
			sameLines(t, traces["verify"], traces["int3"])
		})
	}
}

// checkDetours decodes the detour of every probed site of the rewritten kpd back and
// compares it with the original instructions of its DCR in prog: the site's jmp lands
// on the template's entry, the filler is int3, each relocated instruction does what
// the original did (same RIP-relative target, same branch target, calls push the
// original return address), and the detour ends with a jmp back after the DCR.
func checkDetours(t *testing.T, prog, kpd string) {
	t.Helper()
	of, err := elfio.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	b, err := analysis.Analyze(of, analysis.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	kf, err := elf.Open(kpd)
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	syms, err := kf.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	symAddr, symSize := map[string]uint64{}, map[string]uint64{}
	for _, s := range syms {
		symAddr[s.Name], symSize[s.Name] = s.Value, s.Size
	}
	read := func(addr, n uint64) []byte {
		for _, p := range kf.Progs {
			if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+n <= p.Vaddr+p.Filesz {
				buf := make([]byte, n)
				if _, err := p.ReadAt(buf, int64(addr-p.Vaddr)); err != nil {
					t.Fatal(err)
				}
				return buf
			}
		}
		t.Fatalf("%#x+%d is not in the rewritten file", addr, n)
		return nil
	}
	tmpl, err := trampolines.OptTemplate()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range formSites {
		site := symAddr[s.fn] + s.off
		chk := b.Check(analysis.SiteRequest{Addr: site})
		if chk.Verdict != analysis.Optimize {
			t.Fatalf("%s+%d: verdict %v", s.fn, s.off, chk.Verdict)
		}
		name := fmt.Sprintf("kprewrite_detour.%s+%#x", s.fn, s.off)
		det, ok := symAddr[name]
		if !ok {
			t.Fatalf("no symbol %s", name)
		}
		// the site: jmp rel32 to the entry (an inline record's, when the point has one:
		// trampolines.InlineRec), then int3 filler
		entry := det + uint64(tmpl.Entry)
		irName := fmt.Sprintf("%s%s+%#x", rewriter.SymInlineRecPrefix, s.fn, s.off)
		ir, hasIR := symAddr[irName]
		sb := read(site, uint64(chk.DCRLen))
		j, err := x86dec.Decode(sb, site)
		if hasIR {
			f, _ := trampolines.InlineRecEntry(false)
			nf, _ := trampolines.InlineRecEntry(true)
			if j.Target == ir+uint64(f) || j.Target == ir+uint64(nf) {
				entry = j.Target
			}
		}
		if err != nil || j.Kind != x86dec.KindJmp || j.Len != 5 || j.Target != entry {
			t.Fatalf("%s: site % x does not jmp to %#x", s.fn, sb, entry)
		}
		if !bytes.Equal(sb[5:], bytes.Repeat([]byte{0xcc}, len(sb)-5)) {
			t.Errorf("%s: filler % x", s.fn, sb[5:])
		}
		// the template, with its fields
		code := read(det, symSize[name])
		if !bytes.Equal(code[:tmpl.Gate], tmpl.Code[:tmpl.Gate]) {
			t.Errorf("%s: the detour does not start with the template", s.fn)
		}
		checkDCRCopy(t, s.fn, of, chk, site, det+uint64(len(tmpl.Code)), code[len(tmpl.Code):], read)
		if hasIR { // the inline record's own copy, at its end
			n := symSize[name] - uint64(len(tmpl.Code))
			checkDCRCopy(t, s.fn, of, chk, site, ir+symSize[irName]-n, read(ir+symSize[irName]-n, n), read)
		}
	}
}

// checkDCRCopy checks a detour's copy of the DCR of site (its analysis chk), rel at
// pc: each instruction relocated as the analysis said, then the jmp back.
func checkDCRCopy(t *testing.T, fn string, of *elfio.File, chk analysis.Site, site, pc uint64, rel []byte,
	read func(addr, n uint64) []byte) {
	t.Helper()
	s := struct{ fn string }{fn}
	{
		dec := func() x86dec.Inst {
			in, err := x86dec.Decode(rel, pc)
			if err != nil {
				t.Fatalf("%s: detour % x at %#x: %v", s.fn, rel, pc, err)
			}
			rel, pc = rel[in.Len:], pc+uint64(in.Len)
			return in
		}
		for _, ref := range chk.DCR {
			ob, err := of.Bytes(ref.Addr, uint64(ref.Len))
			if err != nil {
				t.Fatal(err)
			}
			o, _ := x86dec.Decode(ob, ref.Addr)
			ret := ref.Addr + uint64(ref.Len)
			switch {
			case o.Kind == x86dec.KindCall || o.Kind == x86dec.KindCallIndirect:
				// push the original return address, then jmp (or jmp *) to the callee
				first := rel[0]
				dec()
				switch first {
				case 0x68: // push $imm32
					imm := binary.LittleEndian.Uint32(read(pc-4, 4))
					if uint64(imm) != ret {
						t.Errorf("%s: push $%#x, want the return address %#x", s.fn, imm, ret)
					}
				default: // push %rax; lea ret(%rip),%rax; xchg %rax,(%rsp)
					l := dec()
					dec()
					if !l.RIPRel || l.RIPTarget != ret {
						t.Errorf("%s: the pushed address is %#x, want %#x", s.fn, l.RIPTarget, ret)
					}
				}
				jm := dec()
				if o.Kind == x86dec.KindCall && (jm.Kind != x86dec.KindJmp || jm.Target != o.Target) ||
					o.Kind == x86dec.KindCallIndirect && (jm.Kind != x86dec.KindJmpIndirect || jm.RIPRel != o.RIPRel || jm.RIPTarget != o.RIPTarget) {
					t.Errorf("%s: the call at %#x became %v to %#x/%#x", s.fn, ref.Addr, jm.Kind, jm.Target, jm.RIPTarget)
				}
			case o.Kind == x86dec.KindLoop:
				l := dec()
				skip := dec()
				jmAt := pc
				jm := dec()
				if l.Kind != x86dec.KindLoop || l.Target != jmAt || skip.Kind != x86dec.KindJmp || skip.Target != pc || jm.Kind != x86dec.KindJmp || jm.Target != o.Target {
					t.Errorf("%s: loop/jrcxz sandwich at %#x is wrong", s.fn, ref.Addr)
				}
			case o.Kind == x86dec.KindJmp || o.Kind == x86dec.KindJcc:
				n := dec()
				if n.Kind != o.Kind || n.Target != o.Target || n.RelSize != 4 {
					t.Errorf("%s: %v at %#x became %v to %#x (rel%d)", s.fn, o.Kind, ref.Addr, n.Kind, n.Target, n.RelSize*8)
				}
			case o.RIPRel:
				n := dec()
				if !n.RIPRel || n.RIPTarget != o.RIPTarget || n.Len != o.Len || n.Enc != o.Enc {
					t.Errorf("%s: RIP-relative %v at %#x addresses %#x, want %#x", s.fn, o.Enc, ref.Addr, n.RIPTarget, o.RIPTarget)
				}
			default:
				n := dec()
				if !bytes.Equal(read(pc-uint64(n.Len), uint64(n.Len)), ob) {
					t.Errorf("%s: the copy of %#x differs", s.fn, ref.Addr)
				}
			}
		}
		back := dec()
		if back.Kind != x86dec.KindJmp || back.Target != site+uint64(chk.DCRLen) || len(rel) != 0 {
			t.Errorf("%s: the detour ends with %v to %#x and %d more bytes, want a jmp to %#x", s.fn, back.Kind, back.Target, len(rel), site+uint64(chk.DCRLen))
		}
	}
}

// TestOptVerifyViolation: control reaching an inner byte of a would-be DCR through a
// pointer the analysis cannot see, inside an instruction: it is reported and the
// program dies by SIGTRAP (at an instruction boundary the program goes on and the
// violation is counted and recorded: tests/cases/opt-verify-violation).
func TestOptVerifyViolation(t *testing.T) {
	prog := testprog.Build(t, optformsSource(t), "c", "-O2", "-no-pie")
	dir := t.TempDir()
	out := filepath.Join(dir, "optforms")
	rewriteWith(t, prog, out, []string{"p:opt/victim o_victim a=%di:s64"}, "--verify-regions")
	tr := filepath.Join(dir, "run.trace")
	// inside the 3-byte mov: reported, then SIGTRAP
	r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"jumpin", "1"}, Extra: []string{"KPREWRITE_TRACE=" + tr + "2"}})
	if r.Signal != "trace/breakpoint trap" || !strings.Contains(r.Stderr, "inside an instruction") {
		t.Errorf("inside an instruction: %s", r)
	}
	if o := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"jumpin", "1"}}); o.Stdout != "jumpin=15\n" {
		t.Errorf("original: %s", o)
	}
	// int3 mode has no inner bytes: the same jump runs as in the original
	rewriteWith(t, prog, out, []string{"p:opt/victim o_victim a=%di:s64"}, "--no-optimize")
	testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"jumpin", "1"}, Extra: []string{"KPREWRITE_TRACE=" + tr + "3"}}, nil)
}

// TestOptExclude: --exclude keeps probes out of code by glob and by address range.
func TestOptExclude(t *testing.T) {
	prog := testprog.Build(t, optformsSource(t), "c", "-O2", "-no-pie")
	dir := t.TempDir()
	out := filepath.Join(dir, "optforms")
	syms := symbolTable(t, prog)
	code, _, stderr := kp("rewrite", "-o", out, "--skip-refused", "--exclude", "o_vex*", "--exclude", fmt.Sprintf("%#x+1", syms["o_jcc8"]),
		"-e", "p:opt/vex o_vex", "-e", "p:opt/veximm o_vex_imm", "-e", "p:opt/jcc o_jcc8", "-e", "p:opt/pad o_pad", prog)
	if code != 0 || strings.Count(stderr, "skipped:") != 3 || !strings.Contains(stderr, "excluded") || !strings.Contains(stderr, "o_vex*") {
		t.Fatalf("rewrite: exit %d: %s", code, stderr)
	}
	if list := listFlags(t, out); len(list) != 1 || list["o_pad+0x0"] == "" {
		t.Errorf("list %v", list)
	}
	code, _, stderr = kp("rewrite", "-o", out, "--exclude", "no_such_*", "-e", "p:opt/pad o_pad", prog)
	if code != 1 || !strings.Contains(stderr, "matches no function") {
		t.Errorf("a glob matching nothing: exit %d: %s", code, stderr)
	}
}

// cpuHasFlag says whether /proc/cpuinfo lists flag for the first CPU.
func cpuHasFlag(t *testing.T, flag string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			return slices.Contains(strings.Fields(val), flag)
		}
	}
	return false
}
