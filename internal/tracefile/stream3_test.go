package tracefile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

// v3Block is a block header followed by records, padded to size.
func v3Block(size uint32, seq, drained uint32, recs ...[]byte) []byte {
	var b bytes.Buffer
	blk := RawBlock{Magic: BlockMagic, Size: size, PID: 10, TID: 11, ImageID: 7, Bias: 0x1000, Seq: seq, Drained: drained}
	copy(blk.Comm[:], "prog")
	binary.Write(&b, binary.LittleEndian, &blk)
	for _, r := range recs {
		b.Write(r)
	}
	if int(size) > b.Len() {
		b.Write(make([]byte, int(size)-b.Len()))
	}
	return b.Bytes()
}

// v3Rec is a compact record: ext names its type, event and time; ret a return address.
func v3Rec(probe uint32, rel uint64, data []byte, commit bool, ext *RawCRecExt, ret uint64) []byte {
	var b bytes.Buffer
	rlen := uint16(len(data)) | CRecHit
	if ext != nil {
		rlen |= CRecExt
		rel = 0xffffffffffff
	}
	if ret != 0 {
		rlen |= CRecRet
	}
	c := uint16(0)
	if commit {
		c = uint16(len(data)) | CRecCommitted
	}
	binary.Write(&b, binary.LittleEndian, &RawCRec{RLen: rlen, Commit: c, CPU: 1, TsHi: uint16(rel >> 32), TsLo: uint32(rel), Probe: probe})
	if ext != nil {
		binary.Write(&b, binary.LittleEndian, ext)
	}
	if ret != 0 {
		binary.Write(&b, binary.LittleEndian, ret)
	}
	b.Write(data)
	for b.Len()%8 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

func v3Header(dataSize uint64) RawTraceHeader {
	var h RawTraceHeader
	copy(h.Magic[:], TraceMagic)
	h.Version, h.DataOff, h.DataSize, h.BlockSize = TraceVersion, TraceHeaderSize, dataSize, 4096
	h.CountersOff, h.CountersSize = TraceHeaderSize+dataSize, 64
	h.NImages, h.CountersUsed = 1, 32
	h.Images[0] = RawTraceImage{ImageID: 7, NProbes: 2, CountersOff: h.CountersOff}
	h.TsBase = 1000
	return h
}

func v3File(h RawTraceHeader, data []byte, tail []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, &h)
	b.Write(make([]byte, TraceHeaderSize-b.Len()))
	b.Write(data)
	b.Write(make([]byte, int(h.DataSize)-len(data)))
	b.Write(make([]byte, 64)) // counters
	b.Write(tail)
	return b.Bytes()
}

// synthTraceV3: a block of three records (one with its ext part, one a return
// probe's, one torn), then a block its writer never wrote a header in; a file of
// format version v (3 or 4: the same records).
func synthTraceV3(v uint32) []byte {
	h := v3Header(8192)
	h.Head, h.Version = 8192, v
	blk := v3Block(4096, 0, 0,
		v3Rec(NoProbe, 0, []byte{1, 2, 3, 4, 5}, true, &RawCRecExt{Type: RecPrintk, EventID: NoEvent, IP: 0x40, TsNs: 2000}, 0),
		v3Rec(1, 500, []byte{9, 9, 9, 9, 9, 9, 9, 9}, true, nil, 0x5555),
		v3Rec(0, 600, []byte{1}, false, nil, 0))
	return v3File(h, blk, nil)
}

func TestParseTraceV3(t *testing.T) {
	for _, v := range []uint32{TraceVersion3, TraceVersion4, TraceVersion} {
		t.Run(fmt.Sprint("v", v), func(t *testing.T) { testParseTraceV3(t, v) })
	}
}

func testParseTraceV3(t *testing.T, v uint32) {
	tr, err := ParseTrace(synthTraceV3(v))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 2 || tr.Torn != 1 {
		t.Fatalf("%d records, %d torn", len(tr.Records), tr.Torn)
	}
	a, b := tr.Records[0], tr.Records[1]
	if a.TsNs != 1500 || a.Type != RecKretprobe || a.RetIP != 0x5555 || a.PID != 10 || a.TID != 11 || a.Bias != 0x1000 ||
		a.CommString() != "prog" || a.Size != 32 || len(a.Data) != 8 || a.CPU != 1 || a.Probe != 1 {
		t.Errorf("first record %+v", a)
	}
	if b.TsNs != 2000 || b.Type != RecPrintk || b.IP != 0x40 || !bytes.Equal(b.Data, []byte{1, 2, 3, 4, 5}) {
		t.Errorf("second record %+v", b)
	}
	if tr.Images[0].Counters[1].Hit != 1 {
		t.Errorf("probe 1's record not counted: %+v", tr.Images[0].Counters)
	}
}

