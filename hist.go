package kprewrite

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/tracectl"
)

// HistOptions select the histograms Hist reads: the options of `kprewrite hist`.
type HistOptions struct {
	// Event is the events whose histograms to read: EVENT, GROUP/EVENT, GROUP/* or
	// "all" ("" is all).
	Event string
}

// Histogram is one hist trigger's histogram of one event, as the program left it in
// the trace file (RewriteOptions.Triggers "GROUP/EVENT:hist:keys=...", or a `kprewrite
// probe` event's): its entries as data, and String for the kernel's hist file.
type Histogram struct {
	Image, Group, Event string
	// Trigger is the trigger as the hist file's "trigger info" line prints it.
	Trigger string
	// Keys and Vals name the key and value fields, in the trigger's order (the
	// implicit hitcount is not among Vals).
	Keys, Vals []string
	// Entries are in the hist file's order (the trigger's sort=, hitcount by default).
	Entries []HistEntry
	Paused  bool
	// Hits counts every hit while active, Dropped the hits that found the table full.
	Hits, Dropped uint64
	text          string
}

// HistEntry is one entry of a histogram.
type HistEntry struct {
	// Key has one value per key field: int64 for a signed field, string for a string
	// or comm key, []uint64 for a stacktrace (its return addresses), uint64 for the
	// rest (.log2 and .buckets=N keys as the bucket: the log2, the bucket's start;
	// .execname as the pid, its name in Comm).
	Key      []any
	Comm     string
	Hitcount uint64
	// Vals are the sums of the value fields (a signed field's as its two's complement:
	// int64(v) is the sum).
	Vals []uint64
}

// String is the histogram as the kernel's events/GROUP/EVENT/hist file shows it.
func (h *Histogram) String() string { return h.text }

// Histograms are a trace file's histograms, in `kprewrite hist`'s order: image by
// image, each one's events then its synthetic events, in trigger order.
type Histograms []*Histogram

// String is what `kprewrite hist` prints: the histograms, with a heading naming the
// event before each when there are several events.
func (hs Histograms) String() string {
	events := map[string]bool{}
	for _, h := range hs {
		events[h.Image+"\x00"+h.Group+"/"+h.Event] = true
	}
	var b strings.Builder
	last := ""
	for _, h := range hs {
		key := h.Image + "\x00" + h.Group + "/" + h.Event
		switch {
		case key == last: // another histogram of the same event, as the kernel separates them
			b.WriteString("\n\n")
		case len(events) > 1:
			if last != "" {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "# events/%s/%s/hist (%s)\n", h.Group, h.Event, h.Image)
		}
		last = key
		b.WriteString(h.text)
	}
	return b.String()
}

// Hist reads the histograms of the hist triggers on the events opt.Event selects
// from the trace file at path, as they are now (a program still running may be adding
// to them), without changing them. Events with no hist trigger are an error; errors
// name the file.
func Hist(path string, opt HistOptions) (Histograms, error) {
	pattern := opt.Event
	if pattern == "" {
		pattern = "all"
	}
	f, err := tracectl.OpenRead(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hs, err := f.Hists(pattern)
	live, lerr := f.LiveHists(pattern) // (events added at run time: kprewrite probe)
	if lerr != nil {
		return nil, lerr
	}
	if err != nil && len(live) == 0 {
		return nil, err
	}
	hs = append(hs, live...)
	if len(hs) == 0 {
		return nil, fmt.Errorf("%s: no hist trigger on %s (give one with rewrite --trigger 'GROUP/EVENT:hist:keys=...')", path, pattern)
	}
	out := make(Histograms, 0, len(hs))
	for i := range hs {
		h, err := readHist(&hs[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %s/%s: %w", path, hs[i].Group, hs[i].Name, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// readHist reads one histogram's table and prints it once: the text is what the
// entries were when read, not when String is called.
func readHist(th *tracectl.Hist) (*Histogram, error) {
	t, err := th.Read()
	if err != nil {
		return nil, err
	}
	s := th.Spec
	var text bytes.Buffer
	s.Print(&text, t, th.Desc.Symbolize)
	h := &Histogram{Image: th.Image, Group: th.Group, Event: th.Name, Trigger: s.Info(), Paused: t.Paused,
		Hits: t.Hits, Dropped: t.Drops, text: text.String()}
	for i := range s.Keys {
		h.Keys = append(h.Keys, s.Keys[i].Text())
	}
	for i := range s.Vals {
		h.Vals = append(h.Vals, s.Vals[i].Text())
	}
	es := append([]evhist.Entry(nil), t.Entries...)
	s.SortEntries(es)
	for _, e := range es {
		h.Entries = append(h.Entries, HistEntry{Key: histKey(s, e.Key), Comm: e.Comm, Hitcount: e.Hitcount, Vals: e.Vals})
	}
	return h, nil
}

// histKey splits an entry's key words into one value per key field.
func histKey(s *evhist.Spec, words []uint64) []any {
	key := make([]any, 0, len(s.Keys))
	for i := range s.Keys {
		f := &s.Keys[i]
		w := words[:f.Words()]
		words = words[f.Words():]
		switch {
		case f.Stack:
			n := 0
			for n < len(w) && w[n] != 0 {
				n++
			}
			key = append(key, append([]uint64(nil), w[:n]...))
		case f.String || f.Comm:
			key = append(key, evhist.KeyString(w))
		case f.Signed && f.Mod == evhist.ModNone:
			v := int64(w[0])
			if f.Size > 0 && f.Size < 8 { // sign-extended from the field's size
				sh := uint(64 - 8*f.Size)
				v = v << sh >> sh
			}
			key = append(key, v)
		default:
			key = append(key, w[0])
		}
	}
	return key
}
