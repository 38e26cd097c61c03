package tracectl

import (
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Hist is one hist trigger of one event of one image, and its table in the file.
type Hist struct {
	Group, Name string
	Image       string // the image's input name
	Desc        *tracefile.Desc
	Spec        *evhist.Spec
	table       []byte
}

// Read reads the histogram as it is now (writers may be adding to it).
func (h *Hist) Read() (*evhist.Table, error) { return h.Spec.ReadTable(h.table) }

// Hists lists the histograms of the events matching pattern (EVENT, GROUP/EVENT,
// GROUP/* or all), in image order, each image's events then its synthetic events,
// in trigger order. A multi-probe event's histogram is listed once.
func (f *File) Hists(pattern string) ([]Hist, error) {
	var out []Hist
	matched := false
	for _, im := range f.images {
		if im.desc == nil {
			continue
		}
		flagBytes := kprt.CtlFlagBytes(im.desc.RuntimeEvents())
		// a multi-probe event lists its histograms once; a named one (name=) is
		// listed under each event that feeds it, as each event's hist file shows it
		type listed struct {
			group, name string
			slot        uint32
		}
		seen := map[listed]bool{}
		// add lists the hist triggers among one event's triggers
		add := func(group, name string, triggers []string, slots []uint32, fields func() ([]evfilter.Field, error)) error {
			if !eventdef.MatchesName(pattern, group, name) {
				return nil
			}
			matched = true
			for k, text := range triggers {
				if !isHist(text) {
					continue
				}
				if k >= len(slots) || slots[k] == unplaced || seen[listed{group, name, slots[k]}] {
					continue
				}
				seen[listed{group, name, slots[k]}] = true
				fs, err := fields()
				var spec *evhist.Spec
				if err == nil {
					spec, err = parseHist(text, fs)
				}
				var h Hist
				if err == nil {
					h, err = f.hist(im, flagBytes, slots[k], spec)
				}
				if err != nil {
					return fmt.Errorf("%s: %s/%s: %w", f.Path, group, name, err)
				}
				h.Group, h.Name, h.Image, h.Desc = group, name, im.desc.Input, im.desc
				out = append(out, h)
			}
			return nil
		}
		// the triggers as the latest run-time change left them (histograms added at run time)
		fr, err := f.latestFrame(im.desc.ImageID)
		if err != nil {
			return nil, err
		}
		ctl, err := NewControls(im.desc, fr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", f.Path, im.desc.Input, err)
		}
		for i, e := range im.desc.Events {
			ts, slots, err := ctl.triggers(uint32(i))
			if err != nil {
				return nil, fmt.Errorf("%s: %s/%s: %w", f.Path, e.Group, e.Name, err)
			}
			err = add(e.Group, e.Name, ts, slots, func() ([]evfilter.Field, error) {
				p, err := eventdef.Parse(e.Def)
				if err != nil {
					return nil, err
				}
				return evfilter.EventFields(p, e.GoID > 0), nil
			})
			if err != nil {
				return nil, err
			}
		}
		for k, sy := range im.desc.Synthetic {
			ts, slots, err := ctl.SynthTriggers(k)
			if err != nil {
				return nil, fmt.Errorf("%s: synthetic/%s: %w", f.Path, sy.Name, err)
			}
			err = add("synthetic", sy.Name, ts, slots, func() ([]evfilter.Field, error) {
				def, err := evhist.ParseSynthetic(sy.Def)
				if err != nil {
					return nil, err
				}
				return def.Fields(), nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if !matched {
		return nil, fmt.Errorf("%s: no event %s%s", f.Path, pattern, f.eventHint(pattern))
	}
	return out, nil
}

// hist is the histogram of spec at slot of an image's control area: in the area, or
// (added at run time) after it in the file's counters area.
func (f *File) hist(im image, flagBytes uint64, slot uint32, spec *evhist.Spec) (Hist, error) {
	rel := flagBytes + uint64(slot)*8
	n := uint64(spec.TableWords()) * 8
	off := im.ctlOff + rel
	coff, csize := atomic.LoadUint64(f.word64(offCountersOff)), atomic.LoadUint64(f.word64(offCountersSize))
	inArea := rel+n <= uint64(im.ctlSize)
	inCounters := off >= coff && coff+csize <= uint64(len(f.data)) && off+n <= coff+csize
	if (!inArea && !inCounters) || off+n > uint64(len(f.data)) {
		return Hist{}, fmt.Errorf("the histogram is past the image's control area (the program that wrote the file did not run its triggers)")
	}
	return Hist{Spec: spec, table: f.data[off : off+n]}, nil
}

// parseHist parses a hist trigger as the description lists it ("hist:... [active]").
func parseHist(text string, fields []evfilter.Field) (*evhist.Spec, error) {
	text = strings.TrimSuffix(strings.TrimSuffix(text, " [active]"), " [paused]")
	if name, rest, ok := namedHist(text); ok {
		text = "hist:name=" + name + ":" + rest
	}
	t, err := evtrigger.Parse(text, evtrigger.Env{Fields: fields, Syms: evfilter.AnySymbols{}, Exists: func(string, string) bool { return true }})
	if err != nil {
		return nil, err
	}
	if t.Hist == nil {
		return nil, fmt.Errorf("trigger %q is not a hist trigger", text)
	}
	return t.Hist, nil
}

func (h *Hist) word(i int) *uint64 { return (*uint64)(unsafe.Pointer(&h.table[8*i])) }

// SetPaused pauses or continues the histogram (":pause", ":cont") for every program
// writing into the file; it returns whether it was paused.
func (h *Hist) SetPaused(paused bool) bool {
	w := h.word(0)
	for {
		old := atomic.LoadUint64(w)
		nw := old &^ evhist.FlagPaused
		if paused {
			nw |= evhist.FlagPaused
		}
		if atomic.CompareAndSwapUint64(w, old, nw) {
			return old&evhist.FlagPaused != 0
		}
	}
}

// Clear empties the histogram (":clear"), leaving it paused or not as it was. A
// program adding to it at the same moment may lose the hit it was adding.
func (h *Hist) Clear() {
	was := h.SetPaused(true)
	for i := 2; i < len(h.table)/8; i++ { // after the flags and the reserved hits word
		atomic.StoreUint64(h.word(i), 0)
	}
	h.SetPaused(was)
}

// Listed is event ev's triggers (c: its image's controls; nil: a synthetic event's
// are the rewrite's) as its trigger file lists them now: a counted trigger's count is what
// it has left, a histogram's state, [active] or [paused], its table's.
func (f *File) Listed(ev Event, c *Controls) []string {
	im := f.images[ev.img]
	var ts []string
	var slots []uint32
	if ev.Synthetic { // its histograms: the rewrite's, then those added at run time
		sy := &im.desc.Synthetic[ev.Index]
		ts, slots = sy.Triggers, sy.CtlSlots
		if c != nil {
			if t, s, err := c.SynthTriggers(int(ev.Index)); err == nil {
				ts, slots = t, s
			}
		}
	} else {
		var err error
		if ts, slots, err = c.triggers(ev.Index); err != nil {
			return c.Triggers(ev.Index)
		}
	}
	flagBytes := kprt.CtlFlagBytes(im.desc.RuntimeEvents())
	out := append([]string(nil), ts...)
	for k, t := range ts {
		if k >= len(slots) || slots[k] == unplaced {
			continue
		}
		off := im.ctlOff + flagBytes + uint64(slots[k])*8
		if off+8 > uint64(len(f.data)) {
			continue
		}
		if !isHist(t) { // a counted trigger: the fires it has left, as the kernel lists it
			out[k] = withCount(t, atomic.LoadUint64(f.word64(uintptr(off))))
			continue
		}
		state := " [active]"
		if atomic.LoadUint64(f.word64(uintptr(off)))&evhist.FlagPaused != 0 {
			state = " [paused]"
		}
		out[k] = strings.TrimSuffix(strings.TrimSuffix(t, " [active]"), " [paused]") + state
	}
	return out
}

// withCount is listed trigger t with the fires it has left (n), as the kernel lists a
// counted trigger; t unchanged when it has no count.
func withCount(t string, n uint64) string {
	i := strings.Index(t, ":count=")
	if i < 0 {
		return t
	}
	end := i + len(":count=")
	for end < len(t) && t[end] >= '0' && t[end] <= '9' {
		end++
	}
	return t[:i] + fmt.Sprintf(":count=%d", n) + t[end:]
}
