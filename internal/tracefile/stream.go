package tracefile

import (
	"fmt"
	"sort"
	"sync/atomic"
	"syscall"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// A Stream reads a trace file's records in time order without holding them: memory
// grows with the number of runs (a writer's stretch of records in time order, one or a
// few per 64 KiB block) and of threads writing at once, not with the records' count.
//
// The record area is a sequence of blocks, each one thread's records in the order it
// wrote them. NewStream walks it once, counting hits and records, and cuts it into
// runs: a run starts at a block, and again wherever a timestamp goes back (a signal
// handler's record written after one it interrupted), so that every run is in
// (time, offset) order. Each merges the runs by (time, offset), taking a run into the
// merge only when its first record is due: the order is the one a stable sort of all
// records by time gives, the order `kprewrite trace` has always printed.
type Stream struct {
	*Trace         // header, images and counters (record hits included), Lost, Torn; no Records
	Count   int    // committed records
	data    []byte // the record area
	mapping []byte // the file's mapping (OpenStream), unmapped by Close
	runs    []run  // by (first timestamp, offset)
	v1      bool
	v3      bool   // compact records (stream3.go): data is the whole file, offsets the file's
	file    []byte // the whole file
	blocks  []blockCtx
	refs    map[uint8][]probeRef
	noRefs  [256]bool
	dropped uint64 // the first pass gave back the pages before this offset
	mapped  bool   // data is a file's mapping: dropPages gives back what was read
	bs      uint64
	holes   []span       // the file's holes (OpenStream): never read, they hold no records
	done    atomic.Int64 // records Each gave, updated every few thousand (Done)
	// Until, when not 0, ends Each at the first record later than it: the trace as it
	// was at that time (Snapshot).
	Until uint64
}

// Snapshot limits the stream to the file's latest snapshot (a snapshot trigger, an
// onmax().snapshot() action): the records written up to it. It reports false when
// no snapshot was taken.
func (s *Stream) Snapshot() bool {
	if s.Header.SnapTs == 0 {
		return false
	}
	s.Until = s.Header.SnapTs
	return true
}

// Done returns about how many records Each has given so far: a progress display reads
// it from another goroutine.
func (s *Stream) Done() int64 { return s.done.Load() }

// dropChunk is how much of the record area the first pass reads before it gives the
// pages back.
const dropChunk = 8 << 20

// dropPages gives back the pages of the mapping wholly inside [from, to) of the record
// area, once read: the kernel keeps them in the page cache, but the reader's resident
// size stays that of the records being merged, whatever the file's size.
func (s *Stream) dropPages(from, to uint64) {
	if !s.mapped || to <= from {
		return
	}
	base := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.data))))
	lo := (base + from + pageSize - 1) &^ (pageSize - 1)
	hi := (base + to) &^ (pageSize - 1)
	if hi <= lo {
		return
	}
	syscall.Madvise(s.data[lo-base:hi-base], syscall.MADV_DONTNEED)
}

const pageSize = 4096

// run is a stretch of records in (time, offset) order: [off, end) of the record area,
// ts the first record's timestamp.
type run struct {
	off, end, ts uint64
	blk          int32 // version 3: its block's entry in Stream.blocks
}

// NewStream parses b's header and indexes its records. b must stay readable (and
// unchanged) while the stream is used.
func NewStream(b []byte) (*Stream, error) { return newStream(b, false, nil) }

// newStream is NewStream; mapped says b is a file's read-only mapping, whose pages
// are given back once read (dropPages), holes the file's holes.
func newStream(b []byte, mapped bool, holes []span) (*Stream, error) {
	t, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	h := &t.Header
	s := &Stream{Trace: t, data: b[kprt.TraceHeaderSize : kprt.TraceHeaderSize+h.DataSize], v1: h.Version == traceVersion1, mapped: mapped, file: b, holes: holes}
	if compact(h.Version) {
		s.v3 = true
		s.index3()
		s.dropPages(s.dropped, uint64(len(s.data)))
		s.sortRuns()
		return s, nil
	}
	end := min(h.Head, h.DataSize)
	// Version 1: one sequence of records. Version 2: blocks of whole granules of
	// BlockSize bytes, each one thread's sequence of records until a size 0, after which
	// the block is zero: the next record is at a later granule.
	s.bs = end
	if !s.v1 {
		s.bs = h.BlockSize
		if s.bs < kprt.RecordSize || s.bs&(s.bs-1) != 0 || h.DataSize%s.bs != 0 {
			return nil, fmt.Errorf("%w: block size %d for a record area of %d bytes", ErrTrace, s.bs, h.DataSize)
		}
	}
	cur := run{off: ^uint64(0)}
	closeRun := func(at uint64) {
		if cur.off != ^uint64(0) && cur.off < at {
			cur.end = at
			s.runs = append(s.runs, cur)
		}
		cur.off = ^uint64(0)
	}
	var r kprt.RawRecord
	dropped, last := uint64(0), uint64(0) // last: the run's last timestamp so far
	for off := uint64(0); off+kprt.RecordSize <= end; {
		if off-dropped >= dropChunk {
			s.dropPages(dropped, off)
			dropped = off
		}
		decodeRecord(s.data[off:], &r)
		sz := uint64(r.Size)
		if sz < kprt.RecordSize || sz%8 != 0 || sz > end-off {
			// the rest of the block was never written (its thread ended, or the writer
			// died right after taking its place) or is corrupt
			closeRun(off)
			if s.v1 {
				break
			}
			off = (off/s.bs + 1) * s.bs
			continue
		}
		if r.Commit == kprt.RecDiscard {
			// refused by its event's filter after it was written: not a record
		} else if r.Commit != kprt.RecCommit || uint64(r.DataLen) > sz-kprt.RecordSize {
			t.Torn++
		} else {
			if cur.off == ^uint64(0) || r.TsNs < last {
				closeRun(off)
				cur = run{off: off, ts: r.TsNs}
			}
			last = r.TsNs
			s.Count++
			if !s.v1 {
				t.countHit(&r)
			}
		}
		off += sz
	}
	closeRun(end)
	s.dropPages(dropped, end)
	s.sortRuns()
	return s, nil
}

