package tracectl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evhist"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	"github.com/kprewrite/kprewrite/internal/mmapfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// offTracingOff is RawTraceHeader.TracingOff's offset.
var offTracingOff = unsafe.Offsetof(kprt.RawTraceHeader{}.TracingOff)

// File is a trace file opened for its switches.
type File struct {
	Path   string
	data   []byte // shared, writable mapping of the whole file
	images []image
	// held, pending: Hold is in effect; an event was switched meanwhile
	held, pending bool
	// binaries may be the images' rewritten binaries (AddBinary: livefree.go)
	binaries []string
	// mapsID is the file as /proc/PID/maps names it, "DEV INODE" (mappedBy)
	mapsID string
}

type image struct {
	desc    *tracefile.Desc
	ctlOff  uint64
	ctlSize uint32
	nprobes int
}

// Event is one event of one image, as Events finds it.
type Event struct {
	Group, Name string
	Image       string // the image's input name
	Enabled     bool   // not soft-disabled
	Armed       bool   // its probes run: rewritten without --disable, or soft
	Index       uint32 // the runtime event index in its image
	// Synthetic: a synthetic event (Group "synthetic"): only its switch (its records
	// on or off) changes at run time; Index is its entry in the description's list.
	Synthetic bool
	ctl       *uint32
	synthInit bool // Synthetic: rewritten disabled (the switch word's bit 0 flips it)
	img       int
}

// Open maps the trace file at p for reading and writing its switches. It must be a
// regular file holding a kprewrite trace.
func Open(p string) (*File, error) { return open(p, true) }

// OpenRead maps the trace file at p for reading only (Hists, Events).
func OpenRead(p string) (*File, error) { return open(p, false) }

func open(p string, write bool) (*File, error) {
	s, descs, err := tracefile.OpenStream(p, nil)
	if err != nil {
		return nil, err
	}
	tr := s.Trace
	var imgs []image
	for _, im := range tr.Images {
		imgs = append(imgs, image{desc: descs[im.ImageID], ctlOff: im.CtlOff, ctlSize: im.CtlSize, nprobes: len(im.Counters)})
	}
	s.Close()
	mode, prot := os.O_RDONLY, syscall.PROT_READ
	if write {
		mode, prot = os.O_RDWR, syscall.PROT_READ|syscall.PROT_WRITE
	}
	f, err := os.OpenFile(p, mode, 0)
	if err != nil {
		return nil, fmt.Errorf("open trace file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open trace file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s, not a trace file", p, mmapfile.Kind(st.Mode()))
	}
	if st.Size() < kprt.TraceHeaderSize || st.Size() > tracefile.MaxTraceFile {
		return nil, fmt.Errorf("%s: not a trace file (%d bytes)", p, st.Size())
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), prot, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map trace file %s: %w", p, err)
	}
	for _, im := range imgs {
		if im.ctlOff+uint64(im.ctlSize) > uint64(len(data)) {
			syscall.Munmap(data)
			return nil, fmt.Errorf("%s: changed while it was opened", p)
		}
	}
	return &File{Path: p, data: data, images: imgs, mapsID: mapsID(st)}, nil
}

// Descs are the descriptions of the file's images, in the header's order (nil for an
// image whose description the file lacks).
func (f *File) Descs() []*tracefile.Desc {
	out := make([]*tracefile.Desc, len(f.images))
	for k, im := range f.images {
		out[k] = im.desc
	}
	return out
}

// Close unmaps the file.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	err := syscall.Munmap(f.data)
	f.data = nil
	return err
}

func (f *File) word(off uintptr) *uint32 { return (*uint32)(unsafe.Pointer(&f.data[off])) }

// Tracing says whether records are being written (no traceoff in effect).
func (f *File) Tracing() bool { return atomic.LoadUint32(f.word(offTracingOff)) == 0 }

// SetTracing turns tracing on or off for every program writing into the file and
// returns whether it was on.
func (f *File) SetTracing(on bool) bool {
	v := uint32(1)
	if on {
		v = 0
	}
	was := atomic.SwapUint32(f.word(offTracingOff), v) == 0
	if was && !on {
		f.bumpSw()
	}
	return was
}

