package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kprewrite/kprewrite/internal/tracectl"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// runProbe is `kprewrite probe TARGET DEF...`: kprobe_events for running programs.
// TARGET is a trace file or the PID of a program writing into one; each DEF adds an
// event (p:[GRP/]EV SITE [FETCHARGS], r:...) at a site the rewrite prepared
// (--prepare) or, p: only, at any other site the rewriter's analysis accepts for an
// int3 (a free live point of a live-capable image), or removes one added so
// (-:[GRP/]EV). Without a DEF it lists the events
// added. The programs arm and disarm the sites within milliseconds.
func runProbe(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("probe", "probe [--startup] [-b BINARY]... TARGET [DEF...]", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "`BINARY`: a rewritten binary (or library copy) writing into the trace file, which the analysis of an event at a site it did not prepare reads (otherwise found through the PID, or beside the trace file) (repeatable)")
	startup := fs.Bool("startup", false, "add the events of the environment's "+bootEnv+" (the kernel's kprobe_event= boot parameter: ';' between definitions, ',' for spaces), each that fails said on stderr and skipped; a rewritten program's runtime runs this at start-up, before main")
	if err := fs.Parse(args); err != nil { // (a DEF may start with '-': flags only before TARGET)
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	pos := fs.Args()
	if len(pos) < 1 {
		return usageErr("want a TARGET (a trace file or a PID) and definitions (see kprewrite probe -h)")
	}
	f, path, err := openTarget(pos[0])
	if err != nil {
		return err
	}
	defer f.Close()
	for _, b := range bins {
		f.AddBinary(b)
	}
	if pid, err := strconv.Atoi(pos[0]); err == nil && path != pos[0] {
		f.AddProcessBinaries(pid) // (an event at an unprepared site: the analysis reads the binary)
	}
	if *startup {
		f.AddProcessBinaries(os.Getppid()) // (the program that runs it waits for it)
		if len(pos) > 1 {
			return usageErr("--startup takes its definitions from %s, not the command line", bootEnv)
		}
		return addBootEvents(f, path, os.Getenv(bootEnv), stderr)
	}
	if len(pos) == 1 {
		return printLive(f, stdout)
	}
	added, err := applyDefs(f, path, pos[1:], stdout)
	waitApplied(f, path, stderr) // (the definitions before a failing one are applied)
	sayUnarmed(f, path, added, stderr)
	return err
}

// sayUnarmed says on stderr which of the events just added (ids) a running program
// has not armed although it applied them: a free live point waiting for a thread to
// leave its old place, or one the program refused.
func sayUnarmed(f *tracectl.File, path string, ids map[uint32]bool, stderr io.Writer) {
	evs, err := f.Live()
	if err != nil {
		return
	}
	for _, e := range evs {
		switch {
		case !ids[e.ID] || e.Gone:
		case e.State == kprt.LSPending:
			fmt.Fprintf(stderr, "kprewrite: %s: %s/%s: pending: its site waits for a thread to leave the place its free live point had (armed when it does; list shows [PENDING])\n", path, e.Group, e.Name)
		case e.State == kprt.LSRefused:
			fmt.Fprintf(stderr, "kprewrite: %s: %s/%s: the program refused its point (see its stderr): not armed (list shows [UNPLACED])\n", path, e.Group, e.Name)
		}
	}
}

// applyDefs adds or removes the events of defs in order, up to the first that fails:
// the ids of the events added.
func applyDefs(f *tracectl.File, path string, defs []string, stdout io.Writer) (map[uint32]bool, error) {
	added := map[uint32]bool{}
	for _, def := range defs {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(def), "-:"); ok {
			gone, err := f.RemoveLive(strings.TrimSpace(rest))
			if err != nil {
				return added, err
			}
			for _, e := range gone {
				fmt.Fprintf(stdout, "%s: %s/%s (%s): removed\n", path, e.Group, e.Name, e.Image)
			}
			continue
		}
		e, err := f.AddLive(def)
		if err != nil {
			return added, fmt.Errorf("%s: %w", def, err)
		}
		added[e.ID] = true
		fmt.Fprintf(stdout, "%s: %s/%s (%s): added\n", path, e.Group, e.Name, e.Image)
	}
	return added, nil
}

