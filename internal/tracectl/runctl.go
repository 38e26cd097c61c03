package tracectl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evfilter/elfsyms"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Controls are one image's filters and triggers as a change sees them: the rewrite's,
// then its latest frame's. Changes go into a new frame (Frame), written whole.
type Controls struct {
	Desc      *tracefile.Desc
	SpareBase uint32 // the control area's first spare count slot
	frame     *Frame
	counts    map[uint32]uint64 // spare slots given out by this change: their first counts
	histOps   []histOp          // pause, cont, clear of existing histograms
	dirty     bool              // the frame changed
	syms      evfilter.Symbols
	// Live gives the enable_event/disable_event targets of the image's events added at
	// run time named GROUP/NAME (their switches: File.Controls sets it; nil: none)
	Live func(group, name string) ([]uint32, error)
}

// NewControls starts from fr (nil: the rewrite's controls only).
func NewControls(d *tracefile.Desc, fr *Frame) (*Controls, error) {
	base, err := spareBase(d)
	if err != nil {
		return nil, err
	}
	c := &Controls{Desc: d, SpareBase: base, counts: map[uint32]uint64{}}
	c.frame = &Frame{ImageID: d.ImageID, NEvents: uint32(d.RuntimeEvents()), Entries: map[uint32]*Entry{}}
	if fr != nil && fr.ImageID == d.ImageID && fr.NEvents == uint32(d.RuntimeEvents()) {
		for e, en := range fr.Entries {
			cp := *en
			c.frame.Entries[e] = &cp
		}
	}
	return c, nil
}

// Frame is the controls as changed so far.
func (c *Controls) Frame() *Frame { return c.frame }

// Counts are the first counts of the spare slots this change gave out.
func (c *Controls) Counts() map[uint32]uint64 { return c.counts }

// spareBase is the runtime's count slots of the rewrite (nslots in rt_trigger.c): past
// every trigger's count and every histogram's table (a synthetic event's included).
func spareBase(d *tracefile.Desc) (uint32, error) {
	var end uint64
	add := func(triggers []string, slots []uint32, fields func() ([]evfilter.Field, error)) error {
		for k, text := range triggers {
			if k >= len(slots) {
				return fmt.Errorf("the description lists %d triggers and %d slots", len(triggers), len(slots))
			}
			words := uint64(1)
			if isHist(text) {
				fs, err := fields()
				if err != nil {
					return err
				}
				spec, err := parseHist(text, fs)
				if err != nil {
					return err
				}
				words = uint64(spec.TableWords())
			}
			end = max(end, uint64(slots[k])+words)
		}
		return nil
	}
	for i := range d.Events {
		e := &d.Events[i]
		if err := add(e.Triggers, e.CtlSlots, func() ([]evfilter.Field, error) { return eventFields(e) }); err != nil {
			return 0, fmt.Errorf("%s/%s: %w", e.Group, e.Name, err)
		}
	}
	for _, sy := range d.Synthetic {
		err := add(sy.Triggers, sy.CtlSlots, func() ([]evfilter.Field, error) {
			def, err := evhist.ParseSynthetic(sy.Def)
			if err != nil {
				return nil, err
			}
			return def.Fields(), nil
		})
		if err != nil {
			return 0, fmt.Errorf("synthetic/%s: %w", sy.Name, err)
		}
	}
	return uint32(end), nil
}

// isHist says whether a listed trigger is a hist trigger ("hist:...", or a named
// histogram's "NAME:hist:...").
func isHist(listed string) bool {
	_, _, named := namedHist(listed)
	return strings.HasPrefix(listed, "hist:") || named
}

// namedHist splits a named histogram's listed trigger, "NAME:hist:REST" (the kernel's
// trigger info prints the name first).
func namedHist(listed string) (name, rest string, ok bool) {
	name, rest, ok = strings.Cut(listed, ":hist:")
	return name, rest, ok && !strings.HasPrefix(listed, "hist:") && !strings.ContainsAny(name, ": ")
}

func eventFields(e *tracefile.DescEvent) ([]evfilter.Field, error) {
	p, err := eventdef.Parse(e.Def)
	if err != nil {
		return nil, err
	}
	return evfilter.EventFields(p, e.GoID > 0), nil
}

