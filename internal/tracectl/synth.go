package tracectl

import (
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// A synthetic event's histograms: the rewrite's are targets of the histograms whose
// actions generate the event (they are linked when rewriting); those added at run time
// are a frame entry of their own (kprt.CtlSynth | the event's index), which the
// runtime runs after the rewrite's on the same data.

// synthKey is the frame entry of synthetic event k.
func synthKey(k int) uint32 { return kprt.CtlSynth | uint32(k) }

// synthFields are synthetic event k's fields.
func (c *Controls) synthFields(k int) ([]evfilter.Field, error) {
	def, err := evhist.ParseSynthetic(c.Desc.Synthetic[k].Def)
	if err != nil {
		return nil, err
	}
	return def.Fields(), nil
}

// SynthTriggers are synthetic event k's histograms now, as its trigger file lists
// them, and their table slots: the rewrite's, then those added at run time.
func (c *Controls) SynthTriggers(k int) ([]string, []uint32, error) {
	sy := &c.Desc.Synthetic[k]
	ts := append([]string(nil), sy.Triggers...)
	slots := append([]uint32(nil), sy.CtlSlots...)
	en := c.frame.Entries[synthKey(k)]
	if en == nil || en.Flags&kprt.CETrig == 0 || en.Trig == nil {
		return ts, slots, nil
	}
	cs, err := evtrigger.Decode(en.Trig, c.Desc.RuntimeEvents())
	if err != nil {
		return nil, nil, err
	}
	if len(cs) != len(en.Triggers) {
		return nil, nil, fmt.Errorf("the run-time triggers list %d triggers for %d in their program", len(en.Triggers), len(cs))
	}
	for i, x := range cs {
		ts = append(ts, en.Triggers[i])
		if x.Alloc {
			slots = append(slots, unplaced)
		} else {
			slots = append(slots, x.Slot)
		}
	}
	return ts, slots, nil
}

// ApplySynthTrigger writes a hist trigger to synthetic event k's trigger file: a new
// histogram (self-contained, as every one added at run time), ":pause", ":cont" or
// ":clear" of an existing one, or "!hist:..." removing one added at run time. The
// rewrite's histograms stay (the generating histograms hold them): they can be paused.
func (c *Controls) ApplySynthTrigger(k int, text string) error {
	sy := &c.Desc.Synthetic[k]
	if sy.ID == 0 {
		return fmt.Errorf("synthetic/%s: the program was rewritten by a kprewrite that ran no run-time histograms of synthetic events (rewrite it again)", sy.Name)
	}
	if k >= kprt.CtlMaxSynth {
		return fmt.Errorf("synthetic/%s: run-time histograms are kept for the first %d synthetic events of a program", sy.Name, kprt.CtlMaxSynth)
	}
	fs, err := c.synthFields(k)
	if err != nil {
		return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
	}
	env := evtrigger.Env{Fields: fs, Syms: c.symbols(), Exists: func(g, e string) bool { return len(c.named(g, e)) > 0 }}
	t, err := evtrigger.Parse(text, env)
	if err != nil {
		return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
	}
	if t.Cmd != evtrigger.Hist {
		return fmt.Errorf("synthetic/%s: trigger %q: a synthetic event takes hist triggers only", sy.Name, text)
	}
	listed, slots, err := c.SynthTriggers(k)
	if err != nil {
		return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
	}
	nRewrite := len(sy.Triggers)
	set := make(evtrigger.Set, len(listed))
	for i, l := range listed {
		spec, err := parseHist(l, fs)
		if err != nil {
			return fmt.Errorf("synthetic/%s: its trigger %q: %w", sy.Name, l, err)
		}
		set[i] = evtrigger.Trigger{Cmd: evtrigger.Hist, Text: l, Count: evtrigger.Unlimited, Hist: spec, Filter: spec.Filter}
	}
	if !t.Remove && (t.Hist.Pause || t.Hist.Cont || t.Hist.Clear) {
		for i := range set {
			if set[i].Hist.Same(t.Hist) {
				if slots[i] == unplaced {
					return fmt.Errorf("synthetic/%s: trigger %q: the histogram is made when the program starts; pause, cont and clear act on a trace file's (kprewrite trigger FILE, kprewrite hist --pause)", sy.Name, text)
				}
				c.histOps = append(c.histOps, histOp{slot: slots[i], spec: set[i].Hist, pause: t.Hist.Pause, cont: t.Hist.Cont, clear: t.Hist.Clear})
				return nil
			}
		}
	}
	next, err := set.Apply(t)
	if err != nil {
		return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
	}
	// the rewrite's stay, in their order, before the run-time ones
	var cs []evtrigger.Compiled
	var out []string
	en := c.frame.Entries[synthKey(k)]
	var prev []evtrigger.Compiled
	if en != nil && en.Flags&kprt.CETrig != 0 && en.Trig != nil {
		if prev, err = evtrigger.Decode(en.Trig, c.Desc.RuntimeEvents()); err != nil {
			return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
		}
	}
	kept := 0
	for _, nt := range next {
		at := -1
		for i := range set {
			if set[i].Text == nt.Text {
				at = i
			}
		}
		switch {
		case at >= 0 && at < nRewrite:
			kept++
		case at >= nRewrite: // added at run time before: its program and table
			cs = append(cs, prev[at-nRewrite])
			out = append(out, nt.Text)
		default:
			prog, err := c.newHist(nt.Hist)
			if err != nil {
				return fmt.Errorf("synthetic/%s: trigger %q: %w", sy.Name, text, err)
			}
			cs = append(cs, evtrigger.Compiled{Trigger: nt, Hist: prog, Alloc: true})
			out = append(out, nt.String())
		}
	}
	if kept != nRewrite {
		return fmt.Errorf("synthetic/%s: trigger %q: that histogram was given when rewriting and the histograms generating the event feed it; pause it (hist:...:pause) instead, or rewrite without it", sy.Name, text)
	}
	ent := c.entry(synthKey(k))
	ent.Flags |= kprt.CETrig
	ent.Trig, ent.Triggers = nil, nil
	if len(cs) > 0 {
		prog, err := evtrigger.Program(cs)
		if err != nil {
			return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
		}
		ent.Trig, ent.Triggers = prog, out
	}
	return nil
}

// SynthFilter is synthetic event k's filter now ("" for none): a run-time one, else
// the rewrite's.
func (c *Controls) SynthFilter(k int) string {
	if en := c.frame.Entries[synthKey(k)]; en != nil && en.Flags&kprt.CEFilter != 0 {
		return en.FilterText
	}
	return c.Desc.Synthetic[k].Filter
}

// SetSynthFilter gives synthetic event k the filter expr ("0" removes it, the
// rewrite's too): the records it refuses are not written; its histograms count them.
func (c *Controls) SetSynthFilter(k int, expr string) error {
	sy := &c.Desc.Synthetic[k]
	if sy.ID == 0 || k >= kprt.CtlMaxSynth {
		return fmt.Errorf("synthetic/%s: the program was rewritten by a kprewrite that recorded no synthetic events, or it has more than %d (rewrite it again)", sy.Name, kprt.CtlMaxSynth)
	}
	en := c.entry(synthKey(k))
	if strings.TrimSpace(expr) == "0" {
		en.Flags |= kprt.CEFilter
		en.Filter, en.FilterText = nil, ""
		return nil
	}
	fs, err := c.synthFields(k)
	if err != nil {
		return fmt.Errorf("synthetic/%s: %w", sy.Name, err)
	}
	f, err := evfilter.Parse(expr, fs, c.symbols())
	if err != nil {
		return evfilter.EventError("synthetic", sy.Name, err)
	}
	en.Flags |= kprt.CEFilter
	en.Filter, en.FilterText = f.Program(), expr
	return nil
}
