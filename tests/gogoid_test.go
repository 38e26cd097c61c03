package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// goGoidSrc runs 16 goroutines, each a recursion that yields at every level (so that
// goroutines move between threads), counts its own calls, and writes each goroutine's
// id (from runtime.Stack's "goroutine N [" header) to the file its argument names.
const goGoidSrc = `package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"

	"gogoid/helper"
)

var nDown, nLeaf, nRun atomic.Int64

func goid() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

//go:noinline
func leaf(n int) int { nLeaf.Add(1); return n * 2 }

//go:noinline
func down(n int) int {
	nDown.Add(1)
	runtime.Gosched()
	if n == 0 {
		return leaf(n)
	}
	return down(n-1) + leaf(n)
}

//go:noinline
func run(i int) {
	nRun.Add(1)
	sum := int(helper.Grow()) - 255
	for k := 0; k < 20; k++ {
		sum += down(6)
	}
	ids[i] = goid()
	if sum != 840 {
		panic(sum)
	}
}

var ids = make([]uint64, 16)

func main() {
	runtime.GOMAXPROCS(4)
	helper.Run(len(ids), run)
	var b bytes.Buffer
	for _, id := range ids {
		fmt.Fprintln(&b, id)
	}
	os.WriteFile(os.Args[1], b.Bytes(), 0o644)
	fmt.Println(nRun.Load(), nDown.Load(), nLeaf.Load())
}
`

// goHelperSrc runs the goroutines and grows their stacks, outside main.*. Grow: an
// entry probe sits before Go's stack check, and a function that morestack restarts on
// a grown stack is entered twice (issue 48 item 1; a restart on the same stack, a
// preemption, is recognized by the nesting). Run: a goroutine says it is done after
// main.run returned, so the program cannot exit before that return is recorded.
const goHelperSrc = `package helper

import "sync"

//go:noinline
func Grow() byte {
	var b [16 << 10]byte
	for i := range b {
		b[i] = byte(i)
	}
	return b[len(b)-1]
}

func Run(n int, f func(int)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { f(i); wg.Done() }()
	}
	wg.Wait()
}
`

