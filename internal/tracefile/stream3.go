package tracefile

import (
	"encoding/binary"
	"iter"
	"slices"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Version 3 trace files hold compact records (kprt.RawCRec, 16 bytes before their data)
// in blocks whose header (kprt.RawBlock) names the writing process, thread, image and
// comm once. The record area is either given out by the header's head (a file a
// program writes on its own) or a ring of blocks that `kprewrite record` drains into
// chunks appended to the file (kprt.RawChunk); a reader takes the chunks' pieces and
// whatever the ring still holds past what they copied.

// blockCtx is what a block's header says about each of its records.
type blockCtx struct {
	pid, tid uint32
	image    uint8
	imageID  uint64
	bias     uint64
	comm     [16]byte
}

func ctxOf(blk *kprt.RawBlock) blockCtx {
	return blockCtx{pid: blk.PID, tid: blk.TID, image: blk.Image, imageID: blk.ImageID, bias: blk.Bias, comm: blk.Comm}
}

// probeRef is what a record's probe index stands for: its event and site, and
// whether that event is an entry (kprobe) event.
type probeRef struct {
	eventID uint32
	site    uint64
	entry   bool
	goid    int // the event's DescEvent.GoID
}

const granule = 4096

// decodeBlock decodes the block header at b[off:]; false when there is none (no magic,
// or a size that does not fit [off, end)).
func decodeBlock(b []byte, off, end uint64, blk *kprt.RawBlock) bool {
	if off > end || end-off < kprt.BlockSize || end > uint64(len(b)) {
		return false
	}
	c := cursor{b: b[off : off+kprt.BlockSize]}
	blk.Magic, blk.Size, blk.PID, blk.TID = c.u32(), c.u32(), c.u32(), c.u32()
	blk.Image = c.u8()
	c.bytes(blk.Pad[:])
	blk.Seq, blk.ImageID, blk.Bias = c.u32(), c.u64(), c.u64()
	blk.Done, blk.Drained = c.u32(), c.u32()
	c.bytes(blk.Comm[:])
	return blk.Magic == kprt.BlockMagic && uint64(blk.Size) >= kprt.BlockSize && uint64(blk.Size) <= end-off
}

// probeRefs returns the probe table of the image at entry i of the header, from its
// description in the file (nil when it has none).
func (s *Stream) probeRefs(i uint8) []probeRef {
	if s.refs == nil {
		s.refs = map[uint8][]probeRef{}
	}
	if r, ok := s.refs[i]; ok {
		return r
	}
	if s.noRefs[i] {
		return nil
	}
	var refs []probeRef
	if int(i) < len(s.Images) && s.Images[i].Desc != nil {
		if d, err := ParseDesc(s.Images[i].Desc); err == nil {
			refs = make([]probeRef, len(d.Probes))
			for k, p := range d.Probes {
				refs[k] = probeRef{eventID: kprt.NoEvent, site: p.Site}
				if p.Event >= 0 && p.Event < len(d.Events) {
					refs[k].eventID = d.Events[p.Event].ID
					refs[k].entry = !d.Events[p.Event].Return
					refs[k].goid = d.Events[p.Event].GoID
				}
			}
		}
	}
	if refs != nil { // an image whose description is not in the file yet may be later
		s.refs[i] = refs
	} else {
		s.noRefs[i] = true // (in this stream: a description that does not parse is tried once)
	}
	return refs
}

// crec states
const (
	crecEnd       = iota // no record here: the block's records end
	crecCommitted        // a record
	crecTorn             // reserved, never committed (its writer died)
	crecDiscarded        // refused by its event's filter after it was written
)

// crec decodes the compact record at off, which must end by end, into r (with
// bc's identity); it returns the record's size and state.
func (s *Stream) crec(off, end uint64, bc *blockCtx, r *Record) (uint64, int) {
	b := s.data
	if off > end || end-off < kprt.CRecSize {
		return 0, crecEnd
	}
	h := b[off : off+kprt.CRecSize]
	rlen, commit := binary.LittleEndian.Uint16(h), binary.LittleEndian.Uint16(h[2:])
	cpu, tsHi := binary.LittleEndian.Uint16(h[4:]), binary.LittleEndian.Uint16(h[6:])
	tsLo, probe := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
	if tsLo == 0 && tsHi == 0 {
		return 0, crecEnd
	}
	reserved := uint64(rlen & kprt.CRecLen)
	size := kprt.CRecBytes(rlen)
	if size > end-off {
		return 0, crecEnd // corrupt: its writer's size does not fit the block
	}
	if commit&kprt.CRecCommitted == 0 {
		return size, crecTorn
	}
	dlen := uint64(commit & kprt.CRecLen)
	if dlen > reserved {
		return size, crecTorn
	}
	if commit&kprt.CRecDiscarded != 0 {
		return size, crecDiscarded
	}
	rr := &r.RawRecord
	rr.Size, rr.Commit, rr.CPU = uint32(size), kprt.RecCommit, cpu
	rr.Image, rr.ImageID, rr.PID, rr.TID, rr.Bias, rr.Comm = bc.image, bc.imageID, bc.pid, bc.tid, bc.bias, bc.comm
	rr.Probe, rr.DataLen = kprt.NoProbe, uint32(dlen)
	if rlen&kprt.CRecHit != 0 {
		rr.Probe = probe
	}
	p := off + kprt.CRecSize
	goid := 0 // the event's DescEvent.GoID
	if rlen&kprt.CRecExt != 0 {
		x := b[p : p+kprt.CRecExtSize]
		rr.Type = x[0]
		rr.EventID = binary.LittleEndian.Uint32(x[4:])
		rr.IP = binary.LittleEndian.Uint64(x[8:])
		rr.TsNs = binary.LittleEndian.Uint64(x[16:])
		p += kprt.CRecExtSize
	} else {
		rr.Type = kprt.RecKprobe
		rr.TsNs = s.Header.TsBase + (uint64(tsHi)<<32 | uint64(tsLo))
		rr.EventID, rr.IP = kprt.NoEvent, 0
		entry := false
		if refs := s.probeRefs(bc.image); uint64(probe) < uint64(len(refs)) {
			rr.EventID, rr.IP, entry, goid = refs[probe].eventID, refs[probe].site, refs[probe].entry, refs[probe].goid
		}
		if rlen&kprt.CRecRet != 0 && !entry {
			rr.Type = kprt.RecKretprobe
		}
	}
	rr.RetIP, r.EntrySP, r.TailCall = 0, 0, false
	if rlen&kprt.CRecRet != 0 {
		w := binary.LittleEndian.Uint64(b[p:])
		p += 8
		if rr.Type == kprt.RecKprobe {
			r.EntrySP, r.TailCall = w&^1, w&1 != 0
		} else {
			rr.RetIP = w
		}
	}
	r.Data = b[p : p+dlen]
	if rlen&kprt.CRecExt != 0 && rr.EventID != kprt.NoEvent {
		goid = s.extGoID(bc.image, probe, rr.EventID)
	}
	r.GoID, r.HasGoID = 0, false
	if o := goid - 1; o >= 0 && o+8 <= len(r.Data) {
		r.GoID, r.HasGoID = binary.LittleEndian.Uint64(r.Data[o:]), true
	}
	return size, crecCommitted
}

// extGoID is the DescEvent.GoID of an ext record's event (its time past the compact
// form's): its probe's, when the image's description names that event there.
func (s *Stream) extGoID(image uint8, probe, eventID uint32) int {
	refs := s.probeRefs(image)
	if uint64(probe) < uint64(len(refs)) && refs[probe].eventID == eventID {
		return refs[probe].goid
	}
	return 0
}

// index3 indexes a version 3 or 4 file's records: the blocks given out by head, or the
// recorder's chunks and the ring.
func (s *Stream) index3() {
	h := &s.Header
	s.data = s.file
	base := uint64(kprt.TraceHeaderSize)
	if h.RingBlocks == 0 {
		end := base + min(h.Head, h.DataSize)
		for off := base; off < end; {
			if to := holeEnd(s.holes, off); to != 0 { // blocks lost to a full disk
				off = (to + granule - 1) / granule * granule
				continue
			}
			var blk kprt.RawBlock
			if !decodeBlock(s.data, off, end, &blk) {
				off += granule // never written: its writer died as it took it
				continue
			}
			s.walkBlock(off+kprt.BlockSize, off+uint64(blk.Size), &blk)
			off += (uint64(blk.Size) + granule - 1) / granule * granule
		}
		return
	}
	drained := s.indexChunks()
	bs := h.RingBS
	for off := range ringBlocks(s.data, h) {
		var blk kprt.RawBlock
		if !decodeBlock(s.data, off, off+bs, &blk) {
			continue
		}
		from := max(uint64(blk.Drained), drained[blk.Seq], kprt.BlockSize)
		if from < uint64(blk.Size) {
			s.walkBlock(off+from, off+uint64(blk.Size), &blk)
		}
	}
}

// ringBlocks yields the file offsets of the ring's blocks that can hold records (in
// data, the file): the blocks of the file's ring, then those it grew by (up to the
// header's RingGrown, in the extents appended to the file, RingExtOff's table; in older
// files, in the file's ring), never the header of a block it could have grown into.
// A corrupt header or table yields fewer blocks, each inside the file.
func ringBlocks(data []byte, h *kprt.RawTraceHeader) iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		n, bs, e, size := uint64(h.RingBlocks), h.RingBS, uint64(h.RingExtBlocks), uint64(len(data))
		if bs < 2*granule || bs > 1<<30 || h.DataSize > size {
			return
		}
		n0 := n
		if e != 0 {
			n0 = h.DataSize / bs
		}
		if n0 > h.DataSize/bs {
			return
		}
		if g := h.RingGrown; g > 0 && g < n {
			n = g
		}
		for i := uint64(0); i < min(n, n0); i++ {
			if !yield(kprt.TraceHeaderSize + i*bs) {
				return
			}
		}
		if n <= n0 || e*bs > 1<<30 {
			return
		}
		// the extents' table inside the file, and the extents in it in the order they
		// were appended, none over another: a corrupt table cannot make the walk longer
		// than the file's blocks
		table := h.RingExtOff()
		if h.RingQueueOff > size || uint64(h.RingBlocks)*8 > size-h.RingQueueOff {
			return
		}
		next, end := (n-n0+e-1)/e, uint64(0)
		for k := uint64(0); k < next && table+k*8 <= size-8; k++ {
			at := binary.LittleEndian.Uint64(data[table+k*8:])
			if at == 0 || at < end || at > size || e*bs > size-at {
				continue // not appended (or corrupt)
			}
			end = at + e*bs
			for j := uint64(0); j < e && n0+k*e+j < n; j++ {
				if !yield(at + j*bs) {
					return
				}
			}
		}
	}
}

