package tracefile

import (
	"bytes"
	"encoding/binary"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

// synthTrace builds a small valid trace file: one image with counters, two blocks of
// 256 bytes: the first holds a committed record with data and a torn one, then unused
// bytes; the second a committed record that is probe 1's hit.
func synthTrace() []byte {
	const dataSize, blockSize = 512, 256
	var h RawTraceHeader
	copy(h.Magic[:], TraceMagic)
	h.Version, h.DataOff, h.DataSize, h.BlockSize = TraceVersion2, TraceHeaderSize, dataSize, blockSize
	h.CountersOff, h.CountersSize = TraceHeaderSize+dataSize, 64
	h.NImages, h.CountersUsed = 1, 32
	h.Images[0] = RawTraceImage{ImageID: 7, NProbes: 2, CountersOff: h.CountersOff}
	var recs bytes.Buffer
	r := RawRecord{Size: RecordSize + 8, Commit: RecCommit, Type: RecKprobe, EventID: 1, PID: 10, TID: 11, DataLen: 5,
		TsNs: 20, ImageID: 7, Probe: NoProbe}
	copy(r.Comm[:], "prog")
	binary.Write(&recs, binary.LittleEndian, &r)
	recs.Write([]byte{1, 2, 3, 4, 5, 0, 0, 0})
	r.Commit, r.DataLen, r.Size = 0, 0, RecordSize
	binary.Write(&recs, binary.LittleEndian, &r)
	recs.Write(make([]byte, blockSize-recs.Len()))
	// the second block: earlier in time, so it comes first
	r = RawRecord{Size: RecordSize, Commit: RecCommit, Type: RecKprobe, EventID: 1, PID: 10, TID: 12, TsNs: 10,
		ImageID: 7, Probe: 1}
	binary.Write(&recs, binary.LittleEndian, &r)
	h.Head = 2 * blockSize
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, &h)
	b.Write(make([]byte, TraceHeaderSize-b.Len()))
	b.Write(recs.Bytes())
	b.Write(make([]byte, dataSize-recs.Len()))
	ctr := make([]byte, 64)
	binary.LittleEndian.PutUint64(ctr, 3)
	binary.LittleEndian.PutUint64(ctr[8:], 1)
	b.Write(ctr)
	return b.Bytes()
}

func TestParseTraceSynthetic(t *testing.T) {
	tr, err := ParseTrace(synthTrace())
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 2 || tr.Torn != 1 || tr.Records[1].CommString() != "prog" ||
		!bytes.Equal(tr.Records[1].Data, []byte{1, 2, 3, 4, 5}) || tr.Records[0].TID != 12 {
		t.Errorf("records %+v torn %d", tr.Records, tr.Torn)
	}
	// probe 1's hit is its record
	if len(tr.Images) != 1 || tr.Images[0].Counters[0] != (Counter{Hit: 3, NMissed: 1}) || tr.Images[0].Counters[1] != (Counter{Hit: 1, NMissed: 0}) {
		t.Errorf("images %+v", tr.Images)
	}
	// a record of another image (same index, other id) counts nothing
	b := synthTrace()
	binary.LittleEndian.PutUint64(b[TraceHeaderSize+256+16:], 8) // the second block's ImageID
	if tr, err := ParseTrace(b); err != nil || tr.Images[0].Counters[1] != (Counter{Hit: 0, NMissed: 0}) {
		t.Errorf("foreign record counted: %v %+v", err, tr)
	}
	// a block size that does not divide the record area
	binary.LittleEndian.PutUint64(b[88:], 384)
	if _, err := ParseTrace(b); err == nil {
		t.Error("block size 384 accepted")
	}
	if _, err := ParseTrace(synthTrace()[:100]); err == nil {
		t.Error("truncated header accepted")
	}
}

// FuzzParseTrace: a fuzz input is a trace header's first bytes (the rest of its 4 KiB
// is zero) and what follows the header, so that inputs stay small: the fuzzer
// minimizes each new input byte by byte, and a whole 4 KiB header made that take all
// of the run.
func FuzzParseTrace(f *testing.F) {
	add := func(b []byte) {
		hdr := b[:min(len(b), TraceHeaderSize)]
		for len(hdr) > 0 && hdr[len(hdr)-1] == 0 {
			hdr = hdr[:len(hdr)-1]
		}
		f.Add(hdr, b[min(len(b), TraceHeaderSize):])
	}
	good := synthTrace()
	add(good)
	add(good[:TraceHeaderSize+50])
	add(synthTraceDesc())
	add(synthTraceV3(TraceVersion3))
	add(synthTraceV3(TraceVersion))
	add(synthRingV3())
	bad := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(bad[24:], 1<<62) // head far past the data
	add(bad)
	f.Fuzz(func(t *testing.T, hdr, rest []byte) {
		if len(hdr) > TraceHeaderSize {
			return
		}
		b := make([]byte, TraceHeaderSize, TraceHeaderSize+len(rest))
		copy(b, hdr)
		tr, err := ParseTrace(append(b, rest...))
		if err != nil {
			return
		}
		for _, r := range tr.Records {
			if r.Size < CRecSize || int(r.DataLen) != len(r.Data) || uint64(r.DataLen) > uint64(r.Size)-CRecSize {
				t.Fatalf("bad record %+v", r)
			}
		}
	})
}

