package tracefile

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/mmapfile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// A Follower prints a version 3 or 4 trace file's records as they are committed, while
// programs write it (`kprewrite trace --follow`, `record --live`): each Poll maps the
// file again, reads only what is new since the last one (per block, where it stopped)
// and prints it in time order, as reading trace_pipe does. Records that two polls see
// out of order across threads are printed in the order of the polls.
//
// Its memory is bounded by the threads writing and the poll's window, not by the
// trace: a poll prints at most pollBudget records (More then says there are others,
// as after a long time away, or on a file that was written before), blocks are read
// in file order, and what it keeps of blocks their writers left goes.
type Follower struct {
	path string
	bins []string
	// direct files: the blocks still being followed in file order, and where the search
	// for new blocks goes on
	cursors []dcursor
	latest  map[[2]uint32]uint64 // per writer (pid, tid): its latest block's offset
	scan    uint64
	missing map[uint64]int // a block whose header is not there yet: polls it stayed so
	// ring files: the last chunk read whole, the one being read and its pieces read,
	// and per ring block seq how far its records were printed (absent: polls since the
	// ring last held that seq)
	chunkDone, chunkAt uint64
	pieceAt            int
	printed            map[uint32]uint64
	absent             map[uint32]int
	descs              Descs
	refs               map[uint8][]probeRef
	fm                 *Formatter
	nimages            uint32
	described          uint32 // of them, with their description in the file at the last read
	ctlLast            uint64 // the header's ctl_last the descriptions were made under
	pending            []Record
	errs               map[string]bool
	Printed            uint64 // records printed
	// More is set when the last poll stopped at its budget: poll again at once.
	More bool
	// Done is set once the recorder finished (a ring file) and everything was printed.
	Done bool
	// ChunksOnly: of a ring file, read only what the recorder copied into its chunks,
	// never the ring's blocks, which a recorder in the same process (record --live)
	// refills while a lagging follower reads them; it copies every record there.
	ChunksOnly bool
}

// dcursor is a block of a direct file being followed: where its next record is, and
// how many polls found nothing new there.
type dcursor struct {
	blk, next uint64
	idle      int
}

// pollBudget is how many records one poll prints at most.
const pollBudget = 1 << 16

// NewFollower follows the trace file at path; bins are binaries whose descriptions the
// file may not hold (OpenStream's).
func NewFollower(path string, bins []string) *Follower {
	return &Follower{path: path, bins: bins, latest: map[[2]uint32]uint64{}, missing: map[uint64]int{},
		printed: map[uint32]uint64{}, absent: map[uint32]int{}, errs: map[string]bool{}}
}

// missingPolls is how many polls a block that head has passed may lack its header before
// it is taken for one whose writer died as it took it; and how many polls a block its
// writer left stays followed (a record a signal handler interrupted may be committed
// after the handler took a new block).
const missingPolls = 20

