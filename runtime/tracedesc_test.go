package runtime

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"testing"
)

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
	if len(tr.Images) != 1 || string(tr.Images[0].Desc) != "KPRWDESC-frame-24-bytes!" || tr.Images[0].Counters[0] != (Counter{3, 1}) {
		t.Fatalf("images %+v", tr.Images)
	}
	// a frame running past the end of the file is left out, the rest parses
	tr, err = ParseTrace(b[:len(b)-1])
	if err != nil || tr.Images[0].Desc != nil || len(tr.Records) != 1 {
		t.Fatalf("truncated frame: %v, %+v", err, tr)
	}
	// no ext flag: no frame
	binary.LittleEndian.PutUint32(b[imagesOff+12:], 0)
	if tr, err = ParseTrace(b); err != nil || tr.Images[0].Desc != nil {
		t.Fatalf("without the flag: %v %+v", err, tr.Images)
	}
}

// TestTraceCopiesDesc: the runtime copies the bytes kprw_header.desc names into the
// trace file once per image (the frame's content is the rewriter's business: here the
// test points it at t_add's code), and a second run that appends to the file reuses the
// image and its frame.
func TestTraceCopiesDesc(t *testing.T) {
	var want []byte
	b := buildRewritten(t, "testdata/probed.c", nil, basicSpecs[:1], func(tabs *Tables, f *elf.File) {
		var addr uint64
		syms, _ := f.Symbols()
		for _, s := range syms {
			if s.Name == "t_mul" {
				addr = s.Value
			}
		}
		tabs.Desc, tabs.DescSize = addr, 12
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr+12 <= p.Vaddr+p.Filesz {
				want = make([]byte, 12)
				p.ReadAt(want, int64(addr-p.Vaddr))
			}
		}
	})
	if want == nil {
		t.Fatal("no t_mul")
	}
	r := b.run(t, "basic")
	if r.trace == nil || len(r.trace.Images) != 1 || !bytes.Equal(r.trace.Images[0].Desc, want) {
		t.Fatalf("trace images %+v, want the frame %x", r.trace.Images, want)
	}
	// append a second run to the first one's file
	tr := b.path + ".trace"
	for i := 0; i < 2; i++ {
		cmd := exec.Command(b.path, "basic")
		cmd.Env = []string{"KPREWRITE_TRACE=" + tr}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseTrace(data)
	if err != nil || len(p.Images) != 1 || !bytes.Equal(p.Images[0].Desc, want) || p.Images[0].Counters[0].Hit != 4 {
		t.Fatalf("two runs: %v, images %+v", err, p.Images)
	}
}
