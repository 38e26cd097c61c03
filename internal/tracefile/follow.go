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

// A Follower prints a version 3 trace file's records as they are committed, while
// programs write it (`kprewrite trace --follow`, `record --live`): each Poll maps the
// file again, reads only what is new since the last one (per block, where it stopped)
// and prints it in time order, as reading trace_pipe does. Records that two polls see
// out of order across threads are printed in the order of the polls.
type Follower struct {
	path string
	bins []string
	// direct files: blocks found so far by offset, where each one's next record is;
	// scan is where the search for new blocks goes on
	cursors map[uint64]uint64
	scan    uint64
	missing map[uint64]int // a block whose header is not there yet: polls it stayed so
	// ring files: chunks read, and per ring block seq how far its records were printed
	chunks  map[uint64]bool
	printed map[uint32]uint64
	descs   Descs
	refs    map[uint8][]probeRef
	fm      *Formatter
	nimages uint32
	pending []Record
	errs    map[string]bool
	Printed uint64 // records printed
	// Done is set once the recorder finished (a ring file) and everything was printed.
	Done bool
}

// NewFollower follows the trace file at path; bins are binaries whose descriptions the
// file may not hold (OpenStream's).
func NewFollower(path string, bins []string) *Follower {
	return &Follower{path: path, bins: bins, cursors: map[uint64]uint64{}, missing: map[uint64]int{},
		chunks: map[uint64]bool{}, printed: map[uint32]uint64{}, errs: map[string]bool{}}
}

// missingPolls is how many polls a block that head has passed may lack its header before
// it is taken for one whose writer died as it took it.
const missingPolls = 20

// Poll prints the records committed since the last poll to w (errors, once each, to
// errw). A file that is not yet a trace file (empty, or its magic still zero: a program
// is making it) prints nothing; one that is something else, or a trace file of another
// version, is an error.
func (f *Follower) Poll(w, errw io.Writer) error {
	data, err := mmapfile.Map(f.path, MaxTraceFile, "a trace file")
	if err != nil {
		return err
	}
	defer mmapfile.Unmap(data)
	t, err := parseHeader(data)
	if err != nil || t.Header.Version != kprt.TraceVersion {
		if head := data[:min(len(data), len(kprt.TraceMagic))]; bytes.Count(head, []byte{0}) == len(head) {
			return nil // not yet
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		return fmt.Errorf("%s: %w: version %d; --follow reads version %d files (without --follow it reads this one)", f.path, ErrTrace, t.Header.Version, kprt.TraceVersion)
	}
	if f.fm == nil || t.Header.NImages != f.nimages {
		// new images registered: their descriptions
		f.nimages = t.Header.NImages
		f.descs = Descs{}
		for _, d := range ownDescs(t) {
			f.descs.Add(d)
		}
		for _, b := range f.bins {
			if im, err := readImagePath(b); err == nil {
				f.descs.Add(im.Desc)
			}
		}
		f.fm = NewFormatter(f.descs)
	}
	if f.refs == nil {
		f.refs = map[uint8][]probeRef{}
	}
	s := &Stream{Trace: t, data: data, file: data, v3: true, refs: f.refs, holes: fileHoles(f.path)}
	f.pending = f.pending[:0]
	if t.Header.RingBlocks == 0 {
		f.pollDirect(s)
	} else {
		f.pollRing(s)
	}
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
	f.Done = t.Header.RingBlocks != 0 && t.Header.RingFlags&kprt.RingDone != 0
	_, err = io.WriteString(w, sb.String())
	return err
}

// keep copies a record out of the mapping into pending.
func (f *Follower) keep(r *Record) {
	c := *r
	c.Data = append([]byte(nil), r.Data...)
	f.pending = append(f.pending, c)
}

// walk reads the committed records of [off, end) of a block that blk names, stopping
// at the first one not committed yet; it returns where it stopped.
func (f *Follower) walk(s *Stream, off, end uint64, blk *kprt.RawBlock, emit func(off, size uint64, r *Record)) uint64 {
	bc := ctxOf(blk)
	var r Record
	for off < end {
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

func (f *Follower) pollDirect(s *Stream) {
	h := &s.Header
	base := uint64(kprt.TraceHeaderSize)
	end := base + min(h.Head, h.DataSize)
	if f.scan < base {
		f.scan = base
	}
	for f.scan < end {
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
		f.cursors[f.scan] = f.scan + kprt.BlockSize
		f.scan += (uint64(blk.Size) + granule - 1) / granule * granule
	}
	for b, cur := range f.cursors {
		var blk kprt.RawBlock
		if !decodeBlock(s.data, b, uint64(len(s.data)), &blk) {
			continue
		}
		f.cursors[b] = f.walk(s, cur, b+uint64(blk.Size), &blk, func(_, _ uint64, r *Record) { f.keep(r) })
	}
}

func (f *Follower) pollRing(s *Stream) {
	h := &s.Header
	// chunks the recorder appended since the last poll
	for _, off := range chunkChain(s.data, h.ChunkLast, func(off uint64) bool { return f.chunks[off] }) {
		f.chunks[off] = true
		eachPiece(s.data, off, func(blk *kprt.RawBlock, start, end uint64) {
			seq, from := blk.Seq, uint64(blk.Drained)
			f.walk(s, start, end, blk, func(o, sz uint64, r *Record) {
				if at := from + (o - start); at >= f.printed[seq] {
					f.keep(r)
					f.printed[seq] = at + sz
				}
			})
		})
	}
	n, bs := uint64(h.RingBlocks), h.RingBS
	if bs < 2*granule || n > h.DataSize/bs {
		return
	}
	for i := uint64(0); i < n; i++ {
		off := uint64(kprt.TraceHeaderSize) + i*bs
		var blk kprt.RawBlock
		if !decodeBlock(s.data, off, off+bs, &blk) {
			continue
		}
		seq := blk.Seq
		from := max(f.printed[seq], kprt.BlockSize)
		f.walk(s, off+from, off+uint64(blk.Size), &blk, func(o, sz uint64, r *Record) {
			f.keep(r)
			f.printed[seq] = o - off + sz
		})
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
