package tracectl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Events added to running programs (kprewrite probe): kprobe_events for a trace file.
// An event rides a prepared site's placeholder probe (rewrite --prepare: an entry
// kprobe and a kretprobe whose events are Spare); adding or removing one writes the
// image's whole list of live events as a new frame (tracefile.LiveFrame) under the
// file lock, links it and wakes the programs' live-probe threads, which arm the sites
// that have events and disarm the others (runtime src/rt_livedef.c).

// LiveEvent is an event added at run time, as the file holds it.
type LiveEvent struct {
	Image       string // the image's input name
	Group, Name string
	Def         string
	Return      bool
	ID          uint32
	Hits        uint64
	Gone        bool // removed (its records stay in the file)
	// State is what its site is now in the program that applied it last (kprt.LS*;
	// -1: not known, an event added by an older kprewrite)
	State int
	// Switch: it has a switch word (kprewrite disable, enable_event and disable_event
	// triggers naming it; an event added by an older kprewrite has none), Disabled: it is
	// soft-disabled now (its hits run its triggers and write no record)
	Switch, Disabled bool
	img              int
	ent              tracefile.LiveEvent
}

// ErrNotPrepared is returned for a site that no image of the file prepared.
var ErrNotPrepared = errors.New("is not a prepared site of the programs writing into the file (rewrite them with --prepare FUNC, or give the event at rewrite time)")

// firstLiveID is the least record id of an event added at run time: far above the
// ids an image's events and synthetic events take.
const firstLiveID = 1 << 20

