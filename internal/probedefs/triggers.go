package probedefs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
)

// TriggerDef is one of an event's triggers and where it was given.
type TriggerDef struct {
	evtrigger.Trigger
	Origin string
}

// attachTriggers applies trigger specs ("GROUP/EVENT:TRIGGER", as `rewrite --trigger`
// and a definitions file's "trigger GROUP/EVENT:TRIGGER" lines give them) in order, as
// successive writes to the events' trigger files: the kernel's grammar and errors
// (internal/evtrigger), one trigger of a kind per event, '!' removes one. A
// multi-probe event's probes get the same triggers.
func attachTriggers(defs []Probe, synth *Synthetics, specs []FilterSpec) error {
	exists := func(group, event string) bool {
		for i := range defs {
			if defs[i].Def.Group == group && defs[i].Def.Event == event {
				return true
			}
		}
		return group == "synthetic" && synth != nil && synth.Events[event] != nil // enable_hist's
	}
	for _, s := range specs {
		if name, text, ok := synth.named(s.Text); ok {
			if err := synth.attach(name, text, s.Origin, exists); err != nil {
				return err
			}
			continue
		}
		hit, err := eventsNamed(defs, s, "trigger", "GROUP/EVENT:TRIGGER")
		if err != nil {
			return err
		}
		_, text, _ := strings.Cut(s.Text, ":")
		for _, i := range hit {
			d := &defs[i]
			if d.Handler != nil {
				return fmt.Errorf("%s: %s/%s runs a C handler and writes no records: give it triggers in its C code", s.Origin, d.Def.Group, d.Def.Event)
			}
			t, err := evtrigger.Parse(text, evtrigger.Env{Fields: evfilter.FieldsGo(d.Def), Syms: evfilter.AnySymbols{}, Exists: exists})
			if err != nil {
				return fmt.Errorf("%s: %s/%s: %w", s.Origin, d.Def.Group, d.Def.Event, err)
			}
			if d.Triggers, err = applyTrigger(d.Triggers, t, s.Origin); err != nil {
				return fmt.Errorf("%s: %s/%s: %w", s.Origin, d.Def.Group, d.Def.Event, err)
			}
		}
	}
	return nil
}

// applyTrigger applies t (given at origin) to an event's triggers (evtrigger.Set.Apply);
// the triggers it leaves keep where they were given.
func applyTrigger(tds []TriggerDef, t evtrigger.Trigger, origin string) ([]TriggerDef, error) {
	set := make(evtrigger.Set, len(tds))
	for k, td := range tds {
		set[k] = td.Trigger
	}
	set, err := set.Apply(t)
	if err != nil {
		return nil, err
	}
	next := make([]TriggerDef, 0, len(set))
	for _, t := range set {
		td := TriggerDef{Trigger: t, Origin: origin}
		for _, old := range tds {
			if old.Trigger == t {
				td.Origin = old.Origin
			}
		}
		next = append(next, td)
	}
	return next, nil
}

// eventsNamed finds the definitions of the event a "GROUP/EVENT:..." spec names.
func eventsNamed(defs []Probe, s FilterSpec, what, form string) ([]int, error) {
	target, _, ok := strings.Cut(s.Text, ":")
	if !ok || target == "" {
		return nil, fmt.Errorf("%s: %q: a %s is %s", s.Origin, s.Text, what, form)
	}
	var hit []int
	group, event, grouped := strings.Cut(target, "/")
	if !grouped {
		event, group = group, ""
	}
	groups := map[string]bool{}
	for i := range defs {
		d := defs[i].Def
		if d.Event == event && (!grouped || d.Group == group) {
			hit = append(hit, i)
			groups[d.Group] = true
		}
	}
	switch {
	case len(hit) == 0:
		return nil, fmt.Errorf("%s: no event %s is defined", s.Origin, target)
	case len(groups) > 1:
		return nil, fmt.Errorf("%s: events of several groups are called %s: name one as GROUP/%s", s.Origin, event, event)
	}
	return hit, nil
}

