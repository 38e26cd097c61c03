package cli

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/atomicfile"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracectl"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// runTraceOnOff is `kprewrite traceon|traceoff FILE`: tracefs's tracing_on for every
// program writing into the trace file, running or to come.
func runTraceOnOff(on bool) func(args []string, stdout, stderr io.Writer) error {
	name := map[bool]string{true: "traceon", false: "traceoff"}[on]
	return func(args []string, stdout, _ io.Writer) error {
		fs := helpFlagSet(name, name+" TARGET", stdout)
		pos, err := parseFlags(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageErr("want exactly one TARGET (a trace file or the PID of a program writing one), got %d arguments (see kprewrite %s -h)", len(pos), name)
		}
		f, path, err := openTarget(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		was := f.SetTracing(on)
		fmt.Fprintf(stdout, "%s: tracing %s (was %s)\n", path, onOff(on), onOff(was))
		return nil
	}
}

// runEnableDisable is `kprewrite enable|disable FILE EVENT...`: the events' switch, as
// an event's enable file in soft mode, for every program writing into the trace file.
func runEnableDisable(on bool) func(args []string, stdout, stderr io.Writer) error {
	name := map[bool]string{true: "enable", false: "disable"}[on]
	return func(args []string, stdout, stderr io.Writer) error {
		fs := helpFlagSet(name, name+" TARGET EVENT...|all", stdout)
		pos, err := parseFlags(fs, args)
		if err != nil {
			return err
		}
		if len(pos) < 2 {
			return usageErr("want a trace FILE (or a PID) and at least one EVENT (EVENT, GROUP/EVENT, GROUP/*, */*), or all, got %d arguments (see kprewrite %s -h)", len(pos), name)
		}
		f, path, err := openTarget(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		pos[0] = path
		var evs []tracectl.Event
		var live []tracectl.LiveEvent // events added at run time (kprewrite probe)
		all := false
		for _, pat := range pos[1:] { // every name checked before anything changes
			if pat == "all" { // the switch of every probe (kprobes/enabled), not the events'
				all = true
				continue
			}
			e, err := f.Events(pat)
			le, lerr := f.LiveSwitches(pat)
			if err != nil && lerr != nil {
				return err
			}
			if lerr == nil {
				live = append(live, le...)
			}
			for _, ev := range e {
				if on && !ev.Armed {
					return fmt.Errorf("%s: %s/%s: %w", pos[0], ev.Group, ev.Name, tracectl.ErrNotArmed)
				}
			}
			evs = append(evs, e...)
		}
		f.Hold() // the programs' live-probe threads woken once, after every switch
		defer func() {
			f.Release()
			// returns once the running programs have armed or disarmed their sites, as
			// a write of kprobes/enabled or an event's enable file does
			waitApplied(f, pos[0], stderr)
		}()
		if all {
			was := f.SetArmed(on)
			fmt.Fprintf(stdout, "%s: every probe %s (was %s)\n", pos[0], map[bool]string{true: "armed", false: "disarmed"}[on], map[bool]string{true: "armed", false: "disarmed"}[was])
		}
		for _, ev := range evs {
			if err := f.SetEnabled(ev, on); err != nil {
				return fmt.Errorf("%s: %w", pos[0], err)
			}
			fmt.Fprintf(stdout, "%s: %s/%s (%s): %sd (was %s)\n", pos[0], ev.Group, ev.Name, ev.Image, name, map[bool]string{true: "enabled", false: "disabled"}[ev.Enabled])
		}
		for _, e := range live { // soft: its site stays armed, its triggers run
			if err := f.SetLiveEnabled(e, on); err != nil {
				return fmt.Errorf("%s: %w", pos[0], err)
			}
			fmt.Fprintf(stdout, "%s: %s/%s (%s): %sd (was %s)\n", pos[0], e.Group, e.Name, e.Image, name, map[bool]string{true: "disabled", false: "enabled"}[e.Disabled])
		}
		return nil
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// imageEvents groups a trace file's matched events by image, in the file's order.
func imageEvents(evs []tracectl.Event) [][]tracectl.Event {
	var out [][]tracectl.Event
	at := map[int]int{}
	for _, ev := range evs {
		i, ok := at[ev.ImageIndex()]
		if !ok {
			i = len(out)
			at[ev.ImageIndex()] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], ev)
	}
	return out
}

// editControls is what `kprewrite filter` and `kprewrite trigger` share: the trace
// file's events matching EVENT, each image's controls read once, each(c, ev, value)
// making the change (value nil: printing what there is) and returning what to say once
// it is in the file. Nothing is written unless every change was accepted.
func editControls(name, usage string, args []string, stdout io.Writer,
	each func(f *tracectl.File, c *tracectl.Controls, ev tracectl.Event, value *string) (func(), error)) error {
	fs := helpFlagSet(name, name+" TARGET EVENT ["+strings.ToUpper(name)+"]", stdout)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 && len(pos) != 3 {
		return usageErr("want a TARGET (a trace file or a PID), an EVENT (EVENT, GROUP/EVENT, GROUP/* or all) and %s, got %d arguments (see kprewrite %s -h)", usage, len(pos), name)
	}
	var value *string
	if len(pos) == 3 {
		value = &pos[2]
	}
	f, _, err := openTarget(pos[0])
	if err != nil {
		return err
	}
	defer f.Close()
	all, err := f.Events(pos[1])
	if err != nil {
		return err
	}
	evs := all
	type change struct {
		ev  tracectl.Event
		c   *tracectl.Controls
		say func()
	}
	var changes []change
	for _, group := range imageEvents(evs) {
		c, err := f.Controls(group[0])
		if err != nil {
			return err
		}
		for _, ev := range group {
			if value != nil && !ev.Armed && !ev.Synthetic {
				return fmt.Errorf("%s: %s/%s: %w", pos[0], ev.Group, ev.Name, tracectl.ErrNotArmed)
			}
			say, err := each(f, c, ev, value)
			if err != nil {
				return fmt.Errorf("%s: %w", pos[0], err)
			}
			if value != nil && say != nil {
				changes = append(changes, change{ev, c, say})
			}
		}
	}
	committed := map[*tracectl.Controls]bool{}
	for _, ch := range changes {
		if !committed[ch.c] {
			if err := f.Commit(ch.ev, ch.c); err != nil {
				return err
			}
			committed[ch.c] = true
		}
		fmt.Fprintf(stdout, "%s: ", pos[0])
		ch.say()
	}
	return nil
}

// runFilter is `kprewrite filter FILE EVENT [EXPR]`: the events' filter file, for every
// program writing into the trace file, running or to come.
func runFilter(args []string, stdout, stderr io.Writer) error {
	if done, err := liveFilter(args, stdout, stderr); done {
		return err
	}
	return editControls("filter", "a filter EXPR (0 removes it; none prints it)", args, stdout,
		func(_ *tracectl.File, c *tracectl.Controls, ev tracectl.Event, expr *string) (func(), error) {
			get, set := c.Filter, c.SetFilter
			if ev.Synthetic { // its records
				get = func(i uint32) string { return c.SynthFilter(int(i)) }
				set = func(i uint32, e string) error { return c.SetSynthFilter(int(i), e) }
			}
			was := get(ev.Index)
			if expr == nil {
				fmt.Fprintf(stdout, "%s/%s (%s): %s\n", ev.Group, ev.Name, ev.Image, orNone(was))
				return nil, nil
			}
			if err := set(ev.Index, *expr); err != nil {
				return nil, err
			}
			return func() {
				fmt.Fprintf(stdout, "%s/%s (%s): filter %s (was %s)\n", ev.Group, ev.Name, ev.Image, orNone(get(ev.Index)), orNone(was))
			}, nil
		})
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// runTrigger is `kprewrite trigger FILE EVENT [TRIGGER]`: the events' trigger file, for
// every program writing into the trace file, running or to come.
func runTrigger(args []string, stdout, stderr io.Writer) error {
	if done, err := liveTrigger(args, stdout, stderr); done {
		return err
	}
	done := map[*tracectl.Controls]map[string]bool{} // a multi-probe event's runtime events change together
	return editControls("trigger", "a TRIGGER ('!CMD' removes one; none prints them)", args, stdout,
		func(f *tracectl.File, c *tracectl.Controls, ev tracectl.Event, text *string) (func(), error) {
			if done[c] == nil {
				done[c] = map[string]bool{}
			}
			if done[c][ev.Group+"/"+ev.Name] {
				return nil, nil
			}
			done[c][ev.Group+"/"+ev.Name] = true
			list := func(indent string) {
				ts := f.Listed(ev, c)
				if len(ts) == 0 {
					fmt.Fprintf(stdout, "%s# Available triggers:\n%s# traceon traceoff snapshot stacktrace enable_event disable_event enable_hist disable_hist hist\n", indent, indent)
				}
				for _, t := range ts {
					fmt.Fprintf(stdout, "%s%s\n", indent, t)
				}
			}
			if text == nil {
				fmt.Fprintf(stdout, "%s/%s (%s):\n", ev.Group, ev.Name, ev.Image)
				list("")
				return nil, nil
			}
			apply := func() error { return c.ApplyTrigger(ev.Group, ev.Name, *text) }
			if ev.Synthetic {
				apply = func() error { return c.ApplySynthTrigger(int(ev.Index), *text) }
			}
			if err := apply(); err != nil {
				return nil, err
			}
			return func() {
				fmt.Fprintf(stdout, "%s/%s (%s): triggers now:\n", ev.Group, ev.Name, ev.Image)
				list("  ")
			}, nil
		})
}

// runControl is `kprewrite control -o FILE ... BINARY`: a KPREWRITE_CONTROL file, the
// filters, triggers and switches the next runs of BINARY start with.
func runControl(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("control", "control -o FILE [--filter GROUP/EVENT:EXPR]... [--trigger GROUP/EVENT:TRIGGER]... [--enable LIST]... [--disable LIST]... BINARY", stdout)
	out := fs.String("o", "", "write the control file to `FILE` (replaced atomically)")
	var filters, triggers, enables, disables multiFlag
	fs.Var(&filters, "filter", "`GROUP/EVENT:EXPR`: the event's filter, as rewrite --filter (GROUP/EVENT:0 removes the rewrite's) (repeatable)")
	fs.Var(&triggers, "trigger", "`GROUP/EVENT:TRIGGER`: write TRIGGER to the event's trigger file, as rewrite --trigger ('!CMD' removes one of the rewrite's; a new hist trigger's table is placed in the trace file by the first program that starts with the file) (repeatable)")
	fs.Var(&enables, "enable", "switch events on at start-up: all, or a comma-separated `LIST` of EVENT, GROUP/EVENT, GROUP/* (repeatable)")
	fs.Var(&disables, "disable", "switch events off at start-up (their hits are counted, not recorded): all, or a comma-separated `LIST` (repeatable)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *out == "" || len(pos) != 1 {
		return usageErr("want -o FILE and one rewritten BINARY, got %d arguments (see kprewrite control -h)", len(pos))
	}
	if err := outfile.Check(*out, pos[0]); err != nil {
		return err
	}
	bin, err := elfio.Open(pos[0])
	if err != nil {
		return err
	}
	im, err := tracefile.ReadImage(bin)
	bin.Close()
	if err != nil {
		return err
	}
	c, err := tracectl.NewControls(im.Desc, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	cf := &controlFile{c: c, d: im.Desc, bin: pos[0]}
	if err := cf.filters(filters); err != nil {
		return err
	}
	if err := cf.triggers(triggers); err != nil {
		return err
	}
	if err := cf.switches(enables, disables); err != nil {
		return err
	}
	b, err := tracectl.EncodeControlFile([]*tracectl.Frame{c.Frame()})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(*out, bytes.NewReader(b), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: controls for %d events of %s (KPREWRITE_CONTROL=%s at start-up)\n", *out, len(c.Frame().Entries)+len(c.Frame().Switches), pos[0], *out)
	return nil
}

// controlFile is a control file being made: the controls of the binary bin, whose
// description is d.
type controlFile struct {
	c   *tracectl.Controls
	d   *tracefile.Desc
	bin string
}

// match splits spec at ':' into the events of the binary it names (GROUP/EVENT,
// GROUP/*, EVENT, all) and the text after; what and form name the flag and its form
// in the messages.
func (cf *controlFile) match(spec, what, form string) (string, []uint32, error) {
	target, text, ok := strings.Cut(spec, ":")
	if !ok || target == "" {
		return "", nil, usageErr("--%s %q: want %s", what, spec, form)
	}
	var idx []uint32
	for i, e := range cf.d.Events {
		if eventdef.MatchesName(target, e.Group, e.Name) {
			idx = append(idx, uint32(i))
		}
	}
	if len(idx) == 0 {
		return "", nil, fmt.Errorf("--%s %q: %s has no event %s", what, spec, cf.bin, target)
	}
	return text, idx, nil
}

// filters sets each --filter on the synthetic events or the armed events it names.
func (cf *controlFile) filters(filters multiFlag) error {
	c, d := cf.c, cf.d
	for k, spec := range filters {
		if done, err := synthSpec(d, spec, "filter", k, cf.bin, c.SetSynthFilter); done || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		text, idx, err := cf.match(spec, "filter", "GROUP/EVENT:EXPR")
		if err != nil {
			return err
		}
		for _, i := range idx {
			if !c.Armed(i) {
				return fmt.Errorf("--filter #%d: %s/%s: %w", k+1, d.Events[i].Group, d.Events[i].Name, tracectl.ErrNotArmed)
			}
			if err := c.SetFilter(i, text); err != nil {
				return fmt.Errorf("--filter #%d: %w", k+1, err)
			}
		}
	}
	return nil
}

// triggers writes each --trigger to the trigger file of the synthetic events or the
// events it names, once per GROUP/EVENT; pause, cont and clear are refused, since
// they act on a trace file's histogram, which a control file has none of.
func (cf *controlFile) triggers(triggers multiFlag) error {
	c, d := cf.c, cf.d
	for k, spec := range triggers {
		if done, err := synthSpec(d, spec, "trigger", k, cf.bin, c.ApplySynthTrigger); done || err != nil {
			if err != nil {
				return err
			}
			if c.HistOps() > 0 {
				return fmt.Errorf("--trigger #%d: %q: pause, cont and clear change a histogram that a trace file holds: kprewrite trigger FILE EVENT TRIGGER or kprewrite hist --pause|--cont|--clear FILE", k+1, spec)
			}
			continue
		}
		text, idx, err := cf.match(spec, "trigger", "GROUP/EVENT:TRIGGER")
		if err != nil {
			return err
		}
		done := map[string]bool{}
		for _, i := range idx {
			e := d.Events[i]
			if done[e.Group+"/"+e.Name] {
				continue
			}
			done[e.Group+"/"+e.Name] = true
			if err := c.ApplyTrigger(e.Group, e.Name, text); err != nil {
				return fmt.Errorf("--trigger #%d: %w", k+1, err)
			}
			if c.HistOps() > 0 {
				return fmt.Errorf("--trigger #%d: %s/%s: trigger %q: pause, cont and clear change a histogram that a trace file holds: kprewrite trigger FILE EVENT TRIGGER or kprewrite hist --pause|--cont|--clear FILE", k+1, e.Group, e.Name, text)
			}
		}
	}
	return nil
}

// switches sets the start-up switches of --enable, then of --disable: a pattern
// naming only synthetic events switches their records; one naming no event at all
// is refused.
func (cf *controlFile) switches(enables, disables multiFlag) error {
	c, d := cf.c, cf.d
	for _, sw := range []struct {
		lists multiFlag
		on    bool
	}{{enables, true}, {disables, false}} {
		for _, list := range sw.lists {
			for _, pat := range strings.Split(list, ",") {
				synth := false // a synthetic event's records (KPREWRITE_CONTROL's switches)
				for k, sy := range d.Synthetic {
					if sy.ID != 0 && eventdef.MatchesName(pat, "synthetic", sy.Name) {
						c.SetSynthSwitch(k, sw.on)
						synth = true
					}
				}
				_, idx, err := cf.match(pat+":", map[bool]string{true: "enable", false: "disable"}[sw.on], "EVENT, GROUP/EVENT, GROUP/* or all")
				if err != nil {
					if synth { // (only synthetic events of that name)
						continue
					}
					return err
				}
				for _, i := range idx {
					if err := c.SetSwitch(i, sw.on); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// synthSpec applies a control's --filter or --trigger spec k ("synthetic/NAME:TEXT") to
// the synthetic events of d it names, with apply(their index, TEXT); done is false when
// the spec names no synthetic event (an event's spec).
func synthSpec(d *tracefile.Desc, spec, what string, k int, bin string, apply func(int, string) error) (done bool, err error) {
	target, text, ok := strings.Cut(spec, ":")
	if !ok || !strings.HasPrefix(target, "synthetic/") {
		return false, nil
	}
	found := false
	for j, sy := range d.Synthetic {
		if eventdef.MatchesName(target, "synthetic", sy.Name) {
			found = true
			if err := apply(j, text); err != nil {
				return true, fmt.Errorf("--%s #%d: %w", what, k+1, err)
			}
		}
	}
	if !found {
		return true, fmt.Errorf("--%s %q: %s has no event %s", what, spec, bin, target)
	}
	return true, nil
}

// liveMatch opens the trace file of `kprewrite filter|trigger FILE EVENT [VALUE]` and
// finds the events added at run time (kprewrite probe) EVENT names, when it names such
// events and none of the rewrite's (else nil: the rewrite's events' command runs, and
// says what is wrong). The caller closes f.
func liveMatch(args []string) (*tracectl.File, []tracectl.LiveEvent) {
	if len(args) != 2 && len(args) != 3 || strings.HasPrefix(args[0], "-") {
		return nil, nil
	}
	f, _, err := openTarget(args[0])
	if err != nil {
		return nil, nil
	}
	var match []tracectl.LiveEvent
	if evs, err := f.Events(args[1]); err != nil || len(evs) == 0 {
		live, _ := f.Live()
		for _, e := range live {
			if !e.Gone && eventdef.MatchesName(args[1], e.Group, e.Name) {
				match = append(match, e)
			}
		}
	}
	if len(match) == 0 {
		f.Close()
		return nil, nil
	}
	return f, match
}

// liveFilter is `kprewrite filter FILE EVENT [EXPR]` for events added at run time
// (kprewrite probe), when EVENT names such events and none of the rewrite's: done
// says it was (its error is the command's).
func liveFilter(args []string, stdout, stderr io.Writer) (done bool, err error) {
	f, match := liveMatch(args)
	if f == nil {
		return false, nil
	}
	defer f.Close()
	if len(args) == 2 {
		for _, e := range match {
			fmt.Fprintf(stdout, "%s/%s (%s): %s\n", e.Group, e.Name, e.Image, orNone(e.Filter()))
		}
		return true, nil
	}
	changed, err := f.SetLiveFilter(args[1], args[2])
	if err != nil {
		return true, fmt.Errorf("%s: %w", args[0], err)
	}
	waitApplied(f, args[0], stderr)
	for _, e := range changed {
		now := strings.TrimSpace(args[2])
		if now == "0" {
			now = ""
		}
		fmt.Fprintf(stdout, "%s/%s (%s): filter %s (was %s)\n", e.Group, e.Name, e.Image, orNone(now), orNone(e.Filter()))
	}
	return true, nil
}

// liveTrigger is `kprewrite trigger FILE EVENT [TRIGGER]` for events added at run time,
// as liveFilter is for their filters.
func liveTrigger(args []string, stdout, stderr io.Writer) (done bool, err error) {
	f, match := liveMatch(args)
	if f == nil {
		return false, nil
	}
	defer f.Close()
	list := func(e tracectl.LiveEvent, indent string) {
		ts := f.LiveTriggers(e)
		if len(ts) == 0 {
			fmt.Fprintf(stdout, "%s# Available triggers:\n%s# traceon traceoff snapshot stacktrace enable_event disable_event hist\n", indent, indent)
		}
		for _, t := range ts {
			fmt.Fprintf(stdout, "%s%s\n", indent, t)
		}
	}
	if len(args) == 2 {
		for _, e := range match {
			fmt.Fprintf(stdout, "%s/%s (%s):\n", e.Group, e.Name, e.Image)
			list(e, "")
		}
		return true, nil
	}
	changed, err := f.SetLiveTrigger(args[1], args[2])
	if err != nil {
		return true, fmt.Errorf("%s: %w", args[0], err)
	}
	waitApplied(f, args[0], stderr)
	now, err := f.Live()
	if err != nil {
		return true, err
	}
	for _, c := range changed {
		for _, e := range now {
			if e.ID == c.ID && e.ImageIndex() == c.ImageIndex() && !e.Gone {
				fmt.Fprintf(stdout, "%s: %s/%s (%s): triggers now:\n", args[0], e.Group, e.Name, e.Image)
				list(e, "  ")
			}
		}
	}
	return true, nil
}
