package tests

import (
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// redirectDefs probe every function of testdata/redirect.c: cpy, cpy32 and cpycc are
// entered at +3 by a jmp rel8 (with padding after it), a jmp rel32 and a jcc rel32 of
// the functions before them; spin loops back to its own +3 with a jcc rel8.
var redirectDefs = []string{
	"p:t/cpy cpy n=%dx:u64", "p:t/cpy32 cpy32 n=%dx:u64", "p:t/cpycc cpycc n=%dx:u64", "p:t/spin spin",
	"p:t/pcpy pcpy", "p:t/pcpy32 pcpy32", "p:t/maybe maybecpy", "p:t/again again",
}

// TestRedirectedJumps: a function entered a few bytes past its start by a jump from
// elsewhere (glibc's mempcpy jumps to memmove+3) is jump-optimized all the same: the
// jump goes to a relocated copy of the rest of the region instead, and the traced sizes
// are the program's. A jump another probe takes is not redirected. That the rewritten
// programs behave as the original, every probe counts exactly the calls the program
// counts itself (a jump to +3 is no hit; again's loop back to its entry hits its probe
// on every turn), in every mode, and no jump reaches an overwritten byte under
// --verify-regions, are cases: tests/cases/redirect-*.
func TestRedirectedJumps(t *testing.T) {
	src, err := os.ReadFile("testdata/redirect.c")
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 100
	for _, pie := range []string{"-pie", "-no-pie"} {
		prog := testprog.Build(t, string(src), "c", "-O2", pie)
		checkRedirectJSON(t, prog)
		for _, mode := range []string{"traced", "count-only", "verify"} {
			t.Run(pie[1:]+"/"+mode, func(t *testing.T) {
				dir := t.TempDir()
				out := filepath.Join(dir, "redirect")
				var flags []string
				switch mode {
				case "count-only":
					flags = []string{"--count-only"}
				case "verify":
					flags = []string{"--verify-regions"}
				}
				rewriteWith(t, prog, out, redirectDefs, flags...)
				if mode == "traced" {
					tr := filepath.Join(dir, "run.trace")
					testprog.Same(t, prog, out, testprog.Cmd{Args: []string{fmt.Sprint(rounds)}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
					var got, exp []string
					for _, l := range readTrace(t, tr, out) {
						if l.Event == "cpy" {
							got = append(got, strings.TrimSpace(l.Args))
						}
					}
					for r := 0; r < rounds; r++ {
						exp = append(exp, fmt.Sprintf("n=%d", r%40+1))
					}
					if strings.Join(got, ",") != strings.Join(exp, ",") {
						t.Errorf("t/cpy records %v, want %v", got, exp)
					}
				}
				// each jump now goes to the copy of its target's region
				for _, j := range []struct{ from, to string }{{"pcpy", "cpy"}, {"pcpy32", "cpy32"}, {"maybecpy", "cpycc"}} {
					checkJumpRedirected(t, prog, out, j.from, j.to)
				}
			})
		}
		t.Run(pie[1:]+"/blocked", func(t *testing.T) {
			// a probe on pcpy's jmp itself: its copy keeps the jmp's target, so cpy's
			// region must stay whole (cpy gets an int3), in the rewrite and in check
			dir := t.TempDir()
			out := filepath.Join(dir, "redirect")
			defs := []string{"p:t/cpy cpy n=%dx:u64", "p:t/j pcpy+6"}
			rewriteWith(t, prog, out, defs)
			tr := filepath.Join(dir, "run.trace")
			testprog.Same(t, prog, out, testprog.Cmd{Args: []string{fmt.Sprint(rounds)}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
			if prof := profile(t, tr, out); prof["cpy"] != [2]uint64{rounds, 0} || prof["j"] != [2]uint64{rounds, 0} {
				t.Errorf("profile %v, want %d hits of cpy and of j", prof, rounds)
			}
			if k := listKinds(t, out); k["cpy"] != "[BOOSTED]" || k["pcpy+0x6"] != "[OPTIMIZED]" {
				t.Errorf("list %v: want cpy [BOOSTED] and pcpy+0x6 [OPTIMIZED]", k)
			}
			code, stdout, _ := kp("check", "-e", defs[0], "-e", defs[1], prog)
			if code != 0 || !strings.Contains(stdout, "cannot be redirected: the probe at") {
				t.Errorf("check: exit %d, no reason for the jump it cannot redirect:\n%s", code, stdout)
			}
		})
	}
}

// checkRedirectJSON: `check --json` lists pcpy's jmp among cpy's redirects.
func checkRedirectJSON(t *testing.T, prog string) {
	t.Helper()
	code, stdout, stderr := kp("check", "--json", "-e", redirectDefs[0], prog)
	if code != 0 {
		t.Fatalf("check --json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Sites []struct {
			Verdict string
			DCR     *struct {
				Redirects []struct {
					Jump, Target  string
					Length, Bytes int
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	pcpy, cpy := symAddr(t, prog, "pcpy"), symAddr(t, prog, "cpy")
	var from, to uint64
	fmt.Sscanf(pcpy, "0x%x", &from)
	fmt.Sscanf(cpy, "0x%x", &to)
	if len(rep.Sites) != 1 || rep.Sites[0].DCR == nil || len(rep.Sites[0].DCR.Redirects) != 1 {
		t.Fatalf("check --json: %s", stdout)
	}
	r := rep.Sites[0].DCR.Redirects[0]
	if r.Jump != fmt.Sprintf("%#x", from+6) || r.Target != fmt.Sprintf("%#x", to+3) || r.Length != 2 || r.Bytes != 5 {
		t.Errorf("check --json: redirect %+v, want the jmp rel8 at pcpy+6 to cpy+3, grown to 5 bytes", r)
	}
}

// listKinds maps each probe's place in `kprewrite list` (FUNC or FUNC+0xOFF) to its
// kind tags.
func listKinds(t *testing.T, bin string) map[string]string {
	t.Helper()
	code, stdout, stderr := kp("list", bin)
	if code != 0 {
		t.Fatalf("kprewrite list: exit %d: %s", code, stderr)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			t.Fatalf("list line %q", line)
		}
		out[strings.TrimSuffix(f[2], "+0x0")] = f[len(f)-1]
	}
	return out
}

// checkJumpRedirected asserts that the jump at the end of from's first instructions
// (which targets to+3 in prog) is, in the rewrite out, a jmp or jcc rel32 to the
// symbol kprewrite_redirect.TO+0x3.
func checkJumpRedirected(t *testing.T, prog, out, from, to string) {
	t.Helper()
	var jmpAt, stub uint64
	for _, s := range elfSymbols(t, out) {
		switch s.Name {
		case from:
			jmpAt = s.Value + 6 // mov (3 bytes) and add or test (3 bytes) come first
		case "kprewrite_redirect." + to + "+0x3":
			stub = s.Value
		}
	}
	if jmpAt == 0 || stub == 0 {
		t.Fatalf("%s: no symbol %s or kprewrite_redirect.%s+0x3", out, from, to)
	}
	b := bytesAt(t, out, jmpAt, 6)
	var next uint64
	var rel int32
	switch {
	case b[0] == 0xe9:
		next, rel = jmpAt+5, int32(binary.LittleEndian.Uint32(b[1:]))
	case b[0] == 0x0f && b[1]&0xf0 == 0x80:
		next, rel = jmpAt+6, int32(binary.LittleEndian.Uint32(b[2:]))
		if orig := bytesAt(t, prog, jmpAt, 2); orig[1] != b[1] {
			t.Errorf("%s+6: condition %#x, the original's %#x", from, b[1], orig[1])
		}
	default:
		t.Fatalf("%s+6: % x, want a jmp or jcc rel32", from, b)
	}
	if got := next + uint64(int64(rel)); got != stub {
		t.Errorf("%s+6 jumps to %#x, want kprewrite_redirect.%s+0x3 at %#x", from, got, to, stub)
	}
}

// bytesAt reads n bytes at virtual address addr of the ELF file at path.
func bytesAt(t *testing.T, path string, addr uint64, n int) []byte {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+uint64(n) <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			if _, err := p.ReadAt(b, int64(addr-p.Vaddr)); err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%s: %#x is in no segment's file image", path, addr)
	return nil
}
