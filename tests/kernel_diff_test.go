package tests

// Differential test against the kernel's uprobe tracer: the same definitions are set
// as uprobes on the original program and compiled into the rewritten one; both run the
// same input, and every line of kprewrite's trace must name the same event with the
// same head and name=value list as the kernel's line. Needs root and tracefs at
// /sys/kernel/tracing; events go in a group and a tracing instance of our own.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

const (
	tracefs    = "/sys/kernel/tracing"
	diffGroup  = "kpwe2e"
	diffInstnc = tracefs + "/instances/kpwe2e"
)

// diffDefs use only what the kernel's uprobe tracer accepts ($argN is refused there).
var diffDefs = []string{
	"p:kpwe2e/add add a=%di:s32 b=%si:s32 x=%di:x16 u=%si:u64 d=%di ret=$stack0",
	"p:kpwe2e/greet greet s=+0(%di):string us=+0(%di):ustring c=+1(%di):u8 arr=+0(%di):u8[3] ch=+0(%di):char bf=+0(%di):b4@2/8 cm=$comm",
	"p:kpwe2e/fent fact n=%di:s64 sp8=+8($stack):x8 imm=\\1234",
	"r:kpwe2e/fact fact ret=$retval:s64 rx=$retval ax=%ax:u16",
	// at a uprobe the kernel's %ip is the probe address (not the address after the
	// int3): the runtime must give fetch programs that ip
	"p:kpwe2e/ip greet ip=%ip",
	"r:kpwe2e/rip greet ip=%ip",
}

// kernelTypes is the rewrite's flag for the kernel's default types of untyped
// fetchargs (x64, $retval too), which the uprobe tracer prints: a program built with
// DWARF would otherwise print its parameters' types.
const kernelTypes = "--kernel-types"

func needUprobeTracer(t *testing.T) {
	t.Helper()
	testprog.Need(t, "setarch")
	if os.Geteuid() != 0 {
		t.Skip("the kernel's uprobe tracer needs root")
	}
	if _, err := os.Stat(tracefs + "/uprobe_events"); err != nil {
		t.Skip("tracefs with uprobe_events is not mounted at " + tracefs)
	}
}

func appendUprobeEvent(line string) error {
	f, err := os.OpenFile(tracefs+"/uprobe_events", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(line + "\n"))
	return errors.Join(werr, f.Close())
}

func removeDiffEvents() {
	data, _ := os.ReadFile(tracefs + "/uprobe_events")
	for _, line := range strings.Split(string(data), "\n") {
		w := strings.Fields(line)
		if len(w) == 0 {
			continue
		}
		_, ev, _ := strings.Cut(w[0], ":")
		if strings.HasPrefix(ev, diffGroup+"/") {
			appendUprobeEvent("-:" + ev)
		}
	}
}

func TestKernelDifferential(t *testing.T) {
	needUprobeTracer(t)
	src := probedSource(t)
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"nopie", []string{"-O2", "-no-pie"}},
		{"pie", []string{"-O2"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, src, "c", build.flags...)
			dir, orig, kpd := sameNamePair(t, prog, "probed")
			for _, mode := range []string{"boost", "no-boost", "optimize", "exits", "live", "live-unprepared"} {
				t.Run(mode, func(t *testing.T) {
					flags := []string{"--no-optimize"}
					defs := diffDefs
					switch mode {
					case "no-boost":
						flags = append(flags, "--no-boost")
					case "optimize":
						flags = nil // jump-optimized where the analysis allows it
					case "exits":
						flags = []string{"--exits"} // return events recorded at the rets
					case "live": // the same definitions added to the trace file by kprewrite probe
						flags, defs = []string{"--prepare", "add", "--prepare", "greet", "--prepare", "fact"}, nil
					case "live-unprepared": // likewise, add's event at an int3 placed live
						flags, defs = []string{"--prepare", "greet", "--prepare", "fact"}, nil
					}
					rewriteWith(t, orig, kpd, defs, append(flags, kernelTypes)...)
					if mode == "exits" {
						mustExit(t, kpd, "fact")
					}
					kernel := kernelTrace(t, orig, []string{"diff"})
					tr := filepath.Join(dir, mode+".trace")
					want := testprog.Run(t, noASLR(orig, "diff"))
					c := noASLR(kpd, "diff")
					c.Extra = []string{"KPREWRITE_TRACE=" + tr}
					if strings.HasPrefix(mode, "live") {
						// a first run makes the trace file, the events go into it, and the
						// next run, appending, starts with them (and records only them)
						testprog.Run(t, c)
						if code, o, e := kp(append([]string{"probe", "-b", kpd, tr}, diffDefs...)...); code != 0 {
							t.Fatalf("kprewrite probe: exit %d\n%s%s", code, o, e)
						}
						c.Extra = append(c.Extra, "KPREWRITE_APPEND=1")
					}
					if got := testprog.Run(t, c); want.Diff(got) != "" {
						t.Fatalf("rewritten program behaves differently: %s", want.Diff(got))
					}
					ours := readTrace(t, tr, kpd)
					if len(kernel) != 25 || len(ours) != len(kernel) {
						t.Fatalf("kernel trace has %d lines, kprewrite's %d (want 25 each)\nkernel:\n%v\nkprewrite:\n%v", len(kernel), len(ours), kernel, ours)
					}
					for i := range kernel {
						k, o := kernel[i], ours[i]
						if k.Event != o.Event || k.Args != o.Args || k.Comm != o.Comm {
							t.Errorf("line %d:\n  kernel:    %s %s%s\n  kprewrite: %s %s%s", i+1, k.Event, k.Head, k.Args, o.Event, o.Head, o.Args)
						}
						// both ran without ASLR: the addresses agree too
						if k.Head != o.Head {
							t.Errorf("line %d: head %s, kernel %s", i+1, o.Head, k.Head)
						}
					}
				})
			}
		})
	}
}

