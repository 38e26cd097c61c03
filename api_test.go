package kprewrite_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/kprewrite/kprewrite"
)

// TestExternalModule runs the tests of testdata/apiuser, a module of its own that
// requires this one (through a replace directive) and uses only the public API, as
// another project's test suite would.
func TestExternalModule(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to compile the module's test program")
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "test", "-count=1", "./...")
	cmd.Dir = "testdata/apiuser"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok  \texample.com/apiuser") {
		t.Fatalf("go test in testdata/apiuser: %v\n%s", err, out)
	}
}

// TestRewriteErrors: options that contradict each other, an output that is the input,
// and a definition that does not resolve are errors, and nothing is written.
func TestRewriteErrors(t *testing.T) {
	dir := t.TempDir()
	prog := build(dir)
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		in   string
		opt  kprewrite.RewriteOptions
		opts bool // an ErrOptions
		want string
	}{
		{"exits-only alone", prog, kprewrite.RewriteOptions{ExitsOnly: true}, true, "--exits-only needs --count-only"},
		{"single-step", prog, kprewrite.RewriteOptions{SingleStep: "dr7"}, true, "want tf or int3"},
		{"input as output", out, kprewrite.RewriteOptions{}, true, "is the input"},
		{"unknown symbol", prog, kprewrite.RewriteOptions{Definitions: []string{"p:x/y no_such_function"}}, false, `Invalid probed address or symbol (no symbol no_such_function in`},
		{"bad definition", prog, kprewrite.RewriteOptions{Definitions: []string{"p:x/y add a=%zz"}}, false, "-e #1"},
	} {
		if c.in == out {
			os.WriteFile(out, []byte("x"), 0o755)
		}
		_, err := kprewrite.Rewrite(c.in, out, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, kprewrite.ErrOptions) != c.opts {
			t.Errorf("%s: error %v, want one saying %q (ErrOptions %v)", c.name, err, c.want, c.opts)
		}
		if c.in != out {
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("%s: output written", c.name)
			}
		}
		os.Remove(out)
	}
}

// TestOutputMode: the output's mode is what a linker gives: read and write for all,
// execute where the input has it, masked by the umask (issue 13).
func TestOutputMode(t *testing.T) {
	dir := t.TempDir()
	prog := build(dir)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, c := range []struct {
		in, umask, want os.FileMode
	}{{0o755, 0o022, 0o755}, {0o644, 0o022, 0o644}, {0o700, 0o022, 0o744}, {0o755, 0o077, 0o700}, {0o555, 0o002, 0o775}} {
		if err := os.Chmod(prog, c.in); err != nil {
			t.Fatal(err)
		}
		syscall.Umask(int(c.umask))
		out := filepath.Join(dir, "out")
		os.Remove(out)
		if _, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(out); err != nil || st.Mode().Perm() != c.want {
			t.Errorf("input %o, umask %03o: output %v, want %o (%v)", c.in, c.umask, st.Mode().Perm(), c.want, err)
		}
	}
}