func (s *Stream) sortRuns() {
	sort.Slice(s.runs, func(i, j int) bool {
		a, b := &s.runs[i], &s.runs[j]
		return a.ts < b.ts || a.ts == b.ts && a.off < b.off
	})
}

// cursor of the merge: the run's next committed record, decoded.
type runCursor struct {
	rec             Record
	start, off, end uint64
	blk             int32
}

// next moves c to the first committed record at or after c.off; false at the run's end.
func (s *Stream) next(c *runCursor) bool {
	if s.v3 {
		return s.next3(c)
	}
	for c.off+kprt.RecordSize <= c.end {
		decodeRecord(s.data[c.off:], &c.rec.RawRecord)
		sz := uint64(c.rec.Size)
		if sz < kprt.RecordSize || sz > c.end-c.off {
			return false
		}
		if c.rec.Commit == kprt.RecCommit && uint64(c.rec.DataLen) <= sz-kprt.RecordSize {
			c.rec.Data = s.data[c.off+kprt.RecordSize : c.off+kprt.RecordSize+uint64(c.rec.DataLen)]
			return true
		}
		c.off += sz
	}
	return false
}

// Each calls fn with every committed record in time order (records with the same
// timestamp in file order) until fn returns an error, which Each returns. The record
// and its Data are valid only during the call.
func (s *Stream) Each(fn func(*Record) error) error {
	var h []*runCursor // a min-heap by (ts, off)
	less := func(a, b *runCursor) bool {
		return a.rec.TsNs < b.rec.TsNs || a.rec.TsNs == b.rec.TsNs && a.off < b.off
	}
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			if r := l + 1; r < len(h) && less(h[r], h[l]) {
				l = r
			}
			if !less(h[l], h[i]) {
				return
			}
			h[i], h[l] = h[l], h[i]
			i = l
		}
	}
	up := func(i int) {
		for i > 0 {
			p := (i - 1) / 2
			if !less(h[i], h[p]) {
				return
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	var free []*runCursor
	pending, given := 0, int64(0)
	defer func() { s.done.Store(given) }()
	for {
		// a run joins the merge when its first record is due
		for pending < len(s.runs) {
			rn := &s.runs[pending]
			if len(h) > 0 && (h[0].rec.TsNs < rn.ts || h[0].rec.TsNs == rn.ts && h[0].off < rn.off) {
				break
			}
			pending++
			var c *runCursor
			if n := len(free); n > 0 {
				c, free = free[n-1], free[:n-1]
			} else {
				c = new(runCursor)
			}
			c.start, c.off, c.end, c.blk = rn.off, rn.off, rn.end, rn.blk
			if !s.next(c) {
				free = append(free, c)
				continue
			}
			h = append(h, c)
			up(len(h) - 1)
		}
		if len(h) == 0 {
			return nil
		}
		c := h[0]
		if s.Until != 0 && c.rec.TsNs > s.Until {
			return nil
		}
		if given++; given&4095 == 0 {
			s.done.Store(given)
		}
		if err := fn(&c.rec); err != nil {
			return err
		}
		c.off += uint64(c.rec.Size)
		if s.next(c) {
			down(0)
			continue
		}
		s.dropPages(c.start, c.end)
		free = append(free, c)
		h[0] = h[len(h)-1]
		h = h[:len(h)-1]
		if len(h) > 0 {
			down(0)
		}
	}
}

// collect returns the trace with every record in Records, in time order, their Data
// copied out of the file.
func (s *Stream) collect() *Trace {
	t := s.Trace
	t.Records = make([]Record, 0, s.Count)
	s.Each(func(r *Record) error {
		c := *r
		c.Data = append([]byte(nil), r.Data...)
		t.Records = append(t.Records, c)
		return nil
	})
	return t
}
