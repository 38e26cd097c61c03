package tests

// The case runner: each directory under tests/cases is one end-to-end case, a program,
// its probe definitions and options, and the output expected of kprewrite's commands on
// its trace. README.md describes the files; `go test ./tests -run TestCases/NAME` runs
// one case, `-update` rewrites the expect files from what the commands print.

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

var update = flag.Bool("update", false, "TestCases: rewrite the expect files of tests/cases with what the commands print")

// caseModes are the probe modes a case's modes: line can name, with their rewrite flags.
var caseModes = map[string][]string{
	"default":     nil,                                                      // jump-optimized where possible
	"no-optimize": {"--no-optimize"},                                        // int3 probes, boosted where possible
	"no-boost":    {"--no-optimize", "--no-boost"},                          // int3 probes, single-stepped with the trap flag
	"int3-step":   {"--no-optimize", "--no-boost", "--single-step", "int3"}, // single-stepped with a second int3
	"verify":      {"--verify-regions"},                                     // int3 on every byte of each would-be DCR
}

// caseKinds are the expect files a case can hold, in the order they are compared.
// check is run once per case (it does not depend on the mode); the others on each mode's
// rewrite and run.
var caseKinds = []string{"stdout", "trace", "profile", "report", "hist", "list", "check"}

// endToEndCase is a parsed tests/cases/NAME/case file.
type endToEndCase struct {
	dir     string
	source  string   // the program's source (prog.c or prog.cc by default)
	build   []string // compiler flags
	rewrite []string // extra rewrite flags
	args    []string // the program's arguments
	env     []string // KEY=value added to the program's environment
	modes   []string
	exit    string // expected status: a number or the signal's name
	runs    int    // runs into the same trace file
	check   []string
	list    []string
}

// splitWords splits s at spaces, keeping what single or double quotes enclose together.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

func parseCase(dir string) (*endToEndCase, error) {
	c := &endToEndCase{dir: dir, build: []string{"-O2"}, modes: []string{"default"}, exit: "0", runs: 1}
	text, err := os.ReadFile(filepath.Join(dir, "case"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("case:%d: want KEY: VALUE", i+1)
		}
		val = strings.TrimSpace(val)
		words, err := splitWords(val)
		if err != nil {
			return nil, fmt.Errorf("case:%d: %v", i+1, err)
		}
		switch strings.TrimSpace(key) {
		case "source":
			c.source = val
		case "build":
			c.build = words
		case "rewrite":
			c.rewrite = words
		case "args":
			c.args = words
		case "env":
			c.env = words
		case "modes":
			c.modes = words
		case "exit":
			c.exit = val
		case "runs":
			if c.runs, err = strconv.Atoi(val); err != nil || c.runs < 1 {
				return nil, fmt.Errorf("case:%d: runs %q", i+1, val)
			}
		case "check":
			c.check = words
		case "list":
			c.list = words
		default:
			return nil, fmt.Errorf("case:%d: unknown key %q", i+1, key)
		}
	}
	if c.source == "" {
		for _, name := range []string{"prog.c", "prog.cc"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				c.source = name
			}
		}
		if c.source == "" {
			return nil, fmt.Errorf("no prog.c, prog.cc or source: line")
		}
	}
	for _, m := range c.modes {
		if _, ok := caseModes[m]; !ok {
			return nil, fmt.Errorf("unknown mode %q", m)
		}
	}
	return c, nil
}

// TestCases runs every case of tests/cases, each in each of its modes.
func TestCases(t *testing.T) {
	ents, err := os.ReadDir("cases")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join("cases", e.Name())
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c, err := parseCase(dir)
			if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			runCase(t, c)
		})
	}
}

// caseOutputs are a run's normalised outputs by kind.
type caseOutputs map[string]string

