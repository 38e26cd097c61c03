package tracectl

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Triggers on events added at run time (kprewrite trigger FILE EVENT TRIGGER): the
// trigger file of a live event. Its triggers are an evtrigger program in its entry of
// the live frame, with their texts; their counts and histograms' tables are words of
// the counters area given out when a trigger is added, named by their slot from the
// image's control area, as the rewrite's are (the runtime's rt_trigger.c runs them).

// liveTriggerCmds are the commands a live event's trigger may have: all but
// enable_hist and disable_hist, whose targets are the rewrite's tables.
var liveTriggerCmds = map[evtrigger.Command]bool{
	evtrigger.TraceOn: true, evtrigger.TraceOff: true, evtrigger.Snapshot: true,
	evtrigger.EnableEvent: true, evtrigger.DisableEvent: true, evtrigger.StackTrace: true,
	evtrigger.Hist: true,
}

// SetLiveTrigger writes trigger text to the trigger files of the events added at run
// time that match pattern (EVENT, GROUP/EVENT, GROUP/*), as the kernel's: a new trigger
// (EEXIST for a second of its kind), or "!CMD" removing one. The programs run it from
// their next hit on. It returns the events changed.
func (f *File) SetLiveTrigger(pattern, text string) ([]LiveEvent, error) {
	if strings.ContainsAny(text, "\n\x00") {
		return nil, fmt.Errorf("trigger %q: a trigger is one line", text)
	}
	evs, err := f.Live()
	if err != nil {
		return nil, err
	}
	var out []LiveEvent
	byImg := map[int][]LiveEvent{}
	for _, e := range evs {
		if !e.Gone && eventdef.MatchesName(pattern, e.Group, e.Name) {
			byImg[e.img] = append(byImg[e.img], e)
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no event %s was added at run time", f.Path, pattern)
	}
	// every change checked and compiled first: nothing is written unless all are accepted
	type imageChange struct {
		slotBase uint64
		changes  map[uint32]*liveTrigChange
		ops      []*histOp
	}
	plan := map[int]*imageChange{}
	for k, es := range byImg {
		slotBase, err := f.liveSlotBase(k)
		if err != nil {
			return nil, err
		}
		ic := &imageChange{slotBase: slotBase, changes: map[uint32]*liveTrigChange{}}
		for _, e := range es {
			ch, err := f.liveTrigChange(e, text)
			if err != nil {
				return nil, err
			}
			if ch.op != nil { // :pause, :cont or :clear of one it has: its table, no new frame
				ic.ops = append(ic.ops, ch.op)
			} else {
				ic.changes[e.ID] = ch
			}
		}
		plan[k] = ic
	}
	for k, ic := range plan {
		if err := f.commitLiveTriggers(k, ic.slotBase, ic.changes, ic.ops); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// commitLiveTriggers makes the changes of image k's live events' triggers: the
// histograms' pauses, conts and clears in their tables, the new sets in a new frame.
func (f *File) commitLiveTriggers(k int, slotBase uint64, changes map[uint32]*liveTrigChange, ops []*histOp) error {
	for _, op := range ops {
		if err := f.liveHistOp(k, slotBase, op); err != nil {
			return err
		}
	}
	if len(changes) == 0 {
		return nil
	}
	return f.commitLive(k, func(cur []tracefile.LiveEvent, _ uint32, alloc *liveAlloc) ([]tracefile.LiveEvent, error) {
		next := append([]tracefile.LiveEvent(nil), cur...)
		for i := range next {
			if ch := changes[next[i].ID]; ch != nil {
				if err := ch.apply(&next[i], slotBase, alloc); err != nil {
					return nil, err
				}
			}
		}
		return next, nil
	})
}

// liveSlotBase is the file offset of image k's control area's slot 0, from which the
// counts of its live events' triggers are named.
func (f *File) liveSlotBase(k int) (uint64, error) {
	im := f.images[k]
	if im.ctlSize == 0 {
		return 0, fmt.Errorf("%s: %s has no control area in the file (rewrite it again)", f.Path, im.desc.Input)
	}
	return im.ctlOff + kprt.CtlFlagBytes(im.desc.RuntimeEvents()), nil
}

// liveTrigChange is one event's new set of triggers, compiled but for the counts and
// tables of those it adds (given out under the file lock: liveTrigChange.apply), or a
// pause, cont or clear of one of its histograms (op).
type liveTrigChange struct {
	e      LiveEvent
	next   evtrigger.Set
	kept   map[string]uint32 // the slot of each trigger kept, by its listed text
	hist   map[string][]byte // the histograms' programs, by listed text
	filter map[string][]byte // the condition programs, by listed text
	target map[string][]uint32
	op     *histOp
}

// liveTrigChange applies trigger text to live event e's triggers, checked as the
// kernel's trigger file checks a write, against the event's own fields.
func (f *File) liveTrigChange(e LiveEvent, text string) (*liveTrigChange, error) {
	d := f.images[e.img].desc
	p, err := eventdef.Parse(e.Def)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", e.Group, e.Name, err)
	}
	fs := evfilter.Fields(p)
	var syms evfilter.Symbols = noSymbols{}
	if len(d.Symbols) > 0 {
		syms = descSymbols(d.Symbols)
	}
	env := evtrigger.Env{Fields: fs, Syms: syms, Exists: func(g, n string) bool {
		return len(rewriteEvents(d, g, n)) > 0 || f.liveExists(e.img, g, n) // (a live event's switch too)
	}}
	t, err := evtrigger.Parse(text, env)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", e.Group, e.Name, err)
	}
	if err := liveRunnable(d, t); err != nil {
		return nil, fmt.Errorf("%s/%s: trigger %q: %w", e.Group, e.Name, text, err)
	}
	ch := &liveTrigChange{e: e, kept: map[string]uint32{}, hist: map[string][]byte{}, filter: map[string][]byte{},
		target: map[string][]uint32{}}
	cur, err := ch.current(env, fs, d.RuntimeEvents())
	if err != nil {
		return nil, err
	}
	if ch.op = ch.histOp(cur, t); ch.op != nil {
		return ch, nil
	}
	if ch.next, err = cur.Apply(t); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", e.Group, e.Name, err)
	}
	live := func(g, n string) ([]uint32, error) { return f.liveNamed(e.img, g, n) }
	if err := ch.compile(d, fs, syms, live); err != nil {
		return nil, fmt.Errorf("%s/%s: trigger %q: %w", e.Group, e.Name, text, err)
	}
	return ch, nil
}

