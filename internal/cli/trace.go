package cli

import (
	"io"

	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runTrace(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("trace", "trace [-b BINARY]... [--no-header] FILE", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	noHeader := fs.Bool("no-header", false, "print only the event lines")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one trace FILE, got %d arguments (see kprewrite trace -h)", len(pos))
	}
	tr, descs, err := tracefile.Open(pos[0], bins)
	if err != nil {
		return err
	}
	return tracefile.WriteTrace(stdout, stderr, tr, descs, !*noHeader)
}
