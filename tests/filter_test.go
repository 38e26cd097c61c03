package tests

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

var filterDefs = []string{
	"p:kpwe2e/w work n=%di:s32 s=+0(%si):string u=%dx:u64 w=%cx:s16 x=%di:x8",
	"r:kpwe2e/wr work rv=$retval:s64",
}

// filterCases are filters on filtered.c's work(), each checked against the kernel's.
var filterCases = []map[string]string{
	{"w": `n > 10 && s ~ "open*"`},
	{"w": `s == "" || s ~ "*star" || s ~ "x?y"`, "wr": "rv >= 100 && rv < 150"},
	{"w": `!(n < 0) && (w < -5000 || u & 0x10000)`},
	{"w": `comm == "worker-b" && n & 1`, "wr": `comm ~ "work*"`},
	{"w": `x == 0xec || u > 0x9000000 || s ~ "[cr]*"`},
	{"w": `w != 0 && !(s ~ "*e*") || common_pid == 0`, "wr": "rv < 0 || rv == 136"},
	{"w": `comm ~ "*ed"`}, // the kernel's suffix match on comm looks at all 16 bytes
	{"w": `s ~ "*pe*" && (n == 5 || n == 6 || n >= 50)`},
}

// TestFilterKernelDifferential: the same definitions and filters on filtered.c, traced
// by the kernel's uprobe tracer (filters written into the events' filter files) and
// by the rewritten program (rewrite --filter), int3 and jump-optimized: the lines
// must be the kernel's, and the filtered-out hits still count in the profile.
func TestFilterKernelDifferential(t *testing.T) {
	needUprobeTracer(t)
	src, err := os.ReadFile("testdata/filtered.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2", "-pthread")
	dir, orig, kpd := sameNamePair(t, prog, "filtered")
	total := 0
	for i, filters := range filterCases {
		kernel := kernelTraceFiltered(t, orig, filterDefs, filters, nil)
		if len(kernel) == 0 || len(kernel) >= 240 {
			t.Fatalf("case %d: the kernel kept %d of 240 lines: the case does not filter", i, len(kernel))
		}
		for _, mode := range []string{"int3", "optimize"} {
			var flags []string
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			for ev, expr := range filters {
				flags = append(flags, "--filter", "kpwe2e/"+ev+":"+expr)
			}
			rewriteWith(t, orig, kpd, filterDefs, flags...)
			tr := filepath.Join(dir, fmt.Sprintf("%d-%s.trace", i, mode))
			c := noASLR(kpd)
			c.Extra = []string{"KPREWRITE_TRACE=" + tr}
			if res := testprog.Run(t, c); res.Exit != 3 {
				t.Fatalf("case %d %s: %s", i, mode, res)
			}
			ours := readTrace(t, tr, kpd)
			if len(ours) != len(kernel) {
				t.Errorf("case %d %s %v: kprewrite wrote %d lines, the kernel %d\nkernel:\n%s\nkprewrite:\n%s", i, mode, filters, len(ours), len(kernel), joinLines(kernel), joinLines(ours))
				continue
			}
			for k := range kernel {
				a, b := kernel[k], ours[k]
				if a.Event != b.Event || a.Args != b.Args || a.Comm != b.Comm || a.Head != b.Head {
					t.Errorf("case %d %s line %d:\n  kernel:    %s %s %s%s\n  kprewrite: %s %s %s%s", i, mode, k+1, a.Comm, a.Event, a.Head, a.Args, b.Comm, b.Event, b.Head, b.Args)
				}
			}
			hits := profile(t, tr, kpd)
			if h := hits["w"][0]; h != 120 {
				t.Errorf("case %d %s: kpwe2e/w counted %d hits, want all 120 (filtered out or not)", i, mode, h)
			}
			total += len(ours)
		}
	}
	t.Logf("%d filter cases, %d lines equal to the kernel's", len(filterCases), total)
}

func joinLines(ls []traceLine) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "  %s %s %s%s\n", l.Comm, l.Event, l.Head, l.Args)
	}
	return b.String()
}

// TestFilterWrittenThenRefused: a record too large to fetch on the stack first is judged
// where it was written, and a refused one is skipped by readers (not reported torn).
func TestFilterWrittenThenRefused(t *testing.T) {
	src, err := os.ReadFile("testdata/filtered.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2", "-pthread")
	kpd := filepath.Join(t.TempDir(), "filtered")
	for _, mode := range []string{"int3", "optimize"} {
		flags := []string{"--filter", "kpwe2e/big:n < 0"}
		if mode == "int3" {
			flags = append(flags, "--no-optimize")
		}
		rewriteWith(t, prog, kpd, []string{"p:kpwe2e/big work n=%di:s32 st=+0(%sp):x64[40]"}, flags...)
		tr := kpd + ".trace"
		os.Remove(tr)
		if res := testprog.Run(t, testprog.Cmd{Path: kpd}); res.Exit != 3 {
			t.Fatalf("%s: %s", mode, res)
		}
		code, stdout, stderr := kp("trace", tr)
		if code != 0 || stderr != "" {
			t.Fatalf("trace: exit %d: %s", code, stderr)
		}
		if strings.Contains(stdout, "torn") || !strings.Contains(stdout, "entries-written: 20/20") {
			t.Errorf("%s: header of the trace:\n%s", mode, stdout[:min(len(stdout), 300)])
		}
		lines := parseTraceLines(t, stdout)
		if len(lines) != 20 {
			t.Fatalf("%s: %d records, want the 20 with n < 0", mode, len(lines))
		}
		for _, l := range lines {
			if !strings.HasPrefix(l.Args, " n=-") {
				t.Errorf("%s: %s%s passed the filter", mode, l.Event, l.Args)
			}
		}
	}
}