func runCase(t *testing.T, c *endToEndCase) {
	src, err := os.ReadFile(filepath.Join(c.dir, c.source))
	if err != nil {
		t.Fatal(err)
	}
	lang := "c"
	if strings.HasSuffix(c.source, ".cc") || strings.HasSuffix(c.source, ".cpp") {
		lang = "c++"
	}
	prog := testprog.Build(t, string(src), lang, c.build...)
	var defs []string
	if _, err := os.Stat(filepath.Join(c.dir, "defs")); err == nil {
		abs, err := filepath.Abs(filepath.Join(c.dir, "defs"))
		if err != nil {
			t.Fatal(err)
		}
		defs = []string{"-f", abs}
	}
	expects := map[string]bool{}
	for _, k := range caseKinds {
		if _, err := os.Stat(filepath.Join(c.dir, "expect."+k)); err == nil {
			expects[k] = true
		}
	}
	if len(expects) == 0 {
		t.Fatal("the case has no expect file (-update fills the ones there, even empty)")
	}
	syms := funcSymbols(t, prog)
	if expects["check"] {
		code, stdout, stderr := kp(append(append(append([]string{"check"}, c.check...), defs...), prog)...)
		compareExpect(t, c, "", "check", commandOutput(code, normCheck(stdout, prog), stderr, prog))
	}
	for _, mode := range c.modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "prog")
			args := append(append(append([]string{"rewrite", "-o", out}, caseModes[mode]...), c.rewrite...), defs...)
			if code, stdout, stderr := kp(append(args, prog)...); code != 0 {
				t.Fatalf("kprewrite %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
			}
			tr := filepath.Join(dir, "prog.trace")
			env := append([]string{"KPREWRITE_TRACE=" + tr}, c.env...)
			if c.runs > 1 { // every run into the one trace, not a new trace each
				env = append(env, "KPREWRITE_APPEND=1")
			}
			var res testprog.Result
			for r := 0; r < c.runs; r++ {
				res = testprog.Same(t, prog, out, testprog.Cmd{Args: c.args, Extra: env}, nil)
				if st := resultStatus(res); st != c.exit {
					t.Fatalf("the program ended with %s, want %s: %s", st, c.exit, res)
				}
			}
			outs := caseOutputs{"stdout": res.Stdout}
			for _, k := range []string{"trace", "profile", "report", "hist"} {
				if !expects[k] {
					continue
				}
				code, stdout, stderr := kp(k, "-b", out, tr)
				if k == "hist" {
					code, stdout, stderr = kp(k, tr)
				}
				switch k {
				case "trace":
					stdout = normTrace(stdout, syms)
				case "profile":
					stdout = normProfile(stdout)
				case "report":
					stdout = normReport(stdout)
				}
				outs[k] = commandOutput(code, stdout, stderr, out)
			}
			code, stdout, stderr := kp(append(append([]string{"list"}, c.list...), out)...)
			outs["list"] = commandOutput(code, normList(stdout), stderr, out)
			for _, k := range caseKinds {
				if k != "check" && expects[k] {
					compareExpect(t, c, mode, k, outs[k])
				}
			}
		})
	}
}

// compareExpect compares got with the case's expect.KIND.MODE, or else expect.KIND; with
// -update it writes got there instead: into expect.KIND for the case's first mode, into
// expect.KIND.MODE for another mode whose output differs from expect.KIND.
func compareExpect(t *testing.T, c *endToEndCase, mode, kind, got string) {
	t.Helper()
	base := filepath.Join(c.dir, "expect."+kind)
	path := base
	if mode != "" {
		if _, err := os.Stat(base + "." + mode); err == nil {
			path = base + "." + mode
		}
	}
	want, err := os.ReadFile(path)
	if *update {
		if err == nil && string(want) == got {
			return
		}
		if path == base && mode != "" && mode != c.modes[0] {
			path = base + "." + mode
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s differs (-update rewrites it):\n%s", path, lineDiff(string(want), got))
	}
}

// lineDiff shows the first lines where want and got differ, and both in full when short.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 8; i++ {
		var x, y string
		if i < len(w) {
			x = w[i]
		}
		if i < len(g) {
			y = g[i]
		}
		if x != y {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, x, y)
			shown++
		}
	}
	if len(g) <= 80 {
		fmt.Fprintf(&b, "--- got:\n%s", got)
	}
	return b.String()
}

// resultStatus is how a run ended, as a case's exit: line says it.
func resultStatus(r testprog.Result) string {
	if r.Signal != "" {
		return r.Signal
	}
	return strconv.Itoa(r.Exit)
}

// commandOutput is a command's normalised standard output, then, when it failed, its
// status and standard error (path replaced by its base name).
func commandOutput(code int, stdout, stderr, path string) string {
	if code == 0 {
		return stdout
	}
	stderr = strings.ReplaceAll(stderr, path, filepath.Base(path))
	return fmt.Sprintf("%sexit %d\n%s", stdout, code, stderr)
}

var (
	caseTraceRE = regexp.MustCompile(`^\s*(.*)-(\d+)\s+\[\d+\]\s+(?:[^\s\d]\S*\s+)?\d+\.\d+: (.*)$`)
	caseHeadRE  = regexp.MustCompile(`^(\S+: )\((0x[0-9a-f]+)(?: <- (0x[0-9a-f]+))?\)`)
	caseHexRE   = regexp.MustCompile(`0x[0-9a-f]+`)
	caseAddrRE  = regexp.MustCompile(`\b0x[0-9a-f]{4,}\b`) // an address, not an offset
	caseTimeRE  = regexp.MustCompile(`\d+(\.\d+)? +(ns|us|ms|s)\b`)
)

