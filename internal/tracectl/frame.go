package tracectl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Frame is one image's run-time controls (struct kprw_ctlframe): the events whose
// filter or triggers differ from the rewrite's, and KPREWRITE_CONTROL's switches.
type Frame struct {
	ImageID uint64
	NEvents uint32
	Entries map[uint32]*Entry // by runtime event index (kprt.CtlSynth | k: synthetic event k)
	// Switches are KPREWRITE_CONTROL's synthetic event switches (struct
	// kprw_ctlswitch): bit 0 of the control area's word at a slot, by slot.
	Switches map[uint32]uint32
}

// Entry is one event's run-time control (struct kprw_ctlent).
type Entry struct {
	Flags      uint32 // kprt.CE*
	Filter     []byte // evfilter program (nil: none)
	Trig       []byte // evtrigger program (nil: none)
	FilterText string
	Triggers   []string // as the trigger file lists them
}

const (
	frameHdr = 48
	entHdr   = 24
)

var offSource = unsafe.Offsetof(kprt.RawCtlFrame{}.Source)

func pad8(n int) int { return (n + 7) &^ 7 }

// Encode is the frame's bytes, entries by event index (the same controls give the same
// bytes).
func (fr *Frame) Encode() ([]byte, error) {
	evs := make([]uint32, 0, len(fr.Entries))
	for e := range fr.Entries {
		evs = append(evs, e)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i] < evs[j] })
	b := make([]byte, frameHdr)
	copy(b, kprt.CtlFrameMagic)
	binary.LittleEndian.PutUint64(b[16:], fr.ImageID)
	binary.LittleEndian.PutUint32(b[28:], uint32(len(evs)))
	binary.LittleEndian.PutUint32(b[32:], fr.NEvents)
	for _, e := range evs {
		en := fr.Entries[e]
		text := en.FilterText + "\x00" + strings.Join(en.Triggers, "\n")
		var h [entHdr]byte
		binary.LittleEndian.PutUint32(h[0:], e)
		binary.LittleEndian.PutUint32(h[4:], en.Flags)
		binary.LittleEndian.PutUint32(h[8:], uint32(len(en.Filter)))
		binary.LittleEndian.PutUint32(h[12:], uint32(len(en.Trig)))
		binary.LittleEndian.PutUint32(h[16:], uint32(len(text)))
		b = append(b, h[:]...)
		for _, part := range [][]byte{en.Filter, en.Trig, []byte(text)} {
			b = append(b, part...)
			b = append(b, make([]byte, pad8(len(part))-len(part))...)
		}
	}
	slots := make([]uint32, 0, len(fr.Switches))
	for sl := range fr.Switches {
		slots = append(slots, sl)
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i] < slots[j] })
	for _, sl := range slots {
		b = binary.LittleEndian.AppendUint32(b, sl)
		b = binary.LittleEndian.AppendUint32(b, fr.Switches[sl]&1)
	}
	binary.LittleEndian.PutUint32(b[36:], uint32(len(slots)))
	if len(b) > kprt.CtlFrameMax {
		return nil, fmt.Errorf("the run-time controls take %d bytes; at most %d", len(b), kprt.CtlFrameMax)
	}
	binary.LittleEndian.PutUint32(b[24:], uint32(len(b)))
	return b, nil
}

// DecodeFrame reads a frame at the start of b, checking it as the runtime does; it
// returns the frame and its size.
func DecodeFrame(b []byte) (*Frame, int, error) {
	if len(b) < frameHdr || string(b[:8]) != kprt.CtlFrameMagic {
		return nil, 0, errors.New("not a run-time control frame")
	}
	size := int(binary.LittleEndian.Uint32(b[24:]))
	if size < frameHdr || size > len(b) || size%8 != 0 || size > kprt.CtlFrameMax {
		return nil, 0, fmt.Errorf("run-time control frame: size %d of %d bytes", size, len(b))
	}
	fr := &Frame{
		ImageID: binary.LittleEndian.Uint64(b[16:]),
		NEvents: binary.LittleEndian.Uint32(b[32:]),
		Entries: map[uint32]*Entry{},
	}
	n := int(binary.LittleEndian.Uint32(b[28:]))
	off := frameHdr
	for k := 0; k < n; k++ {
		if size-off < entHdr {
			return nil, 0, fmt.Errorf("run-time control frame: entry %d truncated", k)
		}
		h := b[off : off+entHdr]
		e := binary.LittleEndian.Uint32(h)
		fl, tl, xl := int(binary.LittleEndian.Uint32(h[8:])), int(binary.LittleEndian.Uint32(h[12:])), int(binary.LittleEndian.Uint32(h[16:]))
		off += entHdr
		if fl > size || tl > size || xl > size || off+pad8(fl)+pad8(tl)+pad8(xl) > size {
			return nil, 0, fmt.Errorf("run-time control frame: entry %d runs past the frame", k)
		}
		if (e >= fr.NEvents && (e&kprt.CtlSynth == 0 || e&^kprt.CtlSynth >= kprt.CtlMaxSynth)) || fr.Entries[e] != nil {
			return nil, 0, fmt.Errorf("run-time control frame: entry %d: event %d", k, e)
		}
		en := &Entry{Flags: binary.LittleEndian.Uint32(h[4:])}
		if fl > 0 {
			en.Filter = b[off : off+fl]
		}
		off += pad8(fl)
		if tl > 0 {
			en.Trig = b[off : off+tl]
		}
		off += pad8(tl)
		text := string(b[off : off+xl])
		off += pad8(xl)
		ft, tr, _ := strings.Cut(text, "\x00")
		en.FilterText = ft
		if tr != "" {
			en.Triggers = strings.Split(tr, "\n")
		}
		fr.Entries[e] = en
	}
	if nsw := int(binary.LittleEndian.Uint32(b[36:])); nsw > 0 {
		if nsw > (size-off)/8 {
			return nil, 0, fmt.Errorf("run-time control frame: %d switches past the frame", nsw)
		}
		fr.Switches = map[uint32]uint32{}
		for k := 0; k < nsw; k++ {
			fr.Switches[binary.LittleEndian.Uint32(b[off:])] = binary.LittleEndian.Uint32(b[off+4:]) & 1
			off += 8
		}
	}
	return fr, size, nil
}

// EncodeControlFile is a KPREWRITE_CONTROL file holding frames.
func EncodeControlFile(frames []*Frame) ([]byte, error) {
	b := []byte(kprt.CtlFileMagic)
	for _, fr := range frames {
		fb, err := fr.Encode()
		if err != nil {
			return nil, err
		}
		// its hash: the processes started with the file install it once (the first
		// one's counts and histograms are the trace file's)
		h := fnv.New64a()
		h.Write(fb)
		src := max(h.Sum64(), 1)
		binary.LittleEndian.PutUint64(fb[offSource:], src)
		b = append(b, fb...)
	}
	return b, nil
}

// DecodeControlFile reads a KPREWRITE_CONTROL file.
func DecodeControlFile(b []byte) ([]*Frame, error) {
	if len(b) < 8 || string(b[:8]) != kprt.CtlFileMagic {
		return nil, errors.New("not a kprewrite control file")
	}
	var out []*Frame
	for off := 8; off < len(b); {
		fr, n, err := DecodeFrame(b[off:])
		if err != nil {
			return nil, fmt.Errorf("at byte %d: %w", off, err)
		}
		out = append(out, fr)
		off += n
	}
	return out, nil
}