// TestFilterErrors: bad filters are refused with the kernel's message and caret, and
// no output is written; filters come from definitions files too; "0" removes one.
func TestFilterErrors(t *testing.T) {
	src, err := os.ReadFile("testdata/filtered.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2", "-pthread")
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	def := "p:kpwe2e/w work n=%di:s32 s=+0(%si):string"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--filter", "kpwe2e/w:n == 1 && zz == 2"}, "--filter #1: filter of kpwe2e/w: Field not found\n  n == 1 && zz == 2\n               ^\n  parse_error: Field not found"},
		{[]string{"--filter", `w:s == 1`}, "Expecting string field"},
		{[]string{"--filter", `w:(n == 1`}, "Too many '('"},
		{[]string{"--filter", `w:n = 1`}, "Invalid operator"},
		{[]string{"--filter", `w:s ~ "x`}, "Missing matching quote"},
		{[]string{"--filter", `w:n == 99999999999999999999`}, "Illegal integer value"},
		{[]string{"--filter", `w:&& n == 1`}, "Error: (0)"},
		{[]string{"--filter", `nosuch:n == 1`}, "--filter #1: no event nosuch is defined"},
		{[]string{"--filter", `kpwe2e/w`}, "a filter is GROUP/EVENT:EXPR"},
		{[]string{"--filter", `w:n == 1`, "--count-only"}, "with --count-only none is"},
		{[]string{"--filter", `w:__probe_ip.function == nosuch`}, "Function not found"},
	} {
		args := append([]string{"rewrite", "-o", out, "-e", def}, c.args...)
		code, _, stderr := kp(append(args, prog)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant %q", c.args, code, stderr, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: an output was written", c.args)
		}
	}
	// check refuses the same filters
	if code, _, stderr := kp("check", "-e", def, "--filter", "w:zz == 1", prog); code == 0 || !strings.Contains(stderr, "Field not found") {
		t.Errorf("check: exit %d: %s", code, stderr)
	}

	// a definitions file's filter lines, the second replacing the first; a
	// .function filter resolved in the binary; and "0" on the command line removing
	// the return event's filter
	defs := filepath.Join(dir, "defs")
	os.WriteFile(defs, []byte(def+"\nfilter kpwe2e/w:n == 1\nfilter kpwe2e/w:n >= 130 && __probe_ip.function == work\nr:kpwe2e/wr work rv=$retval:s64\nfilter wr:rv == 0\n"), 0o644)
	if code, _, stderr := kp("rewrite", "-o", out, "-f", defs, "--filter", "wr:0", prog); code != 0 {
		t.Fatalf("rewrite -f: %s", stderr)
	}
	tr := out + ".trace"
	if res := testprog.Run(t, testprog.Cmd{Path: out}); res.Exit != 3 {
		t.Fatal(res)
	}
	lines := readTrace(t, tr, out)
	w, wr := 0, 0
	for _, l := range lines {
		switch l.Event {
		case "w":
			w++
		case "wr":
			wr++
		}
	}
	if w != 10 || wr != 120 {
		t.Errorf("%d w records (want 10: n 130..139), %d wr (want all 120)", w, wr)
	}
	if code, stdout, _ := kp("list", "-v", out); code != 0 || !strings.Contains(stdout, "filter: n >= 130 && __probe_ip.function == work") {
		t.Errorf("list does not show the filter:\n%s", stdout)
	}
}

// inlineCases are filters on filtered.c's work() that read registers and the stack
// only: each is compiled into the detour (kprewrite_filter.work+...).
var inlineCases = []string{
	"n >= 30 && n < 120 && w != 0",
	"x > 0xf0 || x == 5 || !(u & 0x400000)",
	"u < 0xffffffff00000000 && u > 0x7fffffff00 || n == 3",
	"w < -20000 || w > 25000",
	"ra > 0x1000 && (n == 7 || n == 107) || xs < -100",
	"n & 4 && x != 0x64 && w16 >= 0x8000",
	"u >= 0x10000 && u <= 0x500000 && (n == -1 || n == 100 || n == 137)",
}