// Poll prints the records committed since the last poll to w (errors, once each, to
// errw), at most pollBudget of them (More). A file that is not yet a trace file (empty,
// or its magic still zero: a program is making it) prints nothing; one that is
// something else, or a trace file of another version, is an error.
func (f *Follower) Poll(w, errw io.Writer) error {
	data, err := mmapfile.Map(f.path, MaxTraceFile, "a trace file")
	if err != nil {
		return err
	}
	defer mmapfile.Unmap(data)
	t, err := parseHeader(data)
	if err != nil || !compact(t.Header.Version) {
		if head := data[:min(len(data), len(kprt.TraceMagic))]; bytes.Count(head, []byte{0}) == len(head) {
			return nil // not yet
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		return fmt.Errorf("%s: %w: version %d; --follow reads versions %d to %d (without --follow it reads this one)", f.path, ErrTrace, t.Header.Version, kprt.TraceVersion3, kprt.TraceVersion)
	}
	f.describe(t, data)
	s := &Stream{Trace: t, data: data, file: data, v3: true, refs: f.refs, holes: fileHoles(f.path)}
	f.pending = f.pending[:0]
	f.More = false
	if t.Header.RingBlocks == 0 {
		f.pollDirect(s)
	} else {
		f.pollRing(s)
	}
	f.Done = t.Header.RingBlocks != 0 && t.Header.RingFlags&kprt.RingDone != 0 && !f.More
	return f.print(w, errw)
}

// describe reads the descriptions of the images registered since the last poll.
func (f *Follower) describe(t *Trace, data []byte) {
	if f.fm != nil && t.Header.NImages == f.nimages && t.Header.CtlLast == f.ctlLast && f.described >= f.nimages {
		return
	}
	// (an image is registered before its description is written: a poll between the
	// two reads the descriptions again next time, or its records had no names)
	f.nimages, f.ctlLast = t.Header.NImages, t.Header.CtlLast
	f.descs = Descs{}
	own := ownDescs(t)
	f.described = uint32(len(own))
	for _, d := range own {
		f.descs.Add(d)
	}
	for _, b := range f.bins {
		if im, err := readImagePath(b); err == nil {
			f.descs.Add(im.Desc)
		}
	}
	addLiveEvents(data, t.Header.CtlLast, f.descs) // (events added at run time: kprewrite probe)
	f.fm = NewFormatter(f.descs)
	f.fm.Counter = t.Header.Clock == kprt.ClockCounter
	f.refs = map[uint8][]probeRef{}
}

// print writes the poll's records in time order.
func (f *Follower) print(w, errw io.Writer) error {
	sort.SliceStable(f.pending, func(i, j int) bool { return f.pending[i].TsNs < f.pending[j].TsNs })
	var sb strings.Builder
	for i := range f.pending {
		line, err := f.fm.Line(&f.pending[i])
		if err != nil {
			if msg := err.Error(); !f.errs[msg] {
				f.errs[msg] = true
				fmt.Fprintf(errw, "kprewrite trace: %s\n", msg)
			}
			continue
		}
		sb.WriteString(line)
		sb.WriteByte('\n')
		f.Printed++
	}
	clear(f.pending) // no Data kept alive until the next poll
	_, err := io.WriteString(w, sb.String())
	return err
}

// full reports whether the poll has its budget of records.
func (f *Follower) full() bool { return len(f.pending) >= pollBudget }

// keep copies a record out of the mapping into pending.
func (f *Follower) keep(r *Record) {
	c := *r
	c.Data = append([]byte(nil), r.Data...)
	f.pending = append(f.pending, c)
}

// walk reads the committed records of [off, end) of a block that blk names, stopping
// at the first one not committed yet, or once the poll is full; it returns where it
// stopped.
func (f *Follower) walk(s *Stream, off, end uint64, blk *kprt.RawBlock, emit func(off, size uint64, r *Record)) uint64 {
	bc := ctxOf(blk)
	var r Record
	for off < end && !f.full() {
		size, st := s.crec(off, end, &bc, &r)
		if st == crecEnd || st == crecTorn {
			break // not there yet, or being written
		}
		if st == crecCommitted {
			emit(off, size, &r)
		}
		off += size
	}
	return off
}

// pollDirect reads a file whose blocks head gives out: the blocks followed, in file
// order, then the new ones, until the poll is full.
func (f *Follower) pollDirect(s *Stream) {
	keep := f.cursors[:0]
	for i := range f.cursors {
		c := f.cursors[i]
		if !f.full() && !f.walkDirect(s, &c) {
			continue // finished, or left by its writer
		}
		keep = append(keep, c)
	}
	f.cursors = keep
	h := &s.Header
	base := uint64(kprt.TraceHeaderSize)
	end := base + min(h.Head, h.DataSize)
	f.scan = max(f.scan, base)
	for f.scan < end && !f.full() {
		var blk kprt.RawBlock
		// a hole is not read (see holes.go): a block its writer is readying, or one
		// lost to a full disk when it stays one
		hole := holeEnd(s.holes, f.scan)
		if hole != 0 || !decodeBlock(s.data, f.scan, end, &blk) {
			f.missing[f.scan]++
			if f.missing[f.scan] < missingPolls {
				break // its writer is writing its header
			}
			delete(f.missing, f.scan)
			f.scan = max(f.scan+granule, (hole+granule-1)/granule*granule)
			continue
		}
		delete(f.missing, f.scan)
		f.latest[[2]uint32{blk.PID, blk.TID}] = f.scan
		c := dcursor{blk: f.scan, next: f.scan + kprt.BlockSize}
		if f.walkDirect(s, &c) {
			f.cursors = append(f.cursors, c)
		}
		f.scan += (uint64(blk.Size) + granule - 1) / granule * granule
	}
	f.More = f.full()
}

// walkDirect reads block c's new records; false when the block is done with: no room
// left for a record, or its writer has a later block and nothing came for
// missingPolls polls.
func (f *Follower) walkDirect(s *Stream, c *dcursor) bool {
	var blk kprt.RawBlock
	if !decodeBlock(s.data, c.blk, uint64(len(s.data)), &blk) {
		return false
	}
	end := c.blk + uint64(blk.Size)
	next := f.walk(s, c.next, end, &blk, func(_, _ uint64, r *Record) { f.keep(r) })
	if next != c.next {
		c.next, c.idle = next, 0
	} else {
		c.idle++
	}
	if end-c.next < kprt.CRecSize {
		return false
	}
	return f.latest[[2]uint32{blk.PID, blk.TID}] == c.blk || c.idle < missingPolls
}

// pollRing reads a file kprewrite record writes: the chunks appended since the last
// poll, then what the ring holds past them, until the poll is full.
func (f *Follower) pollRing(s *Stream) {
	h := &s.Header
	for _, off := range chunkChain(s.data, h.ChunkLast, func(off uint64) bool { return off <= f.chunkDone }) {
		if off != f.chunkAt {
			f.chunkAt, f.pieceAt = off, 0
		}
		k := 0
		eachPiece(s.data, off, func(blk *kprt.RawBlock, start, end uint64) {
			if k++; k <= f.pieceAt || f.full() {
				return
			}
			f.pieceAt = k
			seq, from := blk.Seq, uint64(blk.Drained)
			f.walk(s, start, end, blk, func(o, sz uint64, r *Record) {
				if at := from + (o - start); at >= f.printed[seq] {
					f.keep(r)
					f.printed[seq] = at + sz
				}
			})
		})
		if f.full() {
			f.More = true // (a piece read in part is read again from its start)
			f.pieceAt = max(f.pieceAt-1, 0)
			return
		}
		f.chunkDone = off
	}
	if !f.ChunksOnly {
		f.pollBlocks(s)
	}
	f.More = f.full()
}

// pollBlocks reads the ring's blocks past what was printed of them, and forgets the
// seqs the ring has not held for two polls (the chunk holding a block's last records
// is linked before the block is given back, so the next poll has read it).
func (f *Follower) pollBlocks(s *Stream) {
	h := &s.Header
	bs := h.RingBS
	held := make(map[uint32]bool)
	for off := range ringBlocks(s.data, h) {
		var blk kprt.RawBlock
		if !decodeBlock(s.data, off, off+bs, &blk) {
			continue
		}
		seq := blk.Seq
		held[seq] = true
		from := max(f.printed[seq], kprt.BlockSize)
		f.walk(s, off+from, off+uint64(blk.Size), &blk, func(o, sz uint64, r *Record) {
			f.keep(r)
			f.printed[seq] = o - off + sz
		})
	}
	for seq := range f.printed {
		if held[seq] {
			delete(f.absent, seq)
		} else if f.absent[seq]++; f.absent[seq] > 2 {
			delete(f.printed, seq)
			delete(f.absent, seq)
		}
	}
}

// readImagePath reads the description of the rewritten binary at path.
func readImagePath(path string) (*Image, error) {
	f, err := elfio.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadImage(f)
}