// Events lists the events matching pattern (EVENT, GROUP/EVENT, GROUP/* or all) in
// every image of the file.
func (f *File) Events(pattern string) ([]Event, error) {
	var out []Event
	for k, im := range f.images {
		if im.desc == nil {
			continue
		}
		for i, e := range im.desc.Events {
			if e.At > 0 || e.Free || (e.Spare && pattern == "all") || !eventdef.MatchesName(pattern, e.Group, e.Name) {
				continue // (events added at run time: Live; prepared sites' own events, named only)
			}
			ev := Event{Group: e.Group, Name: e.Name, Image: im.desc.Input, Armed: !e.Disabled || e.Soft, Index: uint32(i), img: k}
			if uint64(i)*4+4 <= uint64(im.ctlSize) {
				ev.ctl = f.word(uintptr(im.ctlOff) + uintptr(i)*4)
				flags := atomic.LoadUint32(ev.ctl)
				ev.Enabled = ev.Armed && flags&kprt.CtlEvSoftDisabled == 0
			}
			out = append(out, ev)
		}
		flagBytes := kprt.CtlFlagBytes(im.desc.RuntimeEvents())
		for i, sy := range im.desc.Synthetic {
			if sy.ID == 0 || !eventdef.MatchesName(pattern, "synthetic", sy.Name) {
				continue // (an older rewrite's synthetic events write no records)
			}
			ev := Event{Group: "synthetic", Name: sy.Name, Image: im.desc.Input, Armed: true, Index: uint32(i), Synthetic: true, synthInit: sy.Disabled, img: k}
			if off := flagBytes + uint64(sy.SwitchSlot)*8; off+8 <= uint64(im.ctlSize) {
				ev.ctl = f.word(uintptr(im.ctlOff + off)) // the low half of the slot's word
				ev.Enabled = (atomic.LoadUint32(ev.ctl)&1 != 0) == sy.Disabled
			}
			out = append(out, ev)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no event %s%s", f.Path, pattern, f.eventHint(pattern))
	}
	return out, nil
}

// eventHint is what follows "no event PATTERN": the file's event names within a typing
// error of it (GROUP/EVENT when PATTERN has a group, EVENT else), or "".
func (f *File) eventHint(pattern string) string {
	var names []string
	for _, im := range f.images {
		if im.desc == nil {
			continue
		}
		for _, e := range im.desc.Events {
			if strings.Contains(pattern, "/") {
				names = append(names, e.Group+"/"+e.Name)
			} else {
				names = append(names, e.Name)
			}
		}
	}
	if near := eventdef.Nearest(pattern, names); len(near) > 0 {
		return "; did you mean " + eventdef.OrList(near) + "?"
	}
	return ""
}

// ErrNotArmed is returned for an event whose probes do not run (rewritten with
// --disable and no trigger naming it): no switch can make it record.
var ErrNotArmed = errors.New("rewritten disabled (--disable): its probes are not armed; rewrite it with a trigger naming it, or without --disable")

// SetEnabled switches ev's records on or off.
func (f *File) SetEnabled(ev Event, on bool) error {
	if ev.ctl == nil {
		return fmt.Errorf("%s/%s: the program that wrote %s has no control area (an older kprewrite)", ev.Group, ev.Name, f.Path)
	}
	if on && !ev.Armed {
		return fmt.Errorf("%s/%s: %w", ev.Group, ev.Name, ErrNotArmed)
	}
	if ev.Synthetic { // records on when bit 0 equals the rewrite state
		for {
			old := atomic.LoadUint32(ev.ctl)
			nw := old &^ 1
			if on == ev.synthInit {
				nw |= 1
			}
			if atomic.CompareAndSwapUint32(ev.ctl, old, nw) {
				return nil
			}
		}
	}
	for {
		old := atomic.LoadUint32(ev.ctl)
		nw := old | kprt.CtlEvSoftDisabled
		if on {
			nw = old &^ kprt.CtlEvSoftDisabled
		}
		if atomic.CompareAndSwapUint32(ev.ctl, old, nw) {
			if old != nw {
				if !on && f.held {
					f.bumpSw() // at once: changed() bumps it when it is not held
				}
				f.changed() // live sites follow their events' switches
			}
			return nil
		}
	}
}

var (
	offCtlGen       = unsafe.Offsetof(kprt.RawTraceHeader{}.CtlGen)
	offSwGen        = unsafe.Offsetof(kprt.RawTraceHeader{}.Images) + kprt.TraceSwGenImage*unsafe.Sizeof(kprt.RawTraceImage{})
	offVersion      = unsafe.Offsetof(kprt.RawTraceHeader{}.Version)
	offCtlLast      = unsafe.Offsetof(kprt.RawTraceHeader{}.CtlLast)
	offCountersOff  = unsafe.Offsetof(kprt.RawTraceHeader{}.CountersOff)
	offCountersSize = unsafe.Offsetof(kprt.RawTraceHeader{}.CountersSize)
	offCountersUsed = unsafe.Offsetof(kprt.RawTraceHeader{}.CountersUsed)
	offImages       = unsafe.Offsetof(kprt.RawTraceHeader{}.Images)
	offImageFlags   = unsafe.Offsetof(kprt.RawTraceImage{}.Flags)
)

func (f *File) word64(off uintptr) *uint64 { return (*uint64)(unsafe.Pointer(&f.data[off])) }

// latestFrame is the image's newest run-time control frame in the file (nil: none).
func (f *File) latestFrame(id uint64) (*Frame, error) {
	off := atomic.LoadUint64(f.word64(offCtlLast))
	for steps := 0; off != 0; steps++ {
		if off%8 != 0 || off < kprt.TraceHeaderSize || off >= uint64(len(f.data)) || steps > 65536 {
			return nil, fmt.Errorf("%s: run-time control frame at %d: out of the file", f.Path, off)
		}
		if string(f.data[off:min(off+8, uint64(len(f.data)))]) != kprt.LiveFrameMagic { // (events added: live.go)
			fr, _, err := DecodeFrame(f.data[off:])
			if err != nil {
				return nil, fmt.Errorf("%s: at byte %d: %w", f.Path, off, err)
			}
			if fr.ImageID == id {
				return fr, nil
			}
		}
		prev := binary.LittleEndian.Uint64(f.data[off+8:])
		if prev >= off {
			return nil, fmt.Errorf("%s: run-time control frame at %d links forward", f.Path, off)
		}
		off = prev
	}
	return nil, nil
}

// Controls are the run-time controls of the image of ev, to change and Commit.
func (f *File) Controls(ev Event) (*Controls, error) {
	im := f.images[ev.img]
	fr, err := f.latestFrame(im.desc.ImageID)
	if err != nil {
		return nil, err
	}
	c, err := NewControls(im.desc, fr)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", f.Path, im.desc.Input, err)
	}
	c.Live = func(g, n string) ([]uint32, error) { return f.liveNamed(ev.img, g, n) }
	return c, nil
}