// Live lists the events added at run time to the file's images: those in each image's
// newest frame, then those removed (Gone), each once.
func (f *File) Live() ([]LiveEvent, error) {
	frames, _, err := tracefile.LiveFrames(f.data, atomic.LoadUint64(f.word64(offCtlLast)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	var out []LiveEvent
	seen := map[[2]uint64]bool{}
	newest := map[uint64]bool{}
	for _, fr := range frames { // newest first
		k := f.imageOf(fr.ImageID)
		if k < 0 {
			continue
		}
		gone := newest[fr.ImageID]
		newest[fr.ImageID] = true
		for _, e := range fr.Events {
			key := [2]uint64{fr.ImageID, uint64(e.ID)}
			if seen[key] {
				continue
			}
			seen[key] = true
			g, n := LiveDefName(e.Def)
			le := LiveEvent{Image: f.images[k].desc.Input, Group: g, Name: n, Def: e.Def, Return: e.Return, ID: e.ID,
				Gone: gone, img: k, ent: e}
			le.State = -1
			if e.HitsOff+8 <= uint64(len(f.data)) && e.HitsOff%8 == 0 {
				le.Hits = atomic.LoadUint64(f.word64(uintptr(e.HitsOff)))
				if e.State && e.HitsOff+16 <= uint64(len(f.data)) {
					le.State = int(atomic.LoadUint64(f.word64(uintptr(e.HitsOff + 8))))
				}
				if e.Ctl && e.HitsOff+24 <= uint64(len(f.data)) {
					le.Switch = true
					le.Disabled = atomic.LoadUint64(f.word64(uintptr(e.HitsOff+16)))&kprt.CtlEvSoftDisabled != 0
				}
			}
			out = append(out, le)
		}
	}
	return out, nil
}

// LiveDefName is a definition's group and event ("?" when it does not parse).
func LiveDefName(def string) (string, string) {
	p, err := eventdef.Parse(def)
	if err != nil {
		return "?", "?"
	}
	return p.Group, p.Event
}

func (f *File) imageOf(id uint64) int {
	for k, im := range f.images {
		if im.desc != nil && im.desc.ImageID == id {
			return k
		}
	}
	return -1
}

// AddLive adds the event def defines (p: or r:, the kprobe-event syntax) at a prepared
// site of one of the file's images.
func (f *File) AddLive(def string) (LiveEvent, error) {
	p, err := eventdef.Parse(def)
	if err != nil {
		return LiveEvent{}, err
	}
	if p.Delete {
		return LiveEvent{}, fmt.Errorf("%q removes an event: use RemoveLive", def)
	}
	if err := f.checkNewName(p); err != nil {
		return LiveEvent{}, err
	}
	var free *freeSite
	k, probe, err := f.preparedSite(p)
	if errors.Is(err, ErrNotPrepared) { // the analysis decides (livefree.go)
		if k, err = f.freeImage(p); err == nil {
			free, err = f.planFree(k, p)
		}
	}
	if err != nil {
		return LiveEvent{}, err
	}
	d := f.images[k].desc
	prog, err := eventdef.Compile(p, func(sym string) (uint64, bool) {
		for _, s := range d.Symbols {
			if s.Name == sym {
				return s.Addr, true
			}
		}
		return 0, false
	})
	if err != nil {
		return LiveEvent{}, err
	}
	if p.Return && len(prog) >= 8 && binary.LittleEndian.Uint16(prog[6:]) != 0 {
		return LiveEvent{}, fmt.Errorf("%s/%s: a return event added at run time cannot keep values of the entry (give it at rewrite time)", p.Group, p.Event)
	}
	e := tracefile.LiveEvent{Probe: uint32(probe), Return: p.Return, Def: strings.TrimSpace(def), Fetch: prog}
	le := LiveEvent{Image: d.Input, Group: p.Group, Name: p.Event, Def: e.Def, Return: p.Return, img: k}
	var used []freeUse
	if free != nil {
		used = f.freeUses(d.ImageID)
	}
	err = f.commitLive(k, func(cur []tracefile.LiveEvent, id uint32, alloc *liveAlloc) ([]tracefile.LiveEvent, error) {
		if len(cur) >= kprt.LiveMax {
			return nil, fmt.Errorf("%s: %d events added at run time already (the most)", d.Input, len(cur))
		}
		if free != nil {
			var err error
			if e.Probe, e.Point, e.Slot, err = free.place(cur, used); err != nil {
				return nil, fmt.Errorf("%s: %w", d.Input, err)
			}
		}
		e.ID, e.HitsOff, e.State, e.Ctl = id, alloc.word(0), true, true
		alloc.word(kprt.LSNone) // (its state, after its hit count: the programs write it)
		alloc.word(0)           // (its switch, after its state: on)
		le.ID, le.ent = id, e
		return append(cur, e), nil
	})
	return le, err
}

// RemoveLive removes the events added at run time that match pattern (EVENT,
// GROUP/EVENT, GROUP/*), from every image: their sites are disarmed once no event
// rides them; return instances in flight still return (their records are not written).
func (f *File) RemoveLive(pattern string) ([]LiveEvent, error) {
	evs, err := f.Live()
	if err != nil {
		return nil, err
	}
	var out []LiveEvent
	byImg := map[int]map[uint32]bool{}
	for _, e := range evs {
		if e.Gone || !eventdef.MatchesName(pattern, e.Group, e.Name) {
			continue
		}
		if byImg[e.img] == nil {
			byImg[e.img] = map[uint32]bool{}
		}
		byImg[e.img][e.ID] = true
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no event %s was added at run time", f.Path, pattern)
	}
	if err := f.checkUntargeted(out, evs); err != nil {
		return nil, err
	}
	for k, ids := range byImg {
		err := f.commitLive(k, func(cur []tracefile.LiveEvent, _ uint32, _ *liveAlloc) ([]tracefile.LiveEvent, error) {
			var keep []tracefile.LiveEvent
			for _, e := range cur {
				if !ids[e.ID] {
					keep = append(keep, e)
				}
			}
			return keep, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkNewName refuses an event name some image's event, or a live event, has.
func (f *File) checkNewName(p *eventdef.Probe) error {
	for _, im := range f.images {
		if im.desc == nil {
			continue
		}
		for _, e := range im.desc.Events {
			if e.Group == p.Group && e.Name == p.Event && !e.Live {
				return fmt.Errorf("%s/%s: an event of %s has that name already", p.Group, p.Event, im.desc.Input)
			}
		}
	}
	evs, err := f.Live()
	if err != nil {
		return err
	}
	for _, e := range evs {
		if !e.Gone && e.Group == p.Group && e.Name == p.Event {
			return fmt.Errorf("%s/%s: added already (remove it first: -:%s/%s)", p.Group, p.Event, p.Group, p.Event)
		}
	}
	return nil
}

// preparedSite finds the image and the placeholder probe the event p rides: a
// prepared function's entry (p:) or return (r:) placeholder at p's site.
func (f *File) preparedSite(p *eventdef.Probe) (int, int, error) {
	site := p.Symbol
	if site == "" {
		site = fmt.Sprintf("%#x", p.Addr)
	}
	if p.Offset != 0 {
		return 0, 0, fmt.Errorf("%s+%d: %w (prepared sites are function entries)", site, p.Offset, ErrNotPrepared)
	}
	for k, im := range f.images {
		d := im.desc
		if d == nil || (p.Lib != "" && !sameLib(p.Lib, d.Input)) {
			continue
		}
		for pi, dp := range d.Probes {
			if dp.Event < 0 || dp.Event >= len(d.Events) || !d.Events[dp.Event].Spare || d.Events[dp.Event].Free || d.Events[dp.Event].Return != p.Return {
				continue
			}
			if (p.Symbol != "" && dp.Symbol == p.Symbol) || (p.Symbol == "" && dp.Addr == p.Addr) || (p.Symbol != "" && symbolAt(d, p.Symbol) == dp.Addr) {
				return k, pi, nil
			}
		}
	}
	if p.Lib != "" {
		site = p.Lib + ":" + site
	}
	return 0, 0, fmt.Errorf("%s: %w", site, ErrNotPrepared)
}

// symbolAt is the address of symbol name in d's symbols (^0: none).
func symbolAt(d *tracefile.Desc, name string) uint64 {
	for _, s := range d.Symbols {
		if s.Name == name {
			return s.Addr
		}
	}
	return ^uint64(0)
}

// sameLib says whether LIB of LIB:SITE names the image whose input is input.
func sameLib(lib, input string) bool {
	b := filepath.Base(lib)
	return b == input || strings.HasPrefix(input, b+".")
}

// liveAlloc gives out words of the counters area, written before a live frame (hit
// counts, triggers' counts, histograms' tables).
type liveAlloc struct {
	base  uint64 // the file offset of the first
	words []byte
}

// word gives out a word holding v: its file offset.
func (a *liveAlloc) word(v uint64) uint64 {
	a.words = binary.LittleEndian.AppendUint64(a.words, v)
	return a.base + uint64(len(a.words)) - 8
}

// table gives out n words on cache lines of their own, the first holding first: the
// file offset of the first.
func (a *liveAlloc) table(n int, first uint64) uint64 {
	for (a.base+uint64(len(a.words)))%64 != 0 {
		a.word(0)
	}
	at := a.word(first)
	a.words = append(a.words, make([]byte, 8*(n-1))...)
	return at
}

// commitLive writes image k's new list of live events, edit(current, a new id, alloc),
// as a frame under the file lock, links it and wakes the programs. alloc gives out new
// words of the counters area.
func (f *File) commitLive(k int, edit func([]tracefile.LiveEvent, uint32, *liveAlloc) ([]tracefile.LiveEvent, error)) error {
	d := f.images[k].desc
	return f.withCounters(func(fd *os.File, coff, csize, at uint64) error {
		return f.writeLive(fd, d, coff, csize, at, edit)
	})
}

// writeLive is commitLive under the lock.
func (f *File) writeLive(fd *os.File, d *tracefile.Desc, coff, csize, at uint64, edit func([]tracefile.LiveEvent, uint32, *liveAlloc) ([]tracefile.LiveEvent, error)) error {
	frames, _, err := tracefile.LiveFrames(f.data, atomic.LoadUint64(f.word64(offCtlLast)))
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	var cur []tracefile.LiveEvent
	id := uint32(firstLiveID)
	for _, fr := range frames {
		if fr.ImageID == d.ImageID && cur == nil {
			cur = append([]tracefile.LiveEvent{}, fr.Events...)
		}
		for _, e := range fr.Events {
			id = max(id, e.ID+1)
		}
	}
	alloc := &liveAlloc{base: coff + at} // the words given out, then the frame
	next, err := edit(cur, id, alloc)
	if err != nil {
		return err
	}
	fr := &tracefile.LiveFrame{ImageID: d.ImageID, NEvents: uint32(d.RuntimeEvents()), Events: next}
	b := fr.Encode()
	words := alloc.words
	n := uint64(len(words))
	if at+n > csize || uint64(len(b)) > csize-at-n {
		return fmt.Errorf("%s: no room left for run-time events in its counters area (%d bytes used of %d)", f.Path, at, csize)
	}
	binary.LittleEndian.PutUint64(b[8:], atomic.LoadUint64(f.word64(offCtlLast)))
	if _, err := fd.WriteAt(append(words, b...), int64(coff+at)); err != nil {
		return fmt.Errorf("write trace file: %w", err)
	}
	atomic.StoreUint64(f.word64(offCountersUsed), at+n+uint64(len(b)))
	atomic.StoreUint64(f.word64(offCtlLast), coff+at+n)
	f.bumpGen()
	return nil
}

// ImageIndex is the index of the event's image among the file's (Descs).
func (e LiveEvent) ImageIndex() int { return e.img }

// SetLiveFilter gives the events added at run time that match pattern (EVENT,
// GROUP/EVENT, GROUP/*) the filter expr, in the kernel's grammar over each event's own
// fields ("0" removes it, as writing 0 into the kernel's filter file does): the
// programs record only the hits it accepts; every hit is still counted. It returns the
// events changed, their Filter the expression they had.
func (f *File) SetLiveFilter(pattern, expr string) ([]LiveEvent, error) {
	evs, err := f.Live()
	if err != nil {
		return nil, err
	}
	var out []LiveEvent
	set := map[int]map[uint32][]byte{}
	for _, e := range evs {
		if e.Gone || !eventdef.MatchesName(pattern, e.Group, e.Name) {
			continue
		}
		prog, err := liveFilterProgram(f.images[e.img].desc, e, expr)
		if err != nil {
			return nil, err
		}
		if set[e.img] == nil {
			set[e.img] = map[uint32][]byte{}
		}
		set[e.img][e.ID] = prog
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no event %s was added at run time", f.Path, pattern)
	}
	for k, progs := range set {
		err := f.commitLive(k, func(cur []tracefile.LiveEvent, _ uint32, _ *liveAlloc) ([]tracefile.LiveEvent, error) {
			next := append([]tracefile.LiveEvent(nil), cur...)
			for i := range next {
				if prog, ok := progs[next[i].ID]; ok {
					next[i].Filter, next[i].FilterText = prog, strings.TrimSpace(expr)
					if prog == nil {
						next[i].FilterText = ""
					}
				}
			}
			return next, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// liveFilterProgram compiles expr against live event e's fields (nil for "0": none)
func liveFilterProgram(d *tracefile.Desc, e LiveEvent, expr string) ([]byte, error) {
	if strings.TrimSpace(expr) == "0" {
		return nil, nil
	}
	p, err := eventdef.Parse(e.Def)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", e.Group, e.Name, err)
	}
	var syms evfilter.Symbols = noSymbols{} // (a filter naming a function is refused)
	if len(d.Symbols) > 0 {
		syms = descSymbols(d.Symbols)
	}
	flt, err := evfilter.Parse(expr, evfilter.Fields(p), syms)
	if err != nil {
		return nil, evfilter.EventError(e.Group, e.Name, err)
	}
	return flt.Program(), nil
}

// Filter is the event's filter expression ("" for none).
func (e LiveEvent) Filter() string { return e.ent.FilterText }

// Armed says whether the event's site is armed in the program that applied it last,
// and how: "" armed as its kind says, or the flag list shows instead: [PENDING] (no
// program has applied it yet, or its free point waits for a safepoint), [UNPLACED]
// (the program refused the point: said on its stderr), [DISARMED] (every probe
// disarmed, or no records can be written), [INT3] (a jump-optimized site armed as an
// int3: waiting for a safepoint, or optimization off).
func (e LiveEvent) Armed() (armed bool, flag string) {
	switch e.State {
	case kprt.LSNone, kprt.LSPending:
		return false, "[PENDING]"
	case kprt.LSRefused:
		return false, "[UNPLACED]"
	case kprt.LSOff:
		return false, "[DISARMED]"
	case kprt.LSInt3:
		return true, "[INT3]"
	}
	return true, "" // (LSJump, or not known)
}
