package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/infile"
)

// Exit codes shared by every subcommand.
const (
	ExitOK    = 0
	ExitError = 1 // bad input or a failed operation; the message names file, place, reason
	ExitUsage = 2 // the command line itself is wrong
)

// errUsage marks errors that are about the command line.
var errUsage = errors.New("usage")

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"check", "report, per probe site, whether it can be jump-optimized, boosted, single-stepped or must be refused", runCheck},
		{"rewrite", "write a new binary with probes installed", runRewrite},
		{"list", "list the probes of a rewritten binary, like the kernel's kprobes/list", runList},
		{"record", "run a program (rewritten first with the probes given, into a cache), copying its records from a ring in memory into a trace file as it runs", runRecord},
		{"cache", "remove (clean) or locate (dir) the programs record rewrote", runCache},
		{"trace", "print a trace file in the kernel tracer's format", runTrace},
		{"profile", "print hits and misses per event of a trace file, like kprobe_profile", runProfile},
		{"report", "print calls, total and self time per function of a trace file, like uftrace report", runReport},
		{"flamegraph", "draw a trace file's calls as an SVG flame graph (or folded stacks)", runFlamegraph},
		{"hist", "print the histograms of a trace file's hist triggers, as the kernel's hist files (or pause, continue, clear them)", runHist},
		{"format", "print each event's format file, as the kernel's tracefs shows it", runFormat},
		{"traceon", "turn tracing on in a trace file, for the programs writing into it (tracefs's tracing_on)", runTraceOnOff(true)},
		{"traceoff", "turn tracing off in a trace file: hits are counted, nothing is recorded", runTraceOnOff(false)},
		{"enable", "switch events of a trace file (or a PID's) on, for the programs writing into it (an event's enable); all: every probe armed again (kprobes/enabled)", runEnableDisable(true)},
		{"disable", "switch events of a trace file off: their hits are counted, not recorded; all: every probe disarmed, C handlers included (kprobes/enabled 0)", runEnableDisable(false)},
		{"probe", "add or remove events in running programs (kprobe_events): at the sites a rewrite prepared (--prepare), or elsewhere at free live points (rewrite --live-points); or list those added", runProbe},
		{"optimize", "turn jump optimization of running programs' live-capable probes off (int3s into their detours) or on (debug.kprobes-optimization)", runOptimize},
		{"filter", "change (or print) events' filters in a trace file, for the programs writing into it now and later (an event's filter file)", runFilter},
		{"trigger", "add, remove (or print) events' triggers in a trace file, for the programs writing into it now and later (an event's trigger file)", runTrigger},
		{"control", "write a KPREWRITE_CONTROL file: the filters, triggers and switches a rewritten program's next runs start with", runControl},
		{"rules", "list the safety rules and their ids", runRules},
		{"include", "print kprewrite.h, the header of C handler files (-o DIR writes it)", runInclude},
		{"version", "print the version", runVersion},
	}
}

// Version is the tool version reported by `kprewrite version`.
const Version = "0.1.0-dev"

// Main runs kprewrite with args (without the program name) and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return ExitUsage
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" {
		if len(args) > 1 {
			return Main([]string{args[1], "-h"}, stdout, stderr)
		}
		usage(stdout)
		return ExitOK
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		var st exitStatus
		switch {
		case err == nil:
			return ExitOK
		case errors.As(err, &st):
			return int(st)
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		case errors.Is(err, errUsage), errors.Is(err, kprewrite.ErrOptions):
			msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "usage: "), kprewrite.ErrOptions.Error()+": ")
			fmt.Fprintf(stderr, "kprewrite %s: %s\n", name, msg)
			return ExitUsage
		default:
			fmt.Fprintf(stderr, "kprewrite %s: %v\n", name, err)
			return ExitError
		}
	}
	fmt.Fprintf(stderr, "kprewrite: unknown command %q\n\n", name)
	usage(stderr)
	return ExitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kprewrite COMMAND [options] BINARY")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'kprewrite COMMAND -h' for the options of one command.")
}

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// regularInputs refuses an input file that is not a regular file (a FIFO would block
// its reader forever, a device might never end) before anything reads it: what is
// refused is named with its kind; "" (an option not given) is skipped.
func regularInputs(what string, paths ...string) error {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if err := infile.Check(p); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// multiFlag collects a repeatable string flag such as -e.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// parseFlags parses flags that may appear before or after positional arguments, as
// people type them ("kprewrite check BIN --json").
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagErr(fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// helpFlagSet makes a FlagSet whose -h prints the command's usage to w (flagErr).
func helpFlagSet(name, synopsis string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {} // the flag package calls it on every error too: flagErr decides
	helps.Store(fs, help{synopsis, w})
	return fs
}

// help is a helpFlagSet's command: its usage line and where -h prints.
type help struct {
	synopsis string
	w        io.Writer
}

// helps maps the FlagSets helpFlagSet made to their help.
var helps sync.Map

// flagErr is the error of fs.Parse: for -h, the command's usage line and options
// printed (flag.ErrHelp); else the error and the usage line, two lines, not every
// option (an unknown flag printed 47 lines).
func flagErr(fs *flag.FlagSet, err error) error {
	v, ok := helps.Load(fs)
	if !ok {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	h := v.(help)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(h.w, "usage: kprewrite %s\n\noptions:\n", h.synopsis)
		printOptions(fs, h.w)
		return err
	}
	return usageErr("%v\nusage: kprewrite %s", err, h.synopsis)
}

func runVersion(args []string, stdout, _ io.Writer) error {
	fmt.Fprintf(stdout, "kprewrite %s\n", Version)
	return nil
}

// printOptions lists fs's flags as flag.PrintDefaults does, in the usage lines' syntax:
// --name for a long one, -x for a letter (the flag package takes both forms).
func printOptions(fs *flag.FlagSet, w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if arg != "" {
			line += " " + arg
		}
		if len(line) <= 4 { // a letter without an argument: the text on the same line
			line += "\t"
		} else {
			line += "\n    \t"
		}
		line += strings.ReplaceAll(usage, "\n", "\n    \t")
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "[]" {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
				line += fmt.Sprintf(" (default %q)", d)
			} else {
				line += fmt.Sprintf(" (default %v)", d)
			}
		}
		fmt.Fprintln(w, line)
	})
}