// compile compiles the new set's conditions, new histograms and switch targets (the
// rewrite's events, and the switches of the live events live names).
func (ch *liveTrigChange) compile(d *tracefile.Desc, fs []evfilter.Field, syms evfilter.Symbols, live func(g, n string) ([]uint32, error)) error {
	for _, nt := range ch.next {
		key := ch.key(nt)
		if _, kept := ch.kept[key]; nt.Cmd == evtrigger.Hist && !kept {
			prog, err := liveHistProgram(d, nt.Hist)
			if err != nil {
				return err
			}
			ch.hist[key] = prog
		}
		if nt.Filter != "" {
			flt, err := evfilter.Parse(nt.Filter, fs, syms)
			if err != nil {
				return err
			}
			ch.filter[key] = flt.Program()
		}
		if nt.Cmd.Switches() {
			lt, err := live(nt.Group, nt.Event)
			if err != nil {
				return err
			}
			ch.target[key] = append(rewriteEvents(d, nt.Group, nt.Event), lt...)
		}
	}
	return nil
}

// liveRunnable refuses a new trigger a live event cannot carry: enable_hist and
// disable_hist (their targets are the rewrite's tables), a stacktrace without the
// unwind table, enabling or disabling an event that is not armed.
func liveRunnable(d *tracefile.Desc, t evtrigger.Trigger) error {
	switch {
	case t.Remove:
		return nil
	case !liveTriggerCmds[t.Cmd]:
		return fmt.Errorf("%s triggers are not supported on events added at run time (the others are); give the event at rewrite time", t.Cmd)
	case t.Cmd == evtrigger.StackTrace && !hasUnwind(d):
		return errors.New("the program has no unwind table to walk stacks with (the rewrite adds one to programs with a stacktrace trigger or key): rewrite it with one")
	case t.Cmd.Switches():
		for _, x := range rewriteEvents(d, t.Group, t.Event) {
			if ev := d.Events[x]; ev.Disabled && !ev.Soft {
				return fmt.Errorf("%s/%s: %w", t.Group, t.Event, ErrNotArmed)
			}
		}
	}
	return nil
}

