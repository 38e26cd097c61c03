package recorder

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestQueueGrowth: a ring that may grow starts with its first blocks in the queue,
// and the entries past them read as not filled yet to a taker that comes between a
// giver's count and its entry (as zero they read as round 0's block 0: two writers
// had one block). The header says how far the ring may grow, and a give fills the
// next entry.
func TestQueueGrowth(t *testing.T) {
	const bs = 8 << 10
	r, err := Create(filepath.Join(t.TempDir(), "q.trace"), Options{BufferSize: 64 * bs, BlockSize: bs, RingMax: 256 * bs})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Finish()
	if r.n0 != 64 || r.n != 256 {
		t.Fatalf("ring of %d blocks growing to %d, want 64 and 256", r.n0, r.n)
	}
	h := func(off uintptr) uint64 { return atomic.LoadUint64(r.u64(uint64(off))) }
	if g, give := h(offRingGrown), h(offRingGive); g != 64 || give != 64 {
		t.Fatalf("header: ring_grown %d, ring_give %d, want 64 and 64", g, give)
	}
	// the runtime's ring_take: entry t is due when its generation is t / n
	due := func(t uint64) (uint64, bool) {
		e := atomic.LoadUint64(r.u64(r.qoff + (t%r.n)*8))
		return uint64(uint32(e)), e>>32 == t/r.n
	}
	for t0 := uint64(0); t0 < r.n; t0++ {
		blk, ok := due(t0)
		if want := t0 < 64; ok != want || ok && blk != t0 {
			t.Fatalf("entry %d: block %d, due %v; want due %v", t0, blk, ok, want)
		}
	}
	r.push(7)
	if blk, ok := due(64); !ok || blk != 7 {
		t.Errorf("entry 64 after a give of block 7: block %d, due %v", blk, ok)
	}
	if blk, ok := due(65); ok {
		t.Errorf("entry 65 is due (block %d) before any give filled it", blk)
	}
}

// TestRingBlocks: how far a ring may grow: RingMax, within MaxBufferSize; never in
// overwrite mode; not below its size.
func TestRingBlocks(t *testing.T) {
	const bs = 64 << 10
	for _, c := range []struct {
		opt  Options
		want uint64
	}{
		{Options{BufferSize: 32 << 20, RingMax: 64 << 20}, 1024},
		{Options{BufferSize: 32 << 20, RingMax: 32 << 20}, 512},
		{Options{BufferSize: 32 << 20, RingMax: 1 << 20}, 512},
		{Options{BufferSize: 32 << 20, RingMax: 64 << 20, Overwrite: true}, 512},
	} {
		if got := ringBlocks(c.opt, c.opt.BufferSize/bs, bs); got != c.want {
			t.Errorf("%+v: %d blocks, want %d", c.opt, got, c.want)
		}
	}
	if got := ringBlocks(Options{BufferSize: 32 << 20}, 512, bs); got < 512 || got > growFactor*512 {
		t.Errorf("the default: %d blocks, want 512 to %d", got, growFactor*512)
	}
	// a ring already larger than the default's bound does not grow by default
	if got := ringBlocks(Options{BufferSize: 1 << 30}, 16384, bs); got != 16384 {
		t.Errorf("the default for a 1 GiB ring: %d blocks, want 16384", got)
	}
}

// TestRingReserveLazy: the blocks a ring may grow into take no room on the disk (or,
// on tmpfs, no memory) until a writer takes them, nor are they in the file's size (a
// hole of 512 MiB in a trace of a few records, which copies without hole support pay
// for): the file's allocated blocks after Create are the ring's, the queue's and the
// chunks' reserve ahead, its size the ring's, the queue's and the counters'.
func TestRingReserveLazy(t *testing.T) {
	const bs = 64 << 10
	path := filepath.Join(t.TempDir(), "l.trace")
	r, err := Create(path, Options{BufferSize: 8 * bs, BlockSize: bs, RingMax: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Finish()
	if r.n != 8192 {
		t.Fatalf("a ring growing to %d blocks, want 8192", r.n)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if used, most := uint64(st.Blocks)*512, uint64(preallocAhead+countersSlack+8<<20); used > most {
		t.Errorf("the file takes %d MiB after Create, want at most %d", used>>20, most>>20)
	}
	if most := uint64(8*bs + countersSlack + 1<<20); uint64(st.Size) > most {
		t.Errorf("the file's size is %d MiB after Create, want at most %d", st.Size>>20, most>>20)
	}
}

// TestRingInMemory: on tmpfs, where a reserved block is memory taken at once, Create
// reserves no blocks ahead of the chunks (it took 256 MiB for any trace) and none for
// the ring's growth: the file takes its ring, its queue and little more.
func TestRingInMemory(t *testing.T) {
	dir := "/dev/shm"
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil || st.Type != 0x01021994 {
		t.Skip("/dev/shm is not a tmpfs here")
	}
	dir, err := os.MkdirTemp(dir, "kprewrite-ring-test")
	if err != nil {
		t.Skipf("cannot write into /dev/shm: %v", err)
	}
	defer os.RemoveAll(dir)
	const bs = 64 << 10
	path := filepath.Join(dir, "m.trace")
	r, err := Create(path, Options{BufferSize: 8 * bs, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Finish()
	var fst syscall.Stat_t
	if err := syscall.Stat(path, &fst); err != nil {
		t.Fatal(err)
	}
	if used := uint64(fst.Blocks) * 512; used > 8<<20 {
		t.Errorf("the file takes %d MiB of tmpfs after Create, want at most 8", used>>20)
	}
}

// TestAskSpare: the maker is asked for another chunk buffer only when the chunks under
// way hold a buffer's worth of records and the write under way has taken writeWait (the
// disk is behind), not whenever one is being written: a drain's chunk of ~1 MiB in
// flight made python3.11's recorder take 37 buffers of 8 MiB for a 134 MiB trace, and
// 8 MiB under way on a disk that wrote it in 4 ms, 11.
func TestAskSpare(t *testing.T) {
	r, err := Create(filepath.Join(t.TempDir(), "s.trace"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Finish()
	r.takeSpare()
	free := r.free
	r.free = r.free[:1]
	defer func() { r.free = free }()
	asked := r.asked
	r.pending, r.pendingBytes = 1, 1<<20
	r.askSpare()
	if r.asked != asked {
		t.Errorf("asked for a buffer with 1 MiB under way")
	}
	r.pending, r.pendingBytes = 2, maxChunk
	r.writeStart.Store(r.clock())
	r.askSpare()
	if r.asked != asked {
		t.Errorf("asked for a buffer with %d bytes under way in a write just started", maxChunk)
	}
	r.t0 = r.t0.Add(-2 * writeWait) // (the write started 2*writeWait ago)
	r.writeStart.Store(r.clock() - 2*int64(writeWait))
	r.askSpare()
	r.writeStart.Store(0)
	if r.asked != asked+1 {
		t.Errorf("did not ask for a buffer with %d bytes under way", maxChunk)
	}
	r.pending, r.pendingBytes = 0, 0
}
