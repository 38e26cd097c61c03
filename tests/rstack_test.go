package tests

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestReturnStack: trace-only return events keep their frames on the thread's return
// stack (runtime/src/rt_rstack.c, 127 entries) before the probe's instances, in order,
// with the kernel's accounting past both: rec(300) with r64 records the returns of its
// 127 + 64 outermost frames (retvals 110..300, ascending) and misses the other 110, and
// so does deep(300), whose entries the detour's assembly pushes (an entry event without
// fetches: a CALL line, optprobe.S); a
// longjmp out of dive(200) leaves stale entries that rec(50) sweeps (its 51 returns all
// recorded, 0..50); a tail call from tail_a (on the stack) to tail_b (r3: an instance)
// returns tail_b first, both showing main's return address; a fork inside forker
// returns through the parent's frame in the child too (its records under its pid).
func TestReturnStack(t *testing.T) {
	prog := testprog.Build(t, readSource(t, "rstack.c"), "c", "-O2")
	out := filepath.Join(t.TempDir(), "rstack.kp")
	rewriteWith(t, prog, out, []string{
		"p:t/rec rec n=%di:s32", "r64:t/rec_ret rec ret=$retval:s32",
		"p:t/deep deep", "r64:t/deep_ret deep ret=$retval:s32",
		"p:t/dive dive", "r:t/dive_ret dive",
		"p:t/tail_a tail_a", "r:t/tail_a_ret tail_a",
		"p:t/tail_b tail_b", "r3:t/tail_b_ret tail_b",
		"p:t/forker forker", "r:t/forker_ret forker ret=$retval:s32",
	})
	testprog.Same(t, prog, out, testprog.Cmd{}, nil)
	code, text, stderr := kp("trace", out+".trace")
	if code != 0 {
		t.Fatalf("trace: exit %d: %s", code, stderr)
	}
	lines := parseTraceLines(t, text)
	parent := 0
	for _, l := range lines {
		if l.Event == "forker_ret" && strings.Contains(l.Args, "ret=42") {
			parent = l.PID
		}
	}
	if parent == 0 {
		t.Fatalf("no forker_ret ret=42 (the parent's):\n%s", text)
	}
	var recRets, childRets, deepRets []int
	var order []string
	shown := map[string]string{}
	for _, l := range lines {
		switch l.Event {
		case "deep_ret":
			v, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(l.Args), "ret="))
			if err != nil {
				t.Fatalf("deep_ret args %q", l.Args)
			}
			deepRets = append(deepRets, v)
		case "rec_ret":
			v, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(l.Args), "ret="))
			if err != nil {
				t.Fatalf("rec_ret args %q", l.Args)
			}
			if l.PID == parent {
				recRets = append(recRets, v)
			} else {
				childRets = append(childRets, v)
			}
		case "tail_a_ret", "tail_b_ret", "forker_ret", "dive_ret":
			order = append(order, l.Event+l.Args+"@"+strconv.Itoa(l.PID))
			if strings.HasPrefix(l.Event, "tail") {
				shown[l.Event] = strings.SplitN(strings.Trim(l.Head, "()"), " <- ", 2)[0]
			}
		}
	}
	want := []int{}
	for v := 110; v <= 300; v++ {
		want = append(want, v)
	}
	for v := 0; v <= 50; v++ {
		want = append(want, v)
	}
	if !slices.Equal(recRets, want) {
		t.Errorf("the parent's rec returns: %v\nwant 110..300 (the stack's 127 frames and r64's pool), then 0..50", recRets)
	}
	if !slices.Equal(deepRets, want[:191]) {
		t.Errorf("deep returns: %v\nwant 110..300 (the stack's frames pushed by the detour's assembly, then the pool's)", deepRets)
	}
	if !slices.Equal(childRets, []int{0, 1, 2, 3}) {
		t.Errorf("the child's rec returns: %v, want 0..3", childRets)
	}
	child := 0
	for _, l := range lines {
		if l.PID != parent {
			child = l.PID
		}
	}
	wantOrder := []string{}
	for i := 0; i < 1001; i++ {
		wantOrder = append(wantOrder, "tail_b_ret@"+strconv.Itoa(parent), "tail_a_ret@"+strconv.Itoa(parent))
	}
	wantOrder = append(wantOrder, "forker_ret ret=7@"+strconv.Itoa(child), "forker_ret ret=42@"+strconv.Itoa(parent))
	if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
		t.Errorf("returns %.300v, want %.300v (no dive_ret: longjmp left every frame)", order, wantOrder)
	}
	tailCalls(t, prog)
	chainCalls(t, prog)
	if shown["tail_a_ret"] == "" || shown["tail_a_ret"] != shown["tail_b_ret"] {
		t.Errorf("tail call: return addresses shown %v, want main's for both", shown)
	}
	code, prof, _ := kp("profile", out+".trace")
	if code != 0 {
		t.Fatalf("profile: exit %d", code)
	}
	for _, f := range strings.Split(prof, "\n") {
		w := strings.Fields(f)
		if len(w) == 3 && w[0] == "rec_ret" && (w[1] != "246" || w[2] != "110") {
			t.Errorf("rec_ret: %s hits, %s missed; want 246 (191 + 51 + the child's 4) and 110", w[1], w[2])
		}
	}
}

