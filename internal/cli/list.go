package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

func runList(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("list", "list [-v] BINARY", stdout)
	verbose := fs.Bool("v", false, "add each probe's event, definition and filter")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite list -h)", len(pos))
	}
	f, err := elfio.Open(pos[0])
	if err != nil {
		return err
	}
	im, err := tracefile.ReadImage(f)
	copies := libraryCopies(f)
	f.Close()
	if err != nil && !(errors.Is(err, tracefile.ErrNoProbes) && len(copies) > 0) {
		return err
	}
	if im != nil {
		for _, line := range listLines(im, *verbose) {
			fmt.Fprintln(stdout, line)
		}
	}
	// the rewritten copies of the libraries the program loads ($ORIGIN/OUT.libs/...)
	for _, c := range copies {
		lf, err := elfio.Open(c)
		if err != nil {
			return err
		}
		lim, err := tracefile.ReadImage(lf)
		lf.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		for _, line := range listLines(lim, *verbose) {
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}

// libraryCopies returns the paths of the library copies a program rewritten with
// LIB:SITE definitions loads: its DT_NEEDED entries $ORIGIN/OUT.libs/LIB.
func libraryCopies(f *elfio.File) []string {
	var out []string
	for _, n := range f.NeededNames() {
		rel, ok := strings.CutPrefix(n, "$ORIGIN/")
		if dir, lib := filepath.Split(rel); ok && strings.HasSuffix(dir, ".libs/") && !strings.Contains(dir[:len(dir)-1], "/") && lib != "" {
			out = append(out, filepath.Join(filepath.Dir(f.Path), rel))
		}
	}
	return out
}

// listLines renders the probes like the kernel's /sys/kernel/debug/kprobes/list:
//
//	ADDRESS  k|r  SYMBOL+0xOFFSET  IMAGE [FLAGS]
//
// with the probe's link-time address (add the load bias of a PIE), "k" for a kprobe
// and "r" for a kretprobe, and the flags [BOOSTED] (one trap per hit: the copy runs
// with a jmp back, or the branch is emulated), [OPTIMIZED] (a jmp to a detour
// buffer, no trap), [VERIFY] (a would-be-optimized probe of a --verify-regions
// rewrite: a boosted int3, the other bytes of its DCR int3s that report
// violations), [EXIT] (a --count-only return probe counted where its function
// returns: one line per ret or tail call, at that address, instead of a return-address
// hook at the entry) and [DISABLED] (registered disabled; KPREWRITE_DISABLE disables
// more at run time). Probes come in address order.
func listLines(im *tracefile.Image, verbose bool) []string {
	d := im.Desc
	var lines []string
	for _, pt := range im.Points {
		for k := uint32(0); k < uint32(pt.NProbes); k++ {
			i := int(pt.FirstProbe + k)
			if i >= len(d.Probes) {
				continue
			}
			dp := d.Probes[i]
			if dp.Kind == tracefile.KindVerify {
				continue // --verify-regions pseudo-probe on an inner byte
			}
			typ := "k"
			if im.Probes[i].Type == kprt.TKretprobe || dp.Exit {
				typ = "r"
			}
			sym := fmt.Sprintf("%#x", pt.Site)
			if dp.Symbol != "" {
				sym = fmt.Sprintf("%s+%#x", dp.Symbol, dp.Offset)
			}
			flags := ""
			switch dp.Kind {
			case "b", "rb":
				flags += "[BOOSTED]"
			case "o", "ro":
				flags += "[OPTIMIZED]"
			}
			if dp.Verify {
				flags += "[VERIFY]"
			}
			if dp.Exit {
				flags += "[EXIT]"
			}
			disabled := im.Probes[i].Flags&kprt.FDisabled != 0 || im.Header.Flags&kprt.HFDisableAll != 0
			if dp.Event >= 0 && d.Events[dp.Event].Disabled {
				disabled = true
			}
			if disabled {
				flags += "[DISABLED]"
			}
			if dp.Event >= 0 && d.Events[dp.Event].Soft {
				flags += "[SOFT]"
			}
			line := fmt.Sprintf("%016x  %s  %s  %s %s", pt.Site, typ, sym, d.Image, flags)
			if verbose && dp.Event >= 0 {
				e := d.Events[dp.Event]
				line += fmt.Sprintf("  %s/%s  %s", e.Group, e.Name, e.Def)
				if e.Filter != "" {
					line += "  filter: " + e.Filter
				}
				if len(e.Triggers) > 0 {
					line += "  triggers: " + strings.Join(e.Triggers, "; ")
				}
			}
			lines = append(lines, line)
		}
	}
	return lines
}