// TestParseTraceShards: the per-CPU shards a RawTraceImageExt names are added to the
// image's hit counters; shards that do not fit the file, or are too small for its
// probes, are left out.
func TestParseTraceShards(t *testing.T) {
	b := synthTrace()
	ctrOff := uint64(TraceHeaderSize + 512)
	binary.LittleEndian.PutUint32(b[imagesOff+12:], TIFExt)
	b = append(b, make([]byte, 4096-len(b)%4096)...)
	shardsOff := uint64(len(b))
	// 3 shards of 4096 bytes: probe 0 counted 5, 0, 2; probe 1 counted 1, 1, 0
	sh := make([]byte, 3*4096)
	binary.LittleEndian.PutUint64(sh[0:], 5)
	binary.LittleEndian.PutUint64(sh[8:], 1)
	binary.LittleEndian.PutUint64(sh[4096+8:], 1)
	binary.LittleEndian.PutUint64(sh[2*4096:], 2)
	b = append(b, sh...)
	ext := RawTraceImageExt{ShardsOff: shardsOff, ShardsStride: 4096, ShardsN: 3}
	var eb bytes.Buffer
	binary.Write(&eb, binary.LittleEndian, &ext)
	copy(b[ctrOff+32:], eb.Bytes())
	tr, err := ParseTrace(b)
	if err != nil {
		t.Fatal(err)
	}
	// counters {3,1} and {0,0}, probe 1's record, and the shards
	if im := tr.Images[0]; im.Shards != 3 || im.Counters[0] != (Counter{Hit: 3 + 7, NMissed: 1}) || im.Counters[1] != (Counter{Hit: 1 + 2, NMissed: 0}) {
		t.Errorf("image %+v", im)
	}
	for _, bad := range []RawTraceImageExt{
		{ShardsOff: shardsOff, ShardsStride: 4096, ShardsN: 4}, // past the end of the file
		{ShardsOff: shardsOff, ShardsStride: 8, ShardsN: 3},    // too small for 2 probes
		{ShardsOff: 1 << 62, ShardsStride: 4096, ShardsN: 1},
		{ShardsOff: shardsOff, ShardsStride: 1 << 62, ShardsN: 1 << 31},
	} {
		eb.Reset()
		binary.Write(&eb, binary.LittleEndian, &bad)
		copy(b[ctrOff+32:], eb.Bytes())
		if tr, err := ParseTrace(b); err != nil || tr.Images[0].Shards != 0 || tr.Images[0].Counters[0] != (Counter{Hit: 3, NMissed: 1}) {
			t.Errorf("shards %+v: %v %+v", bad, err, tr.Images[0])
		}
	}
}

// synthTraceDesc is synthTrace with the image's description frame appended to the
// file and named by the RawTraceImageExt after its counters.
func synthTraceDesc() []byte {
	b := synthTrace()
	frame := []byte("KPRWDESC-frame-24-bytes!")
	ctrOff := uint64(TraceHeaderSize + 512)
	binary.LittleEndian.PutUint32(b[imagesOff+12:], TIFExt) // Images[0].Flags
	binary.LittleEndian.PutUint64(b[ctrOff+32:], uint64(len(b)))
	binary.LittleEndian.PutUint64(b[ctrOff+40:], uint64(len(frame)))
	return append(b, frame...)
}

// imagesOff is the offset of RawTraceHeader.Images.
const imagesOff = 8 + 4 + 4 + 8*6 + 4 + 4 + 8 + 8 + 5*8

func TestParseTraceDesc(t *testing.T) {
	b := synthTraceDesc()
	tr, err := ParseTrace(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Images) != 1 || string(tr.Images[0].Desc) != "KPRWDESC-frame-24-bytes!" || tr.Images[0].Counters[0] != (Counter{Hit: 3, NMissed: 1}) {
		t.Fatalf("images %+v", tr.Images)
	}
	// a frame running past the end of the file is left out, the rest parses
	tr, err = ParseTrace(b[:len(b)-1])
	if err != nil || tr.Images[0].Desc != nil || len(tr.Records) != 2 {
		t.Fatalf("truncated frame: %v, %+v", err, tr)
	}
	// no ext flag: no frame
	binary.LittleEndian.PutUint32(b[imagesOff+12:], 0)
	if tr, err = ParseTrace(b); err != nil || tr.Images[0].Desc != nil {
		t.Fatalf("without the flag: %v %+v", err, tr.Images)
	}
}

// TestDecodeMatches: the field-by-field decoders read what binary.Read reads.
func TestDecodeMatches(t *testing.T) {
	b := make([]byte, TraceHeaderSize)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	var want, got RawTraceHeader
	if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &want); err != nil {
		t.Fatal(err)
	}
	decodeTraceHeader(b, &got)
	if got != want {
		t.Errorf("header %+v, want %+v", got, want)
	}
	var wr, gr RawRecord
	binary.Read(bytes.NewReader(b[3:]), binary.LittleEndian, &wr)
	decodeRecord(b[3:], &gr)
	if gr != wr {
		t.Errorf("record %+v, want %+v", gr, wr)
	}
	var we, ge RawTraceImageExt
	binary.Read(bytes.NewReader(b[5:]), binary.LittleEndian, &we)
	decodeImageExt(b[5:], &ge)
	if ge != we {
		t.Errorf("ext %+v, want %+v", ge, we)
	}
	if binary.Size(&want) > TraceHeaderSize || binary.Size(&wr) != RecordSize || binary.Size(&we) != TraceImageExtSz {
		t.Error("sizes")
	}
}
