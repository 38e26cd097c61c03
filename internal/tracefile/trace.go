package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Trace is a parsed trace file.
type Trace struct {
	Header  kprt.RawTraceHeader
	Images  []TraceImage
	Records []Record
	// Torn counts records that were reserved but never committed (their writer died
	// while writing them).
	Torn int
	// Lost is the number of records that did not fit (the header's lost count).
	Lost uint64
	// Overwritten is the number of records a `record --overwrite` ring's writers wrote
	// over before anything copied them (the header's count): written, not kept.
	Overwritten uint64
}

// TraceImage holds the counters of one rewritten image in a trace file.
type TraceImage struct {
	ImageID     uint64
	Counters    []Counter // indexed by runtime probe index (Encoded.ProbeIndex)
	CountersOff uint64    // where they are in the file (the counters area, or appended at its end)
	// Shards is how many per-CPU shards of hit counts (count-only detours counting in
	// restartable sequences) the file holds for the image; Counters include them.
	Shards int
	// Desc is the image description frame ("KPRWDESC", internal/rewriter) the runtime
	// copied into the file when the image registered; nil when it did not (older
	// runtimes, or a frame outside the file).
	Desc []byte
	// CtlOff and CtlSize locate the image's control area (per-event switches, trigger
	// counts; RawTraceImageExt.CtlSize), 0 when it has none.
	CtlOff  uint64
	CtlSize uint32
}

// maxTraceDesc bounds an image description in a trace file.
const maxTraceDesc = 64 << 20

// Counter is the {hit, nmissed} pair of a probe (kprobe_profile).
type Counter struct{ Hit, NMissed uint64 }

// Record is one trace record.
type Record struct {
	kprt.RawRecord
	Data []byte // fetch-program output
	// EntrySP is, in a kprobe record at the entry of a function that has a return
	// event, the stack pointer there (the address of the return-address word; 0 when
	// the record does not say): calls of the thread with a lower one have ended.
	// TailCall: that word held the return trampoline, the call is a tail call from a
	// return-probed frame, whose stack pointer it shares.
	EntrySP  uint64
	TailCall bool
	// GoID is the goroutine that wrote the record, when HasGoID: the record is an
	// event's at a Go function of a Go program (DescEvent.GoID), whose data holds it
	// after the definition's fixed fields. Calls nest per goroutine (internal/calls).
	GoID    uint64
	HasGoID bool
}

// CommString returns the record's comm as a string.
func (r *Record) CommString() string {
	c := r.Comm[:]
	if i := bytes.IndexByte(c, 0); i >= 0 {
		c = c[:i]
	}
	return string(c)
}

// ErrTrace reports a file that is not a valid trace file.
var ErrTrace = errors.New("not a kprewrite trace file")

// unwritten counts the records a recorder gave back to the ring copied (the header's
// Spilled) that no chunk in the file holds: lost, once the recording is over (the ring
// finished, or its recorder gone: killed before it wrote them). While a recorder runs
// they are on their way to the file.
func unwritten(b []byte, h *kprt.RawTraceHeader) uint64 {
	if h.Spilled == 0 || h.RingBlocks == 0 {
		return 0
	}
	pid := h.RecorderPID
	if h.RingFlags&kprt.RingDone == 0 && pid > 0 && pid < 1<<22 && !errors.Is(syscall.Kill(int(pid), 0), syscall.ESRCH) {
		return 0
	}
	var mark uint32
	if off := h.ChunkLast; off != 0 && off <= uint64(len(b)) && uint64(len(b))-off >= kprt.ChunkSize && string(b[off:off+8]) == kprt.ChunkMagic {
		mark = binary.LittleEndian.Uint32(b[off+28:])
	}
	return uint64(uint32(h.Spilled) - mark)
}

// parseHeader parses a trace file's header and its images' counters (without the hits
// the records count).
func parseHeader(b []byte) (*Trace, error) {
	var t Trace
	if len(b) < kprt.TraceHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrTrace, len(b))
	}
	decodeTraceHeader(b, &t.Header)
	h := &t.Header
	if string(h.Magic[:]) != kprt.TraceMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrTrace, h.Magic[:])
	}
	if (!compact(h.Version) && h.Version != kprt.TraceVersion2 && h.Version != traceVersion1) || h.DataOff != kprt.TraceHeaderSize {
		return nil, fmt.Errorf("%w: version %d, data offset %d", ErrTrace, h.Version, h.DataOff)
	}
	size := uint64(len(b))
	if h.DataSize > size-kprt.TraceHeaderSize {
		return nil, fmt.Errorf("%w: record area of %d bytes in a %d-byte file", ErrTrace, h.DataSize, size)
	}
	t.Lost, t.Overwritten = h.Lost+unwritten(b, h), h.Overwritten
	if h.NImages > kprt.TraceMaxImages {
		return nil, fmt.Errorf("%w: %d images", ErrTrace, h.NImages)
	}
	for i := uint32(0); i < h.NImages; i++ {
		im := h.Images[i]
		n := uint64(im.NProbes)
		if im.CountersOff > size || n*16 > size-im.CountersOff {
			return nil, fmt.Errorf("%w: image %#x counters at %#x+%d outside the file", ErrTrace, im.ImageID, im.CountersOff, n*16)
		}
		ti := TraceImage{ImageID: im.ImageID, Counters: make([]Counter, n), CountersOff: im.CountersOff}
		for j := range ti.Counters {
			o := im.CountersOff + uint64(j)*16
			ti.Counters[j] = Counter{binary.LittleEndian.Uint64(b[o:]), binary.LittleEndian.Uint64(b[o+8:])}
		}
		if im.Flags&kprt.TIFExt != 0 {
			ti.Desc = traceDesc(b, im.CountersOff+n*16) // a copy: b may be a mapping
			ti.Shards = addShards(b, im.CountersOff+n*16, ti.Counters)
			ti.CtlOff, ti.CtlSize = ctlArea(b, im.CountersOff+n*16)
		}
		t.Images = append(t.Images, ti)
	}
	return &t, nil
}

