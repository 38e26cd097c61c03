package evhist

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/evfilter"
)

// Named is a hist trigger of an event, and the key its table's slot is allocated by.
type Named struct {
	Group, Event string
	Key          string
	Spec         *Spec
}

// Ref is a variable of another histogram that an expression or an action reads: the
// entry with the same key in that histogram, the variable's value there.
type Ref struct {
	Key string // the slot key of the histogram defining it
	Of  *Spec
	Var int
}

// Target is a histogram of the synthetic event an action generates, and its "if"
// compiled against the synthetic event's fields (nil: none).
type Target struct {
	Key    string
	Of     *Spec
	Filter []byte
}

// Param says where an action's parameter comes from.
type Param struct {
	Kind uint8 // OpField, OpRef, OpVar
	Idx  int   // the field (in Operands), the ref, or this histogram's variable
	f    *Field
}

// Operand kinds in the runtime's program.
const (
	OpNone uint8 = iota
	OpField
	OpRef
	OpConst
	OpVar
)

// Link is what a histogram with variable references or actions reads and feeds.
type Link struct {
	Refs    []Ref
	Targets []Target
	Params  []Param
	Synth   *Synthetic
}

// LinkAll resolves every histogram's variable references ($name: a variable of the
// histogram of the action's matching event, else the one histogram that defines it)
// and actions (the synthetic event, its parameters, its histograms), as the kernel
// does when a trigger with references is written. synth are the synthetic events;
// synthHists their histograms (by synthetic event name).
func LinkAll(hists []Named, synth map[string]*Synthetic, synthHists map[string][]Named) error {
	for i := range hists {
		h := &hists[i]
		if err := link(h, hists, synth, synthHists); err != nil {
			return fmt.Errorf("%s/%s: %s: %w", h.Group, h.Event, h.Spec.Info(), err)
		}
	}
	for name, hs := range synthHists {
		for _, h := range hs {
			if len(h.Spec.Actions) > 0 || h.Spec.refs() {
				return fmt.Errorf("synthetic/%s: %s: a synthetic event's histogram cannot reference variables or generate events (not supported yet)", name, h.Spec.Info())
			}
		}
	}
	return nil
}

func (s *Spec) refs() bool {
	for _, v := range s.Vars {
		for _, o := range v.Expr {
			if o.Ref != "" {
				return true
			}
		}
	}
	return false
}

func link(h *Named, hists []Named, synth map[string]*Synthetic, synthHists map[string][]Named) error {
	s := h.Spec
	tr := s.Tracer()
	if !s.refs() && tr == nil {
		return nil
	}
	l := &Link{}
	var match *Named
	if tr != nil && !tr.Tracks() {
		a := *tr
		for i := range hists {
			if hists[i].Group == a.Group && hists[i].Event == a.Event {
				match = &hists[i]
				break
			}
		}
		if match == nil {
			return errf(a.Group+"."+a.Event, "Matching event histogram not found")
		}
	}
	refIdx := map[string]int{}
	resolve := func(name string) (int, error) {
		if i, ok := refIdx[name]; ok {
			return i, nil
		}
		var found []Ref
		if match != nil {
			for v, d := range match.Spec.Vars {
				if d.Name == name {
					found = append(found, Ref{Key: match.Key, Of: match.Spec, Var: v})
				}
			}
		}
		if len(found) == 0 {
			for i := range hists {
				if hists[i].Spec == s {
					continue
				}
				for v, d := range hists[i].Spec.Vars {
					if d.Name == name {
						found = append(found, Ref{Key: hists[i].Key, Of: hists[i].Spec, Var: v})
					}
				}
			}
		}
		switch {
		case len(found) == 0:
			return 0, errf("$"+name, "Couldn't find variable")
		case len(found) > 1:
			return 0, errf("$"+name, "Variable name not unique, need to use fully qualified name (subsys.event.var) for variable")
		}
		r := found[0]
		if !sameKeys(r.Of, s) {
			return 0, errf("$"+name, "the histogram defining it has other keys: a variable is read at the entry of the same key")
		}
		if len(l.Refs) == MaxRefs {
			return 0, errf("$"+name, fmt.Sprintf("Too many variable references (%d max)", MaxRefs))
		}
		refIdx[name] = len(l.Refs)
		l.Refs = append(l.Refs, r)
		return len(l.Refs) - 1, nil
	}
	for _, v := range s.Vars {
		for _, o := range v.Expr {
			if o.Ref != "" {
				if _, err := resolve(o.Ref); err != nil {
					return err
				}
			}
		}
	}
	if tr != nil {
		a := *tr
		sy := synth[a.Synth]
		if sy == nil {
			return errf(a.Synth, "Couldn't find synthetic event")
		}
		if len(a.Params) != len(sy.Names) {
			return errf(a.String(), "Param count doesn't match synthetic event field count")
		}
		l.Synth = sy
		for _, p := range a.Params {
			if strings.HasPrefix(p, "$") {
				own := -1
				for v, d := range s.Vars {
					if d.Name == p[1:] {
						own = v
					}
				}
				if own >= 0 {
					l.Params = append(l.Params, Param{Kind: OpVar, Idx: own})
					continue
				}
				r, err := resolve(p[1:])
				if err != nil {
					return err
				}
				l.Params = append(l.Params, Param{Kind: OpRef, Idx: r})
				continue
			}
			return errf(p, "Couldn't find param (give a variable: $name)")
		}
		for _, t := range synthHists[a.Synth] {
			tg := Target{Key: t.Key, Of: t.Spec}
			if t.Spec.Filter != "" {
				f, err := evfilter.Parse(t.Spec.Filter, synth[a.Synth].Fields(), evfilter.AnySymbols{})
				if err != nil {
					return fmt.Errorf("synthetic/%s: %q: %w", a.Synth, t.Spec.Filter, err)
				}
				tg.Filter = f.Program()
			}
			l.Targets = append(l.Targets, tg)
		}
	}
	s.Link = l
	return nil
}

// sameKeys says whether two histograms' keys take the same words in the same order.
func sameKeys(a, b *Spec) bool {
	if len(a.Keys) != len(b.Keys) {
		return false
	}
	for i := range a.Keys {
		if a.Keys[i].Words() != b.Keys[i].Words() || a.Keys[i].String != b.Keys[i].String {
			return false
		}
	}
	return true
}

// SelfContained says why the histogram needs other tables laid out with it (nil when
// it does not): variables, references to other histograms' variables, actions and
// shared names are linked when the program is rewritten; a histogram added at run time
// (kprewrite trigger, KPREWRITE_CONTROL) has only its own table.
func (s *Spec) SelfContained() error {
	switch {
	case s.Name != "":
		return errors.New("a named histogram (name=) is shared by the events rewritten with it")
	case len(s.Vars) > 0 || s.refs():
		return errors.New("histogram variables are linked to the histograms reading them")
	case len(s.Actions) > 0:
		return errors.New("actions (onmatch, onmax, onchange) are linked to their events")
	}
	return nil
}