// Commit makes c the image's run-time controls for every program writing into the file:
// the new triggers' counts are stored, new histograms' tables placed in the counters
// area, the frame written there and linked, and ctl_gen changes, which the programs see
// at their next hit. Pause, cont and clear of existing histograms change their tables.
func (f *File) Commit(ev Event, c *Controls) error {
	im := f.images[ev.img]
	flagBytes := kprt.CtlFlagBytes(im.desc.RuntimeEvents())
	if f.imageFlags(ev.img)&kprt.TIFSpare == 0 || uint64(im.ctlSize) != flagBytes+(uint64(c.SpareBase)+kprt.CtlSpare)*8+f.userBytes(ev.img) {
		return fmt.Errorf("%s: %s was rewritten by a kprewrite without run-time controls (rewrite it again)", f.Path, im.desc.Input)
	}
	slotBase := im.ctlOff + flagBytes // file offset of the control area's slot 0
	for _, op := range c.histOps {
		h, err := f.hist(im, flagBytes, op.slot, op.spec)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		switch {
		case op.clear:
			h.Clear()
		default:
			h.SetPaused(op.pause)
		}
	}
	if !c.dirty {
		return nil
	}
	return f.withCounters(func(fd *os.File, coff, csize, at uint64) error {
		at, err := f.placeHists(fd, c, coff, csize, at, slotBase)
		if err != nil {
			return err
		}
		b, err := c.Frame().Encode()
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		at = (at + 7) &^ 7
		if at > csize || uint64(len(b)) > csize-at {
			return fmt.Errorf("%s: no room left for run-time controls in its counters area (%d bytes used of %d)", f.Path, at, csize)
		}
		binary.LittleEndian.PutUint64(b[8:], atomic.LoadUint64(f.word64(offCtlLast)))
		if _, err := fd.WriteAt(b, int64(coff+at)); err != nil {
			return fmt.Errorf("write trace file: %w", err)
		}
		for slot, n := range c.Counts() {
			atomic.StoreUint64(f.word64(uintptr(slotBase+uint64(slot)*8)), n)
		}
		atomic.StoreUint64(f.word64(offCountersUsed), at+uint64(len(b)))
		atomic.StoreUint64(f.word64(offCtlLast), coff+at)
		f.bumpGen()
		return nil
	})
}