// TestGoroutineNesting: a Go program's records carry their goroutine's id (what the
// program itself reads), a goroutine keeps its calls' nesting when it moves between
// threads, and report, the Chrome JSON (a track per goroutine) and the folded stacks
// pair every call.
func TestGoroutineNesting(t *testing.T) {
	testprog.Need(t, "go")
	dir := goProgDir(t, goGoidSrc)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gogoid\n\ngo 1.22\n"), 0o644)
	os.Mkdir(filepath.Join(dir, "helper"), 0o755)
	os.WriteFile(filepath.Join(dir, "helper", "helper.go"), []byte(goHelperSrc), 0o644)
	prog := buildGo(t, dir, "prog")
	out := filepath.Join(dir, "prog.k")
	rewriteWith(t, prog, out, nil, "--calls", "main.*", "--exits", "--exits-only", "--optimized-only")
	tr, idFile := filepath.Join(dir, "prog.trace"), filepath.Join(dir, "ids")
	// the nesting across threads is what is checked, so a run where the scheduler kept
	// every goroutine on one thread (a short run on a busy machine: about one in ten
	// here) is run again, up to 4 runs, each one's records checked
	var ids map[uint64]bool
	for run, moved := 1, 0; moved == 0; run++ {
		os.Remove(tr)
		res := testprog.Same(t, prog, out, testprog.Cmd{Args: []string{idFile}, Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
		if res.Stdout != "16 2240 2240\n" {
			t.Fatalf("unexpected run: %s", res)
		}
		ids = programGoids(t, idFile) // the rewritten program's: it ran last
		if moved = checkGoidRecords(t, tr, ids); moved == 0 && run == 4 {
			t.Fatalf("in %d runs no goroutine ran on two threads", run)
		}
	}
	code, rep, stderr := kp("report", tr)
	if code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	calls, lost := reportCalls(t, rep)
	for fn, n := range map[string]int{"main.down": 2240, "main.leaf": 2240, "main.run": 16, "main.goid": 16, "main.main": 1} {
		if calls[fn] != n || lost[fn] != 0 {
			t.Errorf("report: %s: %d calls, %d lost returns; the program made %d\n%s", fn, calls[fn], lost[fn], n, rep)
		}
	}
	checkGoidChrome(t, tr, ids)
	// trace --goid ends each line with it; the lines are as before without the flag
	_, plain, _ := kp("trace", "--no-header", tr)
	code, lines, stderr := kp("trace", "--no-header", "--goid", tr)
	if code != 0 || strings.Contains(plain, "goid=") {
		t.Fatalf("trace --goid: exit %d: %s", code, stderr)
	}
	pl, gl := strings.Split(plain, "\n"), strings.Split(lines, "\n")
	for i := range gl {
		var id uint64
		head, tail, _ := strings.Cut(gl[i], " goid=")
		if _, err := fmt.Sscan(tail, &id); i < len(pl)-1 && (len(pl) != len(gl) || head != pl[i] || err != nil || (strings.Contains(head, " main_run:") && !ids[id])) {
			t.Fatalf("trace --goid line %q for %q", gl[i], pl[i])
		}
	}
	// the Go API's records carry it too
	n := 0
	for r, err := range kprewrite.Records(tr) {
		if err != nil || !r.HasGoID || (r.Event == "main_run" && !ids[r.GoID]) {
			t.Fatalf("API record %+v: %v", r, err)
		}
		n++
	}
	if n == 0 {
		t.Error("the API read no records")
	}
	// format lists the id after the event's fields (none: at the data's start)
	if code, ff, stderr := kp("format", "--event", "calls/main_down", out); code != 0 ||
		!strings.Contains(ff, "\tfield:u64 common_goid;\toffset:16;\tsize:8;\tsigned:0;\n\nprint fmt:") {
		t.Errorf("format: exit %d: %s%s", code, ff, stderr)
	}
}

// programGoids reads the goroutine ids the program wrote.
func programGoids(t *testing.T, file string) map[uint64]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for _, l := range strings.Fields(string(b)) {
		var id uint64
		if _, err := fmt.Sscan(l, &id); err != nil || id == 0 {
			t.Fatalf("goroutine id %q", l)
		}
		ids[id] = true
	}
	if len(ids) != 16 {
		t.Fatalf("the program's goroutine ids: %v", ids)
	}
	return ids
}

// checkGoidRecords checks the records' goroutine ids (trace --format json): each of
// the program's goroutines returned 140 times from main.down (returns: an entry
// restarted by morestack is recorded twice) and every record has an id; it
// returns how many goroutines' records came from two threads or more.
func checkGoidRecords(t *testing.T, tr string, ids map[uint64]bool) int {
	t.Helper()
	code, jl, stderr := kp("trace", "--format", "json", tr)
	if code != 0 {
		t.Fatalf("trace --format json: exit %d: %s", code, stderr)
	}
	downs := map[uint64]int{}
	threads := map[uint64]map[int]bool{}
	for _, l := range strings.Split(strings.TrimSpace(jl), "\n") {
		var r struct {
			Tid   int     `json:"tid"`
			Goid  *uint64 `json:"goid"`
			Event string  `json:"event"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("record %s: %v", l, err)
		}
		if r.Goid == nil {
			t.Fatalf("record without a goroutine id: %s", l)
		}
		if r.Event == "main_down__return" {
			downs[*r.Goid]++
		}
		if threads[*r.Goid] == nil {
			threads[*r.Goid] = map[int]bool{}
		}
		threads[*r.Goid][r.Tid] = true
	}
	moved := 0
	for id := range ids {
		if downs[id] != 140 {
			t.Errorf("goroutine %d: %d returns of main.down, the program made 140 (by goroutine: %v)", id, downs[id], downs)
		}
		if len(threads[id]) > 1 {
			moved++
		}
	}
	t.Logf("%d of %d goroutines ran on more than one thread: %v", moved, len(ids), threads)
	return moved
}

// checkGoidChrome checks the Chrome JSON: nested and closed slices on each track, one
// track per goroutine (its id as tid, "goroutine N" as name) with its 140 calls of
// main.down and one of main.run.
func checkGoidChrome(t *testing.T, tr string, ids map[uint64]bool) {
	t.Helper()
	code, cj, stderr := kp("trace", "--format", "chrome", tr)
	if code != 0 {
		t.Fatalf("trace --format chrome: exit %d: %s", code, stderr)
	}
	for _, s := range checkChrome(t, []byte(cj)) {
		if s.lost {
			t.Errorf("chrome: a lost return of %s", s.name)
		}
	}
	var doc struct {
		TraceEvents []chromeEvent `json:"traceEvents"`
	}
	json.Unmarshal([]byte(cj), &doc) // (checkChrome parsed it)
	names := map[int]string{}
	begins := map[int]map[string]int{}
	for _, e := range doc.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			names[e.Tid], _ = e.Args["name"].(string)
		case e.Ph == "B":
			if begins[e.Tid] == nil {
				begins[e.Tid] = map[string]int{}
			}
			begins[e.Tid][e.Name]++
		}
	}
	for id := range ids {
		tid := int(id)
		if names[tid] != fmt.Sprintf("goroutine %d", id) || begins[tid]["main.down"] != 140 || begins[tid]["main.run"] != 1 {
			t.Errorf("chrome: track %d named %q has %v", tid, names[tid], begins[tid])
		}
	}
}
