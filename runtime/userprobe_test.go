package kprt_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	. "github.com/kprewrite/kprewrite/runtime"
)

// C-handler probes (FUser): testdata/userprobed.c holds struct kprobe / struct
// kretprobe objects of kprewrite.h; the tables point at them and the runtime reads the
// handlers from them. Each probed function exists once per execution mode, so one run
// shows the same handlers on the k, b and o paths (and r, rb, ro for return probes).

func userSpecs() []pointSpec {
	kp := func(user string) []probeSpec { return []probeSpec{{typ: TKprobe, flags: FUser, event: -1, user: user}} }
	rp := func(user string) []probeSpec {
		return []probeSpec{{typ: TKretprobe, flags: FUser, event: -1, user: user, maxactive: 4, dataSize: 16}}
	}
	return []pointSpec{
		{site: "k_sub_s0", xmode: XSStep, probes: kp("kp_k")},
		{site: "b_sub_s0", xmode: XBoost, probes: kp("kp_b")},
		{site: "o_sub_s0", xmode: XOptimized, probes: kp("kp_o")},
		{site: "k_sum_s0", xmode: XSStep, probes: rp("rp_k")},
		{site: "b_sum_s0", xmode: XBoost, probes: rp("rp_b")},
		{site: "o_sum_s0", xmode: XOptimized, probes: rp("rp_o")},
	}
}

type userRun struct {
	*runResult
	stderr string
}

