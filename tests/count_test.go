package tests

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// detourKind says what the detour of the probe at SYM+OFF starts with: "count-dead"
// (lea, push %rcx, mov of the rseq offset: a count-only detour with the flags dead),
// "count-live" (lea, push %rax, lahf: count-only saving the flags), "full" (anything
// else), or "" without a detour.
func detourKind(t *testing.T, bin, site string) string {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"kprewrite_detour." + site: true}
	if fn, ok := strings.CutSuffix(site, "+0x0"); ok {
		names["kprewrite_detour."+fn+"+0x4"] = true // after an endbr64
	}
	for _, s := range syms {
		if !names[s.Name] {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value+64 <= p.Vaddr+p.Filesz {
				b := make([]byte, 64)
				if _, err := p.ReadAt(b, int64(s.Value-p.Vaddr)); err != nil {
					t.Fatal(err)
				}
				// RSEQ_SIG first: the inline form's cold part, its entry 23 bytes on; the
				// PIC inline form pushes %rdx after the head
				suffix := ""
				if bytes.HasPrefix(b, []byte{0x53, 0x30, 0x05, 0x53}) {
					b, suffix = b[23:], "-inline"
					if head := 5 + map[bool]int{true: 5}[b[5] == 0x50]; b[head+10] == 0x52 {
						suffix = "-inlinepic"
					}
				}
				switch {
				case bytes.HasPrefix(b, []byte{0x48, 0x8d, 0x64, 0x24, 0x80, 0x51, 0x48, 0x8b, 0x0d}):
					return "count-dead" + suffix
				case bytes.HasPrefix(b, []byte{0x48, 0x8d, 0x64, 0x24, 0x80, 0x50, 0x9f}):
					return "count-live" + suffix
				}
				return "full"
			}
		}
	}
	return ""
}

// TestCountOnly: --count-only rewrites of the probes corpus give jump-optimized kprobe
// events count-only detours (flags saved where they are live: f_jcc+2 and f_pushf read
// them), none for the return probe on fact (counted at its exits), and run like the
// originals without a trace file. That they write no records and count every hit of
// every event, disabled events nothing, are cases: tests/cases/count-only-*.
func TestCountOnly(t *testing.T) {
	src := probedSource(t)
	for _, build := range probedBuilds {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, src, "c", build.flags...)
			for _, mode := range []string{"optimize", "no-optimize", "verify"} {
				t.Run(mode, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "probed")
					flags := []string{"--count-only"}
					switch mode {
					case "no-optimize":
						flags = append(flags, "--no-optimize")
					case "verify":
						flags = append(flags, "--verify-regions")
					}
					rewriteWith(t, prog, out, basicDefs, flags...)
					want := map[string]string{"add+0x0": "count", "greet+0x0": "count", "f_jcc+0x2": "count-live",
						"f_pushf+0x0": "count-live", "f_call+0x1": "count-live", "f_rip+0x0": "count-dead",
						"fact+0x0": ""} // r:fact is counted at its rets: nothing at its entry
					inline := 0
					for site, kind := range want {
						got := detourKind(t, out, site)
						if mode != "optimize" {
							kind = ""
						}
						if !strings.HasPrefix(got, kind) || (kind == "" && got != "") {
							t.Errorf("%s: detour %q, want %q", site, got, kind)
						}
						fixed := build.name == "nopie-cet" || build.name == "static"
						if strings.HasSuffix(got, "-inline") || strings.HasSuffix(got, "-inlinepic") {
							inline++
							if strings.HasSuffix(got, "-inlinepic") == fixed {
								t.Errorf("%s: detour %q in an image at fixed addresses %v", site, got, fixed)
							}
						}
					}
					// a point of one probe: its own restartable sequence, PIC where the image
					// moves (add has two events: the call form)
					if (inline > 0) != (mode == "optimize") {
						t.Errorf("%d detours of the inline form", inline)
					}

					// dynamic glibc builds, jump-optimized: the image only counts, so its int3
					// probes (loop, ret, jmp, indcall) count per CPU too: the counts of
					// tests/cases/count-only-pie and -nopie-cet come from the shards
					if mode == "optimize" && (build.name == "pie" || build.name == "nopie-cet") {
						r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"basic"},
							Extra: []string{"KPREWRITE_TRACE=" + filepath.Join(dir, "debug.trace"), "KPREWRITE_DEBUG=1"}})
						if !strings.Contains(r.Stderr, "int3 hits too") {
							t.Errorf("int3 hits not counted per CPU: %s", r.Stderr)
						}
					}
					// no trace file: counted in memory, the program is unchanged
					testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"basic"}, Extra: []string{"KPREWRITE_TRACE="}}, nil)
				})
			}
		})
	}
}

