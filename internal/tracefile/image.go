package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// ErrNoProbes reports a file that is not a binary rewritten by kprewrite with probes.
var ErrNoProbes = errors.New("not a binary rewritten by kprewrite with probes")

// Image is what a rewritten binary holds about its probes: the description and the
// runtime tables as the runtime will read them.
type Image struct {
	Desc   *Desc
	Header kprt.RawHeader
	Points []kprt.RawPoint // sorted by site, then the Header.NFree free live points (site 0)
	Probes []kprt.RawProbe // by runtime index
	Events []kprt.RawEvent
}

// ReadImage reads the probes of a binary rewritten by kprewrite.
func ReadImage(f *elfio.File) (*Image, error) {
	s := f.Section(elfio.SecRodata)
	if s == nil {
		return nil, fmt.Errorf("%s: %w (no %s section)", f.Path, ErrNoProbes, elfio.SecRodata)
	}
	data := f.SectionData(s)
	frame, ok := FindDesc(data)
	if !ok {
		return nil, fmt.Errorf("%s: %w (no image description in %s)", f.Path, ErrNoProbes, elfio.SecRodata)
	}
	d, err := ParseDesc(frame)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	im, err := parseTables(data, s.Addr, d.TablesAddr())
	if err != nil {
		return nil, fmt.Errorf("%s: probe tables: %w", f.Path, err)
	}
	im.Desc = d
	if len(im.Probes) != len(d.Probes) || im.Header.ImageID != d.ImageID {
		return nil, fmt.Errorf("%s: %w: the description lists %d probes of image %#x, the tables %d of image %#x",
			f.Path, ErrDesc, len(d.Probes), d.ImageID, len(im.Probes), im.Header.ImageID)
	}
	return im, nil
}

// headerSize168 is the size of the probe tables' header before the unwind table.
const headerSize168 = 168

// parseTables reads the header at hdrAddr and the tables it points at, all inside
// data (the bytes of a section at address base).
func parseTables(data []byte, base, hdrAddr uint64) (*Image, error) {
	at := func(addr, size uint64) ([]byte, error) {
		if addr < base || addr-base > uint64(len(data)) || size > uint64(len(data))-(addr-base) {
			return nil, fmt.Errorf("%#x+%d is outside the section at %#x+%d", addr, size, base, len(data))
		}
		return data[addr-base : addr-base+size], nil
	}
	var im Image
	// images rewritten before the unwind table have a 168-byte header: the same
	// fields, the new ones zero
	hb, err := at(hdrAddr, headerSize168)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if hs := binary.LittleEndian.Uint16(hb[6:]); hs == kprt.HeaderSize {
		if hb, err = at(hdrAddr, kprt.HeaderSize); err != nil {
			return nil, fmt.Errorf("header: %w", err)
		}
	}
	full := make([]byte, kprt.HeaderSize)
	copy(full, hb)
	if err := binary.Read(bytes.NewReader(full), binary.LittleEndian, &im.Header); err != nil {
		return nil, err
	}
	h := &im.Header
	if h.Magic != kprt.Magic || h.Version != kprt.Version || (h.HeaderSize != kprt.HeaderSize && h.HeaderSize != headerSize168) || h.Self != hdrAddr {
		return nil, fmt.Errorf("bad header (magic %#x version %d size %d self %#x)", h.Magic, h.Version, h.HeaderSize, h.Self)
	}
	if h.NPoints > kprt.MaxPoints || h.NFree > kprt.MaxFree {
		return nil, fmt.Errorf("%d points and %d free ones (max %d)", h.NPoints, h.NFree, kprt.MaxPoints)
	}
	npoints := h.NPoints + h.NFree
	// check that each array is inside the section before allocating it
	pb, err := at(h.Points, uint64(npoints)*kprt.PointSize)
	if err != nil {
		return nil, fmt.Errorf("points: %w", err)
	}
	qb, err := at(h.Probes, uint64(h.NProbes)*kprt.ProbeSize)
	if err != nil {
		return nil, fmt.Errorf("probes: %w", err)
	}
	eb, err := at(h.Events, uint64(h.NEvents)*kprt.EventSize)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	im.Points = make([]kprt.RawPoint, npoints)
	im.Probes = make([]kprt.RawProbe, h.NProbes)
	im.Events = make([]kprt.RawEvent, h.NEvents)
	for _, r := range []struct {
		b []byte
		v any
	}{{pb, im.Points}, {qb, im.Probes}, {eb, im.Events}} {
		if err := binary.Read(bytes.NewReader(r.b), binary.LittleEndian, r.v); err != nil {
			return nil, err
		}
	}
	for i, p := range im.Probes {
		if p.Point >= npoints {
			return nil, fmt.Errorf("probe %d: point %d of %d", i, p.Point, npoints)
		}
		if p.Event != kprt.NoEvent && p.Event >= h.NEvents {
			return nil, fmt.Errorf("probe %d: event %d of %d", i, p.Event, h.NEvents)
		}
	}
	return &im, nil
}

// PointOf returns the table entry of the point probe i is on.
func (im *Image) PointOf(i int) *kprt.RawPoint {
	return &im.Points[im.Probes[i].Point]
}