// TestInlineFilter: a filter that reads only registers and the stack is tested in the
// detour itself, before anything is saved, and a refused hit only counts. The records
// kept are exactly those the filter's reference (evfilter.Match) keeps for the
// arguments filtered.c is known to pass, at int3 points (the runtime's filter) and at
// jump-optimized ones (the inline filter), in order, and every refused hit counts. A
// filter given at run time (KPREWRITE_CONTROL) replaces the inline one.
func TestInlineFilter(t *testing.T) {
	src, err := os.ReadFile("testdata/filtered.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := testprog.Build(t, string(src), "c", "-O2", "-pthread")
	def := "p:kpwe2e/w work n=%di:s32 u=%dx:u64 w=%cx:s16 x=%di:x8 xs=%di:s8 w16=%cx:u16 ra=+0(%sp):x64"
	p, err := eventdef.Parse(def)
	if err != nil {
		t.Fatal(err)
	}
	// the calls filtered.c makes, in the order a trace shows them (main's, then the
	// thread's), as the record's data
	var calls []int
	for i := -20; i < 60; i++ {
		calls = append(calls, i)
	}
	for i := 100; i < 140; i++ {
		calls = append(calls, i)
	}
	data := func(i int) []byte {
		u := uint64(i+64) * 0x10001
		w := uint16(int16(i * 1000))
		b := binary.LittleEndian.AppendUint32(nil, uint32(int32(i)))
		b = binary.LittleEndian.AppendUint64(b, u)
		b = binary.LittleEndian.AppendUint16(b, w)
		b = append(b, byte(i), byte(i))
		b = binary.LittleEndian.AppendUint16(b, w)
		return binary.LittleEndian.AppendUint64(b, 0x555555554000) // a return address
	}
	dir := t.TempDir()
	kpd := filepath.Join(dir, "filtered")
	check := func(what, expr, tr string, wantN []int) {
		t.Helper()
		lines := readTrace(t, tr, kpd)
		var got []int
		for _, l := range lines {
			n, err := strconv.Atoi(strings.TrimPrefix(strings.Fields(l.Args)[0], "n="))
			if err != nil {
				t.Fatalf("%s: line %s%s", what, l.Event, l.Args)
			}
			got = append(got, n)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantN) {
			t.Errorf("%s %q: n of the records %v, want %v", what, expr, got, wantN)
		}
		if h := profile(t, tr, kpd)["w"]; h != [2]uint64{120, 0} {
			t.Errorf("%s %q: hits and misses %v, want all 120 hits (filtered out or not)", what, expr, h)
		}
	}
	for _, expr := range inlineCases {
		f, err := evfilter.Parse(expr, evfilter.Fields(p), evfilter.AnySymbols{})
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		var want []int
		for _, i := range calls {
			if evfilter.Match(f.Program(), &evfilter.Env{Data: data(i)}) {
				want = append(want, i)
			}
		}
		if len(want) == 0 || len(want) == len(calls) {
			t.Fatalf("%q keeps %d of %d calls: the case does not filter", expr, len(want), len(calls))
		}
		for _, mode := range []string{"int3", "optimize"} {
			flags := []string{"--filter", "kpwe2e/w:" + expr}
			if mode == "int3" {
				flags = append(flags, "--no-optimize")
			}
			rewriteWith(t, prog, kpd, []string{def}, flags...)
			if inline := hasSymbolPrefix(t, kpd, "kprewrite_filter.work+"); inline != (mode == "optimize") {
				t.Fatalf("%s %q: an inline filter %v", mode, expr, inline)
			}
			tr := kpd + ".trace"
			os.Remove(tr)
			if res := testprog.Run(t, testprog.Cmd{Path: kpd, Extra: []string{"KPREWRITE_TRACE=" + tr}}); res.Exit != 3 {
				t.Fatalf("%s: %s", mode, res)
			}
			check(mode, expr, tr, want)
		}
	}
	// KPREWRITE_CONTROL gives the event another filter: it decides, not the inline one
	rewriteWith(t, prog, kpd, []string{def}, "--filter", "kpwe2e/w:n < 0")
	ctl := filepath.Join(dir, "w.ctl")
	if code, _, stderr := kp("control", "-o", ctl, "--filter", "kpwe2e/w:n >= 130 || n == -3", kpd); code != 0 {
		t.Fatalf("control: %s", stderr)
	}
	tr := kpd + ".trace"
	os.Remove(tr)
	if res := testprog.Run(t, testprog.Cmd{Path: kpd, Extra: []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_CONTROL=" + ctl}}); res.Exit != 3 {
		t.Fatalf("control: %s", res)
	}
	check("run-time filter", "n >= 130 || n == -3", tr, []int{-3, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139})
}

// hasSymbolPrefix says whether the ELF file has a symbol whose name starts with prefix.
func hasSymbolPrefix(t *testing.T, path, prefix string) bool {
	t.Helper()
	for _, s := range elfSymbols(t, path) {
		if strings.HasPrefix(s.Name, prefix) {
			return true
		}
	}
	return false
}