// exists says whether a trigger may name GROUP/NAME: an event of the image's, or one
// added to it at run time (Live).
func (c *Controls) exists(group, name string) bool {
	if len(c.named(group, name)) > 0 {
		return true
	}
	lt, err := c.liveTargets(group, name)
	return err != nil || len(lt) > 0 // (an error is the compile's to say)
}

// liveTargets are the switches of the image's live events GROUP/NAME (Live).
func (c *Controls) liveTargets(group, name string) ([]uint32, error) {
	if c.Live == nil {
		return nil, nil
	}
	return c.Live(group, name)
}

// named are the runtime events of GROUP/NAME (a multi-probe event has several; the
// description's entries of events added at run time, after them, are not).
func (c *Controls) named(group, name string) []uint32 {
	var out []uint32
	for i, e := range c.Desc.Events[:c.Desc.RuntimeEvents()] {
		if e.Group == group && e.Name == name {
			out = append(out, uint32(i))
		}
	}
	return out
}

// histSlots are the table slots of GROUP/EVENT's histograms (enable_hist's targets):
// its hist triggers' slots, or a synthetic event's histograms'.
func (c *Controls) histSlots(group, name string) []uint32 {
	var out []uint32
	seen := map[uint32]bool{}
	add := func(texts []string, slots []uint32) {
		for k, text := range texts {
			if k < len(slots) && isHist(text) && slots[k] != unplaced && !seen[slots[k]] {
				seen[slots[k]] = true
				out = append(out, slots[k])
			}
		}
	}
	for _, s := range c.Desc.Synthetic {
		if group == "synthetic" && s.Name == name {
			add(s.Triggers, s.CtlSlots)
		}
	}
	for _, i := range c.named(group, name) {
		if ts, slots, err := c.triggers(i); err == nil {
			add(ts, slots)
		}
	}
	return out
}

// Filter is event i's filter now ("" for none).
func (c *Controls) Filter(i uint32) string {
	if en := c.frame.Entries[i]; en != nil && en.Flags&kprt.CEFilter != 0 {
		return en.FilterText
	}
	return c.Desc.Events[i].Filter
}

// Triggers are event i's triggers now, as the trigger file lists them.
func (c *Controls) Triggers(i uint32) []string {
	ts, _, _ := c.triggers(i)
	return ts
}

// triggers are event i's triggers now and their count slots
func (c *Controls) triggers(i uint32) ([]string, []uint32, error) {
	en := c.frame.Entries[i]
	if en == nil || en.Flags&kprt.CETrig == 0 {
		e := &c.Desc.Events[i]
		return e.Triggers, e.CtlSlots, nil
	}
	if en.Trig == nil {
		return nil, nil, nil
	}
	cs, err := evtrigger.Decode(en.Trig, c.Desc.RuntimeEvents())
	if err != nil {
		return nil, nil, err
	}
	if len(cs) != len(en.Triggers) {
		return nil, nil, fmt.Errorf("the run-time triggers list %d triggers for %d in their program", len(en.Triggers), len(cs))
	}
	slots := make([]uint32, len(cs))
	for k, t := range cs {
		slots[k] = t.Slot
		if t.Alloc {
			slots[k] = unplaced
		}
	}
	return en.Triggers, slots, nil
}

func (c *Controls) entry(i uint32) *Entry {
	c.dirty = true
	en := c.frame.Entries[i]
	if en == nil {
		en = &Entry{}
		c.frame.Entries[i] = en
	}
	return en
}

// symbols finds .function names in the image's description, else in the rewritten
// binary it names, else nowhere (a filter naming a function is refused)
func (c *Controls) symbols() evfilter.Symbols {
	if c.syms != nil {
		return c.syms
	}
	c.syms = noSymbols{}
	if len(c.Desc.Symbols) > 0 {
		c.syms = descSymbols(c.Desc.Symbols)
	} else if f, err := elfio.Open(c.Desc.Image); err == nil {
		fns := f.Functions()
		f.Close()
		if fns != nil {
			c.syms = elfsyms.Of(fns)
		}
	}
	return c.syms
}

