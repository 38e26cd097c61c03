package cli

import (
	"fmt"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kprewrite/kprewrite/internal/cleanup"
	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// followTrace prints the records of the trace file at path as they arrive: a poll every
// 50 ms, until SIGINT or SIGTERM, or until a recording's ring is finished.
func followTrace(path string, bins []string, stdout, stderr io.Writer) error {
	if _, err := os.Stat(path); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	cleanup.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	f := tracefile.NewFollower(path, bins)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := f.Poll(stdout, stderr); err != nil {
			return err
		}
		if f.Done {
			return f.Poll(stdout, stderr)
		}
		if f.More { // a poll's budget of records printed: more are there now
			continue
		}
		select {
		case <-sigs:
			return f.Poll(stdout, stderr)
		case <-tick.C:
		}
	}
}

func runTrace(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("trace", "trace [-b BINARY]... [--no-header] [--snapshot] [--event PATTERN] [--goid] [--format text|json|chrome] [-o OUT] [--follow] [FILE]", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	noHeader := fs.Bool("no-header", false, "print only the event lines (text)")
	format := fs.String("format", "text", "text: the kernel tracer's lines; json: one JSON object per record; chrome: the Trace Event Format (Perfetto, chrome://tracing, speedscope)")
	out := fs.String("o", "", "write to OUT (atomically) instead of standard output")
	snapshot := fs.Bool("snapshot", false, "print the trace as it was at its latest snapshot (a snapshot trigger or an onmax()/onchange() snapshot() action): the records written up to it, as the kernel's snapshot file")
	event := fs.String("event", "", "print only the records of the events matching `PATTERN` (EVENT, GROUP/EVENT, GROUP/*; text format)")
	goid := fs.Bool("goid", false, "end the text line of a record that carries a goroutine id (an event at a Go function) with goid=N")
	follow := fs.Bool("follow", false, "print records as the programs write them, like reading trace_pipe, until interrupted (or, for a file kprewrite record writes, until the recording ends)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if pos, err = traceArg("trace", pos); err != nil {
		return err
	}
	if *follow {
		if *snapshot {
			return usageErr("--follow and --snapshot do not go together")
		}
		if *format != "text" || *out != "" {
			return usageErr("--follow prints text lines to standard output (no --format, no -o)")
		}
		return followTrace(pos[0], bins, stdout, stderr)
	}
	if err := outfile.Check(*out, tracefile.Inputs(pos[0], bins)...); err != nil {
		return err
	}
	if *event != "" && *format != "text" {
		return usageErr("--event selects text lines (--format text)")
	}
	if *goid && *format != "text" {
		return usageErr("--goid adds to text lines (--format text; json has goid, chrome a track per goroutine)")
	}
	var write func(io.Writer, *export.Input) error
	switch *format {
	case "text":
		var match func(group, name string) bool
		if *event != "" {
			match = func(group, name string) bool { return eventdef.MatchesName(*event, group, name) }
		}
		write = func(w io.Writer, in *export.Input) error {
			return tracefile.WriteTraceEvents(w, stderr, in.Stream, in.Descs, !*noHeader, match, *goid)
		}
	case "json":
		write = export.WriteJSONLines
	case "chrome":
		write = export.WriteChrome
	default:
		return usageErr("unknown --format %q (text, json or chrome)", *format)
	}
	in, done, err := openExport("kprewrite trace", pos[0], bins, stderr)
	if err != nil {
		return err
	}
	defer done()
	if *snapshot && !in.Stream.Snapshot() {
		return fmt.Errorf("%s: no snapshot was taken (a snapshot trigger, or an onmax()/onchange() snapshot() action, takes one)", pos[0])
	}
	return writeTo(*out, stdout, func(w io.Writer) error { return write(w, in) })
}
