package tests

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/debuginfo"
	"github.com/kprewrite/kprewrite/internal/srcprobe"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// gdbValue is one value as tests/testdata/gdbvars.py prints it.
type gdbValue struct {
	I       *string  `json:"i"`
	E       *string  `json:"e"`     // an enum's value as gdb names it (I is its number)
	F       *string  `json:"f"`     // a float's value (Python's repr)
	FSize   int      `json:"fsize"` // ... and its size
	S       *string  `json:"s"`
	A       []string `json:"a"`
	Opt     bool     `json:"opt"`
	BelowSP bool     `json:"below_sp"`
	Fault   bool     `json:"fault"`
	Err     string   `json:"err"`
}

type gdbPoint struct {
	Func string              `json:"func"`
	Vals map[string]gdbValue `json:"vals"`
}

// srcTally counts what one differential run compared.
type srcTally struct {
	points, skippedPoints     int // addresses compared; addresses where gdb showed another frame
	inlinedPoints             int // ... of them in an inlined copy of a function
	pairs                     int // (address, expression) pairs gdb printed a value for
	equal                     int // ... that kprewrite traced with the same value
	refused                   int // ... that kprewrite refused (the resolution gap)
	notTraced                 int // ... resolved, at a point left out (refused even as an int3 probe)
	int3Points                int // events compared at points only an int3 probe can take
	optimizedOut, bothRefused int // pairs gdb called <optimized out>; of which kprewrite refused
	// equal pairs of the types the kernel's fetch types lack: enums traced by name,
	// floats and doubles, signed bitfields with a negative value
	enums, floats, signedBitfields int
}

// TestSourceVarsMatchGDB is the differential test of source-level probes: a C
// program (also compiled as C++) with structs, pointers, arrays, strings, enums,
// bitfields, loops, an inlined function and globals, built with -g at -O0 to -O3.
// At every address a line probe can go on (check --lines of each function), gdb
// prints every variable in scope and one level of members and elements; kprewrite
// traces the same expressions, written by name, at the same addresses (the first
// hit of each, as gdb's first stop). Every value kprewrite traces must equal
// gdb's; where gdb says <optimized out>, kprewrite must refuse.
func TestSourceVarsMatchGDB(t *testing.T) {
	testprog.Need(t, "gcc", "g++", "gdb")
	src, err := os.ReadFile("testdata/srcvars.c")
	if err != nil {
		t.Fatal(err)
	}
	var all srcTally
	builds := []struct{ lang, opt, dwarf string }{
		{"c", "-O0", ""}, {"c", "-O1", ""}, {"c", "-O2", ""}, {"c", "-O3", ""},
		{"c++", "-O0", ""}, {"c++", "-O2", ""},
		{"c", "-O2", "-gdwarf-4"}, // .debug_loc and DW_OP_GNU_* where DWARF 5 has loclists
	}
	for _, b := range builds {
		t.Run(b.lang+b.opt+b.dwarf, func(t *testing.T) {
			flags := []string{"-g", b.opt}
			if b.dwarf != "" {
				flags = append(flags, b.dwarf)
			}
			bin := testprog.Build(t, string(src), b.lang, flags...)
			tally := compareSourceVars(t, bin)
			t.Logf("%s %s: %d points (%d in inlined copies; %d skipped: gdb shows another frame; %d events at int3-only points), %d pairs gdb printed: %d traced equal (%d enums by name, %d floats, %d negative bitfields), %d refused by kprewrite, %d not traced (refused even as an int3 probe); %d <optimized out>, %d of them refused",
				b.lang, b.opt, tally.points, tally.inlinedPoints, tally.skippedPoints, tally.int3Points, tally.pairs, tally.equal, tally.enums, tally.floats, tally.signedBitfields, tally.refused, tally.notTraced, tally.optimizedOut, tally.bothRefused)
			if tally.pairs != tally.equal+tally.refused+tally.notTraced {
				t.Errorf("%d pairs compared, %d accounted for", tally.pairs, tally.equal+tally.refused+tally.notTraced)
			}
			if tally.equal < 20 {
				t.Errorf("only %d values compared equal", tally.equal)
			}

			all.points += tally.points
			all.pairs += tally.pairs
			all.equal += tally.equal
			all.refused += tally.refused
			all.inlinedPoints += tally.inlinedPoints
			all.notTraced += tally.notTraced
			all.int3Points += tally.int3Points
			all.optimizedOut += tally.optimizedOut
			all.bothRefused += tally.bothRefused
			if tally.enums == 0 || tally.floats == 0 || tally.signedBitfields == 0 {
				t.Errorf("%d enums by name, %d floats, %d negative signed bitfields compared equal: want some of each",
					tally.enums, tally.floats, tally.signedBitfields)
			}
		})
	}
	if all.inlinedPoints == 0 {
		// at an inlined copy's first address gdb shows the caller's frame: the
		// copies compared are those with more than one line (here at -O0)
		t.Errorf("no point in an inlined copy (scale is always_inline) was compared")
	}
	if all.int3Points == 0 {
		t.Errorf("no event at a point only an int3 probe can take was compared")
	}
	t.Logf("all builds: %d points (%d events at int3-only points), %d (point, expression) pairs gdb printed, %d traced equal, %d refused, %d not traced; %d <optimized out>, %d refused",
		all.points, all.int3Points, all.pairs, all.equal, all.refused, all.notTraced, all.optimizedOut, all.bothRefused)
}