// funcSymbols are the function symbols of a program at fixed addresses (ET_EXEC), for
// naming the probed addresses of its trace; nil for a position-independent one.
func funcSymbols(t *testing.T, path string) []elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return nil
	}
	all, _ := f.Symbols()
	var syms []elf.Symbol
	for _, s := range all {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			syms = append(syms, s)
		}
	}
	return syms
}

// symbolize names addr as FUNC+0xOFF by syms, or ADDR.
func symbolize(addr string, syms []elf.Symbol) string {
	a, err := strconv.ParseUint(addr, 0, 64)
	if err != nil {
		return "ADDR"
	}
	for _, s := range syms {
		if a >= s.Value && (a < s.Value+s.Size || a == s.Value) {
			return fmt.Sprintf("%s+%#x", s.Name, a-s.Value)
		}
	}
	return "ADDR"
}

// symbolizeArgs names the hex values of event arguments that are addresses in a
// function of a program at fixed addresses, as FUNC+0xOFF.
func symbolizeArgs(args string, syms []elf.Symbol) string {
	return caseAddrRE.ReplaceAllStringFunc(args, func(a string) string {
		if s := symbolize(a, syms); s != "ADDR" {
			return s
		}
		return a
	})
}

// normTrace normalises `kprewrite trace` text: of the header only the counts (entries,
// lost, torn, snapshot) are kept; an event line becomes "COMM-N EVENT: (HEAD) ARGS", N
// numbering the threads in the order they first appear, without CPU and timestamp;
// in a head, the probed address (the last) is FUNC+0xOFF in a program at fixed
// addresses and ADDR otherwise, a return address ADDR, and an argument's hex value
// that is an address in a function of a program at fixed addresses FUNC+0xOFF; a
// stack frame outside the program is <ADDR>.
func normTrace(text string, syms []elf.Symbol) string {
	var b strings.Builder
	tids := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		switch {
		case l == "":
			continue
		case strings.HasPrefix(l, "#"):
			for _, k := range []string{"# entries-in-buffer", "# lost", "# torn", "# snapshot"} {
				if strings.HasPrefix(l, k) {
					b.WriteString(l + "\n")
				}
			}
			continue
		case strings.HasPrefix(l, " => "):
			b.WriteString(caseHexRE.ReplaceAllString(l, "ADDR") + "\n")
			continue
		}
		m := caseTraceRE.FindStringSubmatch(l)
		if m == nil {
			b.WriteString("?? " + l + "\n")
			continue
		}
		if tids[m[2]] == 0 {
			tids[m[2]] = len(tids) + 1
		}
		rest := m[3]
		if h := caseHeadRE.FindStringSubmatchIndex(rest); h != nil {
			site, ret := rest[h[4]:h[5]], ""
			if h[6] >= 0 {
				ret, site = "ADDR <- ", rest[h[6]:h[7]]
			}
			rest = rest[h[2]:h[3]] + "(" + ret + symbolize(site, syms) + ")" + symbolizeArgs(rest[h[1]:], syms)
		}
		fmt.Fprintf(&b, "%s-%d %s\n", m[1], tids[m[2]], rest)
	}
	return b.String()
}

// normProfile collapses the columns of `kprewrite profile` and blanks addresses (not
// the offsets of FUNC+0xOFF).
func normProfile(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		b.WriteString(caseAddrRE.ReplaceAllString(strings.Join(strings.Fields(l), " "), "ADDR") + "\n")
	}
	return b.String()
}

// normReport blanks the times of `kprewrite report` (T) and collapses its columns.
func normReport(text string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		b.WriteString(strings.Join(strings.Fields(caseTimeRE.ReplaceAllString(l, "T")), " ") + "\n")
	}
	return b.String()
}

// normList drops the address column of `kprewrite list` and collapses the others; the
// lines are sorted (list orders them by address, which the compiler decides).
func normList(text string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && len(f[0]) == 16 {
			f = f[1:]
		}
		lines = append(lines, strings.Join(f, " "))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// normCheck blanks the addresses of `kprewrite check`'s text (not the offsets of
// FUNC+0xOFF) and names the program by its base name.
func normCheck(text, prog string) string {
	return caseAddrRE.ReplaceAllString(strings.ReplaceAll(text, prog, filepath.Base(prog)), "ADDR")
}
