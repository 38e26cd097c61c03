package tracefile

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"sort"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// encodeTrace builds a version 2 trace file holding recs: each TID's records, in the
// order given, in its own blocks of blockSize bytes (a new block when one is full), the
// blocks of all threads interleaved as a program's threads take them.
func encodeTrace(recs []Record, lost uint64, blockSize int) []byte {
	var area bytes.Buffer
	open := map[uint32]*bytes.Buffer{} // each TID's block being filled
	var order []uint32
	for _, r := range recs {
		r.Size = uint32(kprt.RecordSize + (len(r.Data)+7)&^7)
		if r.Commit == 0 {
			r.Commit = kprt.RecCommit
		}
		r.DataLen = uint32(len(r.Data))
		var one bytes.Buffer
		binary.Write(&one, binary.LittleEndian, &r.RawRecord)
		one.Write(r.Data)
		one.Write(make([]byte, int(r.Size)-one.Len()))
		b := open[r.TID]
		if b != nil && b.Len()+one.Len() > blockSize-kprt.RecordSize {
			b.Write(make([]byte, blockSize-b.Len()))
			area.Write(b.Bytes())
			b = nil
		}
		if b == nil {
			b = new(bytes.Buffer)
			open[r.TID] = b
			order = append(order, r.TID)
		}
		b.Write(one.Bytes())
	}
	var h kprt.RawTraceHeader
	copy(h.Magic[:], kprt.TraceMagic)
	h.Version, h.DataOff, h.BlockSize, h.Lost = kprt.TraceVersion2, kprt.TraceHeaderSize, uint64(blockSize), lost
	return finishTrace(&h, &area, open, order, blockSize)
}

// finishTrace flushes the open blocks and writes the header before the record area.
func finishTrace(h *kprt.RawTraceHeader, area *bytes.Buffer, open map[uint32]*bytes.Buffer, order []uint32, blockSize int) []byte {
	done := map[uint32]bool{}
	for _, tid := range order {
		if b := open[tid]; b != nil && !done[tid] {
			done[tid] = true
			b.Write(make([]byte, blockSize-b.Len()))
			area.Write(b.Bytes())
		}
	}
	h.DataSize, h.Head = uint64(area.Len()), uint64(area.Len())
	if h.DataSize == 0 {
		h.DataSize = uint64(blockSize)
	}
	var out bytes.Buffer
	binary.Write(&out, binary.LittleEndian, h)
	out.Write(make([]byte, kprt.TraceHeaderSize-out.Len()))
	out.Write(area.Bytes())
	out.Write(make([]byte, kprt.TraceHeaderSize+int(h.DataSize)-out.Len()))
	return out.Bytes()
}

// TestStreamOrder: the merge of runs gives the order a stable sort of every record by
// time gives, for threads whose records span blocks, equal timestamps, torn records
// and timestamps that go back inside a thread (a signal handler's record).
func TestStreamOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		var recs []Record
		ts := map[uint32]uint64{}
		for i := 0; i < 400; i++ {
			tid := uint32(1 + rng.Intn(5))
			ts[tid] += uint64(rng.Intn(30))
			r := Record{RawRecord: kprt.RawRecord{Type: kprt.RecKprobe, TID: tid, PID: 1, TsNs: ts[tid], EventID: uint32(i), Probe: kprt.NoProbe}}
			if rng.Intn(20) == 0 {
				r.TsNs -= min(r.TsNs, uint64(rng.Intn(50))) // back in time
			}
			if rng.Intn(25) == 0 {
				r.Commit = 1 // torn
			}
			r.Data = make([]byte, rng.Intn(40))
			recs = append(recs, r)
		}
		b := encodeTrace(recs, 0, 512)
		// the expected order: file order, stably sorted by time
		var fileOrder []kprt.RawRecord
		data := b[kprt.TraceHeaderSize:]
		for off := 0; off+kprt.RecordSize <= len(data); {
			var r kprt.RawRecord
			decodeRecord(data[off:], &r)
			if r.Size == 0 {
				off = (off/512 + 1) * 512
				continue
			}
			if r.Commit == kprt.RecCommit {
				fileOrder = append(fileOrder, r)
			}
			off += int(r.Size)
		}
		sort.SliceStable(fileOrder, func(i, j int) bool { return fileOrder[i].TsNs < fileOrder[j].TsNs })
		s, err := NewStream(b)
		if err != nil {
			t.Fatal(err)
		}
		if s.Count != len(fileOrder) {
			t.Fatalf("round %d: count %d, want %d", round, s.Count, len(fileOrder))
		}
		var got []uint32
		s.Each(func(r *Record) error {
			got = append(got, r.EventID)
			if int(r.DataLen) != len(r.Data) {
				t.Fatalf("data %d bytes, want %d", len(r.Data), r.DataLen)
			}
			return nil
		})
		for i := range fileOrder {
			if i >= len(got) || got[i] != fileOrder[i].EventID {
				t.Fatalf("round %d: record %d is event %v, want %d", round, i, got[min(i, len(got)-1)], fileOrder[i].EventID)
			}
		}
	}
}
