package kprt_test

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	. "github.com/kprewrite/kprewrite/runtime"
)

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
		cmd.Env = []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tracefile.ParseTrace(data)
	if err != nil || len(p.Images) != 1 || !bytes.Equal(p.Images[0].Desc, want) || p.Images[0].Counters[0].Hit != 4 {
		t.Fatalf("two runs: %v, images %+v", err, p.Images)
	}
}

// manyProbes adds never-hit points (emulated nops on the table bytes, which never run)
// until the tables hold more than 70,000 probes: more counters than the least counters
// area of a trace file (KPRW_TRACE_COUNTERS_SIZE) holds.
func manyProbes(tabs *Tables, f *elf.File) {
	var base uint64
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == "kp_tables" {
			base = s.Value
		}
	}
	for i := uint64(0); i < 1100; i++ {
		pt := Point{Site: base + 16*i, XMode: XEmulate, EmuOp: EmuNop, InsnLen: 1, Orig: []byte{0x90}}
		for range MaxProbesPerPoint {
			pt.Probes = append(pt.Probes, Probe{Type: TKprobe, Event: -1})
		}
		tabs.Points = append(tabs.Points, pt)
	}
}

// TestTraceManyProbes: a file the runtime creates sizes its counters area for the
// creating image, so an image with 70,000+ probes registers and its counters are read
// back; the same image arriving in a file made by a small image (whose area is too
// small) gets its counters appended at the end of the file.
func TestTraceManyProbes(t *testing.T) {
	big := []string{"-DKP_TABLES_SIZE=8388608", "-DKP_STATE_SIZE=4194304"}
	b := buildRewritten(t, "testdata/probed.c", big, basicSpecs[:1], manyProbes)
	nprobes := 0
	for _, p := range b.points {
		nprobes += len(p.Probes)
	}
	if nprobes <= 70000 || uint64(nprobes)*16 <= TraceCountersSize {
		t.Fatalf("only %d probes", nprobes)
	}
	r := b.run(t, "basic")
	if r.status != 0 || r.trace == nil || len(r.trace.Images) != 1 {
		t.Fatalf("status %v, trace %v", r.status, r.trace != nil)
	}
	h := r.trace.Header
	if h.CountersSize <= TraceCountersSize || h.CountersSize%4096 != 0 || h.CountersUsed > h.CountersSize ||
		h.CountersUsed != uint64(nprobes)*16+TraceImageExtSz+uint64(r.trace.Images[0].CtlSize) {
		t.Fatalf("counters area %d bytes, %d used, for %d probes", h.CountersSize, h.CountersUsed, nprobes)
	}
	if got := len(r.trace.Images[0].Counters); got != nprobes {
		t.Fatalf("%d counters, want %d", got, nprobes)
	}
	if c := b.counter(t, r, 0, 0); c.Hit != 2 {
		t.Fatalf("t_add probe %+v, want 2 hits", c)
	}
	var hits uint64
	for _, c := range r.trace.Images[0].Counters {
		hits += c.Hit
	}
	if hits != 2 {
		t.Fatalf("%d hits in all, want 2", hits)
	}

	// a small image creates the file: the big one finds no room and keeps its counters
	small := buildProbed(t, nil, basicSpecs[:1])
	tr := filepath.Join(t.TempDir(), "shared.trace")
	for _, exe := range []string{small.path, b.path} {
		cmd := exec.Command(exe, "basic")
		cmd.Env = []string{"KPREWRITE_TRACE=" + tr, "KPREWRITE_APPEND=1"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", exe, err, out)
		}
	}
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tracefile.ParseTrace(data)
	if err != nil || p.Header.CountersSize != TraceCountersSize || len(p.Images) != 2 ||
		len(p.Images[0].Counters) != len(small.points[0].Probes) {
		t.Fatalf("shared file: %v, images %d", err, len(p.Images))
	}
	// the big image's counters went to the end of the file (the area was full), page-aligned
	bi := p.Images[1]
	if len(bi.Counters) != nprobes || bi.CountersOff%4096 != 0 ||
		bi.CountersOff < p.Header.CountersOff+p.Header.CountersSize {
		t.Fatalf("big image in the shared file: %d counters at %#x", len(bi.Counters), bi.CountersOff)
	}
	if c := bi.Counters[b.enc.ProbeIndex[b.specPoint[0]][0]]; c.Hit != 2 {
		t.Fatalf("big image's t_add probe in the shared file %+v, want 2 hits", c)
	}
	if len(p.Records) != 4 {
		t.Fatalf("%d records, want 2 per run", len(p.Records))
	}
}