// current reads the event's triggers back as a set, each kept with its slot (and a
// histogram with its program): a histogram from its info line, any other by parsing it
// again.
func (ch *liveTrigChange) current(env evtrigger.Env, fs []evfilter.Field, nevents int) (evtrigger.Set, error) {
	e := ch.e
	if e.ent.Trig == nil {
		return nil, nil
	}
	cs, err := evtrigger.Decode(e.ent.Trig, nevents)
	if err != nil || len(cs) != len(e.ent.Triggers) {
		return nil, fmt.Errorf("%s/%s: its triggers in the file do not decode (%v)", e.Group, e.Name, err)
	}
	set := make(evtrigger.Set, len(cs))
	for k, listed := range e.ent.Triggers {
		old, err := evtrigger.Parse(unlisted(listed), env)
		if isHist(listed) {
			var spec *evhist.Spec
			spec, err = parseHist(listed, fs)
			old = evtrigger.Trigger{Cmd: evtrigger.Hist, Count: evtrigger.Unlimited, Hist: spec}
			if spec != nil {
				old.Filter = spec.Filter
			}
			ch.hist[listed] = cs[k].Hist
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%s: its trigger %q: %w", e.Group, e.Name, listed, err)
		}
		old.Text = listed
		set[k] = old
		ch.kept[listed] = cs[k].Slot
	}
	return set, nil
}

// histOp is t as a pause, cont or clear of a histogram the event has (nil: t is not).
func (ch *liveTrigChange) histOp(cur evtrigger.Set, t evtrigger.Trigger) *histOp {
	if t.Cmd != evtrigger.Hist || t.Remove || !(t.Hist.Pause || t.Hist.Cont || t.Hist.Clear) {
		return nil
	}
	for _, o := range cur {
		if o.Cmd == evtrigger.Hist && o.Hist.Same(t.Hist) {
			return &histOp{slot: ch.kept[o.Text], spec: o.Hist, pause: t.Hist.Pause, cont: t.Hist.Cont, clear: t.Hist.Clear}
		}
	}
	return nil
}

// liveHistProgram is the program of a histogram added to a live event of image d: one
// with its own table only (no variables, actions or name), as a histogram added at run
// time to a rewrite's event.
func liveHistProgram(d *tracefile.Desc, spec *evhist.Spec) ([]byte, error) {
	if err := spec.SelfContained(); err != nil {
		return nil, fmt.Errorf("%w: give the event at rewrite time", err)
	}
	if spec.HasStack() && !hasUnwind(d) {
		return nil, errors.New("the program has no unwind table to walk stacks with (the rewrite adds one to programs with a stacktrace trigger or key): rewrite it with one")
	}
	return histProgram(d, spec)
}

// liveHistOp pauses, continues or clears the table of a live event's histogram in
// image k.
func (f *File) liveHistOp(k int, slotBase uint64, op *histOp) error {
	im := f.images[k]
	h, err := f.hist(im, slotBase-im.ctlOff, op.slot, op.spec)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if op.clear {
		h.Clear()
	} else {
		h.SetPaused(op.pause)
	}
	return nil
}

// key is how a trigger of the new set is listed: a kept one as it was, a new one as
// the kernel lists it.
func (ch *liveTrigChange) key(nt evtrigger.Trigger) string {
	if _, ok := ch.kept[nt.Text]; ok {
		return nt.Text
	}
	return nt.String()
}

