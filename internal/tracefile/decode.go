package tracefile

import (
	"encoding/binary"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// The trace header and records are decoded field by field, not with encoding/binary's
// reflection: a trace holds millions of records, and reflection over the 4 KiB header
// made every parse slow enough to starve the fuzzer (issue 13 item 11). TestDecodeMatches
// checks each decoder against binary.Read.

// cursor reads little-endian fields in order.
type cursor struct {
	b   []byte
	off int
}

func (c *cursor) u8() uint8   { v := c.b[c.off]; c.off++; return v }
func (c *cursor) u16() uint16 { v := binary.LittleEndian.Uint16(c.b[c.off:]); c.off += 2; return v }
func (c *cursor) u32() uint32 { v := binary.LittleEndian.Uint32(c.b[c.off:]); c.off += 4; return v }
func (c *cursor) u64() uint64 { v := binary.LittleEndian.Uint64(c.b[c.off:]); c.off += 8; return v }
func (c *cursor) bytes(dst []byte) {
	c.off += copy(dst, c.b[c.off:c.off+len(dst)])
}

// decodeTraceHeader decodes b, at least kprt.TraceHeaderSize bytes.
func decodeTraceHeader(b []byte, h *kprt.RawTraceHeader) {
	c := cursor{b: b[:kprt.TraceHeaderSize]}
	c.bytes(h.Magic[:])
	h.Version, h.DataOff = c.u32(), c.u32()
	h.DataSize, h.Head, h.Lost = c.u64(), c.u64(), c.u64()
	h.CountersOff, h.CountersSize, h.CountersUsed = c.u64(), c.u64(), c.u64()
	h.NImages, h.ClockID = c.u32(), c.u32()
	h.CreatedRealNs, h.CreatedMonoNs, h.BlockSize = c.u64(), c.u64(), c.u64()
	h.TracingOff, h.CtlGen = c.u32(), c.u32()
	h.CtlLast = c.u64()
	h.SnapTs, h.SnapCount = c.u64(), c.u64()
	for i := range h.Images {
		im := &h.Images[i]
		im.ImageID, im.NProbes, im.Flags, im.CountersOff = c.u64(), c.u32(), c.u32(), c.u64()
	}
	h.TsBase, h.RingBlocks, h.RingFlags = c.u64(), c.u32(), c.u32()
	h.RingBS, h.RingTake, h.RingGive, h.RingQueueOff, h.ChunkLast = c.u64(), c.u64(), c.u64(), c.u64(), c.u64()
	h.RecorderPID, h.Flags = c.u32(), c.u32()
	h.RunPID, h.RunPad, h.RunStart = c.u32(), c.u32(), c.u64()
	h.Overwritten = c.u64()
	h.LiveDone, h.LivePad = c.u32(), c.u32()
	h.Clock, h.RingExtBlocks, h.Counter = c.u32(), c.u32(), c.u64()
	h.Spilled, h.RingGrown = c.u64(), c.u64()
}

// decodeRecord decodes b, at least kprt.RecordSize bytes.
func decodeRecord(b []byte, r *kprt.RawRecord) {
	c := cursor{b: b[:kprt.RecordSize]}
	r.Size, r.Commit = c.u32(), c.u32()
	r.Type, r.Image, r.CPU = c.u8(), c.u8(), c.u16()
	r.EventID, r.ImageID = c.u32(), c.u64()
	r.PID, r.TID = c.u32(), c.u32()
	r.TsNs, r.IP, r.RetIP, r.Bias = c.u64(), c.u64(), c.u64(), c.u64()
	c.bytes(r.Comm[:])
	r.DataLen, r.Probe = c.u32(), c.u32()
}

// decodeImageExt decodes b, at least kprt.TraceImageExtSz bytes.
func decodeImageExt(b []byte, e *kprt.RawTraceImageExt) {
	c := cursor{b: b[:kprt.TraceImageExtSz]}
	e.DescOff, e.DescSize, e.ShardsOff, e.ShardsStride = c.u64(), c.u64(), c.u64(), c.u64()
	e.ShardsN, e.CtlSize = c.u32(), c.u32()
}