// SetFilter gives event i the filter expr ("0" removes it, as writing 0 into the
// kernel's filter file does).
func (c *Controls) SetFilter(i uint32, expr string) error {
	e := &c.Desc.Events[i]
	en := c.entry(i)
	if strings.TrimSpace(expr) == "0" {
		en.Flags |= kprt.CEFilter
		en.Filter, en.FilterText = nil, ""
		return nil
	}
	fs, err := eventFields(e)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", e.Group, e.Name, err)
	}
	f, err := evfilter.Parse(expr, fs, c.symbols())
	if err != nil {
		return evfilter.EventError(e.Group, e.Name, err)
	}
	en.Flags |= kprt.CEFilter
	en.Filter, en.FilterText = f.Program(), expr
	return nil
}

// unlisted turns a trigger as the trigger file lists it back into what was written
// ("traceoff:count=3 if a > 1" is "traceoff:3 if a > 1")
func unlisted(listed string) string {
	head, cond, hasCond := strings.Cut(listed, " if ")
	parts := strings.Split(head, ":")
	if n := len(parts); n > 1 {
		switch last := parts[n-1]; {
		case last == "unlimited":
			parts = parts[:n-1]
		case strings.HasPrefix(last, "count="):
			parts[n-1] = strings.TrimPrefix(last, "count=")
		}
	}
	s := strings.Join(parts, ":")
	if hasCond {
		s += " if " + cond
	}
	return s
}

// Armed says whether the probes of event i run (an event rewritten with --disable and
// no trigger naming it records nothing, whatever its controls).
func (c *Controls) Armed(i uint32) bool {
	e := &c.Desc.Events[i]
	return !e.Disabled || e.Soft
}

// hasUnwind says whether the image has the unwind table stacktrace triggers walk with
// (the rewrite adds it to images with stacktrace triggers or keys)
func (c *Controls) hasUnwind() bool { return hasUnwind(c.Desc) }

// hasUnwind says whether image d has the unwind table (Controls.hasUnwind).
func hasUnwind(d *tracefile.Desc) bool {
	for _, e := range d.Events {
		for _, t := range e.Triggers {
			if strings.Contains(t, "stacktrace") {
				return true
			}
		}
	}
	return false
}

// ApplyTrigger writes trigger text to GROUP/NAME's trigger file, as the kernel's: a
// new trigger (EEXIST for a second of its kind), or "!CMD" removing one. A new hist
// trigger's table is placed when the change is committed (Commit: in the trace file's
// counters area) or by the runtime that installs a KPREWRITE_CONTROL file; it must be
// self-contained (evhist.Spec.SelfContained). A hist trigger like one the event has
// with ":pause", ":cont" or ":clear" changes that histogram's table at Commit.
func (c *Controls) ApplyTrigger(group, name, text string) error {
	evs := c.named(group, name)
	if len(evs) == 0 {
		return fmt.Errorf("no event %s/%s", group, name)
	}
	first := &c.Desc.Events[evs[0]]
	if !c.Armed(evs[0]) {
		return fmt.Errorf("%s/%s: %w", group, name, ErrNotArmed)
	}
	fs, err := eventFields(first)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", group, name, err)
	}
	ch := &triggerChange{c: c, group: group, name: name, text: text, fs: fs}
	env := evtrigger.Env{Fields: fs, Syms: c.symbols(), Exists: c.exists}
	t, err := evtrigger.Parse(text, env)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", group, name, err)
	}
	if err := ch.runnable(t); err != nil {
		return err
	}
	listed, slots, err := c.triggers(evs[0])
	if err != nil {
		return fmt.Errorf("%s/%s: %w", group, name, err)
	}
	ch.slots = slots
	if ch.prev, err = c.compiled(evs[0]); err != nil {
		return fmt.Errorf("%s/%s: %w", group, name, err)
	}
	if ch.set, err = ch.current(listed, env); err != nil {
		return err
	}
	if done, err := ch.histOp(t); done || err != nil {
		return err
	}
	next, err := ch.set.Apply(t)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", group, name, err)
	}
	if ch.used, err = c.usedSlots(); err != nil {
		return err
	}
	var cs []evtrigger.Compiled
	var out []string
	for _, nt := range next {
		cc, listedAs, err := ch.compile(nt)
		if err != nil {
			return err
		}
		cs, out = append(cs, cc), append(out, listedAs)
	}
	prog, err := evtrigger.Program(cs)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", group, name, err)
	}
	for _, i := range evs {
		en := c.entry(i)
		en.Flags |= kprt.CETrig
		en.Trig, en.Triggers = prog, out
	}
	return nil
}

