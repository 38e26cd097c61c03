package elfio

import (
	"bytes"
	"fmt"
	"io"
	"sort"
)

// Output is a rewritten image, held as pieces instead of one buffer: most of it is the
// input's bytes, referenced where they are (a node rewrite would otherwise hold a
// second 100 MB copy). Write it with WriteTo; Bytes assembles it in memory.
type Output struct {
	size   uint64
	pieces []piece // sorted by offset, not overlapping; gaps are zeros
	// release, when the input is mapped, drops the resident pages of a piece of it
	// once written (mmapfile.Release): writing a 100 MB program's copy then does not
	// leave 100 MB of it resident.
	release func([]byte)
}

// piece is n bytes at file offset off: b, or n copies of fill when b is nil.
type piece struct {
	off, n uint64
	b      []byte
	fill   byte
	input  bool // b is part of the input
}

// Size is the length of the image in bytes.
func (o *Output) Size() uint64 { return o.size }

// Bytes returns the image in one buffer.
func (o *Output) Bytes() []byte {
	out := make([]byte, o.size)
	for _, p := range o.pieces {
		dst := out[p.off:][:p.n]
		if p.b != nil {
			copy(dst, p.b)
		} else if p.fill != 0 {
			for i := range dst {
				dst[i] = p.fill
			}
		}
	}
	return out
}

// writeChunk is the size of an Output's writes: one write(2) that meets a source page
// it cannot copy without a fault goes on in smaller page-cache folios to its end; each
// write starts over with the largest, so the kernel can map the new segments with
// 2 MiB pages (layout.go, hugePage).
const writeChunk = 2 << 20

// WriteTo writes the image to w in writes of writeChunk bytes (the last shorter), each
// starting at a multiple of writeChunk (see writeChunk).
func (o *Output) WriteTo(w io.Writer) (int64, error) {
	cw := chunkWriter{w: w, buf: make([]byte, 0, writeChunk)}
	pos := uint64(0)
	for _, p := range o.pieces {
		cw.fill(0, p.off-pos)
		switch {
		case p.b != nil && p.input && o.release != nil:
			for b := p.b; len(b) > 0; {
				k := min(len(b), writeChunk)
				cw.write(b[:k])
				o.release(b[:k])
				b = b[k:]
			}
		case p.b != nil:
			cw.write(p.b)
		default:
			cw.fill(p.fill, p.n)
		}
		pos = p.off + p.n
	}
	cw.fill(0, o.size-pos)
	cw.flush()
	return cw.n, cw.err
}

// chunkWriter gathers bytes into writes of a fixed size.
type chunkWriter struct {
	w   io.Writer
	buf []byte
	n   int64
	err error
}

func (c *chunkWriter) write(b []byte) {
	for len(b) > 0 && c.err == nil {
		k := copy(c.buf[len(c.buf):cap(c.buf)], b)
		c.buf, b = c.buf[:len(c.buf)+k], b[k:]
		if len(c.buf) == cap(c.buf) {
			c.flush()
		}
	}
}

var zeros [4096]byte

func (c *chunkWriter) fill(v byte, n uint64) {
	src := zeros[:]
	if v != 0 {
		src = bytes.Repeat([]byte{v}, len(zeros))
	}
	for n > 0 && c.err == nil {
		k := min(n, uint64(len(src)))
		c.write(src[:k])
		n -= k
	}
}

func (c *chunkWriter) flush() {
	if len(c.buf) == 0 || c.err != nil {
		return
	}
	k, err := c.w.Write(c.buf)
	c.n += int64(k)
	c.err = err
	c.buf = c.buf[:0]
}

// outputBuilder collects the pieces of an Output: a base (the input's kept bytes) and
// pieces laid over it or after it.
type outputBuilder struct {
	base    []byte
	pieces  []piece
	release func([]byte) // Output.release
}

// put places b at off (b is referenced, not copied).
func (ob *outputBuilder) put(off uint64, b []byte) {
	if len(b) > 0 {
		ob.pieces = append(ob.pieces, piece{off: off, n: uint64(len(b)), b: b})
	}
}

// putFill places n copies of v at off.
func (ob *outputBuilder) putFill(off, n uint64, v byte) {
	if n > 0 {
		ob.pieces = append(ob.pieces, piece{off: off, n: n, fill: v})
	}
}

// build sorts the pieces, checks that none overlaps another, splits the base around
// them and returns the image of the given size.
func (ob *outputBuilder) build(size uint64) (*Output, error) {
	ps := ob.pieces
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].off < ps[j].off })
	out := &Output{size: size, pieces: make([]piece, 0, 2*len(ps)+1), release: ob.release}
	pos := uint64(0) // the base is in out up to here
	base := uint64(len(ob.base))
	for i, p := range ps {
		if i > 0 && ps[i-1].off+ps[i-1].n > p.off {
			return nil, fmt.Errorf("internal error: output pieces at %#x and %#x overlap", ps[i-1].off, p.off)
		}
		if p.off+p.n > size {
			return nil, fmt.Errorf("internal error: output piece at %#x+%#x past the end %#x", p.off, p.n, size)
		}
		if pos < p.off && pos < base {
			end := min(p.off, base)
			out.pieces = append(out.pieces, piece{off: pos, n: end - pos, b: ob.base[pos:end], input: true})
		}
		out.pieces = append(out.pieces, p)
		pos = max(pos, p.off+p.n)
	}
	if pos < base {
		out.pieces = append(out.pieces, piece{off: pos, n: base - pos, b: ob.base[pos:], input: true})
	}
	return out, nil
}