// maxChunks bounds the chunks a reader follows (a loop in a corrupt file ends).
const maxChunks = 1 << 24

// chunkChain returns the recorder's chunks from the one at last back to the first, or
// to one seen says was read already, oldest first.
func chunkChain(data []byte, last uint64, seen func(uint64) bool) []uint64 {
	var chain []uint64
	size := uint64(len(data))
	for off := last; off != 0 && len(chain) < maxChunks && !seen(off); {
		if off > size || size-off < kprt.ChunkSize || string(data[off:off+8]) != kprt.ChunkMagic {
			break
		}
		chain = append(chain, off)
		prev := binary.LittleEndian.Uint64(data[off+8:])
		if prev >= off {
			break
		}
		off = prev
	}
	slices.Reverse(chain)
	return chain
}

// eachPiece calls fn with each piece of the chunk at off: its block header (Size the
// piece's bytes, Drained where its records were in the ring block) and its records'
// extent in data.
func eachPiece(data []byte, off uint64, fn func(blk *kprt.RawBlock, from, to uint64)) {
	size := uint64(len(data))
	csize := binary.LittleEndian.Uint64(data[off+16:])
	if csize > size-off || csize < kprt.ChunkSize {
		return
	}
	end := off + csize
	for p := off + kprt.ChunkSize; p < end; {
		var blk kprt.RawBlock
		if !decodeBlock(data, p, end, &blk) {
			return
		}
		fn(&blk, p+kprt.BlockSize, p+uint64(blk.Size))
		p += (uint64(blk.Size) + 7) &^ 7
	}
}