// tailCalls: with --calls, tail_a's tail call to tail_b is an exit point that hooks the
// return address (a TAIL line: the detour's assembly pushes the frame on the return
// stack, the trampoline's pops it), tail_b returns at its ret: 1,001 calls of each,
// tail_b's return before tail_a's every time, both showing tail_a's caller.
func tailCalls(t *testing.T, prog string) {
	out := filepath.Join(t.TempDir(), "tails.kp")
	rewriteWith(t, prog, out, nil, "--calls", "tail_*")
	testprog.Same(t, prog, out, testprog.Cmd{}, nil)
	code, text, stderr := kp("trace", out+".trace")
	if code != 0 {
		t.Fatalf("trace: exit %d: %s", code, stderr)
	}
	var seq []string
	for _, l := range parseTraceLines(t, text) {
		if strings.HasSuffix(l.Event, "__return") {
			head := strings.SplitN(strings.Trim(l.Head, "()"), " <- ", 2)[0]
			seq = append(seq, l.Event+"@"+head)
		}
	}
	if len(seq) != 2*1001 {
		t.Fatalf("%d return records, want 2,002", len(seq))
	}
	for i := 0; i+1 < len(seq); i += 2 {
		b, a := strings.SplitN(seq[i], "@", 2), strings.SplitN(seq[i+1], "@", 2)
		if b[0] != "tail_b__return" || a[0] != "tail_a__return" || a[1] != b[1] {
			t.Fatalf("return records %d and %d: %s, %s; want tail_b__return then tail_a__return, one return address", i, i+1, seq[i], seq[i+1])
		}
	}
}

// chainCalls: chain_a's tail call to hooked_c is a TAIL line (--calls chain_a) that
// hooks main's return address on the return stack; hooked_c's entry and return events
// (a CALL line) push a second entry on the same word, a chain, and its return through
// the trampoline records hooked_c's return, then enters the trampoline again for
// chain_a's: 1,000 calls of each, hooked_c's return first, both showing main's return
// address (the detour's and the trampoline's assembly, as kprw_rstack_push and
// kprw_rethook do it).
func chainCalls(t *testing.T, prog string) {
	out := filepath.Join(t.TempDir(), "chains.kp")
	rewriteWith(t, prog, out, []string{"p:t/hc hooked_c", "r:t/hc_ret hooked_c"}, "--calls", "chain_a")
	testprog.Same(t, prog, out, testprog.Cmd{}, nil)
	code, text, stderr := kp("trace", out+".trace")
	if code != 0 {
		t.Fatalf("trace: exit %d: %s", code, stderr)
	}
	var seq []string
	entries := 0
	for _, l := range parseTraceLines(t, text) {
		switch l.Event {
		case "hc":
			entries++
		case "hc_ret", "chain_a__return":
			head := strings.SplitN(strings.Trim(l.Head, "()"), " <- ", 2)[0]
			seq = append(seq, l.Event+"@"+head)
		}
	}
	if entries != 1000 || len(seq) != 2*1000 {
		t.Fatalf("%d hc entries and %d return records, want 1,000 and 2,000:\n%.2000s", entries, len(seq), text)
	}
	for i := 0; i+1 < len(seq); i += 2 {
		c, a := strings.SplitN(seq[i], "@", 2), strings.SplitN(seq[i+1], "@", 2)
		if c[0] != "hc_ret" || a[0] != "chain_a__return" || a[1] != c[1] {
			t.Fatalf("return records %d and %d: %s, %s; want hc_ret then chain_a__return, one return address", i, i+1, seq[i], seq[i+1])
		}
	}
}
