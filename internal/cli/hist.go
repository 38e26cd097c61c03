package cli

import (
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracectl"
)

// runHist is `kprewrite hist [--event PATTERN] [--pause|--cont|--clear] FILE`: the
// kernel's events/GROUP/EVENT/hist files for a trace file, and the ":pause", ":cont"
// and ":clear" a write into the trigger file applies to a running histogram.
func runHist(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("hist", "hist [--event PATTERN] [--pause|--cont|--clear] [-o OUT] [FILE]", stdout)
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
	open := tracectl.OpenRead
	if n > 0 {
		open = tracectl.Open
	}
	f, err := open(pos[0])
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
	if n > 0 {
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
	return writeTo(*out, stdout, func(w io.Writer) error { return printHists(w, pos[0], hs) })
}

// printHists prints the histograms as the kernel's hist files, a heading for each
// event when there are several.
func printHists(w io.Writer, path string, hs []tracectl.Hist) error {
	events := map[string]bool{}
	for _, h := range hs {
		events[h.Image+"\x00"+h.Group+"/"+h.Name] = true
	}
	last := ""
	for i := range hs {
		h := &hs[i]
		t, err := h.Read()
		if err != nil {
			return fmt.Errorf("%s: %s/%s: %w", path, h.Group, h.Name, err)
		}
		key := h.Image + "\x00" + h.Group + "/" + h.Name
		switch {
		case key == last: // another histogram of the same event, as the kernel separates them
			fmt.Fprint(w, "\n\n")
		case len(events) > 1:
			if last != "" {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "# events/%s/%s/hist (%s)\n", h.Group, h.Name, h.Image)
		}
		last = key
		h.Spec.Print(w, t, h.Desc.Symbolize)
	}
	return nil
}