// TestKernelDifferentialChainedReturns: two return probes on one recursive function
// chain through the return trampoline (the newer instance saves the trampoline as its
// return address); every record shows the real return address, in the kernel's order,
// as the uprobe tracer's chained return instances do. With --exits both are recorded at
// the function's rets, in the same order.
func TestKernelDifferentialChainedReturns(t *testing.T) {
	needUprobeTracer(t)
	defs := []string{"p:kpwe2e/fent fact n=%di:s64", "r:kpwe2e/fact fact ret=$retval:s64", "r:kpwe2e/fact2 fact rx=$retval"}
	prog := testprog.Build(t, probedSource(t), "c", "-O2")
	dir, orig, kpd := sameNamePair(t, prog, "probed")
	kernel := kernelTraceDefs(t, orig, defs, []string{"diff"})
	for _, mode := range []string{"int3", "optimize", "exits"} {
		t.Run(mode, func(t *testing.T) {
			var flags []string
			switch mode {
			case "int3":
				flags = []string{"--no-optimize"}
			case "exits":
				flags = []string{"--exits"}
			}
			rewriteWith(t, orig, kpd, defs, append(flags, kernelTypes)...)
			if mode == "exits" {
				mustExit(t, kpd, "fact")
			}
			tr := filepath.Join(dir, mode+".trace")
			c := noASLR(kpd, "diff")
			c.Extra = []string{"KPREWRITE_TRACE=" + tr}
			if got, want := testprog.Run(t, c), testprog.Run(t, noASLR(orig, "diff")); want.Diff(got) != "" {
				t.Fatalf("rewritten program behaves differently: %s", want.Diff(got))
			}
			ours := readTrace(t, tr, kpd)
			if len(kernel) < 6 || len(ours) != len(kernel) {
				t.Fatalf("kernel trace has %d lines, kprewrite's %d\nkernel:\n%v\nkprewrite:\n%v", len(kernel), len(ours), kernel, ours)
			}
			for i := range kernel {
				k, o := kernel[i], ours[i]
				if k.Event != o.Event || k.Head != o.Head || k.Args != o.Args {
					t.Errorf("line %d:\n  kernel:    %s %s%s\n  kprewrite: %s %s%s", i+1, k.Event, k.Head, k.Args, o.Event, o.Head, o.Args)
				}
			}
		})
	}
}

// mustExit fails unless the return probes of fn in the rewritten binary are recorded
// at its exits ([EXIT] in list), not at a hooked return address.
func mustExit(t *testing.T, bin, fn string) {
	t.Helper()
	code, list, stderr := kp("list", bin)
	if code != 0 {
		t.Fatalf("kprewrite list: %s", stderr)
	}
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[1] == "r" && strings.HasPrefix(f[2], fn+"+") && !strings.Contains(l, "[EXIT]") {
			t.Fatalf("%s's return probe is not at its exits:\n%s", fn, list)
		}
	}
	if !strings.Contains(list, "r  "+fn+"+") {
		t.Fatalf("no return probe of %s:\n%s", fn, list)
	}
}