// indexChunks walks the recorder's chunks, oldest first, indexing their pieces; it
// returns, per ring block seq, the end of what the pieces copied of it.
func (s *Stream) indexChunks() map[uint32]uint64 {
	drained := map[uint32]uint64{}
	for _, off := range chunkChain(s.data, s.Header.ChunkLast, func(uint64) bool { return false }) {
		eachPiece(s.data, off, func(blk *kprt.RawBlock, from, to uint64) {
			s.walkBlock(from, to, blk)
			if end := uint64(blk.Drained) + to - from; end > drained[blk.Seq] {
				drained[blk.Seq] = end
			}
		})
	}
	return drained
}

// walkBlock indexes the records of [off, end), written by the thread blk names.
func (s *Stream) walkBlock(off, end uint64, blk *kprt.RawBlock) {
	bi := len(s.blocks)
	s.blocks = append(s.blocks, ctxOf(blk))
	bc := &s.blocks[bi]
	cur := run{off: ^uint64(0)}
	last := uint64(0)
	var r Record
	for off < end {
		if off-s.dropped >= dropChunk {
			s.dropPages(s.dropped, off)
			s.dropped = off
		}
		size, st := s.crec(off, end, bc, &r)
		if st == crecEnd {
			break
		}
		switch st {
		case crecTorn:
			s.Torn++
		case crecCommitted:
			if cur.off == ^uint64(0) || r.TsNs < last {
				if cur.off != ^uint64(0) {
					cur.end = off
					s.runs = append(s.runs, cur)
				}
				cur = run{off: off, ts: r.TsNs, blk: int32(bi)}
			}
			last = r.TsNs
			s.Count++
			s.countHit(&r.RawRecord)
		}
		off += size
	}
	if cur.off != ^uint64(0) {
		cur.end = off
		s.runs = append(s.runs, cur)
	}
}

// next3 moves c to the first committed record at or after c.off; false at the run's end.
func (s *Stream) next3(c *runCursor) bool {
	bc := &s.blocks[c.blk]
	for c.off < c.end {
		size, st := s.crec(c.off, c.end, bc, &c.rec)
		switch st {
		case crecEnd:
			return false
		case crecCommitted:
			return true
		}
		c.off += size
	}
	return false
}