// triggerChange is one ApplyTrigger: the event and the trigger text written (for the
// messages), the event's fields, its triggers before the change with their slots
// (set, slots) and their run-time programs (prev: nil when none was added at run
// time), and the count slots already in use.
type triggerChange struct {
	c                 *Controls
	group, name, text string
	fs                []evfilter.Field
	set               evtrigger.Set
	slots             []uint32
	prev              []evtrigger.Compiled
	used              map[uint32]bool
}

// runnable refuses a new trigger the running program cannot carry out: a stacktrace
// without an unwind table, or enabling or disabling an event that is not armed.
func (ch *triggerChange) runnable(t evtrigger.Trigger) error {
	c, group, name, text := ch.c, ch.group, ch.name, ch.text
	switch {
	case t.Cmd == evtrigger.StackTrace && !t.Remove && !c.hasUnwind():
		return fmt.Errorf("%s/%s: trigger %q: the program has no unwind table to walk stacks with (the rewrite adds one to programs with a stacktrace trigger or key): rewrite it with the trigger", group, name, text)
	case (t.Cmd == evtrigger.EnableEvent || t.Cmd == evtrigger.DisableEvent) && !t.Remove:
		for _, x := range c.named(t.Group, t.Event) {
			if !c.Armed(x) {
				return fmt.Errorf("%s/%s: trigger %q: %s/%s: %w", group, name, text, t.Group, t.Event, ErrNotArmed)
			}
		}
	}
	return nil
}

// current reads back the event's listed triggers as a set the new one applies to:
// a histogram from its info line, any other by parsing it again.
func (ch *triggerChange) current(listed []string, env evtrigger.Env) (evtrigger.Set, error) {
	set := make(evtrigger.Set, len(listed))
	for k, l := range listed {
		if isHist(l) {
			spec, err := parseHist(l, ch.fs)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: its trigger %q: %w", ch.group, ch.name, l, err)
			}
			set[k] = evtrigger.Trigger{Cmd: evtrigger.Hist, Text: l, Count: evtrigger.Unlimited, Hist: spec, Filter: spec.Filter}
			continue
		}
		old, err := evtrigger.Parse(unlisted(l), env)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: its trigger %q: %w", ch.group, ch.name, l, err)
		}
		old.Text = l
		set[k] = old
	}
	return set, nil
}

// histOp is a hist trigger with :pause, :cont or :clear like one the event has: it
// acts on that histogram's table at Commit (done), which a histogram not placed yet
// does not have.
func (ch *triggerChange) histOp(t evtrigger.Trigger) (done bool, _ error) {
	if t.Cmd != evtrigger.Hist || t.Remove || !(t.Hist.Pause || t.Hist.Cont || t.Hist.Clear) {
		return false, nil
	}
	for k := range ch.set {
		if ch.set[k].Cmd == evtrigger.Hist && ch.set[k].Hist.Same(t.Hist) {
			if ch.slots[k] == unplaced {
				return true, fmt.Errorf("%s/%s: trigger %q: the histogram is made when the program starts; pause, cont and clear act on a trace file's (kprewrite trigger FILE, kprewrite hist --pause)", ch.group, ch.name, ch.text)
			}
			ch.c.histOps = append(ch.c.histOps, histOp{slot: ch.slots[k], spec: ch.set[k].Hist, pause: t.Hist.Pause, cont: t.Hist.Cont, clear: t.Hist.Clear})
			return true, nil
		}
	}
	return false, nil
}