// CompileTriggers makes the runtime's trigger program of probe i: conditions
// compiled against the binary's functions, targets as runtime event indexes (evIdx:
// every runtime event of a GROUP/EVENT), count slots from slotOf (one per trigger of
// a logical event, shared by its probes; a histogram's table takes a run of them).
// symLimit is the image's highest link-time address (.sym keys). goid says whether the
// probe's records carry a goroutine id (common_goid).
func CompileTriggers(d *Probe, goid bool, syms evfilter.Symbols, symLimit uint64, evIdx map[string][]uint32, slotOf func(key string, words uint32) uint32, histSlots func(group, event string) []uint32) ([]byte, []uint32, error) {
	if len(d.Triggers) == 0 {
		return nil, nil, nil
	}
	var cs []evtrigger.Compiled
	var slots []uint32
	for _, td := range d.Triggers {
		if err := checkGoID(d, goid, td); err != nil {
			return nil, nil, err
		}
		c := evtrigger.Compiled{Trigger: td.Trigger}
		if td.Filter != "" {
			f, err := evfilter.Parse(td.Filter, evfilter.EventFields(d.Def, goid), syms)
			if err != nil {
				var fe *evfilter.Error
				if errors.As(err, &fe) {
					return nil, nil, fmt.Errorf("%s: trigger %q of %s/%s: %s\n%s", td.Origin, td.Text, d.Def.Group, d.Def.Event, fe.Message(), indent(fe.FilterFile()))
				}
				return nil, nil, fmt.Errorf("%s: trigger %q of %s/%s: %w", td.Origin, td.Text, d.Def.Group, d.Def.Event, err)
			}
			c.Filter = f.Program()
		}
		switch td.Cmd {
		case evtrigger.EnableEvent, evtrigger.DisableEvent:
			c.Targets = evIdx[td.Group+"/"+td.Event]
		case evtrigger.EnableHist, evtrigger.DisableHist:
			c.Targets = histSlots(td.Group, td.Event)
		}
		words := uint32(1)
		if td.Hist != nil {
			h := *td.Hist
			h.SymLimit = symLimit
			c.Hist = h.Program(slotOf)
			words = uint32(h.TableWords())
		}
		c.Slot = slotOf(HistKey(d.Def.Group, d.Def.Event, td.Trigger), words)
		slots = append(slots, c.Slot)
		cs = append(cs, c)
	}
	prog, err := evtrigger.Program(cs)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s/%s: %w", d.Triggers[0].Origin, d.Def.Group, d.Def.Event, err)
	}
	return prog, slots, nil
}

// checkGoID refuses trigger td of probe d when it names common_goid and the probe's
// records carry none (goid false): it was parsed with the id's field (attachTriggers),
// as the binary was not read yet, so it is parsed again without it.
func checkGoID(d *Probe, goid bool, td TriggerDef) error {
	if goid {
		return nil
	}
	env := evtrigger.Env{Fields: evfilter.Fields(d.Def), Syms: evfilter.AnySymbols{}, Exists: func(string, string) bool { return true }}
	if _, err := evtrigger.Parse(td.Text, env); err != nil {
		return noGoID(td.Origin, d, "trigger "+strconv.Quote(td.Text))
	}
	return nil
}

// TriggerTargets says which events are the targets of some enable_event or
// disable_event trigger ("GROUP/EVENT").
func TriggerTargets(defs []Probe) map[string]bool {
	t := map[string]bool{}
	for i := range defs {
		for _, td := range defs[i].Triggers {
			if td.Cmd == evtrigger.EnableEvent || td.Cmd == evtrigger.DisableEvent {
				t[td.Group+"/"+td.Event] = true
			}
		}
	}
	return t
}

// Synthetics are the synthetic events of a rewrite ("s:NAME TYPE FIELD; ..."
// definitions) and their triggers (hist only).
type Synthetics struct {
	Events   map[string]*evhist.Synthetic
	Order    []string // as defined
	Triggers map[string][]TriggerDef
}

// named says whether a "GROUP/EVENT:TRIGGER" spec names a synthetic event
// ("synthetic/NAME").
func (s *Synthetics) named(spec string) (name, text string, ok bool) {
	target, text, found := strings.Cut(spec, ":")
	if !found || s == nil {
		return "", "", false
	}
	group, event, grouped := strings.Cut(target, "/")
	if !grouped {
		return "", "", false
	}
	if group == "synthetic" && s.Events[event] != nil {
		return event, text, true
	}
	return "", "", false
}

func (s *Synthetics) attach(name, text, origin string, exists func(g, e string) bool) error {
	sy := s.Events[name]
	t, err := evtrigger.Parse(text, evtrigger.Env{Fields: sy.Fields(), Syms: evfilter.AnySymbols{}, Exists: exists})
	if err != nil {
		return fmt.Errorf("%s: synthetic/%s: %w", origin, name, err)
	}
	if t.Cmd != evtrigger.Hist {
		return fmt.Errorf("%s: synthetic/%s: trigger %q: a synthetic event takes hist triggers only (kprewrite records no synthetic events)", origin, name, text)
	}
	next, err := applyTrigger(s.Triggers[name], t, origin)
	if err != nil {
		return fmt.Errorf("%s: synthetic/%s: %w", origin, name, err)
	}
	if s.Triggers == nil {
		s.Triggers = map[string][]TriggerDef{}
	}
	s.Triggers[name] = next
	return nil
}