// sameNamePair copies prog to DIR/o/NAME and returns DIR, that copy and DIR/r/NAME,
// where the rewrite goes: the same base name, so $comm and the task column agree.
func sameNamePair(t *testing.T, prog, name string) (dir, orig, kpd string) {
	t.Helper()
	dir = t.TempDir()
	orig, kpd = filepath.Join(dir, "o", name), filepath.Join(dir, "r", name)
	os.Mkdir(filepath.Dir(orig), 0o755)
	os.Mkdir(filepath.Dir(kpd), 0o755)
	data, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orig, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, orig, kpd
}

// noASLR runs path without address-space randomization (setarch -R), so that the
// addresses a trace prints are the same from run to run, PIE included.
func noASLR(path string, args ...string) testprog.Cmd {
	return testprog.Cmd{Path: "setarch", Args: append([]string{"x86_64", "-R", path}, args...)}
}

// kernelTrace runs path with args under the kernel's uprobe tracer with diffDefs and
// returns its trace lines.
func kernelTrace(t *testing.T, path string, args []string) []traceLine {
	t.Helper()
	return kernelTraceDefs(t, path, diffDefs, args)
}

// kernelTraceDefs runs path with args (it must exit with status 3) under the kernel's
// uprobe tracer with defs (in group diffGroup) and returns its trace lines.
func kernelTraceDefs(t *testing.T, path string, defs, args []string) []traceLine {
	t.Helper()
	return kernelTraceFiltered(t, path, defs, nil, args)
}

// kernelTraceFiltered is kernelTraceDefs with filters: EVENT -> the expression written
// into the instance's events/GROUP/EVENT/filter.
func kernelTraceFiltered(t *testing.T, path string, defs []string, filters map[string]string, args []string) []traceLine {
	t.Helper()
	return kernelTraceControlled(t, path, defs, kernelControl{Filters: filters}, args)
}

// kernelControl is what a kernel run writes besides the definitions: filters (EVENT ->
// expression), triggers ({EVENT, TRIGGER} written in order into the events' trigger
// files, after the events are enabled) and the events left disabled (enable 0 before
// the triggers: an event with triggers or named by one is then in soft mode).
type kernelControl struct {
	Filters  map[string]string
	Triggers [][2]string
	Disabled []string
}

// kernelTraceControlled is kernelTraceDefs with a kernelControl.
func kernelTraceControlled(t *testing.T, path string, defs []string, ctl kernelControl, args []string) []traceLine {
	t.Helper()
	f, err := elfio.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fns := f.Functions()
	var lines []string
	for _, d := range defs {
		p, err := eventdef.Parse(d)
		if err != nil {
			t.Fatal(err)
		}
		fn, ok := fns.ByName(p.Symbol)
		if !ok {
			t.Fatalf("no function %s", p.Symbol)
		}
		off, err := f.FileOffset(fn.Addr+p.Offset, 1)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, p.UprobeDefinition(path, off))
	}
	return kernelRun(t, lines, ctl, noASLR(path, args...))
}