// usedSlots is the count slots in use: those of the frame's triggers, and the
// rewrite's where no frame replaced them. The triggers kept keep their slots (and
// counts); a new one takes a spare slot none of these holds.
func (c *Controls) usedSlots() (map[uint32]bool, error) {
	used := map[uint32]bool{}
	for _, en := range c.frame.Entries {
		if en.Flags&kprt.CETrig != 0 && en.Trig != nil {
			cs, err := evtrigger.Decode(en.Trig, c.Desc.RuntimeEvents())
			if err != nil {
				return nil, err
			}
			for _, x := range cs {
				used[x.Slot] = true
			}
		}
	}
	for i := range c.Desc.Events { // the rewrite's, where no frame replaced them
		if en := c.frame.Entries[uint32(i)]; en == nil || en.Flags&kprt.CETrig == 0 {
			for _, s := range c.Desc.Events[i].CtlSlots {
				used[s] = true
			}
		}
	}
	return used, nil
}

// compile compiles trigger nt of the new set and gives the text it is listed as: a
// histogram kept keeps its table (and a run-time one its program), a trigger kept
// its slot and text; a new one takes a spare count slot, and a new histogram a new
// table.
func (ch *triggerChange) compile(nt evtrigger.Trigger) (evtrigger.Compiled, string, error) {
	c := ch.c
	slot, kept, at := uint32(0), false, -1
	for k := range ch.set {
		if ch.set[k].Text == nt.Text && ch.set[k].Cmd == nt.Cmd {
			slot, kept, at = ch.slots[k], true, k
		}
	}
	if nt.Cmd == evtrigger.Hist && kept {
		if ch.prev != nil && ch.prev[at].Hist != nil { // added at run time: its own program and table
			return ch.prev[at], nt.Text, nil
		}
		return evtrigger.Keep(slot), nt.Text, nil
	}
	if !kept && nt.Cmd != evtrigger.Hist {
		slot = c.SpareBase
		for ch.used[slot] || c.counts[slot] != 0 {
			slot++
		}
		if slot >= c.SpareBase+kprt.CtlSpare {
			return evtrigger.Compiled{}, "", fmt.Errorf("%s/%s: trigger %q: no count slot left for another run-time trigger (%d an image); rewrite with the trigger instead", ch.group, ch.name, ch.text, kprt.CtlSpare)
		}
		c.counts[slot] = nt.Count
	}
	cc := evtrigger.Compiled{Trigger: nt, Slot: slot}
	if nt.Filter != "" {
		f, err := evfilter.Parse(nt.Filter, ch.fs, c.symbols())
		if err != nil {
			return cc, "", fmt.Errorf("%s/%s: trigger %q: %w", ch.group, ch.name, nt.Text, err)
		}
		cc.Filter = f.Program()
	}
	switch nt.Cmd {
	case evtrigger.EnableEvent, evtrigger.DisableEvent:
		lt, err := c.liveTargets(nt.Group, nt.Event)
		if err != nil {
			return cc, "", fmt.Errorf("%s/%s: trigger %q: %w", ch.group, ch.name, nt.Text, err)
		}
		cc.Targets = append(c.named(nt.Group, nt.Event), lt...)
	case evtrigger.EnableHist, evtrigger.DisableHist:
		cc.Targets = c.histSlots(nt.Group, nt.Event)
	case evtrigger.Hist:
		prog, err := c.newHist(nt.Hist)
		if err != nil {
			return cc, "", fmt.Errorf("%s/%s: trigger %q: %w", ch.group, ch.name, ch.text, err)
		}
		cc.Hist, cc.Alloc = prog, true
	}
	if kept {
		return cc, nt.Text, nil
	}
	return cc, nt.String(), nil
}

// HistOps says how many pauses, conts and clears of existing histograms the change
// holds: Commit does them on a trace file; a control file cannot.
func (c *Controls) HistOps() int { return len(c.histOps) }

// unplaced is the slot triggers gives a run-time histogram whose table is not placed
// yet (a KPREWRITE_CONTROL file's, before a runtime installs it).
const unplaced = ^uint32(0)

// histOp is a pause, cont or clear of an existing histogram, done at Commit.
type histOp struct {
	slot               uint32
	spec               *evhist.Spec
	pause, cont, clear bool
}