// TestCountOnlyThreadsFork: a count-only detour loses nothing when 8 threads hammer
// it, a fork child counts into the same file, and 16 threads in 4 processes counting
// per CPU (or with lock incq) lose nothing either.
func TestCountOnlyThreadsFork(t *testing.T) {
	prog := testprog.Build(t, probedSource(t), "c", "-O2", "-pthread")
	dir := t.TempDir()
	out := filepath.Join(dir, "probed")
	// two events at add: the call form (one event would take the inline PIC form,
	// hammered below with the non-PIE program's)
	rewriteWith(t, prog, out, []string{"p:kpw/add add t=%di:s32 i=%si:s32", "p:kpw/add2 add"}, "--count-only")
	if k := detourKind(t, out, "add+0x0"); !strings.HasPrefix(k, "count") || strings.Contains(k, "-inline") {
		t.Fatalf("add's detour is %q, want a count-only one calling the runtime", k)
	}
	for _, c := range []struct {
		arg  string
		hits uint64
	}{{"threads", 8000}, {"fork", 6}} {
		tr := filepath.Join(dir, c.arg+".trace")
		testprog.Same(t, prog, out, testprog.Cmd{Args: []string{c.arg}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
		if p := profile(t, tr, out); p["add"] != [2]uint64{c.hits, 0} || p["add2"] != [2]uint64{c.hits, 0} {
			t.Errorf("%s: profile %v, want %d hits each", c.arg, p, c.hits)
		}
	}
	// 16 threads in 4 processes at once on every CPU, 4,000,000 hits: per-CPU counting in
	// restartable sequences (a dynamic glibc program: the file holds a shard per CPU)
	// and, with KPREWRITE_NO_RSEQ=1, the lock incq it replaces, both exact
	for _, env := range []string{"", "KPREWRITE_NO_RSEQ=1"} {
		tr := filepath.Join(dir, "hammer"+env+".trace")
		res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"hammer"}, Extra: []string{"KPREWRITE_TRACE=" + tr, env}}, nil)
		if !strings.Contains(res.Stdout, "hammer bad=0") {
			t.Fatalf("hammer: %s", res)
		}
		if p := profile(t, tr, out); p["add"] != [2]uint64{4000000, 0} || p["add2"] != [2]uint64{4000000, 0} {
			t.Errorf("hammer %s: profile %v, want 4000000 hits each", env, p)
		}
		shards := traceShards(t, tr)
		if (env == "") != (shards > 0) {
			t.Errorf("hammer %s: %d per-CPU shards", env, shards)
		}
	}
	// one event: the detour counts in its own restartable sequence (by absolute
	// addresses in a non-PIE program, PC-relatively in a PIE), 16 threads on 2 CPUs
	// preempted inside it (the kernel restarts it at its abort handler), exact
	for _, pie := range []string{"-no-pie", "-pie"} {
		countInlineHammer(t, dir, pie)
	}
	// a static program: glibc registers its rseq areas after the runtime's start-up, so
	static := testprog.Build(t, probedSource(t), "c", "-O2", "-pthread", "-static")
	sout := filepath.Join(dir, "probed-static")
	rewriteWith(t, static, sout, []string{"p:kpw/add add t=%di:s32 i=%si:s32"}, "--count-only")
	str := filepath.Join(dir, "hammer-static.trace")
	testprog.Same(t, static, sout, testprog.Cmd{Args: []string{"hammer"}, Extra: []string{"KPREWRITE_TRACE=" + str}}, nil)
	if p := profile(t, str, sout); p["add"] != [2]uint64{4000000, 0} || traceShards(t, str) != 0 {
		t.Errorf("hammer, static: profile %v, want 4000000 hits; %d shards, want none", p["add"], traceShards(t, str))
	}
	// the trace command says there is nothing to print, and exits 0
	code, stdout, stderr := kp("trace", filepath.Join(dir, "fork.trace"))
	if code != 0 || len(parseTraceLines(t, stdout)) != 0 {
		t.Errorf("trace of a count-only run: exit %d, %s%s", code, stdout, stderr)
	}
}