// synthRingV3: a ring of two blocks whose first record the recorder copied into a
// chunk (the block's drained offset not yet stored: a recorder killed in between),
// and a second record still in the ring: each is read once.
func synthRingV3() []byte {
	h := v3Header(2 * 8192)
	h.RingBlocks, h.RingBS = 2, 8192
	r1 := v3Rec(0, 100, []byte{1, 0, 0, 0, 0, 0, 0, 0}, true, nil, 0)
	r2 := v3Rec(0, 200, []byte{2, 0, 0, 0, 0, 0, 0, 0}, true, nil, 0)
	ring := v3Block(8192, 5, 0, r1, r2)
	piece := v3Block(uint32(BlockSize+len(r1)), 5, BlockSize, r1)
	var chunk bytes.Buffer
	binary.Write(&chunk, binary.LittleEndian, &RawChunk{Size: uint64(ChunkSize + len(piece)), NPieces: 1})
	copy(chunk.Bytes(), ChunkMagic)
	chunk.Write(piece)
	h.ChunkLast = uint64(TraceHeaderSize + 2*8192 + 64)
	return v3File(h, ring, chunk.Bytes())
}

func TestParseRingV3(t *testing.T) {
	tr, err := ParseTrace(synthRingV3())
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 2 || tr.Records[0].Data[0] != 1 || tr.Records[1].Data[0] != 2 || tr.Records[1].TsNs != 1200 {
		t.Fatalf("records %+v", tr.Records)
	}
}

// TestSpilledLost: records the recorder gave back to the ring once copied (the
// header's Spilled) count as lost when no written chunk holds them (its mark is
// Spilled's low 32 bits with its own) and the recording is over; while the recorder
// that spilled them runs they are on their way to the file.
func TestSpilledLost(t *testing.T) {
	for _, c := range []struct {
		name        string
		spilled     uint64
		mark        uint32
		done, alive bool
		want        uint64
	}{
		{"finished, all written", 7, 7, true, false, 3},
		{"finished, 2 unwritten", 7, 5, true, false, 5},
		{"recorder killed, 4 unwritten", 1<<32 + 3, 0xffffffff, false, false, 7},
		{"recorder running", 7, 5, false, true, 3},
	} {
		b := synthRingV3()
		h := v3Header(2 * 8192)
		h.RingBlocks, h.RingBS = 2, 8192
		h.ChunkLast = uint64(TraceHeaderSize + 2*8192 + 64)
		h.Lost, h.Spilled = 3, c.spilled
		if c.done {
			h.RingFlags |= RingDone
		}
		if c.alive {
			h.RecorderPID = uint32(os.Getpid())
		}
		var hb bytes.Buffer
		binary.Write(&hb, binary.LittleEndian, &h)
		copy(b, hb.Bytes())
		binary.LittleEndian.PutUint32(b[h.ChunkLast+28:], c.mark)
		tr, err := ParseTrace(b)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Lost != c.want {
			t.Errorf("%s: lost %d, want %d", c.name, tr.Lost, c.want)
		}
	}
}

// TestRingBlocksExtents: the blocks of a ring grown by extents are found through the
// table after the queue, in the extents appended (not one not appended yet), up to
// RingGrown; a corrupt header or table yields fewer blocks, never a panic or a walk
// longer than the file (a block size of 0 divided by zero; a queue offset that wraps
// the table's walked 4 billion entries).
func TestRingBlocksExtents(t *testing.T) {
	const bs = 16 << 10
	data := make([]byte, 1<<20)
	h := RawTraceHeader{RingBlocks: 10, RingBS: bs, DataSize: 2 * bs, RingExtBlocks: 2, RingGrown: 7,
		RingQueueOff: TraceHeaderSize + 2*bs}
	table := h.RingExtOff()
	binary.LittleEndian.PutUint64(data[table:], 256<<10)   // extent 0: blocks 2, 3
	binary.LittleEndian.PutUint64(data[table+8:], 512<<10) // extent 1: blocks 4, 5
	binary.LittleEndian.PutUint64(data[table+16:], 0)      // extent 2 (block 6): not appended
	var got []uint64
	for off := range ringBlocks(data, &h) {
		got = append(got, off)
	}
	want := []uint64{TraceHeaderSize, TraceHeaderSize + bs, 256 << 10, 256<<10 + bs, 512 << 10, 512<<10 + bs}
	if !slices.Equal(got, want) {
		t.Errorf("blocks at %v, want %v", got, want)
	}
	for _, bad := range []RawTraceHeader{
		{RingBlocks: 4, RingExtBlocks: 1, RingBS: 0},
		{RingBlocks: 1<<32 - 1, RingBS: bs, DataSize: 2 * bs, RingExtBlocks: 1, RingQueueOff: 1<<64 - (1<<32-1)*8 + 8192},
		{RingBlocks: 1<<32 - 1, RingBS: bs, DataSize: 2 * bs, RingExtBlocks: 1 << 31},
	} {
		n := 0
		for range ringBlocks(data, &bad) {
			n++
		}
		if n > len(data)/bs {
			t.Errorf("%+v: %d blocks in a file of %d bytes", bad, n, len(data))
		}
	}
}