// newHist is the program of a hist trigger added at run time, or why it cannot be.
func (c *Controls) newHist(spec *evhist.Spec) ([]byte, error) {
	if err := spec.SelfContained(); err != nil {
		return nil, fmt.Errorf("%w: give it to kprewrite rewrite --trigger", err)
	}
	if spec.HasStack() && !c.hasUnwind() {
		return nil, errors.New("the program has no unwind table to walk stacks with (the rewrite adds one to programs with a stacktrace trigger or key): rewrite it with the trigger")
	}
	return histProgram(c.Desc, spec)
}

// histProgram is the program of a self-contained histogram spec of image d.
func histProgram(d *tracefile.Desc, spec *evhist.Spec) ([]byte, error) {
	h := *spec
	if h.NeedsSymbols() {
		lim, err := symLimit(d)
		if err != nil {
			return nil, err
		}
		h.SymLimit = lim
	}
	if err := h.Check(); err != nil {
		return nil, err
	}
	return h.Program(nil), nil
}

// symLimit is image d's highest link-time address (.sym keys, as the rewrite gives
// them): from the rewritten binary, else its description's functions when it is not a
// PIE (whose addresses are the run-time ones).
func symLimit(d *tracefile.Desc) (uint64, error) {
	if f, err := elfio.Open(d.Image); err == nil {
		defer f.Close()
		return f.ImageEnd(), nil
	}
	if d.PIE {
		return 0, fmt.Errorf(".sym keys of a PIE need the rewritten binary %s to name its addresses, and it cannot be read", d.Image)
	}
	return 0, nil
}

// compiled is event i's trigger program as a run-time frame holds it (nil: the
// rewrite's triggers, whose hist triggers a frame keeps by slot).
func (c *Controls) compiled(i uint32) ([]evtrigger.Compiled, error) {
	en := c.frame.Entries[i]
	if en == nil || en.Flags&kprt.CETrig == 0 || en.Trig == nil {
		return nil, nil
	}
	return evtrigger.Decode(en.Trig, c.Desc.RuntimeEvents())
}

// SetSynthSwitch records that KPREWRITE_CONTROL switches the records of synthetic
// event k (its entry in the description's list) on or off at start-up.
func (c *Controls) SetSynthSwitch(k int, on bool) {
	sy := &c.Desc.Synthetic[k]
	if c.frame.Switches == nil {
		c.frame.Switches = map[uint32]uint32{}
	}
	bit := uint32(0) // records on when bit 0 equals the rewrite state (runtime/src/rt_hist.c)
	if on == sy.Disabled {
		bit = 1
	}
	c.frame.Switches[sy.SwitchSlot] = bit
	c.dirty = true
}

// SetSwitch records that KPREWRITE_CONTROL switches event i on or off at start-up.
func (c *Controls) SetSwitch(i uint32, on bool) error {
	e := &c.Desc.Events[i]
	if on && !c.Armed(i) {
		return fmt.Errorf("%s/%s: %w", e.Group, e.Name, ErrNotArmed)
	}
	en := c.entry(i)
	en.Flags &^= kprt.CEEnable | kprt.CEDisable
	if on {
		en.Flags |= kprt.CEEnable
	} else {
		en.Flags |= kprt.CEDisable
	}
	return nil
}

// noSymbols knows no function: a filter naming one is refused.
type noSymbols struct{}

func (noSymbols) Func(string) (uint64, uint64, bool)   { return 0, 0, false }
func (noSymbols) FuncAt(uint64) (uint64, uint64, bool) { return 0, 0, false }

type descSymbols []tracefile.DescSymbol

func (s descSymbols) Func(name string) (uint64, uint64, bool) {
	for _, x := range s {
		if x.Name == name {
			return x.Addr, max(x.Size, 1), true
		}
	}
	return 0, 0, false
}

func (s descSymbols) FuncAt(a uint64) (uint64, uint64, bool) {
	for _, x := range s {
		if a >= x.Addr && a < x.Addr+max(x.Size, 1) {
			return x.Addr, max(x.Size, 1), true
		}
	}
	return 0, 0, false
}