// countInlineHammer rewrites the probed program built with pie (-no-pie, -pie) with one
// count-only event on add, whose detour takes the inline form (its PIC form in a PIE),
// and checks its counts under 16 threads and under a storm of signals whose handler
// calls add too.
func countInlineHammer(t *testing.T, dir, pie string) {
	nopie := testprog.Build(t, probedSource(t), "c", "-O2", "-pthread", pie)
	nout := filepath.Join(dir, "probed"+pie)
	// f_jmp's probe is an int3 one (its jmp is too short for a DCR): the image only
	// counts, so its hits from 16 threads count per CPU too (kprw_count_hit)
	rewriteWith(t, nopie, nout, []string{"p:kpw/add add t=%di:s32 i=%si:s32", "p:kpw/jmp f_jmp"}, "--count-only")
	want := map[string]string{"-no-pie": "-inline", "-pie": "-inlinepic"}[pie]
	if k := detourKind(t, nout, "add+0x0"); !strings.HasSuffix(k, want) {
		t.Fatalf("%s: add's detour is %q, want the form %s", pie, k, want)
	}
	for _, env := range []string{"", "KPREWRITE_NO_RSEQ=1"} {
		tr := filepath.Join(dir, "hammer"+pie+env+".trace")
		res := testprog.Same(t, nopie, nout, testprog.Cmd{Args: []string{"hammer"}, Extra: []string{"KPREWRITE_TRACE=" + tr, env}}, nil)
		if !strings.Contains(res.Stdout, "hammer bad=0") {
			t.Fatalf("hammer, %s: %s", pie, res)
		}
		if p := profile(t, tr, nout); p["add"] != [2]uint64{4000000, 0} || p["jmp"] != [2]uint64{4000, 0} || (env == "") != (traceShards(t, tr) > 0) {
			t.Errorf("hammer, %s %s: profile %v, want add 4000000 and jmp 4000 hits; %d shards", pie, env, p, traceShards(t, tr))
		}
	}
	// a timer signal every 20 us whose handler calls add too: signals land inside the
	// restartable sequence (the kernel resumes at its abort handler, which starts over),
	// and each hit, the loop's and the handler's, counts once
	for _, env := range []string{"", "KPREWRITE_NO_RSEQ=1"} {
		tr := filepath.Join(dir, "storm"+pie+env+".trace")
		sigs := regexp.MustCompile(`sig=\d+`)
		var raw string // the rewritten program's output, normalized last
		testprog.Same(t, nopie, nout, testprog.Cmd{Args: []string{"storm"}, Extra: []string{"KPREWRITE_TRACE=" + tr, env}},
			func(s string) string {
				if strings.HasPrefix(s, "storm") {
					raw = s
				}
				return sigs.ReplaceAllString(s, "sig=N")
			})
		var n, sig uint64
		if _, err := fmt.Sscanf(raw, "storm n=%d sig=%d", &n, &sig); err != nil || sig < 100 {
			t.Fatalf("storm %s: %q (%v)", env, raw, err)
		}
		if p := profile(t, tr, nout); p["add"] != [2]uint64{n + sig, 0} {
			t.Errorf("storm, %s %s: profile %v, want %d hits (%d signals)", pie, env, p["add"], n+sig, sig)
		}
	}
}

// traceShards is the number of per-CPU shards of hit counts the trace file at path
// holds for its (only) image.
func traceShards(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tracefile.ParseTrace(b)
	if err != nil || len(tr.Images) != 1 {
		t.Fatalf("trace %s: %v", path, err)
	}
	return tr.Images[0].Shards
}

// TestCountOnlyFileReserve: a trace file a count-only image creates takes the blocks of
// its header and counters only (its record area is never written: 64 MiB of extents
// on ext4, of memory on tmpfs, at every first run were reserved before); an image that
// records into the same file (appending) keeps every record, and the file takes blocks
// for them, not for its whole record area.
func TestCountOnlyFileReserve(t *testing.T) {
	prog := testprog.Build(t, probedSource(t), "c", "-O2", "-pthread")
	dir := t.TempDir()
	co, rec := filepath.Join(dir, "probed-count"), filepath.Join(dir, "probed-record")
	def := []string{"p:kpw/add add t=%di:s32 i=%si:s32"}
	rewriteWith(t, prog, co, def, "--count-only")
	rewriteWith(t, prog, rec, def)
	tr := filepath.Join(dir, "mixed.trace")
	env := []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_TRACE_SIZE=16M"}
	header := func() (flags uint32, dataSize, allocated uint64) {
		t.Helper()
		b, err := os.ReadFile(tr)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tracefile.ParseTrace(b)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(tr)
		if err != nil {
			t.Fatal(err)
		}
		return h.Header.Flags, h.Header.DataSize, uint64(st.Sys().(*syscall.Stat_t).Blocks) * 512
	}
	testprog.Same(t, prog, co, testprog.Cmd{Args: []string{"threads"}, Extra: env}, nil)
	_, size, alloc := header()
	if size != 16<<20 || alloc >= 1<<20 {
		t.Fatalf("after the count-only run: record area %d bytes, %d bytes allocated; want less than 1 MiB allocated", size, alloc)
	}
	testprog.Same(t, prog, rec, testprog.Cmd{Args: []string{"threads"}, Extra: append(env, "KPREWRITE_APPEND=1")}, nil)
	_, _, alloc = header()
	if alloc >= size/2 {
		t.Fatalf("after the recording run: %d bytes allocated; want the records' blocks, not the %d-byte record area's", alloc, size)
	}
	code, stdout, stderr := kp("trace", "-b", rec, tr)
	if n := len(parseTraceLines(t, stdout)); code != 0 || n != 8000 {
		t.Fatalf("trace: exit %d, %d records, want 8000: %s", code, n, stderr)
	}
	// each image's hits in its own counters
	_, stdout, _ = kp("profile", "-b", co, "-b", rec, tr)
	for _, img := range []string{"probed-count", "probed-record"} {
		if !regexp.MustCompile(`(?m)^\s*` + img + `\s+add\s+8000\s+0$`).MatchString(stdout) {
			t.Errorf("profile: no 8000 hits of %s's add:\n%s", img, stdout)
		}
	}
}