// withCounters runs fn under the trace file's lock with the file open for writing, the
// counters area's file offset and size, and its first free byte (8-aligned): where a
// change writes what it adds (run-time controls, live events).
func (f *File) withCounters(fn func(fd *os.File, coff, csize, at uint64) error) error {
	fd, err := os.OpenFile(f.Path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open trace file: %w", err)
	}
	defer fd.Close()
	if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock trace file: %w", err)
	}
	defer syscall.Flock(int(fd.Fd()), syscall.LOCK_UN)
	coff, csize := atomic.LoadUint64(f.word64(offCountersOff)), atomic.LoadUint64(f.word64(offCountersSize))
	at := (atomic.LoadUint64(f.word64(offCountersUsed)) + 7) &^ 7
	if coff+csize > uint64(len(f.data)) {
		return fmt.Errorf("%s: its counters area is not where the header says", f.Path)
	}
	return fn(fd, coff, csize, at)
}

// Hold defers the wake-ups of the programs' live-probe threads that switching events
// makes until Release: a switch of many events wakes them once.
func (f *File) Hold() { f.held = true }

// Release ends Hold, waking the programs once if an event was switched meanwhile.
func (f *File) Release() {
	f.held = false
	if f.pending {
		f.pending = false
		f.bumpGen()
	}
}

// changed wakes the programs' live-probe threads, or notes it for Release.
func (f *File) changed() {
	if f.held {
		f.pending = true
		return
	}
	f.bumpGen()
}

// bumpGen changes ctl_gen and wakes the live-probe threads of the programs writing into
// the file, which wait on it (the runtime's rt_live.c): they arm and disarm their live
// sites at once; every other change is seen at the next hit.
func (f *File) bumpGen() {
	w := f.word(offCtlGen)
	atomic.AddUint32(w, 1)
	f.bumpSw() // (the programs' hits notice a ctl_gen change through it)
	const futexWake = 1
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, math.MaxInt32, 0, 0, 0)
}

// bumpSw says that a switch deciding whether hits write records closed (tracing off, an
// event soft-disabled) or the controls changed, after the change: the programs' points
// that found their events open look again (RawTraceHeader.SwGen; they read no switch
// until it moves).
func (f *File) bumpSw() {
	if atomic.LoadUint32(f.word(offVersion)) >= kprt.TraceVersionSwGen {
		atomic.AddUint64(f.word64(offSwGen), 1)
	}
}

