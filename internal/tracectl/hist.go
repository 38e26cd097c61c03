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
// GROUP/* or all), in image, event and trigger order. A multi-probe event's histogram
// is listed once.
func (f *File) Hists(pattern string) ([]Hist, error) {
	var out []Hist
	matched := false
	for _, im := range f.images {
		if im.desc == nil {
			continue
		}
		flagBytes := (uint64(len(im.desc.Events))*4 + 7) &^ 7
		seen := map[uint32]bool{}
		for _, e := range im.desc.Events {
			if !eventdef.MatchesName(pattern, e.Group, e.Name) {
				continue
			}
			matched = true
			for k, text := range e.Triggers {
				if !strings.HasPrefix(text, "hist:") && !strings.Contains(strings.SplitN(text, " ", 2)[0], ":hist:") {
					continue
				}
				if k >= len(e.CtlSlots) || seen[e.CtlSlots[k]] {
					continue
				}
				seen[e.CtlSlots[k]] = true
				p, err := eventdef.Parse(e.Def)
				var spec *evhist.Spec
				if err == nil {
					spec, err = parseHist(text, evfilter.Fields(p))
				}
				var h Hist
				if err == nil {
					h, err = f.hist(im, flagBytes, e.CtlSlots[k], spec)
				}
				if err != nil {
					return nil, fmt.Errorf("%s: %s/%s: %w", f.Path, e.Group, e.Name, err)
				}
				h.Group, h.Name, h.Image, h.Desc = e.Group, e.Name, im.desc.Input, im.desc
				out = append(out, h)
			}
		}
	}
	for _, im := range f.images {
		if im.desc == nil {
			continue
		}
		flagBytes := (uint64(len(im.desc.Events))*4 + 7) &^ 7
		for _, sy := range im.desc.Synthetic {
			if !eventdef.MatchesName(pattern, "synthetic", sy.Name) {
				continue
			}
			matched = true
			def, err := evhist.ParseSynthetic(sy.Def)
			if err != nil {
				return nil, fmt.Errorf("%s: synthetic/%s: %w", f.Path, sy.Name, err)
			}
			for k, text := range sy.Triggers {
				if k >= len(sy.CtlSlots) {
					break
				}
				spec, err := parseHist(text, def.Fields())
				if err != nil {
					return nil, fmt.Errorf("%s: synthetic/%s: %w", f.Path, sy.Name, err)
				}
				h, err := f.hist(im, flagBytes, sy.CtlSlots[k], spec)
				if err != nil {
					return nil, fmt.Errorf("%s: synthetic/%s: %w", f.Path, sy.Name, err)
				}
				h.Group, h.Name, h.Image, h.Desc = "synthetic", sy.Name, im.desc.Input, im.desc
				out = append(out, h)
			}
		}
	}
	if !matched {
		return nil, fmt.Errorf("%s: no event %s", f.Path, pattern)
	}
	return out, nil
}

// hist is the histogram of spec at slot of an image's control area.
func (f *File) hist(im image, flagBytes uint64, slot uint32, spec *evhist.Spec) (Hist, error) {
	off := flagBytes + uint64(slot)*8
	n := uint64(spec.TableWords()) * 8
	if off+n > uint64(im.ctlSize) || im.ctlOff+off+n > uint64(len(f.data)) {
		return Hist{}, fmt.Errorf("the histogram is past the image's control area (the program that wrote the file did not run its triggers)")
	}
	return Hist{Spec: spec, table: f.data[im.ctlOff+off : im.ctlOff+off+n]}, nil
}

// parseHist parses a hist trigger as the description lists it ("hist:... [active]").
func parseHist(text string, fields []evfilter.Field) (*evhist.Spec, error) {
	text = strings.TrimSuffix(strings.TrimSuffix(text, " [active]"), " [paused]")
	t, err := evtrigger.Parse(text, evtrigger.Env{Fields: fields, Syms: anySyms{}, Exists: func(string, string) bool { return true }})
	if err != nil {
		return nil, err
	}
	if t.Hist == nil {
		return nil, fmt.Errorf("trigger %q is not a hist trigger", text)
	}
	return t.Hist, nil
}

// anySyms accepts every function a condition names: the condition was checked when
// the binary was rewritten, and only its text is needed here.
type anySyms struct{}

func (anySyms) Func(string) (uint64, uint64, bool)     { return 0, 1, true }
func (anySyms) FuncAt(a uint64) (uint64, uint64, bool) { return a, 1, true }

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
