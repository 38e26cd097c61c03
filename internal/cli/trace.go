package cli

import (
	"io"

	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runTrace(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("trace", "trace [-b BINARY]... [--no-header] [--format text|json|chrome] [-o OUT] FILE", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	noHeader := fs.Bool("no-header", false, "print only the event lines (text)")
	format := fs.String("format", "text", "text: the kernel tracer's lines; json: one JSON object per record; chrome: the Trace Event Format (Perfetto, chrome://tracing, speedscope)")
	out := fs.String("o", "", "write to OUT (atomically) instead of standard output")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one trace FILE, got %d arguments (see kprewrite trace -h)", len(pos))
	}
	var write func(io.Writer, *export.Input) error
	switch *format {
	case "text":
		write = func(w io.Writer, in *export.Input) error {
			return tracefile.WriteTrace(w, stderr, in.Stream, in.Descs, !*noHeader)
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
	return writeTo(*out, stdout, func(w io.Writer) error { return write(w, in) })
}
