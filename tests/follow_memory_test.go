package tests

import (
	"bytes"
	"io"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kprewrite/kprewrite/internal/cli"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// heapWriter counts the lines written to it and, every so many writes, the live heap
// after a collection, above base (what the process held before: the package's other
// tests run in the same process, and what they keep is not the follower's).
type heapWriter struct {
	lines, writes int
	base, peak    uint64
}

// liveHeap is the live heap after a collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func (w *heapWriter) Write(b []byte) (int, error) {
	w.lines += bytes.Count(b, []byte{'\n'})
	if w.writes++; w.writes%4 == 0 {
		if h := liveHeap(); h > w.base {
			w.peak = max(w.peak, h-w.base)
		}
	}
	return len(b), nil
}

// TestFollowBoundedMemory: trace --follow of a finished recording of 400,000 records
// prints them all with a heap bounded by its poll's budget, not by the trace (issue 50,
// item 12: 6 million records took 2.9 GB, all in one poll).
func TestFollowBoundedMemory(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "f.trace")
	if code, _, stderr := kp("record", "-q", "--buffer-size", "256M", "-o", file, "--", prog, "400000", "0"); code != 7 {
		t.Fatalf("record: exit %d: %s", code, stderr)
	}
	w := &heapWriter{base: liveHeap()}
	if code := cli.Main([]string{"trace", "--follow", file}, w, io.Discard); code != 0 {
		t.Fatalf("trace --follow: exit %d", code)
	}
	if w.lines != 400000 {
		t.Errorf("trace --follow printed %d lines, want 400000", w.lines)
	}
	if w.writes < 4 || w.peak > 48<<20 {
		t.Errorf("%d writes, heap up to %d MiB: want several polls and a bounded heap", w.writes, w.peak>>20)
	}
}
