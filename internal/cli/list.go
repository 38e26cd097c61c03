package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/handlers"
	"github.com/kprewrite/kprewrite/internal/tracectl"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

func runList(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("list", "list [-v] BINARY|TRACEFILE", stdout)
	verbose := fs.Bool("v", false, "add each probe's event, definition and filter")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite list -h)", len(pos))
	}
	if isTraceFile(pos[0]) {
		return listTrace(pos[0], *verbose, stdout)
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

// listTrace lists the probes of every image writing into the trace file at path as
// the running programs have them now, from the images' descriptions in the file: an
// event switched off in the file's control area is [DISABLED]; a live one ([LIVE]) has
// its sites armed while it is on and the original bytes while it is off (within
// milliseconds of the switch).
func listTrace(path string, verbose bool, stdout io.Writer) error {
	f, err := tracectl.OpenRead(path)
	if err != nil {
		return err
	}
	defer f.Close()
	evs, _ := f.Events("all") // (none: a program with prepared sites only)
	off := map[[2]int]bool{}
	for _, ev := range evs {
		off[[2]int{ev.ImageIndex(), int(ev.Index)}] = ev.Off() || !f.Armed() // (disable FILE all)
	}
	noopt := !f.Optimized()
	for k, d := range f.Descs() {
		if d == nil {
			continue
		}
		probes := slices.Clone(d.Probes)
		for i := range probes {
			if k, ok := map[string]string{"o": "k", "ro": "r"}[probes[i].Kind]; ok && noopt && probes[i].Switchable {
				probes[i].Kind = k // optimize off: an int3 into its detour
			}
		}
		slices.SortStableFunc(probes, func(a, b tracefile.DescProbe) int { return cmp.Compare(a.Site, b.Site) })
		for _, l := range imageLines(f, k, d, probes, off, verbose) {
			fmt.Fprintln(stdout, l.text)
		}
	}
	return listLive(f, verbose, stdout)
}

// siteLine is a line of list and the site it is about.
type siteLine struct {
	site uint64
	text string
}

// imageLines are list's lines of image k (description d, its probes sorted by site) as
// the running programs have them now, in site order: its events' probes ([DISABLED]
// when off says so) and the probes C handlers have registered now (a declared one that
// is not registered left out).
func imageLines(f *tracectl.File, k int, d *tracefile.Desc, probes []tracefile.DescProbe, off map[[2]int]bool, verbose bool) []siteLine {
	regs, user := map[int]tracectl.UserReg{}, f.HasUserRegs(k)
	for _, r := range f.UserRegs(k) {
		regs[r.Probe] = r
	}
	var out []siteLine
	for _, dp := range probes {
		if dp.Kind == tracefile.KindVerify || dp.Event < 0 || dp.Event >= len(d.Events) {
			continue
		}
		disabled := off[[2]int{k, dp.Event}] || !f.Armed()
		r, ok := regs[dp.Index]
		switch e := d.Events[dp.Event]; {
		case ok && r.Free: // a free live point's, at the site the registration placed it
			dp.Site, dp.Addr, dp.Kind, dp.Symbol, dp.Offset = r.Site, r.Site, "k", "", 0
			if r.XMode == kprt.XBoost || r.XMode == kprt.XEmulate {
				dp.Kind = "b"
			}
			if name, off, _, ok := d.Symbolize(r.Site); ok {
				dp.Symbol, dp.Offset = name, off
			}
			out = append(out, siteLine{dp.Site, userLine(d, dp, r, disabled, verbose)})
		case ok: // declared, or registered by name at a prepared site: the word says
			// whether it is disabled (a declared one's event says how it started)
			out = append(out, siteLine{dp.Site, userLine(d, dp, r, !f.Armed(), verbose)})
		case e.Spare || (user && e.Group == handlers.EventGroup):
			// a prepared site's placeholder (the events added show after), a declared C
			// handler probe not registered now
		default:
			out = append(out, siteLine{dp.Site, probeLine(d, dp, probeType(d, dp), disabled, verbose)})
		}
	}
	slices.SortStableFunc(out, func(a, b siteLine) int { return cmp.Compare(a.site, b.site) })
	return out
}

// userLine is list's line of probe dp as C handler registration r has it: its type (k,
// r or j), [DISABLED] when disable_kprobe() or the file's switch says so, no
// [PREPARED] for a prepared site's placeholder it took.
func userLine(d *tracefile.Desc, dp tracefile.DescProbe, r tracectl.UserReg, disabled, verbose bool) string {
	disabled = disabled || r.Disabled
	line := probeLine(d, dp, r.Type, disabled, verbose)
	if !d.Events[dp.Event].Spare {
		return line
	}
	flag := "" // (probeLine says no [DISABLED] for a placeholder)
	if disabled {
		flag = "[DISABLED]"
	}
	return strings.Replace(line, "[PREPARED]", flag, 1)
}

// probeType is list's type column of a probe of d: k, r for a return probe, j for a
// C handler's jprobe (DEFINE_JPROBE).
func probeType(d *tracefile.Desc, dp tracefile.DescProbe) string {
	switch {
	case strings.HasPrefix(dp.Kind, "r") || dp.Exit:
		return "r"
	case dp.Event >= 0 && dp.Event < len(d.Events) && d.Events[dp.Event].Jprobe:
		return "j"
	}
	return "k"
}

// listLive lists the events added at run time (kprewrite probe), at their prepared
// sites: [LIVE], [DISABLED] for one soft-disabled (kprewrite disable, a trigger), and
// [GONE] for one removed.
func listLive(f *tracectl.File, verbose bool, stdout io.Writer) error {
	evs, err := f.Live()
	if err != nil {
		return err
	}
	descs := f.Descs()
	for _, e := range evs {
		d := descs[e.ImageIndex()]
		at := -1
		for i, de := range d.Events {
			if de.ID == e.ID && de.At > 0 {
				at = i
			}
		}
		if at < 0 {
			continue
		}
		if site, addr, ok := e.At(); ok { // at a free live point: its own site
			dp := tracefile.DescProbe{Event: at, Kind: e.Kind(), Addr: addr, Site: site}
			if name, off, _, ok := d.Symbolize(site); ok {
				dp.Symbol, dp.Offset = name, off
			}
			typ := "k"
			if e.Return {
				typ = "r"
			}
			fmt.Fprintln(stdout, liveLine(e, probeLine(d, dp, typ, !f.Armed() || e.Disabled, verbose)))
			continue
		}
		for _, dp := range d.Probes {
			if dp.Event != d.Events[at].At-1 {
				continue
			}
			dp.Event = at
			fmt.Fprintln(stdout, liveLine(e, probeLine(d, dp, probeType(d, dp), !f.Armed() || e.Disabled, verbose)))
		}
	}
	return nil
}

// liveLine is list's line of live event e with its state in the running program: [GONE]
// once removed; else, when its site is not armed as its kind says, [PENDING] (not
// applied yet, or waiting for a safepoint), [UNPLACED] or [DISARMED] instead of its
// kind's flag, and no [OPTIMIZED] for a jump site armed as an int3.
func liveLine(e tracectl.LiveEvent, line string) string {
	if e.Gone {
		return strings.Replace(line, "[LIVE]", "[LIVE][GONE]", 1)
	}
	armed, flag := e.Armed()
	if flag == "" {
		return line
	}
	line = strings.Replace(line, "[OPTIMIZED]", "", 1) // (an int3 now, or not armed)
	if armed {
		return line
	}
	return strings.Replace(line, "[LIVE]", "[LIVE]"+flag, 1)
}

// probeLine is one line of list: ADDRESS  k|r  SYMBOL+0xOFFSET  IMAGE [FLAGS].
func probeLine(d *tracefile.Desc, dp tracefile.DescProbe, typ string, disabled, verbose bool) string {
	sym := fmt.Sprintf("%#x", dp.Site)
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
	spare := dp.Event >= 0 && d.Events[dp.Event].Spare
	if disabled && !spare {
		flags += "[DISABLED]"
	}
	if spare {
		flags += "[PREPARED]" // a placeholder for events added at run time (kprewrite probe)
	} else if dp.Event >= 0 && d.Events[dp.Event].Live {
		flags += "[LIVE]" // its sites hold the original bytes while it is off
	} else if dp.Event >= 0 && d.Events[dp.Event].Soft {
		flags += "[SOFT]"
	}
	line := fmt.Sprintf("%016x  %s  %s  %s %s", dp.Site, typ, sym, d.Image, flags)
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
	return line
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
// with the probe's link-time address (add the load bias of a PIE), "k" for a kprobe,
// "r" for a kretprobe and "j" for a jprobe, and the flags [BOOSTED] (one trap per hit: the copy runs
// with a jmp back, or the branch is emulated), [OPTIMIZED] (a jmp to a detour
// buffer, no trap), [VERIFY] (a would-be-optimized probe of a --verify-regions
// rewrite: a boosted int3, the other bytes of its DCR int3s that report
// violations), [EXIT] (a --count-only return probe counted where its function
// returns: one line per ret or tail call, at that address, instead of a return-address
// hook at the entry) and [DISABLED] (registered disabled; KPREWRITE_DISABLE disables
// more at run time), [SOFT] (disabled but armed: triggers run) and [LIVE] (its sites
// hold the original bytes while it is off, and a switch arms them in the running
// program). Probes come in address order.
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
			if dp.Kind == tracefile.KindVerify || dp.Event >= 0 && d.Events[dp.Event].Free {
				continue // --verify-regions pseudo-probe on an inner byte; a free live point
			}
			typ := probeType(d, dp)
			if im.Probes[i].Type == kprt.TKretprobe {
				typ = "r"
			}
			disabled := im.Probes[i].Flags&kprt.FDisabled != 0 || im.Header.Flags&kprt.HFDisableAll != 0
			if dp.Event >= 0 && d.Events[dp.Event].Disabled {
				disabled = true
			}
			dp.Site = pt.Site
			line := probeLine(d, dp, typ, disabled, verbose)
			lines = append(lines, line)
		}
	}
	return lines
}
