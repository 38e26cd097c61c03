package tracefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// A live-event frame (struct kprw_ctlframe's header with kprt.LiveFrameMagic, then
// struct kprw_liveent entries) lists the events `kprewrite probe` added to a running
// image on its prepared sites. It sits in the trace file's counters area, in the chain
// of run-time control frames (the header's ctl_last); the image's newest frame is what
// its programs run, and every frame's definitions name records (an event removed
// still has records). docs/runtime.md, "Events added at run time".

// LiveFrame is one image's live events.
type LiveFrame struct {
	ImageID uint64
	NEvents uint32 // the image's runtime events (a frame for another build is ignored)
	Events  []LiveEvent
}

// LiveEvent is one event added at run time.
type LiveEvent struct {
	Probe   uint32 // runtime index of the prepared site's probe it rides
	ID      uint32 // the id its records carry
	Return  bool
	HitsOff uint64 // file offset of its hit count
	// State: the word after its hit count is its site's state (kprt.LEState), which
	// the programs write
	State bool
	// Ctl: the word after its state is its switch (kprt.LECtl: kprt.CtlEvSoftDisabled,
	// kprewrite disable and enable_event/disable_event triggers), which State needs
	Ctl   bool
	Def   string // its definition, as given
	Fetch []byte // its fetch program (internal/eventdef)
	// Filter is its filter's program (internal/evfilter; nil: none), FilterText the
	// expression it was compiled from (kprewrite filter)
	Filter     []byte
	FilterText string
	// Trig is its trigger program (internal/evtrigger; nil: none), Triggers their texts
	// as the trigger file lists them (kprewrite trigger)
	Trig     []byte
	Triggers []string
	// Point and Slot: an event at a site no rewrite prepared (kprt.LEPoint): Probe
	// is a free live point's, Point the struct kprw_point the tool made for it
	// (kprt.PointSize bytes; its Aux the address asked for) and Slot its slot's
	// kprt.FreeSlot bytes; nil for an event at a prepared site.
	Point, Slot []byte
}

// At is where an event at a free live point is placed: its site and the address
// asked for (ok false: an event at a prepared site).
func (e *LiveEvent) At() (site, addr uint64, ok bool) {
	if len(e.Point) != kprt.PointSize {
		return 0, 0, false
	}
	return binary.LittleEndian.Uint64(e.Point), binary.LittleEndian.Uint64(e.Point[kprt.PointSize-8:]), true
}

const (
	liveHdr    = 48
	liveEntHdr = 40
)

// ErrLiveFrame reports a live-event frame that does not decode.
var ErrLiveFrame = errors.New("malformed live-event frame")

// Encode is the frame's bytes (prev 0: the writer links it).
func (fr *LiveFrame) Encode() []byte {
	b := make([]byte, liveHdr)
	copy(b, kprt.LiveFrameMagic)
	binary.LittleEndian.PutUint64(b[16:], fr.ImageID)
	binary.LittleEndian.PutUint32(b[28:], uint32(len(fr.Events)))
	binary.LittleEndian.PutUint32(b[32:], fr.NEvents)
	for _, e := range fr.Events {
		var h [liveEntHdr]byte
		binary.LittleEndian.PutUint32(h[0:], e.Probe)
		binary.LittleEndian.PutUint32(h[4:], e.ID)
		text := e.text()
		binary.LittleEndian.PutUint32(h[8:], uint32(len(e.Fetch)))
		binary.LittleEndian.PutUint32(h[12:], uint32(len(text)))
		binary.LittleEndian.PutUint64(h[16:], e.HitsOff)
		var fl uint32
		if e.Return {
			fl |= kprt.LEReturn
		}
		if e.Point != nil {
			fl |= kprt.LEPoint
		}
		if e.State {
			fl |= kprt.LEState
		}
		if e.Ctl {
			fl |= kprt.LECtl
		}
		binary.LittleEndian.PutUint32(h[24:], fl)
		binary.LittleEndian.PutUint32(h[28:], uint32(len(e.Filter)))
		binary.LittleEndian.PutUint32(h[32:], uint32(len(e.Trig)))
		b = append(b, h[:]...)
		for _, part := range [][]byte{e.Fetch, []byte(text), e.Filter, e.Trig, e.Point, e.Slot} {
			b = append(b, part...)
			b = append(b, make([]byte, pad8len(len(part)))...)
		}
	}
	binary.LittleEndian.PutUint32(b[24:], uint32(len(b)))
	return b
}