// ParseTrace parses a trace file's bytes. It validates every offset and size; a
// truncated or corrupt record area ends the record list rather than failing. Records
// are in time order (Stream.Each's), their Data copied out of b.
func ParseTrace(b []byte) (*Trace, error) {
	s, err := NewStream(b)
	if err != nil {
		return nil, err
	}
	return s.collect(), nil
}

// traceVersion1 is the format before per-thread blocks: records back to back in the
// order of their reservation, hits all in the counters.
const traceVersion1 = 1

// compact says whether a trace file of version v holds compact records after block
// headers: versions 3 and 4 (4 differs in who zeroes a ring's reused blocks only).
func compact(v uint32) bool {
	return v == kprt.TraceVersion || v == kprt.TraceVersion4 || v == kprt.TraceVersion3
}

// countHit adds a committed record that is a probe's hit to that probe's hit counter in
// its writer's image: the runtime counts a hit that writes a record by the record alone.
func (t *Trace) countHit(r *kprt.RawRecord) {
	if r.Probe == kprt.NoProbe || int(r.Image) >= len(t.Images) {
		return
	}
	if im := &t.Images[r.Image]; im.ImageID == r.ImageID && uint64(r.Probe) < uint64(len(im.Counters)) {
		im.Counters[r.Probe].Hit++
	}
}

// addShards adds the per-CPU hit counts of count-only detours (the shards a
// RawTraceImageExt at off names, if any and inside the file) to ctrs and returns how
// many shards there were.
func addShards(b []byte, off uint64, ctrs []Counter) int {
	size := uint64(len(b))
	if off > size || kprt.TraceImageExtSz > size-off {
		return 0
	}
	var ext kprt.RawTraceImageExt
	decodeImageExt(b[off:], &ext)
	n, stride, so := uint64(ext.ShardsN), ext.ShardsStride, ext.ShardsOff
	// a shard holds at least one counter: a zero stride would count one word n times
	if so == 0 || n == 0 || stride < uint64(max(len(ctrs), 1))*8 || so > size || stride > (size-so)/n {
		return 0
	}
	for k := uint64(0); k < n; k++ {
		sh := b[so+k*stride:]
		for i := range ctrs {
			ctrs[i].Hit += binary.LittleEndian.Uint64(sh[i*8:])
		}
	}
	return int(n)
}

// ctlArea locates the control area after the RawTraceImageExt at off: (0, 0) when
// there is none or it is not inside the file.
func ctlArea(b []byte, off uint64) (uint64, uint32) {
	size := uint64(len(b))
	if off > size || kprt.TraceImageExtSz > size-off {
		return 0, 0
	}
	var ext kprt.RawTraceImageExt
	decodeImageExt(b[off:], &ext)
	co := off + kprt.TraceImageExtSz
	if ext.CtlSize == 0 || uint64(ext.CtlSize) > size-co {
		return 0, 0
	}
	return co, ext.CtlSize
}

// traceDesc returns the description frame a RawTraceImageExt at off names, or nil.
func traceDesc(b []byte, off uint64) []byte {
	size := uint64(len(b))
	if off > size || kprt.TraceImageExtSz > size-off {
		return nil
	}
	do, ds := binary.LittleEndian.Uint64(b[off:]), binary.LittleEndian.Uint64(b[off+8:])
	if do == 0 || ds == 0 || ds > maxTraceDesc || do > size || ds > size-do {
		return nil
	}
	return append([]byte(nil), b[do:do+ds]...)
}

// ParseStats decodes kprewrite_rt_stats bytes.
func ParseStats(b []byte) (kprt.RawStats, error) {
	var s kprt.RawStats
	if len(b) < kprt.StatsSize {
		return s, fmt.Errorf("stats: %d bytes, want %d", len(b), kprt.StatsSize)
	}
	err := binary.Read(bytes.NewReader(b[:kprt.StatsSize]), binary.LittleEndian, &s)
	return s, err
}