// HistKey is the control-area slot key of a trigger of GROUP/EVENT (of a hist
// trigger: its table's), shared by the probes of a multi-probe event; a named
// histogram (name=NAME) is one table whichever events feed it.
func HistKey(group, event string, t evtrigger.Trigger) string {
	if t.Hist != nil && t.Hist.Name != "" {
		return "\x00named\x00" + t.Hist.Name
	}
	return group + "/" + event + "\x00" + t.String()
}

// ErrNamedMismatch is the kernel's refusal of a named hist trigger unlike the one
// that made the name (HIST_ERR_NAMED_MISMATCH).
var ErrNamedMismatch = errors.New("Named hist trigger doesn't match existing named trigger (includes variables)")

// checkNamedHists: the histograms named alike (name=NAME) share one table, which the
// kernel allows only between triggers with the same keys, values, sort and size
// (hist_trigger_match, the filter aside) on fields of the same sizes; kprewrite also
// keeps variables and actions out of them (a variable lives in its event's entries).
func checkNamedHists(defs []Probe, synth *Synthetics) error {
	type first struct {
		spec       *evhist.Spec
		group, evt string
	}
	byName := map[string]first{}
	check := func(group, event string, td TriggerDef) error {
		h := td.Hist
		if h == nil || h.Name == "" {
			return nil
		}
		if len(h.Vars) > 0 || len(h.Actions) > 0 {
			return fmt.Errorf("%s: %s/%s: named histogram %s: variables and actions are not supported in a named histogram", td.Origin, group, event, h.Name)
		}
		f, ok := byName[h.Name]
		if !ok {
			byName[h.Name] = first{h, group, event}
			return nil
		}
		if !sameTable(f.spec, h) {
			return fmt.Errorf("%s: %s/%s: %w (%s, first on %s/%s)", td.Origin, group, event, ErrNamedMismatch, h.Name, f.group, f.evt)
		}
		return nil
	}
	for i := range defs {
		for _, td := range defs[i].Triggers {
			if err := check(defs[i].Def.Group, defs[i].Def.Event, td); err != nil {
				return err
			}
		}
	}
	if synth != nil {
		for _, name := range synth.Order {
			for _, td := range synth.Triggers[name] {
				if err := check("synthetic", name, td); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sameTable says whether two hist triggers can share a table: the same trigger but
// its filter and its pause, cont or clear, on fields of the same sizes and kinds.
func sameTable(a, b *evhist.Spec) bool {
	x, y := *a, *b
	x.Filter, y.Filter = "", ""
	x.Pause, x.Cont, x.Clear, y.Pause, y.Cont, y.Clear = false, false, false, false, false, false
	if x.Info() != y.Info() {
		return false
	}
	like := func(f, g []evhist.Field) bool {
		for i := range f {
			if f[i].Size != g[i].Size || f[i].Signed != g[i].Signed || f[i].String != g[i].String || f[i].Comm != g[i].Comm || f[i].Src != g[i].Src {
				return false
			}
		}
		return true
	}
	return like(a.Keys, b.Keys) && like(a.Vals, b.Vals)
}

// linkHists resolves the hist triggers' variable references and onmatch() actions
// across events (evhist.LinkAll).
func linkHists(defs []Probe, synth *Synthetics) error {
	var hs []evhist.Named
	seen := map[string]bool{}
	for i := range defs {
		d := defs[i].Def
		for _, td := range defs[i].Triggers {
			if td.Hist == nil {
				continue
			}
			k := HistKey(d.Group, d.Event, td.Trigger)
			if seen[k] { // the probes of a multi-probe event share it
				continue
			}
			seen[k] = true
			hs = append(hs, evhist.Named{Group: d.Group, Event: d.Event, Key: k, Spec: td.Hist})
		}
	}
	sh := map[string][]evhist.Named{}
	for name, tds := range synth.Triggers {
		for _, td := range tds {
			sh[name] = append(sh[name], evhist.Named{Group: "synthetic", Event: name, Key: HistKey("synthetic", name, td.Trigger), Spec: td.Hist})
		}
	}
	if err := evhist.LinkAll(hs, synth.Events, sh); err != nil {
		return err
	}
	// the probes of a multi-probe event each have their own copy of the Spec
	links := map[string]*evhist.Link{}
	for _, h := range hs {
		links[h.Key] = h.Spec.Link
	}
	for i := range defs {
		for _, td := range defs[i].Triggers {
			if td.Hist != nil {
				td.Hist.Link = links[HistKey(defs[i].Def.Group, defs[i].Def.Event, td.Trigger)]
			}
		}
	}
	return nil
}