// bootEnv is the environment variable whose events a rewritten program adds at
// start-up (runtime/src/rt_liveboot.c runs probe --startup)
const bootEnv = "KPREWRITE_EVENTS"

// bootDefs splits a kprobe_event= value into definitions as the kernel's
// setup_boot_kprobe_events does: every ',' a space, ';' between definitions
func bootDefs(v string) []string {
	var defs []string
	for _, d := range strings.Split(strings.ReplaceAll(v, ",", " "), ";") {
		if d = strings.TrimSpace(d); d != "" {
			defs = append(defs, d)
		}
	}
	return defs
}

// addBootEvents adds the events of a kprobe_event= value to the trace file at path, as
// the kernel adds its boot events: one that fails is said and skipped, and one whose
// name the file has already (a process of the same run added it) is left as it is. It
// does not wait for the programs to apply them: the program that runs it is waiting
// for it, and applies them once it returns.
func addBootEvents(f *tracectl.File, path, v string, stderr io.Writer) error {
	have := map[string]bool{}
	if evs, err := f.Live(); err == nil {
		for _, e := range evs {
			have[e.Group+"/"+e.Name] = !e.Gone
		}
	}
	for _, def := range bootDefs(v) {
		if g, n := tracectl.LiveDefName(def); have[g+"/"+n] {
			continue
		}
		if _, err := f.AddLive(def); err != nil {
			fmt.Fprintf(stderr, "kprewrite: %s: %s: %v: not added\n", bootEnv, def, err)
		}
	}
	return nil
}

// appliedWait bounds how long a change to running programs waits for them to apply it
// (their live-probe thread does it within milliseconds; a stopped program never does)
const appliedWait = 2 * time.Second

// waitApplied returns once the running programs have applied the change just written
// (armed or disarmed their sites), or says on stderr that they have not yet.
func waitApplied(f *tracectl.File, path string, stderr io.Writer) {
	if !f.WaitApplied(appliedWait) {
		fmt.Fprintf(stderr, "kprewrite: %s: the running programs have not applied the change after %v (stopped?): they apply it when their live-probe thread runs\n", path, appliedWait)
	}
}

// printLive lists the events added at run time: GROUP/EVENT IMAGE HITS DEF, [GONE]
// for one removed.
func printLive(f *tracectl.File, stdout io.Writer) error {
	evs, err := f.Live()
	if err != nil {
		return err
	}
	for _, e := range evs {
		gone := ""
		if e.Gone {
			gone = " [GONE]"
		}
		fmt.Fprintf(stdout, "%s/%s  %s  %d hits  %s%s\n", e.Group, e.Name, e.Image, e.Hits, e.Def, gone)
	}
	return nil
}

// runOptimize is `kprewrite optimize TARGET [on|off]`: jump optimization of the running
// programs' live-capable probes switched (the kernel's debug.kprobes-optimization), or
// printed.
func runOptimize(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("optimize", "optimize TARGET [on|off]", stdout)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 || (len(pos) == 2 && pos[1] != "on" && pos[1] != "off") {
		return usageErr("want a TARGET (a trace file or a PID) and on or off (see kprewrite optimize -h)")
	}
	f, path, err := openTarget(pos[0])
	if err != nil {
		return err
	}
	defer f.Close()
	if len(pos) == 1 {
		fmt.Fprintf(stdout, "%s: optimization %s\n", path, onOff(f.Optimized()))
		return nil
	}
	was := f.SetOptimized(pos[1] == "on")
	waitApplied(f, path, stderr)
	fmt.Fprintf(stdout, "%s: optimization %s (was %s)\n", path, pos[1], onOff(was))
	return nil
}

// openTarget opens the trace file TARGET names (traceTarget) for its switches; it
// returns the file and its path.
func openTarget(target string) (*tracectl.File, string, error) {
	path, err := traceTarget(target)
	if err != nil {
		return nil, "", err
	}
	f, err := tracectl.Open(path)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

// traceTarget is the trace file TARGET names: a path, or the PID of a program writing
// into a trace file (a number that is not a file's name).
func traceTarget(target string) (string, error) {
	pid, err := strconv.Atoi(target)
	if err != nil || pid <= 0 {
		return target, nil
	}
	if _, err := os.Stat(target); err == nil {
		return target, nil
	}
	return tracectl.TracePathOf(pid)
}