func (b *probedBin) runUser(t *testing.T, mode string, env ...string) *userRun {
	t.Helper()
	tr := filepath.Join(filepath.Dir(b.path), "run-"+mode+".trace")
	os.Remove(tr)
	cmd := exec.Command(b.path, mode)
	cmd.Env = append([]string{"KPREWRITE_TRACE=" + tr}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := &userRun{runResult: &runResult{out: stdout.String(), vals: map[string]string{}}, stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.status = ee.Sys().(syscall.WaitStatus)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: stdout:\n%s\nstderr:\n%s", mode, r.out, r.stderr)
	for _, f := range strings.Fields(r.out) {
		if k, v, ok := strings.Cut(f, "="); ok {
			r.vals[k] = v
		}
	}
	if data, err := os.ReadFile(tr); err == nil {
		if r.trace, err = tracefile.ParseTrace(data); err != nil {
			t.Fatalf("trace: %v", err)
		}
	}
	if r.status != 0 {
		t.Fatalf("%s: exit %v", mode, r.status)
	}
	return r
}

func TestUserKprobes(t *testing.T) {
	for _, link := range []struct {
		name  string
		flags []string
	}{{"pie", nil}, {"nopie", []string{"-no-pie"}}, {"static", []string{"-static"}}} {
		t.Run(link.name, func(t *testing.T) {
			b := buildRewritten(t, "testdata/userprobed.c", link.flags, userSpecs())
			r := b.runUser(t, "kprobes")
			// registers seen (ip = site+1, di, si), post handlers after the instruction (k, b)
			r.want(t, "observe", "7,7,7", "di", "10,10,10", "si", "3,3,3", "post_ax", "10,10,0")
			// a register written by the pre handler takes effect on every path
			r.want(t, "change", "-90,-90,-90")
			// redirection: ip changed and 1 returned resumes there, without post handler
			r.want(t, "redirect", "-7,-7,-7")
			// a handler calling probed functions: those hits are missed (kp->nmissed), the calls work
			r.want(t, "reenter", "7,7,7", "reenter_result", "126", "nmissed", "3,3,3")
			r.want(t, "n_pre", "4,4,4", "n_post", "3,3,0", "n_fault", "0,0,0", "n_bad", "0,0,0")
			// register_kprobe (automatic here) sets addr, and flags OPTIMIZED on the o site
			r.want(t, "addr_ok", "1,1,1", "optimized", "0,0,1")
			r.want(t, "optslow", "1", "faults", "0", "records", "1")
			if !strings.Contains(r.stderr, "pre: k_sub di=10 si=3 pid=") || !strings.Contains(r.stderr, "comm=userprobed") {
				t.Errorf("pr_info line missing from stderr %q", r.stderr)
			}
			// trace_printk: a text record with the function's name
			var texts []string
			for _, rec := range r.trace.Records {
				if rec.Type == RecPrintk {
					fn, text, _ := bytes.Cut(rec.Data, []byte{0})
					texts = append(texts, string(fn)+": "+string(text))
					if rec.IP != b.syms["k_sub"] || rec.EventID != NoEvent || rec.RetIP == 0 {
						t.Errorf("printk record %+v", rec.RawRecord)
					}
				}
			}
			if len(texts) != 1 || texts[0] != "pre: seen 10 3\n" {
				t.Errorf("trace_printk records %q", texts)
			}
			// the trace file's counters: hits and misses of each probe
			for i, want := range []tracefile.Counter{{Hit: 4, NMissed: 3}, {Hit: 4, NMissed: 3}, {Hit: 4, NMissed: 3}} {
				if c := b.counter(t, r.runResult, i, 0); c != want {
					t.Errorf("counters of probe %d: %+v, want %+v", i, c, want)
				}
			}
		})
	}
}

func TestUserKretprobes(t *testing.T) {
	b := buildRewritten(t, "testdata/userprobed.c", nil, userSpecs())
	r := b.runUser(t, "kretprobes")
	// 7 frames, maxactive 4: the 4 outer ones get an instance; data carried from entry to
	// return (zeroed at entry); the return value seen as the function's
	r.want(t, "sum", "21,21,21", "entry", "4,4,4", "ret", "4,4,4", "ret_bad", "0,0,0", "data_bad", "0,0,0")
	r.want(t, "rnmissed", "3,3,3", "maxactive", "4,4,4")
	// a return handler changes the return value (fault injection)
	r.want(t, "inject", "1006,1006,1006")
	// an entry handler calling the probed function: its 4 entries are missed (rp->kp.nmissed)
	r.want(t, "reenter", "9,6", "kpnmissed", "4,4,4")
}

func TestUserSwitches(t *testing.T) {
	b := buildRewritten(t, "testdata/userprobed.c", nil, userSpecs())
	r := b.runUser(t, "switch")
	r.want(t, "dis", "0,0,0", "off", "7,7,7", "off_pre", "0,0,0")
	r.want(t, "en", "0,0,0", "on", "7,7,7", "on_pre", "1,1,1")
	r.want(t, "en_unreg", "-22", "unreg_twice_addr", "1", "unreg", "7,7,7", "unreg_pre", "2,1,1")
	r.want(t, "rr", "0,0", "undeclared", "-2", "twice", "-22", "rereg_pre", "3,2,2")
	r.want(t, "rdis", "0", "rdis_sum", "6", "rdis_entry", "0")
	// a disabled jump-optimized probe closes its gate: no detour call at all
	if c := b.counter(t, r.runResult, 2, 0); c.Hit != 2 {
		t.Errorf("o probe counted %+v, want 2 hits", c)
	}
	// KPREWRITE_DISABLE=all wins over enable_kprobe
	r = b.runUser(t, "switch", "KPREWRITE_DISABLE=all")
	r.want(t, "on_pre", "0,0,0", "rereg_pre", "0,0,0")
}

func TestUserFaults(t *testing.T) {
	b := buildRewritten(t, "testdata/userprobed.c", nil, userSpecs())
	r := b.runUser(t, "faults")
	// a fault in a pre handler: fault_handler called (returns 0), handler abandoned, the
	// probed instruction and the post handler still run
	r.want(t, "fault", "7,7,7", "fault_fault", "1,1,1", "fault_post", "1,1,0", "fault_bad", "0,0,0")
	// fault_handler handles an ud2 by stepping over it: the handler goes on
	r.want(t, "trap", "7,7,7", "after_trap", "3", "trap_fault", "2,2,2")
	// a fault in the fault_handler itself abandons the handler too
	r.want(t, "ff", "7,7,7", "ff_fault", "3,3,3")
	// a fault in a return handler: the function still returns its value
	r.want(t, "retfault", "3,3,3", "blocked", "0", "faults", "21")
	for _, want := range []string{
		"kprewrite: a C handler faulted: SIGSEGV (trap 14, address 0x10) at ",
		"in the pre_handler of the probe at k_sub; the handler is abandoned and the program goes on",
		"in the pre_handler of the probe at o_sub",
		"in the handler of the probe at b_sum",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

func TestUserInitExit(t *testing.T) {
	for _, link := range []struct {
		name  string
		flags []string
	}{{"pie", nil}, {"static", []string{"-static"}}} {
		t.Run(link.name, func(t *testing.T) {
			b := buildRewritten(t, "testdata/userprobed.c", append([]string{"-DWITH_INIT"}, link.flags...), userSpecs())
			r := b.runUser(t, "init")
			// kprewrite_init registered k and b (register_kprobes rolled o back after the
			// undeclared probe), and every kretprobe
			r.want(t, "init", "7,7,7", "sums", "3,3,3", "n_pre", "1,1,0", "entries", "3,3,3")
			if !strings.Contains(r.stderr, "init: -2 1 0 0 -22\n") {
				t.Errorf("init's report missing: %q", r.stderr)
			}
			// kprewrite_exit ran at exit, after main's last call missed 5 of 9 frames
			if !strings.Contains(r.stderr, "exit: rp_k.nmissed=5 n_pre_k=1\n") {
				t.Errorf("exit's report missing: %q", r.stderr)
			}
		})
	}
	b := buildRewritten(t, "testdata/userprobed.c", []string{"-DWITH_INIT", "-DINIT_FAIL"}, userSpecs())
	r := b.runUser(t, "init")
	r.want(t, "init", "7,7,7", "n_pre", "0,0,0", "entries", "0,0,0")
	if !strings.Contains(r.stderr, "kprewrite: kprewrite_init() returned -12: every probe of the C handlers is unregistered") {
		t.Errorf("init failure not reported: %q", r.stderr)
	}
}

// TestUserProbeCost measures a C pre handler's cost per hit on each path (logged; the
// bounds only catch gross regressions on a loaded 2-core machine).
func TestUserProbeCost(t *testing.T) {
	b := buildRewritten(t, "testdata/userprobed.c", nil, userSpecs())
	r := b.runUser(t, "bench", "KPREWRITE_TRACE=")
	t.Logf("ns per call with a C pre handler (on) and disabled (off): %s", strings.TrimSpace(r.out))
	for _, k := range []string{"k_on", "b_on", "o_on", "o_off"} {
		if r.vals[k] == "" {
			t.Fatalf("no %s in %q", k, r.out)
		}
	}
	var on, off float64
	fmt.Sscan(r.vals["o_on"], &on)
	fmt.Sscan(r.vals["o_off"], &off)
	if on > 2000 || off > 500 {
		t.Errorf("o path: %.1f ns with a handler, %.1f disabled", on, off)
	}
}
