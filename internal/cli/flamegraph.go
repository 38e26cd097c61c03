package cli

import (
	"io"
	"path/filepath"

	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runFlamegraph(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("flamegraph", "flamegraph [-b BINARY]... [--format svg|folded] [--threads] [--title T] [-o OUT] [FILE]", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	format := fs.String("format", "svg", "svg: a flame graph a browser shows; folded: flamegraph.pl's folded stacks (self nanoseconds)")
	threads := fs.Bool("threads", false, "a tower per thread (its comm-tid at the bottom)")
	title := fs.String("title", "", "the SVG's title (default: Flame graph of FILE)")
	out := fs.String("o", "", "write to OUT (atomically) instead of standard output")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if pos, err = traceArg("flamegraph", pos); err != nil {
		return err
	}
	if *format != "svg" && *format != "folded" {
		return usageErr("unknown --format %q (svg or folded)", *format)
	}
	if err := outfile.Check(*out, tracefile.Inputs(pos[0], bins)...); err != nil {
		return err
	}
	if *title == "" {
		*title = "Flame graph of " + filepath.Base(pos[0])
	}
	in, done, err := openExport("kprewrite flamegraph", pos[0], bins, stderr)
	if err != nil {
		return err
	}
	defer done()
	st, err := export.BuildStacks(in, *threads)
	if err != nil {
		return err
	}
	return writeTo(*out, stdout, func(w io.Writer) error {
		if *format == "folded" {
			return export.WriteFolded(w, st)
		}
		return export.WriteFlameSVG(w, st, *title)
	})
}