func pad8len(n int) int { return (8 - n%8) % 8 }

// text is what the entry's text holds: the definition, then its filter's expression
// when it has one, then its triggers, one a line.
func (e *LiveEvent) text() string {
	lines := []string{e.Def}
	if e.Filter != nil {
		lines = append(lines, e.FilterText)
	}
	if e.Trig != nil {
		lines = append(lines, e.Triggers...)
	}
	return strings.Join(lines, "\n")
}

// DecodeLiveFrame reads a live-event frame at the start of b, checked as the runtime
// checks it; it returns the frame and its size.
func DecodeLiveFrame(b []byte) (*LiveFrame, int, error) {
	if len(b) < liveHdr || string(b[:8]) != kprt.LiveFrameMagic {
		return nil, 0, fmt.Errorf("%w: no magic", ErrLiveFrame)
	}
	size := int(binary.LittleEndian.Uint32(b[24:]))
	if size < liveHdr || size > len(b) || size%8 != 0 || size > kprt.CtlFrameMax {
		return nil, 0, fmt.Errorf("%w: size %d of %d bytes", ErrLiveFrame, size, len(b))
	}
	fr := &LiveFrame{ImageID: binary.LittleEndian.Uint64(b[16:]), NEvents: binary.LittleEndian.Uint32(b[32:])}
	n := int(binary.LittleEndian.Uint32(b[28:]))
	if n > kprt.LiveMax {
		return nil, 0, fmt.Errorf("%w: %d events", ErrLiveFrame, n)
	}
	off := liveHdr
	for k := 0; k < n; k++ {
		if size-off < liveEntHdr {
			return nil, 0, fmt.Errorf("%w: event %d truncated", ErrLiveFrame, k)
		}
		h := b[off : off+liveEntHdr]
		fl, tl := int(binary.LittleEndian.Uint32(h[8:])), int(binary.LittleEndian.Uint32(h[12:]))
		pl, gl := int(binary.LittleEndian.Uint32(h[28:])), int(binary.LittleEndian.Uint32(h[32:]))
		off += liveEntHdr
		if fl > size || tl > size || pl > size || gl > size ||
			off+fl+pad8len(fl)+tl+pad8len(tl)+pl+pad8len(pl)+gl+pad8len(gl) > size {
			return nil, 0, fmt.Errorf("%w: event %d runs past the frame", ErrLiveFrame, k)
		}
		flags := binary.LittleEndian.Uint32(h[24:])
		if flags&kprt.LEPoint != 0 && off+fl+pad8len(fl)+tl+pad8len(tl)+pl+pad8len(pl)+gl+pad8len(gl)+kprt.PointSize+kprt.FreeSlot > size {
			return nil, 0, fmt.Errorf("%w: event %d's point runs past the frame", ErrLiveFrame, k)
		}
		e := LiveEvent{Probe: binary.LittleEndian.Uint32(h), ID: binary.LittleEndian.Uint32(h[4:]),
			HitsOff: binary.LittleEndian.Uint64(h[16:]), Return: flags&kprt.LEReturn != 0,
			State: flags&kprt.LEState != 0, Ctl: flags&kprt.LEState != 0 && flags&kprt.LECtl != 0}
		e.Fetch = b[off : off+fl]
		off += fl + pad8len(fl)
		lines := strings.Split(string(b[off:off+tl]), "\n")
		e.Def, lines = lines[0], lines[1:]
		off += tl + pad8len(tl)
		if pl > 0 && len(lines) > 0 {
			e.FilterText, lines = lines[0], lines[1:]
			e.Filter = b[off : off+pl]
		}
		off += pl + pad8len(pl)
		if gl > 0 {
			e.Trig, e.Triggers = b[off:off+gl], lines
		}
		off += gl + pad8len(gl)
		if flags&kprt.LEPoint != 0 {
			e.Point = b[off : off+kprt.PointSize]
			e.Slot = b[off+kprt.PointSize : off+kprt.PointSize+kprt.FreeSlot]
			off += kprt.PointSize + kprt.FreeSlot
		}
		fr.Events = append(fr.Events, e)
	}
	return fr, size, nil
}