// placeHists gives each histogram the change adds (evtrigger.Compiled.Alloc) a zeroed
// table in the counters area from at on (each on a cache line of its own) and its slot
// in the trigger programs; it returns the area's first byte after them. A multi-probe
// event's runtime events share one program, and so one table.
func (f *File) placeHists(fd *os.File, c *Controls, coff, csize, at, slotBase uint64) (uint64, error) {
	evs := make([]uint32, 0, len(c.frame.Entries))
	for e := range c.frame.Entries {
		evs = append(evs, e)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i] < evs[j] })
	placed := map[*byte][]byte{}
	for _, e := range evs {
		en := c.frame.Entries[e]
		if en.Flags&kprt.CETrig == 0 || len(en.Trig) == 0 {
			continue
		}
		if p, ok := placed[&en.Trig[0]]; ok {
			en.Trig = p
			continue
		}
		cs, err := evtrigger.Decode(en.Trig, c.Desc.RuntimeEvents())
		if err != nil {
			return 0, fmt.Errorf("%s: %w", f.Path, err)
		}
		changed := false
		for j := range cs {
			if !cs[j].Alloc {
				continue
			}
			words, err := evhist.CheckProgram(cs[j].Hist)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", f.Path, err)
			}
			at = (at + 63) &^ 63
			n := uint64(words) * 8
			if coff+at < slotBase {
				return 0, fmt.Errorf("%s: its counters area is used up to before the image's control area", f.Path)
			}
			if at > csize || n > csize-at {
				return 0, fmt.Errorf("%s: no room left in its counters area for a histogram of %d KiB (%d of %d KiB used): give it a smaller size=", f.Path, n>>10, at>>10, csize>>10)
			}
			slot := (coff + at - slotBase) / 8
			if slot+uint64(words) > evtrigger.MaxSlots {
				return 0, fmt.Errorf("%s: a histogram at word %d of the control area is past its last (%d)", f.Path, slot, evtrigger.MaxSlots)
			}
			if err := zeroFile(fd, coff+at, n); err != nil {
				return 0, err
			}
			if cs[j].Hist[2]&evhist.FlagPaused != 0 { // made paused (":pause")
				atomic.StoreUint64(f.word64(uintptr(coff+at)), evhist.FlagPaused)
			}
			cs[j].Slot, cs[j].Alloc = uint32(slot), false
			at += n
			changed = true
		}
		if changed {
			prog, err := evtrigger.Program(cs)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", f.Path, err)
			}
			placed[&en.Trig[0]] = prog
			en.Trig = prog
		}
	}
	return at, nil
}

// zeroFile writes n zero bytes at off (a table's bytes may be a removed one's).
func zeroFile(fd *os.File, off, n uint64) error {
	zero := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, uint64(len(zero)))
		if _, err := fd.WriteAt(zero[:k], int64(off)); err != nil {
			return fmt.Errorf("write trace file: %w", err)
		}
		off += k
		n -= k
	}
	return nil
}

// ImageIndex is the entry of ev's image in the file's header.
func (ev Event) ImageIndex() int { return ev.img }

// Off says whether the event is switched off in its image's control area now (not
// armed, or soft-disabled): the state `kprewrite list` of a trace file shows.
func (ev Event) Off() bool { return !ev.Enabled }

var offFlags = unsafe.Offsetof(kprt.RawTraceHeader{}.Flags)

// Optimized says whether jump optimization is on (no `optimize off` in effect).
func (f *File) Optimized() bool {
	return atomic.LoadUint32(f.word(offFlags))&kprt.TraceNoOpt == 0
}

// SetOptimized turns jump optimization on or off for every program writing into the
// file (the kernel's debug.kprobes-optimization): off, their live-capable jump points
// become int3s into their detours; on, jmps again. It returns whether it was on.
func (f *File) SetOptimized(on bool) bool { return !f.setFlag(kprt.TraceNoOpt, !on) }

// setFlag sets or clears bit in the header's flags and wakes the programs' live-probe
// threads when it changed; it returns whether it was set.
func (f *File) setFlag(bit uint32, set bool) bool {
	w := f.word(offFlags)
	for {
		old := atomic.LoadUint32(w)
		nw := old &^ bit
		if set {
			nw = old | bit
		}
		if atomic.CompareAndSwapUint32(w, old, nw) {
			if old != nw {
				f.changed()
			}
			return old&bit != 0
		}
	}
}

// Armed says whether the switch of every probe is on (no `disable FILE all`).
func (f *File) Armed() bool {
	return atomic.LoadUint32(f.word(offFlags))&kprt.TraceDisarmed == 0
}

// SetArmed turns the switch of every probe of the programs writing into the file on or
// off (the kernel's kprobes/enabled): off, every probe is disarmed, C handlers
// included, live sites get their original bytes back; on, each probe is as its own
// switches say. It returns whether it was on.
func (f *File) SetArmed(on bool) bool { return !f.setFlag(kprt.TraceDisarmed, !on) }
