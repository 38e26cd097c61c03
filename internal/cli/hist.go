package cli

import (
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracectl"
)

// runHist is `kprewrite hist [--event PATTERN] [--pause|--cont|--clear] FILE`: the
// kernel's events/GROUP/EVENT/hist files for a trace file, and the ":pause", ":cont"
// and ":clear" a write into the trigger file applies to a running histogram.
func runHist(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("hist", "hist [--event PATTERN] [--pause|--cont|--clear] [-o OUT] [FILE|PID]", stdout)
	out := fs.String("o", "", "write the histograms to OUT (atomically) instead of standard output")
	pattern := fs.String("event", "all", "the events whose histograms to print or change: EVENT, GROUP/EVENT, GROUP/* or all")
	pause := fs.Bool("pause", false, "pause the histograms: hits are not added until --cont (for every program writing into FILE)")
	cont := fs.Bool("cont", false, "continue paused histograms")
	clear := fs.Bool("clear", false, "empty the histograms, leaving them paused or not")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if pos, err = traceArg("hist", pos); err != nil {
		return err
	}
	if pos[0], err = traceTarget(pos[0]); err != nil { // (a PID names its program's file)
		return err
	}
	if err := outfile.Check(*out, pos[0]); err != nil {
		return err
	}
	n := 0
	for _, b := range []bool{*pause, *cont, *clear} {
		if b {
			n++
		}
	}
	if n > 1 {
		return usageErr("--pause, --cont and --clear are one change at a time")
	}
	if n == 0 {
		hs, err := kprewrite.Hist(pos[0], kprewrite.HistOptions{Event: *pattern})
		if err != nil {
			return err
		}
		return writeTo(*out, stdout, func(w io.Writer) error {
			_, err := io.WriteString(w, hs.String())
			return err
		})
	}
	f, err := tracectl.Open(pos[0])
	if err != nil {
		return err
	}
	defer f.Close()
	hs, err := f.Hists(*pattern)
	live, lerr := f.LiveHists(*pattern) // (events added at run time: kprewrite probe)
	if lerr != nil {
		return lerr
	}
	if err != nil && len(live) == 0 {
		return err
	}
	hs = append(hs, live...)
	if len(hs) == 0 {
		return fmt.Errorf("%s: no hist trigger on %s (give one with rewrite --trigger 'GROUP/EVENT:hist:keys=...')", pos[0], *pattern)
	}
	for i := range hs {
		h := &hs[i]
		switch {
		case *pause:
			h.SetPaused(true)
		case *cont:
			h.SetPaused(false)
		case *clear:
			h.Clear()
		}
		fmt.Fprintf(stdout, "%s: %s/%s (%s): %s\n", pos[0], h.Group, h.Name, h.Image, h.Spec.Info())
	}
	return nil
}