// apply writes the change into entry en of the new frame: kept triggers keep their
// counts and tables, a new one gets a word of the counters area (alloc) holding its
// first count, a new histogram its table there.
func (ch *liveTrigChange) apply(en *tracefile.LiveEvent, slotBase uint64, alloc *liveAlloc) error {
	var cs []evtrigger.Compiled
	var listed []string
	for _, nt := range ch.next {
		key := ch.key(nt)
		slot, ok := ch.kept[key]
		if !ok {
			var off uint64
			words := 1
			if nt.Cmd == evtrigger.Hist {
				words = nt.Hist.TableWords()
				off = alloc.table(words, uint64(ch.hist[key][2]&evhist.FlagPaused))
			} else {
				off = alloc.word(nt.Count)
			}
			if off < slotBase || (off-slotBase)/8+uint64(words) > evtrigger.MaxSlots {
				return fmt.Errorf("%s/%s: trigger %q: no room the programs can name is left in the counters area", ch.e.Group, ch.e.Name, nt.Text)
			}
			slot = uint32((off - slotBase) / 8)
		}
		cs = append(cs, evtrigger.Compiled{Trigger: nt, Slot: slot, Filter: ch.filter[key], Targets: ch.target[key],
			Hist: ch.hist[key]})
		listed = append(listed, key)
	}
	prog, err := evtrigger.Program(cs)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", ch.e.Group, ch.e.Name, err)
	}
	en.Trig, en.Triggers = prog, listed
	return nil
}

// rewriteEvents are the runtime indexes of the image's events (not those added at run
// time, which follow them in the description) named GROUP/NAME.
func rewriteEvents(d *tracefile.Desc, group, name string) []uint32 {
	var out []uint32
	for i := range d.Events[:d.RuntimeEvents()] {
		if ev := d.Events[i]; ev.Group == group && ev.Name == name {
			out = append(out, uint32(i))
		}
	}
	return out
}

// LiveTriggers are the event's triggers as its trigger file lists them: a counted one
// with the fires it has left.
func (f *File) LiveTriggers(e LiveEvent) []string {
	if e.ent.Trig == nil {
		return nil
	}
	out := append([]string(nil), e.ent.Triggers...)
	base, err := f.liveSlotBase(e.img)
	cs, derr := evtrigger.Decode(e.ent.Trig, f.images[e.img].desc.RuntimeEvents())
	if err != nil || derr != nil || len(cs) != len(out) {
		return out
	}
	for k := range out {
		off := base + uint64(cs[k].Slot)*8
		if off+8 > uint64(len(f.data)) {
			continue
		}
		w := atomic.LoadUint64(f.word64(uintptr(off)))
		if !isHist(out[k]) {
			out[k] = withCount(out[k], w)
			continue
		}
		state := " [active]" // (its table's first word, as Listed shows the rewrite's)
		if w&evhist.FlagPaused != 0 {
			state = " [paused]"
		}
		out[k] = strings.TrimSuffix(strings.TrimSuffix(out[k], " [active]"), " [paused]") + state
	}
	return out
}

// LiveHists are the histograms of the events added at run time that match pattern.
func (f *File) LiveHists(pattern string) ([]Hist, error) {
	evs, err := f.Live()
	if err != nil {
		return nil, err
	}
	var out []Hist
	for _, e := range evs {
		if e.Gone || e.ent.Trig == nil || !eventdef.MatchesName(pattern, e.Group, e.Name) {
			continue
		}
		d := f.images[e.img].desc
		base, err := f.liveSlotBase(e.img)
		if err != nil {
			return nil, err
		}
		cs, err := evtrigger.Decode(e.ent.Trig, d.RuntimeEvents())
		if err != nil || len(cs) != len(e.ent.Triggers) {
			return nil, fmt.Errorf("%s: %s/%s: its triggers do not decode (%v)", f.Path, e.Group, e.Name, err)
		}
		p, err := eventdef.Parse(e.Def)
		if err != nil {
			return nil, fmt.Errorf("%s: %s/%s: %w", f.Path, e.Group, e.Name, err)
		}
		for k, listed := range e.ent.Triggers {
			if !isHist(listed) {
				continue
			}
			spec, err := parseHist(listed, evfilter.Fields(p))
			var h Hist
			if err == nil {
				h, err = f.hist(f.images[e.img], base-f.images[e.img].ctlOff, cs[k].Slot, spec)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %s/%s: %w", f.Path, e.Group, e.Name, err)
			}
			h.Group, h.Name, h.Image, h.Desc = e.Group, e.Name, d.Input, d
			out = append(out, h)
		}
	}
	return out, nil
}
