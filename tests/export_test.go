package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// tracedCalls builds the program src in lang with flags, rewrites it with an entry and
// a return event on every function (--calls '*'), runs both and compares them, and
// returns the trace file.
func tracedCalls(t *testing.T, src, lang string, flags ...string) string {
	t.Helper()
	prog := testprog.Build(t, src, lang, flags...)
	out := filepath.Join(t.TempDir(), "calls.kp")
	if code, o, e := kp("rewrite", "--calls", "*", "-o", out, prog); code != 0 {
		t.Fatalf("rewrite: exit %d\n%s%s", code, o, e)
	}
	testprog.Same(t, prog, out, testprog.Cmd{}, nil)
	return out + ".trace"
}

// chromeEvent is one event of the Trace Event Format.
type chromeEvent struct {
	Ph   string         `json:"ph"`
	Name string         `json:"name"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Args map[string]any `json:"args"`
}

// chromeSlice is a duration slice rebuilt from B and E events.
type chromeSlice struct {
	name   string
	parent string // the enclosing slice's name, "" at the top
	lost   bool
}

// checkChrome checks the structure of a Trace Event Format export: per thread, every
// E closes the innermost open B of the same name, nothing stays open, and time never
// goes backwards. It returns the slices.
func checkChrome(t *testing.T, data []byte) []chromeSlice {
	t.Helper()
	var doc struct {
		TraceEvents []chromeEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("chrome export is not JSON: %v", err)
	}
	type thread struct {
		stack []string
		last  float64
	}
	threads := map[[2]int]*thread{}
	var out []chromeSlice
	names := map[[2]int]bool{}
	for i, e := range doc.TraceEvents {
		k := [2]int{e.Pid, e.Tid}
		th := threads[k]
		if th == nil {
			th = &thread{}
			threads[k] = th
		}
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				names[k] = true
			}
			continue
		case "C":
			continue
		case "B", "E", "i":
		default:
			t.Fatalf("event %d: phase %q", i, e.Ph)
		}
		if e.Ts < th.last {
			t.Fatalf("event %d (%s %s) on %v at %.3f, before the thread's previous event at %.3f", i, e.Ph, e.Name, k, e.Ts, th.last)
		}
		th.last = e.Ts
		if !names[k] {
			t.Fatalf("event %d on thread %v before its thread_name", i, k)
		}
		switch e.Ph {
		case "B":
			th.stack = append(th.stack, e.Name)
		case "E":
			n := len(th.stack)
			if n == 0 || th.stack[n-1] != e.Name {
				t.Fatalf("event %d: E %s on %v, open: %v", i, e.Name, k, th.stack)
			}
			th.stack = th.stack[:n-1]
			s := chromeSlice{name: e.Name, lost: e.Args["lost_return"] == true}
			if n > 1 {
				s.parent = th.stack[n-2]
			}
			out = append(out, s)
		}
	}
	for k, th := range threads {
		if len(th.stack) > 0 {
			t.Errorf("thread %v: slices never closed: %v", k, th.stack)
		}
	}
	return out
}

// reportCalls parses `kprewrite report`: calls and lost returns per function.
func reportCalls(t *testing.T, text string) (calls, lost map[string]int) {
	t.Helper()
	calls, lost = map[string]int{}, map[string]int{}
	line := regexp.MustCompile(`^\s+\S+ +\S+\s+\S+ +\S+\s+(\d+)\s+\S+ +\S+\s+\S+ +\S+\s+\S+ +\S+\s+(\S+)(?:\s+\((\d+) lost returns\))?$`) // ("1.234  s")
	for _, l := range strings.Split(text, "\n")[2:] {
		if l == "" {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("report line %q", l)
		}
		calls[m[2]], _ = strconv.Atoi(m[1])
		if m[3] != "" {
			lost[m[2]], _ = strconv.Atoi(m[3])
		}
	}
	return calls, lost
}

// parseDuration reads a duration as reports print it ("1.234 ms"), in nanoseconds.
func parseDuration(t *testing.T, num, unit string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(num, 64)
	scale := map[string]float64{"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[unit]
	if err != nil || scale == 0 {
		t.Fatalf("duration %q %q", num, unit)
	}
	return v * scale
}

func readSource(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExportCalls: a program with known calls (threads, recursion, a signal handler,
// longjmp, fork), traced at every function's entry and return, exported every way:
// the report counts each function's calls, the Chrome JSON nests and closes every
// slice, go tool pprof lists the functions by self time, the folded stacks and the SVG
// hold the call paths, the JSON lines are one a record.
func TestExportCalls(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			trace := tracedCalls(t, readSource(t, "calls.c"), "c", opt, "-pthread")
			code, rep, stderr := kp("report", trace)
			if code != 0 {
				t.Fatalf("report: exit %d: %s", code, stderr)
			}
			calls, lost := reportCalls(t, rep)
			for fn, n := range map[string]int{"top": 2, "middle": 20, "leaf": 40, "spin": 62, "worker": 1, "on_signal": 1,
				"in_handler": 1, "child": 1, "main": 1} {
				if calls[fn] != n {
					t.Errorf("report: %s has %d calls, want %d\n%s", fn, calls[fn], n, rep)
				}
			}
			if lost["jumper"] == 0 || lost["spin"] != 0 {
				t.Errorf("report: lost returns %v, want jumper's (longjmp) and no other\n%s", lost, rep)
			}
			// sorted by total time, largest first
			var prev float64 = -1
			for _, l := range strings.Split(strings.TrimSpace(rep), "\n")[2:] {
				f := strings.Fields(l)
				d := parseDuration(t, f[0], f[1])
				if prev >= 0 && d > prev {
					t.Errorf("report not sorted by total time at %q", l)
				}
				prev = d
			}

			code, cj, stderr := kp("trace", "--format", "chrome", trace)
			if code != 0 {
				t.Fatalf("trace --format chrome: exit %d: %s", code, stderr)
			}
			slices := checkChrome(t, []byte(cj))
			byName := map[string]int{}
			for _, s := range slices {
				byName[s.name]++
				if s.name == "leaf" && s.parent != "middle" || s.name == "in_handler" && s.parent != "on_signal" {
					t.Errorf("slice %s inside %q", s.name, s.parent)
				}
			}
			for fn, n := range map[string]int{"leaf": 40, "spin": 62, "child": 1} {
				if byName[fn] != n {
					t.Errorf("chrome: %d slices of %s, want %d", byName[fn], fn, n)
				}
			}

			// pprof: go tool pprof reads it; spin's self time is the report's (the time
			// shares themselves depend on the machine's load, not on the exporter), and
			// it has 62 calls
			prof := filepath.Join(t.TempDir(), "p.pb.gz")
			if code, _, stderr := kp("profile", "--format", "pprof", "-o", prof, trace); code != 0 {
				t.Fatalf("profile --format pprof: exit %d: %s", code, stderr)
			}
			top := testprog.MustRun(t, "go", "tool", "pprof", "-top", prof)
			flat := regexp.MustCompile(`(?m)^\s*([\d.]+)(ns|us|ms|s)\s+[\d.]+%\s+\S+%\s+\S+\s+\S+%\s+spin$`).FindStringSubmatch(top)
			var reportSelf float64 = -1
			for _, l := range strings.Split(strings.TrimSpace(rep), "\n")[2:] {
				if f := strings.Fields(l); len(f) >= 4 && f[len(f)-1] == "spin" {
					reportSelf = parseDuration(t, f[2], f[3])
				}
			}
			if flat == nil || reportSelf < 0 {
				t.Errorf("pprof -top or report has no spin row:\n%s\n%s", top, rep)
			} else if d := parseDuration(t, flat[1], flat[2]); math.Abs(d-reportSelf) > 0.005*reportSelf+2000 {
				t.Errorf("pprof -top: spin's self time %.0f ns, the report's %.0f ns:\n%s\n%s", d, reportSelf, top, rep)
			}
			callsTop := testprog.MustRun(t, "go", "tool", "pprof", "-top", "-sample_index=calls", prof)
			if !regexp.MustCompile(`(?m)^\s*62\s.*\sspin$`).MatchString(callsTop) {
				t.Errorf("pprof -top -sample_index=calls: want 62 calls of spin:\n%s", callsTop)
			}

			code, folded, _ := kp("flamegraph", "--format", "folded", trace)
			if code != 0 {
				t.Fatal("flamegraph --format folded failed")
			}
			for _, want := range []string{"main;top;middle;leaf;spin ", "worker;top;middle;leaf;spin ", "main;on_signal;in_handler "} {
				if !strings.Contains(folded, "\n"+want) && !strings.HasPrefix(folded, want) {
					t.Errorf("folded stacks lack %q:\n%s", want, folded)
				}
			}
			code, svg, _ := kp("flamegraph", trace)
			if code != 0 {
				t.Fatal("flamegraph failed")
			}
			if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
				t.Errorf("the SVG is not XML: %v", err)
			}
			for _, fn := range []string{">main<", ">spin<", ">worker<"} {
				if !strings.Contains(svg, fn) {
					t.Errorf("the SVG draws no %s", fn)
				}
			}

			code, text, _ := kp("trace", "--no-header", trace)
			code2, jl, _ := kp("trace", "--format", "json", trace)
			if code != 0 || code2 != 0 {
				t.Fatal("trace failed")
			}
			lines := strings.Split(strings.TrimSpace(jl), "\n")
			if n := len(strings.Split(strings.TrimSpace(text), "\n")); len(lines) != n {
				t.Errorf("%d JSON lines for %d trace lines", len(lines), n)
			}
			for _, l := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["time_ns"] == nil || rec["type"] == nil {
					t.Fatalf("JSON line %q: %v", l, err)
				}
			}
		})
	}
}

// TestExportExceptions: calls a C++ exception leaves end where the trace shows it,
// marked lost, and the calls made after the catch nest where they ran.
func TestExportExceptions(t *testing.T) {
	trace := tracedCalls(t, readSource(t, "calls_throw.cc"), "c++", "-O1")
	code, cj, stderr := kp("trace", "--format", "chrome", trace)
	if code != 0 {
		t.Fatalf("trace --format chrome: exit %d: %s", code, stderr)
	}
	n := map[string]int{}
	lostThrower := 0
	for _, s := range checkChrome(t, []byte(cj)) {
		n[s.name]++
		switch s.name {
		case "after":
			if s.parent != "main" {
				t.Errorf("after() ran in main, shown inside %q", s.parent)
			}
		case "catcher":
			if s.lost || s.parent != "main" {
				t.Errorf("catcher: lost %v, inside %q", s.lost, s.parent)
			}
		case "thrower":
			if s.lost {
				lostThrower++
			}
		}
	}
	if n["catcher"] != 5 || n["thrower"] != 20 || lostThrower != 20 || n["after"] != 1 {
		t.Errorf("slices %v, %d throwers lost; want 5 catcher, 20 thrower (all lost), 1 after", n, lostThrower)
	}
}

// TestReportDiff: --diff compares two traces function by function.
func TestReportDiff(t *testing.T) {
	src := readSource(t, "calls.c")
	a := tracedCalls(t, src, "c", "-O0", "-pthread")
	b := tracedCalls(t, src, "c", "-O2", "-pthread")
	code, out, stderr := kp("report", "--diff", a, "-s", "calls", b)
	if code != 0 {
		t.Fatalf("report --diff: exit %d: %s", code, stderr)
	}
	if !regexp.MustCompile(`(?m)^.*\s62\s+62\s+spin$`).MatchString(out) {
		t.Errorf("report --diff: no line for spin with 62 calls in both:\n%s", out)
	}
	if code, _, stderr := kp("report", "-s", "nonsense", b); code != 2 || !strings.Contains(stderr, "unknown sort key") {
		t.Errorf("report -s nonsense: exit %d, %q", code, stderr)
	}
}

// chromium renders url headless and returns the screenshot's path and what the page
// wrote to its console, a message a line.
func chromium(t *testing.T, url string, width, height int) (shot string, console []string) {
	t.Helper()
	testprog.Need(t, "chromium")
	dir := t.TempDir()
	shot = filepath.Join(dir, "shot.png")
	r := testprog.Run(t, testprog.Cmd{Path: "chromium", Args: []string{"--headless", "--no-sandbox", "--disable-gpu",
		"--enable-unsafe-swiftshader", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--user-data-dir=" + filepath.Join(dir, "profile"),
		"--hide-scrollbars", "--force-device-scale-factor=2", fmt.Sprintf("--window-size=%d,%d", width, height),
		"--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--screenshot=" + shot, url}})
	if _, err := os.Stat(shot); err != nil {
		t.Fatalf("chromium made no screenshot of %s: %v\n%s", url, err, testprog.Clip(r.String(), 3000))
	}
	// [pid:tid:time:INFO:CONSOLE:line] "message", source: URL (line)
	msg := regexp.MustCompile(`:CONSOLE(?::\d+)?\] "(.*)", source: `)
	for _, l := range strings.Split(r.Stderr, "\n") {
		if m := msg.FindStringSubmatch(l); m != nil {
			console = append(console, m[1])
		}
	}
	return shot, console
}

// drawnWords returns the words a screenshot shows, read by tesseract from a
// black-and-white copy (dark text on the frames' colours reads badly as is).
func drawnWords(t *testing.T, shot string) map[string]bool {
	t.Helper()
	testprog.Need(t, "tesseract")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	bw := image.NewGray(b)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if (299*r+587*g+114*bl)/1000>>8 < 90 {
				bw.SetGray(x, y, color.Gray{0})
			} else {
				bw.SetGray(x, y, color.Gray{255})
			}
		}
	}
	bwPath := strings.TrimSuffix(shot, ".png") + "-bw.png"
	w, err := os.Create(bwPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(w, bw); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out := testprog.MustRun(t, "tesseract", bwPath, "-", "--psm", "11")
	words := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		words[sc.Text()] = true
	}
	return words
}

// drawn reports whether OCR read name: exactly, or with one character misread for
// names of four or more ("leat" for "leaf").
func drawn(words map[string]bool, name string) bool {
	if words[name] {
		return true
	}
	if len(name) < 4 {
		return false
	}
	for w := range words {
		if len(w) != len(name) {
			continue
		}
		diff := 0
		for i := range w {
			if w[i] != name[i] {
				diff++
			}
		}
		if diff <= 1 {
			return true
		}
	}
	return false
}

// TestFlameGraphInChromium: the SVG flame graph renders in Chromium with the
// functions' names drawn on their frames.
func TestFlameGraphInChromium(t *testing.T) {
	testprog.Need(t, "chromium", "tesseract")
	trace := tracedCalls(t, readSource(t, "calls.c"), "c", "-O2", "-pthread")
	svg := filepath.Join(t.TempDir(), "flame.svg")
	if code, _, stderr := kp("flamegraph", "-o", svg, trace); code != 0 {
		t.Fatalf("flamegraph: %s", stderr)
	}
	shot, _ := chromium(t, "file://"+svg, 1200, 300)
	words := drawnWords(t, shot)
	for _, fn := range []string{"main", "worker", "top", "middle", "leaf", "spin"} {
		if !drawn(words, fn) {
			t.Errorf("the flame graph in Chromium shows no %q (read: %v)", fn, words)
		}
	}
}

// speedscopeDir finds speedscope's page (npm package speedscope, installed globally by
// .ci/run).
func speedscopeDir(t *testing.T) string {
	t.Helper()
	testprog.Need(t, "npm")
	root, err := exec.Command("npm", "root", "-g").Output()
	if err != nil {
		t.Skipf("npm root -g: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(root)), "speedscope", "dist", "release")
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err != nil {
		t.Skipf("speedscope is not installed (npm install -g speedscope): %v", err)
	}
	return dir
}

// TestExportsInSpeedscope: speedscope, opened in headless Chromium, loads the Chrome
// JSON and the folded stacks with its own importers, logs no error, and draws the
// functions.
func TestExportsInSpeedscope(t *testing.T) {
	testprog.Need(t, "chromium", "tesseract")
	page := speedscopeDir(t)
	trace := tracedCalls(t, readSource(t, "calls.c"), "c", "-O2", "-pthread")
	dir := t.TempDir()
	if code, _, stderr := kp("trace", "--format", "chrome", "-o", filepath.Join(dir, "calls.json"), trace); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := kp("flamegraph", "--format", "folded", "-o", filepath.Join(dir, "calls.folded"), trace); code != 0 {
		t.Fatal(stderr)
	}
	mux := http.NewServeMux()
	mux.Handle("/app/", http.StripPrefix("/app/", http.FileServer(http.Dir(page))))
	mux.Handle("/data/", http.StripPrefix("/data/", http.FileServer(http.Dir(dir))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, file := range []string{"calls.json", "calls.folded"} {
		t.Run(file, func(t *testing.T) {
			shot, console := chromium(t, srv.URL+"/app/index.html#profileURL="+srv.URL+"/data/"+file, 1400, 800)
			// speedscope says which importer took the file and how long the import
			// took; anything thrown or logged as an error is a failure. A call's E
			// with args (the return's fields, lost_return) is merged into its slice
			// as the format says; speedscope, which keys frames by name and args,
			// warns and ends the frame of the same name: anything else is a failure.
			format := map[string]string{"calls.json": "Importing as Trace Event Format profile",
				"calls.folded": "Importing as collapsed stack format"}[file]
			imported, done := false, false
			ended := regexp.MustCompile(`^ts=[\d.]+: Tried to end "([^" ]+) \{.*\}" when "([^" ]+)" was on the top of the stack\. Ending ([^ ]+) instead\.$`)
			for _, m := range console {
				switch {
				case m == format:
					imported = true
				case strings.HasPrefix(m, "import: "):
					done = true
				case regexp.MustCompile(`(?i)error|uncaught|exception|failed|tried to`).MatchString(m):
					if e := ended.FindStringSubmatch(m); e == nil || e[1] != e[2] || e[2] != e[3] {
						t.Errorf("speedscope's console: %s", m)
					}
				}
			}
			if !imported || !done {
				t.Errorf("speedscope did not say %q and how long the import took; its console:\n%s", format, strings.Join(console, "\n"))
			}
			words := drawnWords(t, shot)
			// the first view: the main thread's calls in time order (the JSON), or
			// every stack merged left-heavy (the folded stacks)
			for _, fn := range []string{"main", "top"} {
				if !drawn(words, fn) {
					t.Errorf("speedscope draws no %q for %s (read: %v)", fn, file, words)
				}
			}
		})
	}
}

// TestExportLostReturns: calls whose returns were never recorded end where the trace
// first shows it, so that the calls after them nest where they ran: fib recursing 12
// deep with 3 return-probe instances (most of its returns are missed), and a longjmp out
// of jumper(3) followed by after_jump() from main, three times; and a tail call, which
// shares its caller's frame and is not a lost return.
func TestExportLostReturns(t *testing.T) {
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			prog := testprog.Build(t, readSource(t, "calls_lost.c"), "c", opt)
			var defs []string
			for _, fn := range []string{"main", "fib", "leaf", "jumper", "after_jump", "tail_a", "tail_b"} {
				maxactive := ""
				if fn == "fib" {
					maxactive = "3"
				}
				defs = append(defs, fmt.Sprintf("p:calls/%s %s", fn, fn), fmt.Sprintf("r%s:calls/%s_ret %s", maxactive, fn, fn))
			}
			out := filepath.Join(t.TempDir(), "lost.kp")
			rewriteWith(t, prog, out, defs)
			testprog.Same(t, prog, out, testprog.Cmd{}, nil)
			trace := out + ".trace"

			code, cj, stderr := kp("trace", "--format", "chrome", trace)
			if code != 0 {
				t.Fatalf("trace --format chrome: exit %d: %s", code, stderr)
			}
			// slices per function, fib's deepest nesting, after_jump's parent
			var doc struct {
				TraceEvents []chromeEvent `json:"traceEvents"`
			}
			if err := json.Unmarshal([]byte(cj), &doc); err != nil {
				t.Fatal(err)
			}
			slices := checkChrome(t, []byte(cj))
			n, lost := map[string]int{}, map[string]int{}
			for _, s := range slices {
				n[s.name]++
				if s.lost {
					lost[s.name]++
				}
				if s.name == "after_jump" && s.parent != "main" {
					t.Errorf("after_jump ran in main, shown inside %q", s.parent)
				}
				if s.name == "leaf" && s.parent != "jumper" && s.parent != "after_jump" && s.parent != "tail_a" && s.parent != "tail_b" {
					t.Errorf("leaf shown inside %q", s.parent)
				}
				if s.name == "tail_b" && s.parent != "tail_a" {
					t.Errorf("tail_b shown inside %q, want tail_a (its caller, or at -O2 the frame it replaced)", s.parent)
				}
			}
			depth, deepest := 0, 0
			for _, e := range doc.TraceEvents {
				if e.Name != "fib" {
					continue
				}
				switch e.Ph {
				case "B":
					depth++
					deepest = max(deepest, depth)
				case "E":
					depth--
				}
			}
			// fib(12) makes 2*F(13)-1 calls and recurses 12 deep (fib(12) .. fib(1))
			if n["fib"] != 465 || deepest != 12 || lost["fib"] == 0 {
				t.Errorf("fib: %d slices (want 465), nested %d deep (want 12), %d lost (want some)", n["fib"], deepest, lost["fib"])
			}
			if n["jumper"] != 12 || lost["jumper"] != 12 || n["after_jump"] != 3 || n["leaf"] != 20 || n["tail_a"] != 1 || n["tail_b"] != 1 ||
				lost["after_jump"]+lost["tail_a"]+lost["tail_b"]+lost["leaf"] != 0 {
				t.Errorf("slices %v, lost %v: want 12 jumper (all lost), 3 after_jump, 20 leaf, 1 tail_a and tail_b, no other lost", n, lost)
			}

			code, rep, stderr := kp("report", trace)
			if code != 0 {
				t.Fatalf("report: exit %d: %s", code, stderr)
			}
			calls, lostRep := reportCalls(t, rep)
			if calls["fib"] != 465 || lostRep["fib"] != lost["fib"] || calls["after_jump"] != 3 || lostRep["jumper"] != 12 {
				t.Errorf("report: calls %v, lost %v\n%s", calls, lostRep, rep)
			}
			code, folded, _ := kp("flamegraph", "--format", "folded", trace)
			if code != 0 {
				t.Fatal("flamegraph --format folded failed")
			}
			if strings.Contains(folded, "jumper;after_jump") || !strings.Contains(folded, "main;after_jump;leaf ") {
				t.Errorf("folded stacks: after_jump must be main's call:\n%s", folded)
			}
		})
	}
}

// manyCalls writes, for each n, the trace of calls_many.c making n iterations of two
// nested calls, an entry and a return event on each: 6n records.
func manyCalls(t *testing.T, dir string, ns ...int) map[int]string {
	t.Helper()
	prog := testprog.Build(t, readSource(t, "calls_many.c"), "c", "-O1")
	out := filepath.Join(dir, "many.kp")
	rewriteWith(t, prog, out, []string{"p:c/outer outer", "r:c/outer_ret outer", "p:c/inner inner", "r:c/inner_ret inner"})
	traces := map[int]string{}
	for _, n := range ns {
		trace := filepath.Join(dir, fmt.Sprintf("many-%d.trace", n))
		r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{strconv.Itoa(n)},
			Env: []string{"KPREWRITE_TRACE=" + trace, "KPREWRITE_TRACE_SIZE=512M"}})
		if r.Exit != 0 {
			t.Fatalf("%s %d: %s", out, n, r)
		}
		code, prof, _ := kp("profile", trace)
		if code != 0 || !strings.Contains(prof, fmt.Sprintf(" %d ", 2*n)) {
			t.Fatalf("the trace of %d iterations lacks records:\n%s", n, prof)
		}
		traces[n] = trace
	}
	return traces
}

// TestExportMemoryBounded: every export streams: the peak resident size of `kprewrite`
// exporting a trace eight times longer (3.6M records against 450k) is about the same,
// set by the call depth and the threads, not by the trace's length.
func TestExportMemoryBounded(t *testing.T) {
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)
	traces := manyCalls(t, dir, 75000, 600000)
	// peak resident size in KiB of bin args..., its output thrown away
	peakrss := testprog.Build(t, readSource(t, "peakrss.c"), "c", "-O1")
	peak := func(args ...string) int64 {
		out := testprog.MustRun(t, peakrss, append([]string{bin}, args...)...)
		kib, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("peakrss: %q", out)
		}
		return kib
	}
	for _, export := range [][]string{
		{"trace", "--format", "chrome"},
		{"trace", "--format", "json"},
		{"trace"},
		{"report"},
		{"flamegraph"},
		{"flamegraph", "--format", "folded"},
		{"profile", "--format", "pprof", "-o", filepath.Join(dir, "p.pb.gz")},
	} {
		small := peak(append(export, traces[75000])...)
		large := peak(append(export, traces[600000])...)
		t.Logf("%s: peak %d KiB for 450k records, %d KiB for 3.6M", strings.Join(export, " "), small, large)
		if large > small+small/4+8<<10 {
			t.Errorf("%s: peak resident size %d KiB for 3.6M records, %d KiB for 450k: it grows with the trace",
				strings.Join(export, " "), large, small)
		}
	}
}

// openPTY opens a pseudo-terminal: its master and the terminal (slave) side.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("TIOCSPTLCK: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("TIOCGPTN: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestExportProgressOnTerminal: an export that has run for a second and a half shows,
// on a terminal, how many records it has read, and clears the line when it ends. The
// export is held up by a reader that takes none of its output for two seconds (not by
// the machine's speed); with standard error not a terminal, nothing is shown.
func TestExportProgressOnTerminal(t *testing.T) {
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)
	trace := manyCalls(t, dir, 75000)[75000]
	run := func(stderr *os.File) {
		cmd := exec.Command(bin, "trace", "--format", "chrome", trace)
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the export blocks on its full pipe meanwhile
		n, _ := io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil || n < 1<<20 {
			t.Fatalf("export: %v, %d bytes", err, n)
		}
	}
	master, tty := openPTY(t)
	defer master.Close()
	run(tty)
	tty.Close()
	var screen bytes.Buffer
	io.Copy(&screen, master) // ends with EIO once the terminal side is closed everywhere
	shown := regexp.MustCompile(`\r\x1b\[Kkprewrite trace: (\d+)/450000 records \((\d+)%\)`).FindAllStringSubmatch(screen.String(), -1)
	if len(shown) == 0 || !strings.HasSuffix(screen.String(), "\r\x1b[K") {
		t.Fatalf("the terminal shows %q: want progress lines, then the line cleared", screen.String())
	}
	for _, m := range shown {
		if n, _ := strconv.Atoi(m[1]); n < 0 || n >= 450000 {
			t.Errorf("progress %q: records read out of range", m[0])
		}
	}

	f, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	run(f)
	f.Close()
	if b, _ := os.ReadFile(f.Name()); len(b) != 0 {
		t.Errorf("with standard error a file, the export wrote %q to it", b)
	}
}

// TestRewriteCalls: --calls GLOB puts an entry and a return event on the functions it
// matches, named calls/NAME and calls/NAME__return (a name the user's definitions took
// gets _2); what the analysis refuses of them is left out and counted, while a refusal
// of the user's own definition still fails the rewrite.
func TestRewriteCalls(t *testing.T) {
	prog := testprog.Build(t, readSource(t, "calls.c"), "c", "-O1", "-pthread")
	out := filepath.Join(t.TempDir(), "calls.kp")
	code, _, stderr := kp("rewrite", "--calls", "middle", "--calls", "l*", "-e", "p:calls/leaf spin", "-o", out, prog)
	if code != 0 || !strings.Contains(stderr, "--calls: 2 functions traced as calls, 0 left out") {
		t.Fatalf("rewrite --calls: exit %d: %s", code, stderr)
	}
	testprog.Same(t, prog, out, testprog.Cmd{}, nil)
	code, list, _ := kp("list", "-v", out)
	for _, ev := range []string{"calls/middle ", "calls/middle__return ", "calls/leaf_2 ", "calls/leaf_2__return ", "calls/leaf "} {
		if code != 0 || !strings.Contains(list, ev) {
			t.Errorf("list -v has no %s:\n%s", ev, list)
		}
	}
	// the trace beside a directory of the same name without .trace: the file
	// describes its images, the directory is no binary to read
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := testprog.Run(t, testprog.Cmd{Path: out, Extra: []string{"KPREWRITE_TRACE=" + dir + ".trace"}}); r.Exit != 0 {
		t.Fatal(r)
	}
	code, rep, stderr := kp("report", dir+".trace")
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	calls, _ := reportCalls(t, rep)
	if len(calls) != 2 || calls["middle"] != 20 || calls["leaf"] != 40 {
		t.Errorf("report: calls %v, want middle 20 and leaf 40 only\n%s", calls, rep)
	}

	// every function: the process entry point and what nothing calls are not probed
	code, _, stderr = kp("rewrite", "--calls", "*", "-o", out, prog)
	if code != 0 || !regexp.MustCompile(`--calls: \d+ functions traced as calls`).MatchString(stderr) || strings.Contains(stderr, "warning") {
		t.Fatalf("rewrite --calls '*': exit %d: %s", code, stderr)
	}
	// the user's refused definition fails the rewrite, --calls or not
	code, _, stderr = kp("rewrite", "--calls", "*", "-e", "r:mine/start _start", "-o", out+"2", prog)
	if code == 0 || !strings.Contains(stderr, "retprobe-process-entry") {
		t.Errorf("a refused definition of the user's with --calls: exit %d: %s", code, stderr)
	}
	if code, _, stderr = kp("rewrite", "--calls", "[", "-o", out+"3", prog); code != 2 || !strings.Contains(stderr, "--calls \"[\"") {
		t.Errorf("--calls '[': exit %d: %s", code, stderr)
	}
	for _, f := range []string{out + "2", out + "3"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s written by a failed rewrite", f)
		}
	}
}