// TestReadTraceEveryKind: ReadTrace returns every record `kprewrite trace` prints, in
// the same order: events' hits, C handlers' trace_printk records (the function that
// called it, its text, the probe's site) and --verify-regions violations (the byte
// reached, the probe's site, the symbol). Before, only the events' hits came back.
func TestReadTraceEveryKind(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	prog := build(dir)
	h := filepath.Join(dir, "h.c")
	os.WriteFile(h, []byte(`#include <kprewrite.h>
static int pre(struct kprobe *p, struct pt_regs *r)
{
	(void)p;
	trace_printk("add(%lu, %lu)\n", r->di, r->si);
	return 0;
}
DEFINE_KPROBE(kp, "add", .pre_handler = pre);
`), 0o644)
	out := filepath.Join(dir, "example.kp")
	if _, err := kprewrite.Rewrite(prog, out, kprewrite.RewriteOptions{HandlerFiles: []string{h},
		Definitions: []string{"p:ex/add add a=%di:s32"}}); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(out, "2").Run(); err != nil {
		t.Fatal(err)
	}
	tr, err := kprewrite.ReadTrace(out + ".trace")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range tr.Records {
		switch r.Kind {
		case kprewrite.KindEvent:
			a, _ := r.Field("a")
			kinds = append(kinds, fmt.Sprintf("event %s a=%v", r.Event, a))
		case kprewrite.KindPrintk:
			kinds = append(kinds, fmt.Sprintf("printk %s %q", r.Event, r.Text))
			if r.Addr == 0 || r.RetAddr == 0 || r.Image != "example.kp" || !strings.HasSuffix(r.Line, ": pre: "+r.Text) {
				t.Errorf("printk record %+v", r)
			}
		default:
			kinds = append(kinds, fmt.Sprintf("kind %d", r.Kind))
		}
	}
	want := []string{`printk pre "add(0, 1)"`, "event add a=0", `printk pre "add(1, 2)"`, "event add a=1"}
	if strings.Join(kinds, "\n") != strings.Join(want, "\n") || tr.Undescribed != 0 {
		t.Errorf("records:\n%s\nwant:\n%s\n(undescribed %d)", strings.Join(kinds, "\n"), strings.Join(want, "\n"), tr.Undescribed)
	}
	if tr.Records[0].Addr != tr.Records[1].Addr {
		t.Errorf("the printk's site %#x is not the event's %#x", tr.Records[0].Addr, tr.Records[1].Addr)
	}

	// a synthetic event an onmatch() action generated: its fields, signed at its type
	sout := filepath.Join(dir, "synth.kp")
	if _, err := kprewrite.Rewrite(prog, sout, kprewrite.RewriteOptions{
		Definitions: []string{"s:ab s32 d; u64 b", "p:ex/add add a=%di:s32 b=%si:s32", "r:ex/ret add"},
		Triggers: []string{"ex/add:hist:keys=common_pid:d=a-b:bb=b",
			"ex/ret:hist:keys=common_pid:onmatch(ex.add).trace(ab,$d,$bb)"}}); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(sout, "2").Run(); err != nil {
		t.Fatal(err)
	}
	if tr, err = kprewrite.ReadTrace(sout + ".trace"); err != nil {
		t.Fatal(err)
	}
	var synth []string
	for _, r := range tr.Records {
		if r.Kind == kprewrite.KindSynthetic {
			d, _ := r.Field("d")
			b, _ := r.Field("b")
			synth = append(synth, fmt.Sprintf("%s/%s d=%#v b=%#v", r.Group, r.Event, d, b))
			if !strings.HasSuffix(r.Line, fmt.Sprintf(": ab: d=%v b=%v", d, b)) || r.Addr == 0 {
				t.Errorf("synthetic record %+v", r)
			}
		}
	}
	if want := "synthetic/ab d=-1 b=0x1\nsynthetic/ab d=-1 b=0x2"; strings.Join(synth, "\n") != want || tr.Undescribed != 0 {
		t.Errorf("synthetic records:\n%s\nwant\n%s (undescribed %d)", strings.Join(synth, "\n"), want, tr.Undescribed)
	}

	// a violation: optforms jumps into the 7-byte region a jmp would replace at o_victim
	src, err := os.ReadFile("tests/testdata/optforms.c")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "optforms.c"), src, 0o644)
	opt := filepath.Join(dir, "optforms")
	if b, err := exec.Command("gcc", "-O2", "-no-pie", "-o", opt, filepath.Join(dir, "optforms.c")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	vout := opt + ".kp"
	if _, err := kprewrite.Rewrite(opt, vout, kprewrite.RewriteOptions{VerifyRegions: true, Definitions: []string{"p:opt/victim o_victim"}}); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(vout, "jumpin", "3").Output(); err != nil || string(b) != "jumpin=15\n" {
		t.Fatalf("run: %q %v", b, err)
	}
	tr, err = kprewrite.ReadTrace(vout + ".trace")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 1 || tr.Records[0].Kind != kprewrite.KindViolation {
		t.Fatalf("records %+v", tr.Records)
	}
	v := tr.Records[0]
	site, _ := v.Field("site")
	sym, _ := v.Field("sym")
	if v.Event != "kprewrite_violation" || sym != "o_victim+0x3" || site != v.Addr-3 ||
		v.Line != fmt.Sprintf("%16s-%-7d [%03d] %5d.%06d: kprewrite_violation: (%#x) site=%#x sym=o_victim+0x3", v.Comm, v.TID, v.CPU,
			v.Time.Microseconds()/1000000, v.Time.Microseconds()%1000000, v.Addr, site) {
		t.Errorf("violation %+v", v)
	}
}
