package cli

import (
	"io"
	"strings"

	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runReport(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("report", "report [-b BINARY]... [-s KEY] [--threads] [-n N] [--diff BASE] [-o OUT] [FILE]", stdout)
	out := fs.String("o", "", "write to OUT (atomically) instead of standard output")
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	sortBy := fs.String("s", "total", "sort by "+strings.Join(export.SortKeys, ", "))
	threads := fs.Bool("threads", false, "one line per thread and function instead of per function")
	limit := fs.Int("n", 0, "print only the first N lines (0: all)")
	diff := fs.String("diff", "", "compare with the trace file BASE (before a change): FILE is the new one")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if pos, err = traceArg("report", pos); err != nil {
		return err
	}
	inputs := tracefile.Inputs(pos[0], bins)
	if *diff != "" {
		inputs = append(inputs, *diff)
	}
	if err := outfile.Check(*out, inputs...); err != nil {
		return err
	}
	if err := (&export.Report{}).Sort(*sortBy); err != nil {
		return usageErr("-s: %v", err)
	}
	build := func(path string) (*export.Report, error) {
		in, done, err := openExport("kprewrite report", path, bins, stderr)
		if err != nil {
			return nil, err
		}
		defer done()
		rep, err := export.BuildReport(in, *threads)
		if err != nil {
			return nil, err
		}
		return rep, rep.Sort(*sortBy)
	}
	rep, err := build(pos[0])
	if err != nil {
		return err
	}
	if *diff == "" {
		return writeTo(*out, stdout, func(w io.Writer) error { return rep.Write(w, *limit) })
	}
	base, err := build(*diff)
	if err != nil {
		return err
	}
	return writeTo(*out, stdout, func(w io.Writer) error { return rep.WriteDiff(w, base, *limit) })
}