// srcFuncs are the functions of srcvars.c whose lines are probed.
var srcFuncs = []string{"handle", "sum_hist", "describe", "walk", "weigh", "scale", "main"}

func compareSourceVars(t *testing.T, bin string) srcTally {
	in, err := debuginfo.Load(bin, "")
	if err != nil {
		t.Fatal(err)
	}
	res := &srcprobe.Resolver{Binary: bin}
	// the points: every address of every line of the functions
	addrSet := map[uint64]bool{}
	for _, fn := range srcFuncs {
		fls, err := res.Lines(fn)
		if err != nil {
			t.Fatalf("lines of %s: %v", fn, err)
		}
		for _, fl := range fls {
			for _, l := range fl.Lines {
				for _, a := range l.Addrs {
					addrSet[a] = true
				}
			}
		}
	}
	var addrs []uint64
	for a := range addrSet {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	// the expressions at each: the variables in scope, with members and elements
	exprs := map[uint64][]string{}
	resolved := map[uint64]map[string]bool{}
	for _, a := range addrs {
		_, vars, err := in.Vars(a)
		if err != nil {
			t.Fatalf("vars at %#x: %v", a, err)
		}
		resolved[a] = map[string]bool{}
		for _, v := range vars {
			for _, e := range chainsOf(v.Name, v.Type, 0) {
				exprs[a] = append(exprs[a], e)
				def := fmt.Sprintf("p:s/x %#x v=%s", a, e)
				if _, err := res.Translate(def); err == nil {
					resolved[a][e] = true
				}
			}
		}
	}
	// kprewrite: one event per address (in chunks), the resolved expressions by name
	var defs []string
	names := map[string][2]any{} // event -> address, expressions
	for _, a := range addrs {
		var es []string
		for _, e := range exprs[a] {
			if resolved[a][e] {
				es = append(es, e)
			}
		}
		for c := 0; c*16 < len(es); c++ {
			chunk := es[c*16 : min(len(es), (c+1)*16)]
			ev := fmt.Sprintf("a%x_%d", a, c)
			words := []string{fmt.Sprintf("p:s/%s %#x", ev, a)}
			for i, e := range chunk {
				words = append(words, fmt.Sprintf("v%d=%s", i, e))
			}
			defs = append(defs, strings.Join(words, " "))
			names[ev] = [2]any{a, chunk}
		}
	}
	out := bin + ".src"
	// jump-optimized probes only: gdb would take an int3 probe's SIGTRAP for its own
	rewriteWith(t, bin, out, defs, "--optimized-only", "--skip-refused")
	r := testprog.Run(t, testprog.Cmd{Path: out})
	want := testprog.Run(t, testprog.Cmd{Path: bin})
	if r.Stdout != want.Stdout || r.Exit != 0 {
		t.Fatalf("rewritten program: %s\nwant %s", r, want)
	}
	// gdb runs the rewritten program and prints; its trace is of the same run
	trace := filepath.Join(t.TempDir(), "gdb.trace")
	gdbOut := runGDBVars(t, out, trace, exprs, false)
	first := firstRecords(t, trace)
	optimized := listedAs(t, out, "[OPTIMIZED]")
	// the points no jump can go to: a second rewrite with int3 probes there, which gdb
	// runs stopping at their own SIGTRAPs (gdbvars.py, GDBVARS_INT3)
	var int3Defs []string
	int3Exprs := map[uint64][]string{}
	for _, d := range defs {
		if a, err := strconv.ParseUint(strings.Fields(d)[1], 0, 64); err == nil && !optimized[a] {
			int3Defs = append(int3Defs, d)
			int3Exprs[a] = exprs[a]
		}
	}
	int3 := map[uint64]bool{}
	if len(int3Defs) > 0 {
		out3 := bin + ".int3"
		rewriteWith(t, bin, out3, int3Defs, "--no-optimize", "--skip-refused")
		trace3 := filepath.Join(t.TempDir(), "gdb-int3.trace")
		gdbOut3 := runGDBVars(t, out3, trace3, int3Exprs, true)
		first3 := firstRecords(t, trace3)
		for a := range int3Exprs {
			key := fmt.Sprintf("%#x", a)
			if gp, ok := gdbOut3[key]; ok {
				gdbOut[key] = gp // the values of the run the records are of
				int3[a] = true
			} else {
				delete(gdbOut, key) // a point this run did not reach: nothing to compare
			}
		}
		for ev, rec := range first3 {
			first[ev] = rec
		}
	}
	var tally srcTally
	for _, a := range addrs {
		key := fmt.Sprintf("%#x", a)
		gp, hit := gdbOut[key]
		if !hit {
			continue // not reached by this run
		}
		if fn := in.FuncAt(a); fn == nil || !sameFunc(gp.Func, fn.Name) {
			tally.skippedPoints++
			continue
		}
		tally.points++
		if in.FuncAt(a).Inlined {
			tally.inlinedPoints++
		}
		traced := map[string]json.RawMessage{}
		for ev, info := range names {
			if info[0].(uint64) != a {
				continue
			}
			rec, ok := first[ev]
			if !ok {
				if !optimized[a] && !int3[a] {
					continue // left out: refused even as an int3 probe
				}
				t.Errorf("%#x: gdb stopped there, event %s has no record", a, ev)
				continue
			}
			if int3[a] {
				tally.int3Points++
			}
			for i, e := range info[1].([]string) {
				traced[e] = rec[fmt.Sprintf("v%d", i)]
			}
		}
		for _, e := range exprs[a] {
			g, ok := gp.Vals[e]
			if !ok || g.Err != "" || g.BelowSP || g.S != nil && !printable(*g.S) {
				continue // nothing gdb can compare: an error, unallocated stack, garbage bytes
			}
			got, isTraced := traced[e]
			if g.Opt {
				tally.optimizedOut++
				if isTraced {
					t.Errorf("%#x (%s) %s: gdb says <optimized out>, kprewrite traced %s", a, gp.Func, e, got)
				} else {
					tally.bothRefused++
				}
				continue
			}
			tally.pairs++
			if !resolved[a][e] {
				tally.refused++
				continue
			}
			if !isTraced {
				tally.notTraced++ // no record: reported above unless the probe was left out
				continue
			}
			if w, ok := sameTraced(g, got); !ok {
				t.Errorf("%#x (%s) %s: gdb %s, kprewrite %s", a, gp.Func, e, w, got)
				continue
			}
			tally.equal++
			switch {
			case g.E != nil && *g.E != *g.I:
				tally.enums++
			case g.F != nil:
				tally.floats++
			case strings.HasSuffix(e, "skew") && g.I != nil && strings.HasPrefix(*g.I, "-"):
				tally.signedBitfields++
			}
		}
	}
	return tally
}

// printable says whether s is printable ASCII (a string worth comparing, not the
// garbage of an uninitialized buffer).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// sameFunc compares gdb's function name (C++: with the parameter list) with the
// debug information's.
func sameFunc(gdbName, name string) bool {
	if i := strings.IndexByte(gdbName, '('); i >= 0 {
		gdbName = gdbName[:i]
	}
	return gdbName == name
}

// sameTraced compares a gdb value with a traced JSON field; it returns gdb's value
// in words.
func sameTraced(g gdbValue, got json.RawMessage) (string, bool) {
	switch {
	case g.E != nil:
		// a value with a name is traced as its name, another as its number
		var name string
		if json.Unmarshal(got, &name) == nil {
			return *g.E, name == *g.E
		}
		var n json.Number
		return *g.E, json.Unmarshal(got, &n) == nil && n.String() == *g.I && *g.E == *g.I
	case g.F != nil:
		want, err := strconv.ParseFloat(*g.F, 64)
		if err != nil {
			return *g.F, false
		}
		var f float64
		if json.Unmarshal(got, &f) != nil {
			var text string // NaN and the infinities are traced as text
			return *g.F, json.Unmarshal(got, &text) == nil && math.IsNaN(want) && text == "nan"
		}
		if g.FSize == 4 { // traced as the shortest decimal of the float
			return *g.F, float32(f) == float32(want)
		}
		return *g.F, f == want
	case g.I != nil:
		var n json.Number
		if json.Unmarshal(got, &n) != nil {
			return *g.I, false
		}
		return *g.I, n.String() == *g.I
	case g.S != nil:
		var s string
		if json.Unmarshal(got, &s) != nil {
			return fmt.Sprintf("%q", *g.S), false
		}
		return fmt.Sprintf("%q", *g.S), s == *g.S
	case g.Fault:
		return "(fault)", string(got) == "null"
	case g.A != nil:
		var ns []json.Number
		if json.Unmarshal(got, &ns) != nil || len(ns) != len(g.A) {
			return fmt.Sprint(g.A), false
		}
		for i := range ns {
			if ns[i].String() != g.A[i] {
				return fmt.Sprint(g.A), false
			}
		}
		return fmt.Sprint(g.A), true
	}
	return "(nothing)", false
}

// chainsOf lists the expressions to compare for a variable of type ty: itself when
// scalar, a string or an array of scalars, and (two levels deep) its members,
// pointed-to members and first and last elements.
func chainsOf(expr string, ty dwarf.Type, depth int) []string {
	if ty == nil || depth > 2 {
		return nil
	}
	for {
		switch x := ty.(type) {
		case *dwarf.TypedefType:
			ty = x.Type
			continue
		case *dwarf.QualType:
			ty = x.Type
			continue
		}
		break
	}
	switch x := ty.(type) {
	case *dwarf.IntType, *dwarf.UintType, *dwarf.CharType, *dwarf.UcharType, *dwarf.BoolType, *dwarf.EnumType, *dwarf.FloatType:
		return []string{expr}
	case *dwarf.PtrType:
		out := []string{expr}
		target := x.Type
		for {
			if q, ok := target.(*dwarf.QualType); ok {
				target = q.Type
				continue
			}
			if td, ok := target.(*dwarf.TypedefType); ok {
				target = td.Type
				continue
			}
			break
		}
		if st, ok := target.(*dwarf.StructType); ok && depth < 2 {
			for _, f := range st.Field {
				out = append(out, chainsOf(expr+"->"+f.Name, f.Type, depth+1)...)
			}
		}
		return out
	case *dwarf.StructType:
		var out []string
		for _, f := range x.Field {
			out = append(out, chainsOf(expr+"."+f.Name, f.Type, depth+1)...)
		}
		return out
	case *dwarf.ArrayType:
		if x.Count <= 0 {
			return nil
		}
		out := []string{expr}
		if x.Count > 1 {
			out = append(out, expr+"[0]", fmt.Sprintf("%s[%d]", expr, x.Count-1))
		}
		return out
	}
	return nil
}

// runGDBVars runs tests/testdata/gdbvars.py on the rewritten program bin, its
// trace going to trace.
// listedAs returns the sites `kprewrite list BIN` shows with flag.
func listedAs(t *testing.T, bin, flag string) map[uint64]bool {
	t.Helper()
	code, stdout, stderr := kp("list", bin)
	if code != 0 {
		t.Fatalf("kprewrite list: %s", stderr)
	}
	out := map[uint64]bool{}
	for _, line := range strings.Split(stdout, "\n") {
		var a uint64
		if _, err := fmt.Sscanf(line, "%x", &a); err == nil && strings.Contains(line, flag) {
			out[a] = true
		}
	}
	return out
}

// runGDBVars runs gdbvars.py on bin: at breakpoints, or (int3) at bin's own int3
// probes.
func runGDBVars(t *testing.T, bin, trace string, exprs map[uint64][]string, int3 bool) map[string]gdbPoint {
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := f.Symbols()
	f.Close()
	var mainAddr uint64
	for _, s := range syms {
		if s.Name == "main" {
			mainAddr = s.Value
		}
	}
	points := map[string][]string{}
	for a, es := range exprs {
		points[fmt.Sprintf("%#x", a)] = es
	}
	dir := t.TempDir()
	reqPath, outPath := filepath.Join(dir, "req.json"), filepath.Join(dir, "out.json")
	b, _ := json.Marshal(map[string]any{"main": mainAddr, "points": points})
	if err := os.WriteFile(reqPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("testdata/gdbvars.py")
	cmd := exec.Command("gdb", "-batch", "-nx", "-x", script, "--args", bin)
	cmd.Env = append(os.Environ(), "GDBVARS_REQ="+reqPath, "GDBVARS_OUT="+outPath, "KPREWRITE_TRACE="+trace)
	if int3 {
		cmd.Env = append(cmd.Env, "GDBVARS_INT3=1")
	}
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gdb: %v\n%s", err, testprog.Clip(string(o), 4000))
	}
	data, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatalf("gdb wrote no values: %v", err)
	}
	var out map[string]gdbPoint
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// firstRecords reads a trace as JSON lines and keeps each event's first record's fields.
func firstRecords(t *testing.T, trace string) map[string]map[string]json.RawMessage {
	code, stdout, stderr := kp("trace", "--format", "json", trace)
	if code != 0 {
		t.Fatalf("kprewrite trace: %s", stderr)
	}
	out := map[string]map[string]json.RawMessage{}
	for _, line := range strings.Split(stdout, "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Event  string                     `json:"event"`
			Fields map[string]json.RawMessage `json:"fields"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("trace line %q: %v", line, err)
		}
		if _, seen := out[rec.Event]; !seen {
			out[rec.Event] = rec.Fields
		}
	}
	return out
}

// TestSourceProbeDebugFiles probes by line and variable a stripped program whose
// debug information is in a separate file: given with --debug-file, and found
// through its .gnu_debuglink; without it, the error names what is missing.
func TestSourceProbeDebugFiles(t *testing.T) {
	testprog.Need(t, "gcc", "objcopy")
	src, err := os.ReadFile("testdata/srcvars.c")
	if err != nil {
		t.Fatal(err)
	}
	full := testprog.Build(t, string(src), "c", "-g", "-O2")
	dir := t.TempDir()
	dbg := filepath.Join(dir, "prog.debug")
	stripped := filepath.Join(dir, "prog")
	for _, args := range [][]string{
		{"--only-keep-debug", full, dbg},
		{"--strip-all", "--add-gnu-debuglink=" + dbg, full, stripped},
	} {
		if o, err := exec.Command("objcopy", args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, o)
		}
	}
	defs := []string{"p:src/walk walk@prog.c head head->len head->name", "p:src/loop handle:4 acc d r->len", "r:src/desc describe@prog.c $retval"}
	want := []string{`^walk:\s+head=0x[0-9a-f]+ len=5 name="query"$`, `^loop:\s+acc=3 d=UP len=5$`, `^desc:\s+arg1="query/5/113"$`}
	// a stripped program with its debug file named on the command line, then
	// found beside it through .gnu_debuglink
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"debug-file", []string{"--debug-file", dbg}}, {"debuglink", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "prog.rw")
			rewriteWith(t, stripped, out, defs, tc.flags...)
			r := testprog.Run(t, testprog.Cmd{Path: out})
			if r.Exit != 0 || !strings.Contains(r.Stdout, "query/5/113") {
				t.Fatalf("rewritten program: %s", r)
			}
			lines := readTrace(t, out+".trace")
			for _, w := range want {
				re := regexp.MustCompile(w)
				found := false
				for _, l := range lines {
					if re.MatchString(l.Event + ":" + l.Args) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("no trace line matches %q in %v", w, lines)
				}
			}
		})
	}
	// without debug information: a clear error naming what is missing, no output
	nodebug := testprog.Build(t, string(src), "c", "-O2")
	out := filepath.Join(t.TempDir(), "prog.rw")
	code, _, stderr := kp("rewrite", "-o", out, "-e", "p:src/l sum_hist:3 i", nodebug)
	if code == 0 || !strings.Contains(stderr, "no debug information") || !strings.Contains(stderr, "-e #1") {
		t.Errorf("rewrite of a program without -g: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an output was written")
	}
	// split DWARF (the variables are in a .dwo file): said so, not "no such function"
	split := testprog.Build(t, string(src), "c", "-g", "-gsplit-dwarf", "-O2")
	code, _, stderr = kp("rewrite", "-o", out, "-e", "p:src/l sum_hist:3 i", split)
	if code == 0 || !strings.Contains(stderr, "split DWARF") || !strings.Contains(stderr, ".dwo") {
		t.Errorf("rewrite of a split-DWARF program: exit %d, %s", code, stderr)
	}
	// a variable that does not exist, one optimized out, a line without code
	for _, tc := range []struct{ def, want string }{
		{"p:src/x sum_hist nosuch", "no variable nosuch is visible here"},
		{"p:src/x sum_hist:3 r->nosuch", "has no member nosuch"},
		{"p:src/x sum_hist:3 r->len->x", "not a pointer"},
		{"p:src/x sum_hist:100 s", "has no code"},
		{"p:src/x nosuch.c:3", "no code at that line"},
		{"r:src/x sum_hist:3 s", "a return probe goes on a function"},
	} {
		code, _, stderr := kp("rewrite", "-o", out, "-e", tc.def, full)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, %q; want an error with %q", tc.def, code, stderr, tc.want)
		}
	}
}

// TestSourceProbeSameBinary: a source-level event is the kernel-form definitions it
// translates to, so it costs what they cost. Rewriting with source-level
// definitions that translate to one definition each and with their translations
// gives the same bytes; with a line of two addresses (a multi-probe event: its
// probes' origins differ) every probe has the same site, kind and definition.
func TestSourceProbeSameBinary(t *testing.T) {
	testprog.Need(t, "gcc")
	src, err := os.ReadFile("testdata/srcvars.c")
	if err != nil {
		t.Fatal(err)
	}
	bin := testprog.Build(t, string(src), "c", "-g", "-O2")
	res := &srcprobe.Resolver{Binary: bin}
	translate := func(defs []string) []string {
		var kernel []string
		for _, d := range defs {
			k, err := res.Translate(d)
			if err != nil || len(k) == 0 {
				t.Fatalf("translate %q: %v, %v", d, k, err)
			}
			for _, x := range k {
				if srcprobe.IsSourceLevel(x) {
					t.Errorf("translation %q of %q is still source-level", x, d)
				}
			}
			kernel = append(kernel, k...)
		}
		t.Logf("kernel form:\n%s", strings.Join(kernel, "\n"))
		return kernel
	}
	// the same output name and trace path: both are in the image
	rewrite := func(defs []string) string {
		out := filepath.Join(t.TempDir(), "prog.rw")
		rewriteWith(t, bin, out, defs, "--trace", "none")
		return out
	}
	single := []string{"p:s/walk walk p->small p->at.y", "r:s/desc describe@prog.c $retval", "p:s/vars describe $vars"}
	if testprog.HashFile(t, rewrite(single)) != testprog.HashFile(t, rewrite(translate(single))) {
		t.Error("the rewrite with source-level definitions differs from the one with their translations")
	}
	multi := append([]string{"p:s/loop handle:4 acc d r->len r->name"}, single...)
	kernel := translate(multi)
	if len(kernel) <= len(multi) {
		t.Fatalf("handle:4 has one address at -O2 here; the test wants a line with several")
	}
	_, la, _ := kp("list", "-v", rewrite(multi))
	_, lb, _ := kp("list", "-v", rewrite(kernel))
	if la != lb || la == "" {
		t.Errorf("list -v differs:\n%s\nwith the translations:\n%s", la, lb)
	}
}

// sqliteAmalgamation is where scripts/get-sqlite.sh puts sqlite3.c.
func sqliteAmalgamation(t *testing.T) string {
	p := os.Getenv("KPREWRITE_SQLITE_AMALGAMATION")
	if p == "" {
		home, _ := os.UserHomeDir()
		p = filepath.Join(home, ".cache/kprewrite/sqlite/better-sqlite3-13.2.0/package/deps/sqlite3/sqlite3.c")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no SQLite amalgamation at %s (scripts/get-sqlite.sh fetches it; KPREWRITE_SQLITE_AMALGAMATION names another)", p)
	}
	return p
}

const sqliteDriver = `#include <stdio.h>
#include "sqlite3.h"
static int row(void *arg, int n, char **vals, char **cols) {
	(void)arg;
	for (int i = 0; i < n; i++)
		printf("%s=%s ", cols[i], vals[i] ? vals[i] : "NULL");
	printf("\n");
	return 0;
}
int main(void) {
	sqlite3 *db;
	char *err = 0;
	const char *sql[] = {"create table t(a integer, b text)", "insert into t values (1, 'one'), (2, 'two'), (3, 'three')",
		"select a, b from t where a >= 2 order by a", 0};
	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		return 1;
	for (int i = 0; sql[i]; i++)
		if (sqlite3_exec(db, sql[i], row, 0, &err) != SQLITE_OK) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
	sqlite3_close(db);
	return 0;
}
`

// TestSourceProbeSQLite probes a real program built from source with -g -O2:
// SQLite (its amalgamation, with a small driver), by line and variable name: the
// statements sqlite3_exec prepares (line 23 of sqlite3_exec, where an inlined
// sqlite3_prepare_v2's code is: the variables are sqlite3_exec's), the row count
// when a statement's first row arrives (line 44), and sqlite3_step's typed return
// value.
func TestSourceProbeSQLite(t *testing.T) {
	testprog.Need(t, "gcc")
	amalg := sqliteAmalgamation(t)
	dir := t.TempDir()
	drv := filepath.Join(dir, "drv.c")
	if err := os.WriteFile(drv, []byte(sqliteDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sq")
	cmd := exec.Command("gcc", "-g", "-O2", "-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION", "-I", filepath.Dir(amalg), "-o", bin, drv, amalg)
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build SQLite: %v\n%s", err, testprog.Clip(string(o), 2000))
	}
	out := bin + ".rw"
	rewriteWith(t, bin, out, []string{
		"p:sq/stmt sqlite3_exec:23 zSql pStmt",
		"p:sq/cols sqlite3_exec:44 rc zLeftover db->nChange",
		"r:sq/step sqlite3_step@sqlite3.c $retval",
	})
	want := testprog.MustRun(t, bin)
	if got := testprog.MustRun(t, out); got != want {
		t.Fatalf("rewritten SQLite printed %q, want %q", got, want)
	}
	var stmts, cols []string
	steps := map[string]int{}
	for _, l := range readTrace(t, out+".trace") {
		switch l.Event {
		case "stmt":
			stmts = append(stmts, strings.TrimSpace(l.Args))
		case "cols":
			cols = append(cols, strings.TrimSpace(l.Args))
		case "step":
			steps[strings.TrimSpace(l.Args)]++
		}
	}
	for _, s := range []string{`zSql="create table t(a integer, b text)" pStmt=0x0`,
		`zSql="insert into t values (1, 'one'), (2, 'two'), (3, 'three')" pStmt=0x0`,
		`zSql="select a, b from t where a >= 2 order by a" pStmt=0x0`} {
		if !slices.Contains(stmts, s) {
			t.Errorf("no stmt record %s in %q", s, stmts)
		}
	}
	if !slices.Contains(cols, `rc=100 zLeftover="" nChange=3`) {
		t.Errorf("cols records %q: want the select's first row (rc=100 SQLITE_ROW) after the 3-row insert", cols)
	}
	// sqlite3_step returns SQLITE_ROW (100) or SQLITE_DONE (101): an int, printed as one
	if steps["arg1=100"] < 2 || steps["arg1=101"] < 3 || len(steps) != 2 {
		t.Errorf("step return values %v", steps)
	}
}

const floatEnumSrc = `#include <stdio.h>
enum mode { OFF, ON = 5, AUTO = -2 };
struct cfg {
	int lvl : 3;
	unsigned wide : 4;
	enum mode m;
};
__attribute__((noinline)) double mix(double a, float b, enum mode m, const struct cfg *c)
{
	return a * b + m + c->lvl + (c->m == AUTO ? c->wide : 0);
}
int main(int argc, char **argv)
{
	struct cfg c = {-2, 9, AUTO};
	double s = 0;
	for (int i = 0; i < 4 + argc - 1; i++)
		s += mix(i + 0.5, 0.25f * i, i % 2 ? ON : OFF, &c);
	printf("%g\n", s);
	return 0;
}
`

// TestSourceProbeFloatsEnums traces the types the kernel's fetch types lack, by
// source name and typed from DWARF: doubles and floats (in SSE registers at -O2, on
// the stack at -O0), enums by name, signed and unsigned bitfields, a double $retval
// (xmm0). Both the int3 path (whose SIGTRAP handler must load the interrupted SSE
// registers: a handler starts with them cleared) and the jump-optimized detour give
// the values the program computes.
func TestSourceProbeFloatsEnums(t *testing.T) {
	testprog.Need(t, "gcc")
	var want []string
	for i := 0; i < 4; i++ {
		a, b := float64(i)+0.5, float32(0.25)*float32(i)
		m := [2]string{"OFF", "ON"}[i%2]
		mv := [2]float64{0, 5}[i%2]
		ret := a*float64(b) + mv - 2 + 9
		want = append(want, fmt.Sprintf("mix: a=%s b=%s m=%s lvl=-2 wide=9 cm=AUTO", fmtG(a, 64), fmtG(float64(b), 32), m),
			fmt.Sprintf("mixr: arg1=%s", fmtG(ret, 64)))
	}
	for _, opt := range []string{"-O0", "-O2"} {
		bin := testprog.Build(t, floatEnumSrc, "c", "-g", opt)
		orig := testprog.Run(t, testprog.Cmd{Path: bin})
		for _, mode := range []string{"int3", "optimized"} {
			t.Run(opt+"/"+mode, func(t *testing.T) {
				out := filepath.Join(t.TempDir(), "prog.kp")
				flags := []string{"--no-optimize"}
				if mode == "optimized" {
					flags = []string{"--optimized-only"}
				}
				rewriteWith(t, bin, out, []string{"p:s/mix mix a b m lvl=c->lvl wide=c->wide cm=c->m", "r:s/mixr mix@prog.c $retval"}, flags...)
				got := runEventArgs(t, out, orig.Stdout)
				if !slices.Equal(got, want) {
					t.Errorf("trace:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}

// runEventArgs runs the rewritten program out, which must exit 0 and print stdout, and
// returns its trace as "EVENT: ARGS" lines.
func runEventArgs(t *testing.T, out, stdout string) []string {
	t.Helper()
	r := testprog.Run(t, testprog.Cmd{Path: out})
	if r.Exit != 0 || r.Stdout != stdout {
		t.Fatalf("rewritten program: %s\nwant stdout %q", r, stdout)
	}
	var lines []string
	for _, l := range readTrace(t, out+".trace") {
		lines = append(lines, l.Event+":"+l.Args)
	}
	return lines
}

func fmtG(f float64, bits int) string { return strconv.FormatFloat(f, 'g', -1, bits) }

// TestSourceProbeLibrary: source-level definitions on a shared library the program
// loads (LIB:SITE, the library found as the loader finds it, its own debug
// information): a function with struct members, an enum by name and a double, a line
// of it (a double in an SSE register) and a typed $retval; check --vars and --lines
// take LIB:SITE too. Running the rewritten program (it loads the rewritten copy) gives
// the values the program computes.
func TestSourceProbeLibrary(t *testing.T) {
	testprog.Need(t, "gcc")
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "lib"), 0o755)
	lib := `enum kind { BOOK = 1, FOOD = 2 };
struct item {
	int id;
	const char *name;
	double price;
	enum kind kind;
};
__attribute__((noinline)) double lib_total(const struct item *it, int qty)
{
	double t = it->price * qty;
	if (it->kind == FOOD)
		t *= 0.5;
	return t + it->id;
}
`
	main := `#include <stdio.h>
enum kind { BOOK = 1, FOOD = 2 };
struct item { int id; const char *name; double price; enum kind kind; };
double lib_total(const struct item *it, int qty);
int main(void)
{
	struct item a = {7, "atlas", 12.25, BOOK}, b = {9, "bread", 3.5, FOOD};
	double x = lib_total(&a, 2);
	double y = lib_total(&b, 3);
	printf("%g %g\n", x, y);
	return 0;
}
`
	os.WriteFile(filepath.Join(dir, "lib.c"), []byte(lib), 0o644)
	os.WriteFile(filepath.Join(dir, "main.c"), []byte(main), 0o644)
	for _, args := range [][]string{
		{"-g", "-O2", "-shared", "-fPIC", "-Wl,-soname,libkpw.so", "-o", filepath.Join(dir, "lib", "libkpw.so"), filepath.Join(dir, "lib.c")},
		{"-O2", "-o", filepath.Join(dir, "prog"), filepath.Join(dir, "main.c"), "-L" + filepath.Join(dir, "lib"), "-lkpw", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"},
	} {
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	prog := filepath.Join(dir, "prog")
	orig := testprog.Run(t, testprog.Cmd{Path: prog})

	code, vars, stderr := kp("check", "--vars", "libkpw.so:lib_total:4", prog)
	if code != 0 || !strings.Contains(vars, "t=%xmm") || !strings.Contains(vars, "it=%di:x64") {
		t.Errorf("check --vars libkpw.so:lib_total:4: exit %d\n%s%s", code, vars, stderr)
	}
	code, lines, stderr := kp("check", "--lines", "libkpw.so:lib_total", prog)
	if code != 0 || !regexp.MustCompile(`(?m)^\s+4\s+t \*= 0\.5;\s+# 0x`).MatchString(lines) {
		t.Errorf("check --lines libkpw.so:lib_total: exit %d\n%s%s", code, lines, stderr)
	}

	out := filepath.Join(dir, "prog.kp")
	rewriteWith(t, prog, out, []string{
		"p:s/tot libkpw.so:lib_total it->name it->kind qty it->price",
		"p:s/food libkpw.so:lib_total:4 t it->id",
		"r:s/totr libkpw.so:lib_total@lib.c $retval",
	})
	got := runEventArgs(t, out, orig.Stdout)
	want := []string{
		`tot: name="atlas" kind=BOOK qty=2 price=12.25`,
		`totr: arg1=31.5`,
		`tot: name="bread" kind=FOOD qty=3 price=3.5`,
		`food: t=10.5 id=9`,
		`totr: arg1=14.25`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// the kernel form names the library and a file offset, as uprobe_events do
	code, list, _ := kp("list", "-v", out)
	if code != 0 || !regexp.MustCompile(`libkpw\.so:0x[0-9a-f]+ t=%xmm\d:f64 id=\+0\(%di\):s32`).MatchString(list) {
		t.Errorf("list -v:\n%s", list)
	}
}

// TestSourceProbeDebugFrameOnly: a program built without .eh_frame entries for its own
// functions (-fno-asynchronous-unwind-tables) has its frame addresses in .debug_frame;
// variables relative to the frame base (DW_OP_call_frame_cfa at -O0) are read through
// it and trace as in the same program built with .eh_frame.
func TestSourceProbeDebugFrameOnly(t *testing.T) {
	testprog.Need(t, "gcc")
	src, err := os.ReadFile("testdata/srcvars.c")
	if err != nil {
		t.Fatal(err)
	}
	defs := []string{"p:s/loop handle:4 acc n d r->len r->name", "p:s/walk walk:5 steps p->small p->at.x"}
	var traces [2][]string
	for i, flags := range [][]string{{"-g", "-O0"}, {"-g", "-O0", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"}} {
		bin := testprog.Build(t, string(src), "c", flags...)
		out := filepath.Join(t.TempDir(), "prog.kp")
		rewriteWith(t, bin, out, defs)
		traces[i] = runEventArgs(t, out, testprog.Run(t, testprog.Cmd{Path: bin}).Stdout)
	}
	if len(traces[0]) < 4 || !slices.Equal(traces[0], traces[1]) {
		t.Errorf("with .eh_frame:\n%s\nwith .debug_frame only:\n%s", strings.Join(traces[0], "\n"), strings.Join(traces[1], "\n"))
	}
	if !strings.Contains(strings.Join(traces[1], "\n"), `loop: acc=3 n=3 d=UP len=5 name="query"`) {
		t.Errorf("no loop record with the first round's values:\n%s", strings.Join(traces[1], "\n"))
	}
}

// retvalSrc has functions returning an int, a string, a double and nothing.
const retvalSrc = `
#include <stdio.h>
__attribute__((noinline)) int neg(int a) { return -a; }
__attribute__((noinline)) const char *name(int a) { return a ? "yes" : "no"; }
__attribute__((noinline)) void nothing(int a) { __asm__ volatile("" ::: "memory"); (void)a; }
__attribute__((noinline)) double half(int a) { return a / 2.0; }
int main(void) { nothing(1); printf("%d %s %g\n", neg(5), name(1), half(3)); return 0; }
`

// TestTypedRetvalKernelForm: a kernel-form return probe's untyped $retval takes the
// function's return type from the program's own debug information, as the kernel types
// it from BTF (Linux 6.5+), and a function returning void refuses it; a given type
// stays; without debug information in the program (none, or only in a separate debug
// file) it is the kernel's u64, the same on every machine.
func TestTypedRetvalKernelForm(t *testing.T) {
	testprog.Need(t, "gcc", "objcopy")
	defs := []string{"r:t/neg neg $retval", "r:t/name name $retval", "r:t/half half%return $retval", "r:t/neg2 neg r=$retval:x32"}
	run := func(t *testing.T, bin string) map[string]string {
		out := bin + ".kp"
		rewriteWith(t, bin, out, defs)
		res := testprog.Run(t, testprog.Cmd{Path: out})
		if res.Exit != 0 || res.Stdout != "-5 yes 1.5\n" {
			t.Fatalf("rewritten: %s", res)
		}
		got := map[string]string{}
		for _, l := range readTrace(t, out+".trace", out) {
			got[l.Event] = strings.TrimSpace(l.Args)
		}
		return got
	}
	typed := testprog.Build(t, retvalSrc, "c", "-g", "-O1")
	want := map[string]string{"neg": "arg1=-5", "name": `arg1="yes"`, "half": "arg1=1.5", "neg2": "r=0xfffffffb"}
	if got := run(t, typed); !maps.Equal(got, want) {
		t.Errorf("with -g: %v, want %v", got, want)
	}
	if code, _, stderr := kp("rewrite", "-o", typed+".void", "-e", "r:t/n nothing $retval", typed); code != 1 || !strings.Contains(stderr, "$retval: nothing returns nothing") {
		t.Errorf("$retval of a void function: exit %d: %s", code, stderr)
	}
	// the same program stripped, its debug information in a file it links to: untyped
	stripped := typed + ".stripped"
	dbg := typed + ".debug"
	for _, args := range [][]string{{"--only-keep-debug", typed, dbg}, {"--strip-debug", "--add-gnu-debuglink=" + dbg, typed, stripped}} {
		if out, err := exec.Command("objcopy", args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v %s", args, err, out)
		}
	}
	for _, bin := range []string{stripped, testprog.Build(t, retvalSrc, "c", "-O1")} {
		got := run(t, bin)
		for ev, v := range got {
			if ev != "neg2" && !strings.HasPrefix(v, "arg1=0x") {
				t.Errorf("%s: %s %s, want the kernel's u64", filepath.Base(bin), ev, v)
			}
		}
		if got["neg"] != "arg1=0xfffffffb" || got["neg2"] != "r=0xfffffffb" {
			t.Errorf("%s: %v", filepath.Base(bin), got)
		}
	}
}