// kernelRun runs c (it must exit with status 3) under the kernel's uprobe tracer with
// the uprobe_events lines given (in group diffGroup) and ctl, and returns its trace
// lines.
func kernelRun(t *testing.T, lines []string, ctl kernelControl, c testprog.Cmd) []traceLine {
	t.Helper()
	filters := ctl.Filters
	removeDiffEvents()
	t.Cleanup(removeDiffEvents)
	for _, line := range lines {
		if err := appendUprobeEvent(line); err != nil {
			t.Fatalf("uprobe_events <- %q: %v", line, err)
		}
	}
	os.Remove(diffInstnc)
	if err := os.Mkdir(diffInstnc, 0o755); err != nil && !os.IsExist(err) {
		t.Skipf("cannot make a tracing instance: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(diffInstnc+"/events/"+diffGroup+"/enable", []byte("0"), 0)
		os.Remove(diffInstnc)
	})
	for ev, expr := range filters {
		if err := os.WriteFile(diffInstnc+"/events/"+diffGroup+"/"+ev+"/filter", []byte(expr), 0); err != nil {
			t.Fatalf("kernel refused the filter %q of %s: %v", expr, ev, err)
		}
	}
	if err := os.WriteFile(diffInstnc+"/events/"+diffGroup+"/enable", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	for _, ev := range ctl.Disabled {
		if err := os.WriteFile(diffInstnc+"/events/"+diffGroup+"/"+ev+"/enable", []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tr := range ctl.Triggers {
		if err := os.WriteFile(diffInstnc+"/events/"+diffGroup+"/"+tr[0]+"/trigger", []byte(tr[1]), 0); err != nil {
			t.Fatalf("kernel refused the trigger %q of %s: %v", tr[1], tr[0], err)
		}
	}
	res := testprog.Run(t, c)
	// triggers hold their events registered (soft mode), and a registered uprobe puts
	// its int3 into every executable-capable mapping of the file, a reader's too (the
	// rewrite's): off first
	for i := len(ctl.Triggers) - 1; i >= 0; i-- {
		os.WriteFile(diffInstnc+"/events/"+diffGroup+"/"+ctl.Triggers[i][0]+"/trigger", []byte("!"+ctl.Triggers[i][1]), 0)
	}
	os.WriteFile(diffInstnc+"/events/"+diffGroup+"/enable", []byte("0"), 0)
	if res.Exit != 3 {
		t.Fatalf("original under uprobes: %s", res)
	}
	text, err := os.ReadFile(diffInstnc + "/trace")
	if err != nil {
		t.Fatal(err)
	}
	return parseTraceLines(t, string(text))
}

// TestKernelDifferentialFastRead: the fetches of fastread_test.go (strings, derefs,
// nested derefs, bitfields, arrays, string arrays, $stack, return-probe derefs) on good
// and bad pointers (NULL, unmapped, PROT_NONE, a string into an unmapped page, kernel
// and non-canonical addresses), traced by the kernel's uprobe tracer on the original and
// by the rewritten program, with the fault-catching copy and with
// KPREWRITE_SAFE_READ=syscall: every line must be the kernel's.
func TestKernelDifferentialFastRead(t *testing.T) {
	needUprobeTracer(t)
	src := fastreadSource(t)
	defs := make([]string, len(fastreadDefs))
	for i, d := range fastreadDefs {
		defs[i] = strings.Replace(d, ":fr/", ":"+diffGroup+"/", 1)
	}
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"pie", []string{"-O2", "-pthread"}},
		{"static", []string{"-O2", "-pthread", "-static"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			prog := testprog.Build(t, src, "c", build.flags...)
			dir, orig, kpd := sameNamePair(t, prog, "fastread")
			kernel := kernelTraceDefs(t, orig, defs, []string{"diff"})
			if len(kernel) != 10*len(defs) { // 10 calls of peek
				t.Fatalf("kernel trace has %d lines, want %d:\n%s", len(kernel), 10*len(defs), eaLines(kernel))
			}
			for _, rw := range []string{"optimize", "int3"} {
				var flags []string
				if rw == "int3" {
					flags = []string{"--no-optimize"}
				}
				rewriteWith(t, orig, kpd, defs, append(flags, kernelTypes)...)
				for _, read := range []string{"fast", "syscall"} {
					t.Run(rw+"/"+read, func(t *testing.T) {
						tr := filepath.Join(dir, rw+read+".trace")
						c := noASLR(kpd, "diff")
						c.Extra = []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_SAFE_READ=" + read}
						if got := testprog.Run(t, c); got.Exit != 3 || got.Stdout != "bad done\n" {
							t.Fatalf("rewritten program: %s", got)
						}
						ours := readTrace(t, tr, kpd)
						if len(ours) != len(kernel) {
							t.Fatalf("kernel trace has %d lines, kprewrite's %d\nkernel:\n%s\nkprewrite:\n%s", len(kernel), len(ours), eaLines(kernel), eaLines(ours))
						}
						for i := range kernel {
							k, o := kernel[i], ours[i]
							args := k.Args
							if k.Event == "nest" && strings.HasPrefix(o.Args, " nv=0 tag=") {
								// a faulted inner dereference: the kernel leaves its buffer's
								// stale bytes, kprewrite stores 0
								_, tag, _ := strings.Cut(k.Args, " tag=")
								args = " nv=0 tag=" + tag
							}
							if k.Event != o.Event || args != o.Args || k.Comm != o.Comm || k.Head != o.Head {
								t.Errorf("line %d:\n  kernel:    %s %s%s\n  kprewrite: %s %s%s", i+1, k.Event, k.Head, k.Args, o.Event, o.Head, o.Args)
							}
						}
					})
				}
			}
		})
	}
}