// LiveFrames walks the control frames' chain of a trace file's bytes data from the
// header's ctl_last (ctlLast) and returns its live-event frames, newest first, with
// their offsets.
func LiveFrames(data []byte, ctlLast uint64) ([]*LiveFrame, []uint64, error) {
	var frames []*LiveFrame
	var offs []uint64
	for off, steps := ctlLast, 0; off != 0; steps++ {
		if off%8 != 0 || off < kprt.TraceHeaderSize || uint64(len(data)) < liveHdr || off > uint64(len(data))-liveHdr || steps > 65536 {
			return nil, nil, fmt.Errorf("run-time frame at %d: out of the file", off)
		}
		switch string(data[off : off+8]) {
		case kprt.LiveFrameMagic:
			fr, _, err := DecodeLiveFrame(data[off:])
			if err != nil {
				return nil, nil, fmt.Errorf("at byte %d: %w", off, err)
			}
			frames, offs = append(frames, fr), append(offs, off)
		case kprt.CtlFrameMagic:
		default:
			return nil, nil, fmt.Errorf("at byte %d: not a run-time frame", off)
		}
		prev := binary.LittleEndian.Uint64(data[off+8:])
		if prev >= off {
			return nil, nil, fmt.Errorf("run-time frame at %d links forward", off)
		}
		off = prev
	}
	return frames, offs, nil
}

// addLiveEvents adds to descs the events of the trace file's live-event frames (every
// frame's: an event removed still names its records), each once, described as
// its definition says and placed as its prepared site's event.
func addLiveEvents(data []byte, ctlLast uint64, descs Descs) {
	frames, _, err := LiveFrames(data, ctlLast)
	if err != nil {
		return // (the records of live events then stay unnamed, as a file without them)
	}
	for k := len(frames) - 1; k >= 0; k-- { // oldest first: the order they were added
		fr := frames[k]
		d := descs[fr.ImageID]
		if d == nil || int(fr.NEvents) != len(d.Events)-d.nLive {
			continue
		}
		for _, e := range fr.Events {
			var hits uint64
			if e.HitsOff%8 == 0 && e.HitsOff+8 <= uint64(len(data)) {
				hits = binary.LittleEndian.Uint64(data[e.HitsOff:])
			}
			d.addLive(e, hits)
		}
	}
}

// addLive adds live event e to d, unless d has its id already.
func (d *Desc) addLive(e LiveEvent, hits uint64) {
	if _, _, ok := d.EventByID(e.ID); ok || int(e.Probe) >= len(d.Probes) {
		return
	}
	at := d.Probes[e.Probe].Event
	if at < 0 || at >= len(d.Events) || !d.Events[at].Spare {
		return
	}
	group, name, _ := liveName(e.Def)
	de := DescEvent{ID: e.ID, Group: group, Name: name, Def: e.Def, Origin: "kprewrite probe",
		Return: e.Return, Live: true, At: at + 1, liveHits: hits}
	de.freeSite, de.freeAddr, _ = e.At()
	d.Events = append(d.Events, de)
	d.nLive++
}

// liveName is the group and name a live event's definition gives it.
func liveName(def string) (group, name string, err error) {
	p, err := eventdef.Parse(def)
	if err != nil {
		return "", "", err
	}
	return p.Group, p.Event, nil
}

// RuntimeEvents is the number of the image's own events (its runtime's), without
// those added from the trace file's live-event frames.
func (d *Desc) RuntimeEvents() int { return len(d.Events) - d.nLive }
