package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// TraceSuffix is appended to the output path to make the default trace file path.
const TraceSuffix = tracefile.Suffix

func runRewrite(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("rewrite", "rewrite -o OUT [-e DEF]... [-f DEFFILE]... [--no-optimize] [--optimized-only] [--skip-refused] [--verify-regions] [--exclude PATTERN]... [--calls GLOB]... [--calls-hook] [--prepare GLOB]... [--live-points N] [--disable EVENTS]... [--no-boost] [--single-step tf|int3] [--count-only | --exits [--exits-only]] [--handlers FILE.c]... [--filter GROUP/EVENT:EXPR]... [--trigger GROUP/EVENT:TRIGGER]... [--trace PATH] [--trace-size SIZE] [--clock tsc|mono|counter] [--kernel-types] [--debug-file FILE] BINARY", stdout)
	out := fs.String("o", "", "output file (written atomically; required)")
	rf := addRewriteFlags(fs, true)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite rewrite -h)", len(pos))
	}
	if *out == "" {
		return usageErr("-o OUT is required")
	}
	if err := outfile.Check(*out, append([]string{pos[0]}, rf.inputs()...)...); err != nil {
		return err
	}
	opt, err := rf.options()
	if err != nil {
		return err
	}
	res, err := kprewrite.Rewrite(pos[0], *out, opt)
	if err != nil {
		return err
	}
	rewriteReport(stderr, "kprewrite rewrite", res, len(rf.calls) > 0)
	return nil
}

// rewriteReport says on stderr, each line starting with who, what a rewrite left out
// and what the user should know (calls: --calls was given).
func rewriteReport(stderr io.Writer, who string, res *kprewrite.RewriteResult, calls bool) {
	for _, r := range res.Skipped {
		fmt.Fprintf(stderr, "%s: skipped: %s\n", who, r)
	}
	if calls {
		c := res.Calls
		fmt.Fprintf(stderr, "%s: --calls: %d functions traced as calls, %d left out", who, c.Traced, len(c.LeftOut))
		if len(c.LeftOut) > 0 {
			fmt.Fprintf(stderr, " (first: %s)", c.LeftOut[0])
		}
		fmt.Fprintln(stderr)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", who, w)
	}
}

// parseSize reads a byte count with an optional K, M or G suffix.
func parseSize(text string) (uint64, error) {
	s, mult := text, uint64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("bad size %q (want a positive number with an optional K, M or G suffix, at most 1T)", text)
	}
	return n * mult, nil
}
