package cli

import (
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

func runProfile(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("profile", "profile [-b BINARY]... [--format text|pprof] [-o OUT] [FILE]", stdout)
	var bins multiFlag
	fs.Var(&bins, "b", "a rewritten binary whose events the trace holds (repeatable; default: FILE without "+TraceSuffix+")")
	format := fs.String("format", "text", "text: hits and misses per event, like kprobe_profile; pprof: the calls as a gzipped pprof profile (go tool pprof)")
	out := fs.String("o", "", "write to OUT (atomically) instead of standard output")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if pos, err = traceArg("profile", pos); err != nil {
		return err
	}
	if err := outfile.Check(*out, tracefile.Inputs(pos[0], bins)...); err != nil {
		return err
	}
	switch *format {
	case "pprof":
		return writePprof(pos[0], bins, *out, stdout, stderr)
	case "text":
	default:
		return usageErr("unknown --format %q (text or pprof)", *format)
	}
	tr, descs, err := tracefile.Open(pos[0], bins)
	if err != nil {
		return err
	}
	lines, unknown := tracefile.Profile(tr, descs)
	if err := writeTo(*out, stdout, func(w io.Writer) error { printProfile(w, tr, descs, lines); return nil }); err != nil {
		return err
	}
	if unknown > 0 {
		fmt.Fprintf(stderr, "kprewrite profile: %d image(s) in %s have no description; name their binaries with -b\n", unknown, pos[0])
	}
	return nil
}

// printProfile prints kprobe_profile's lines, and a --verify-regions rewrite's
// violations.
func printProfile(stdout io.Writer, tr *tracefile.Trace, descs tracefile.Descs, lines []tracefile.ProfileLine) {
	images := map[string]bool{}
	for _, l := range lines {
		images[l.Image] = true
	}
	// kprobe_profile: event, hits, misses; the image first when several share the file,
	// as uprobe_profile names the file.
	for _, l := range lines {
		if len(images) > 1 {
			fmt.Fprintf(stdout, "  %s %-44s %15d %15d\n", l.Image, l.Name, l.Hit, l.NMissed)
		} else {
			fmt.Fprintf(stdout, "  %-44s %15d %15d\n", l.Name, l.Hit, l.NMissed)
		}
	}
	// --verify-regions: inner DCR bytes reached (each one a would-be jmp that would
	// have broken the program); "(violations)" cannot be an event name
	if verify, total, list := tracefile.Violations(tr, descs); verify {
		fmt.Fprintf(stdout, "  %-44s %15d %15d\n", "(violations)", total, 0)
		for _, v := range list {
			sym := ""
			if v.Symbol != "" {
				sym = " (" + v.Symbol + ")"
			}
			fmt.Fprintf(stdout, "  violation: %s: %#x%s, inside the DCR of the probe at %#x: %d hits\n", v.Image, v.Byte, sym, v.Site, v.Hits)
		}
	}
}

// writePprof writes the calls of the trace at path as a pprof profile.
func writePprof(path string, bins []string, out string, stdout, stderr io.Writer) error {
	in, done, err := openExport("kprewrite profile", path, bins, stderr)
	if err != nil {
		return err
	}
	defer done()
	st, err := export.BuildStacks(in, false)
	if err != nil {
		return err
	}
	return writeTo(out, stdout, func(w io.Writer) error { return export.WritePprof(w, st) })
}
