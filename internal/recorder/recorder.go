package recorder

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Options sizes the ring.
type Options struct {
	// BufferSize is the ring's size in bytes (DefaultBufferSize when 0): what the
	// programs may write before the recorder has copied it.
	BufferSize uint64
	// BlockSize is the size of each ring block (DefaultBlockSize when 0): a power of
	// two, at least 8 KiB.
	BlockSize uint64
	// Overwrite keeps the most recent BufferSize of records instead of copying them
	// out: full blocks are given back unread when the ring runs short (a flight
	// recorder). Snapshot copies what the ring holds.
	Overwrite bool
	// KeepOld keeps a file the new one replaces as PATH.old (perf record's rule),
	// replacing an older PATH.old: the previous trace survives one more recording.
	KeepOld bool
	// RingMax is what the ring may grow to, in bytes, when the programs outrun the
	// recorder: a writer that finds no free block takes one the ring has not used yet
	// (making its pages present itself) instead of losing its record. 0: growFactor
	// times BufferSize, at most 512 MiB and a quarter of the memory available;
	// BufferSize or less: the ring does not grow. Never in overwrite mode. The blocks
	// it may grow into are not in the file until a writer needs them: it appends them,
	// extentBytes at a time, as the recorder appends its chunks.
	RingMax uint64
}

const (
	DefaultBufferSize = 32 << 20
	DefaultBlockSize  = 64 << 10
	MinBlockSize      = 8 << 10
	MaxBufferSize     = 16 << 30
	// countersSlack is room for the images' counters after the queue (the runtime
	// appends at the end of the file when it is not enough).
	countersSlack = 16 << 20
	// maxChunk bounds the bytes one chunk holds.
	maxChunk = 8 << 20
	// preallocAhead is how far ahead of the chunks the file's blocks are reserved.
	preallocAhead = 256 << 20
	// populateFirst is how much of the ring is made present before the program starts
	// (the rest follows while it runs).
	populateFirst = 1 << 20
	// populateStep is how much of the ring one call makes present in the background.
	populateStep = 256 << 10
	// populateLead is how far the background population goes before the writers have
	// taken populateGo of the ring's blocks, after which it makes all of it present
	// (Drain looks: pace). All of a 32 MiB ring made present at once, while a short
	// program started, took its CPU and the host's page-making from it on this VM:
	// `record` of file(1) (12 records) took 0.26-0.27 s, 0.02-0.03 with 2 MiB made
	// first, the program's ftruncate of the file waiting 50 ms on a populate; paced by
	// the writers' progress all the way, a hot burst met pages not yet there (1.2 ns a
	// record more; issue 49, twenty-sixth session).
	populateLead = 2 << 20
	populateGo   = 1 << 20
	// hugePage is the size of a transparent huge page (x86-64).
	hugePage = 2 << 20
	// chunkBuffers is how many chunk buffers the recorder may have at least (one filled
	// while the other is written); it starts with one and makes more, up to spillFactor
	// times the ring's bytes, when a write is slow or a drain waits for one. (Three made
	// at the start until the twenty-sixth session of issue 49: each buffer is 8 MiB of
	// new memory, 100-200 ms of CPU on this VM while a program runs.)
	chunkBuffers = 2
	// spillFactor bounds the records the recorder holds copied and not yet written: a
	// finished block goes back to the writers once its records are in a chunk buffer, not
	// once the chunk is on disk, so a disk that stalls (a 29 MB chunk took 38 ms here,
	// while python3.11 writes ~400 MB/s) is met by the recorder's memory before the ring
	// fills and records are lost. At 4 (128 MiB for the default ring) python3.11's
	// `--calls '*'` runs reached all 16 of their buffers in a disk stall (issue 49,
	// 2026-11-30); the memory is taken only while the disk is behind.
	spillFactor = 16
	// maxSpill bounds that memory whatever the ring (a 16 GiB ring would otherwise let a
	// stalled disk take 256 GiB of the machine's), and spillShare of the memory the
	// system has available when the recording starts bounds it too.
	maxSpill   = 512 << 20
	spillShare = 4
	// growFactor is how many times BufferSize the ring may grow to by default: a
	// hot event's burst of 20 million records (690 MB in 0.3-0.5 s, twice what this
	// disk takes) lost records in most runs with a ring of 32 MiB, since the backlog
	// needs memory the recorder, on the one CPU the program leaves, could not make
	// present fast enough (a fresh page costs ~1-2 ns a byte on this VM; issue 49).
	// Growing costs nothing until a writer finds the ring full; by default the ring
	// grows to maxGrow at most (memory the backlog may take), or stays as large as a
	// ring already larger.
	growFactor = 16
	maxGrow    = 512 << 20
	// extentBytes is how much the ring grows by at once: a writer that needs a block
	// past the extents there appends the next to the file (on 2 MiB pages where the
	// file system gives them; an extent's blocks are claimed one by one).
	extentBytes = 2 << 20
	// graceTorn is how long a block its writer left may hold a record that is not
	// committed before the record counts as torn (a signal handler's block change can
	// leave the record it interrupted to be finished after it).
	graceTorn = 200 * time.Millisecond
	// heldPeek is how often a block its writer still holds is copied from: a copy
	// reads the line the writer is about to write, whose next store then waits for the
	// recorder's CPU to give it back. Copied at every drain, a hot event's record cost
	// 1.7 ns more (21.68 against 20.02 ns, issue 49); a fast writer leaves a 64 KiB
	// block within ~50 us, so its blocks are copied once, whole.
	heldPeek = 10 * time.Millisecond
	// writeWait is how long Drain waits for a chunk's write to give its buffer back
	// before it asks the maker for another (awaitBuf): a chunk of up to 8 MiB took
	// 0.2-7 ms to write here.
	writeWait = 5 * time.Millisecond
)

// Stats counts what the recorder did.
type Stats struct {
	Records uint64 // committed records copied into chunks
	Bytes   uint64 // bytes of chunks appended
	Chunks  uint64
	Lost    uint64 // records the programs could not write (no free block): the header's count
	// Grown is the bytes the ring grew by past its BufferSize: blocks writers took
	// when they found no free one
	Grown uint64
	// Overwritten is the header's count of records an overwrite ring's writers wrote over
	Overwritten uint64
}

// Recorder drains one ring file.
type Recorder struct {
	Path    string
	keptOld bool // the file it replaced is Path.old
	f       *os.File
	direct  *os.File // the file opened with O_DIRECT for chunks (nil: f): written data
	// bypasses the page cache, whose page allocation costs more here than the disk
	// (buffered 440 MB/s, direct 2.8 GB/s), and leaves the ring's pages alone
	m     []byte // header, ring and queue, shared and writable
	n, bs uint64 // the ring's blocks (those it may grow to) and their size
	n0    uint64 // the blocks the queue starts with, the file's ring (it grows from there)
	qoff  uint64 // the queue's offset in the file
	// the extents the ring grew by, e blocks each, mapped once a writer appended them
	// (their file offsets in the table at extOff, after the queue)
	ext     [][]byte
	e       uint64
	extOff  uint64
	over    bool
	blocks  []blockState
	free    [][]byte // chunk buffers not under way: page-aligned, maxChunk bytes (O_DIRECT)
	bufs    [][]byte // the chunk buffers' mappings (each a little larger, for alignment)
	maxBufs int      // how many chunk buffers it may make
	// spilled counts the records of blocks given back before their chunk was written
	// (the header's spilled, whose low 32 bits each chunk carries as its mark once
	// written: readers count spilled records no written chunk holds as lost); written
	// is the mark of the last chunk written
	spilled, written uint64
	jobs             chan *job
	results          chan *job
	pending          int
	pendingBytes     uint64 // the bytes of the chunks under way
	// writeStart is when the writer's write under way started (clock's; 0: none)
	writeStart atomic.Int64
	t0         time.Time // writeStart's origin (monotonic)
	inflight   []bool    // per block: a chunk holding its records is being written
	prealloc   uint64    // the file's blocks are reserved up to here (writer goroutine)
	pieces     []piece
	stats      Stats
	err        error // the first write error: nothing more is copied
	// populated is closed when the background population of the ring has ended;
	// stopPopulate ends it early (the ring is unmapped after it)
	populated    chan struct{}
	stopPopulate atomic.Bool
	// popTo is how far the population may go (pace); popWake wakes it when that moved
	// or it should stop
	popTo   atomic.Uint64
	popWake chan struct{}
	// spare: chunk buffers the maker goroutine made present ahead of need while the disk
	// is behind (asked: how many it was asked for and Drain has not taken)
	spare chan spareBuf
	want  chan struct{}
	asked int
	made  chan struct{} // closed when the maker has ended
}

// spareBuf is a chunk buffer the maker made: its mapping and its aligned part.
type spareBuf struct{ raw, buf []byte }

// populate makes the ring's pages in [from, to) present and writable, a step at a time
// in the queue's first order (block i first), up to popTo (populateLead until the
// writers have taken populateGo of the ring: pace), until done or stopped.
func (r *Recorder) populate(from, to uint64) {
	defer close(r.populated)
	for off := from; off < to && !r.stopPopulate.Load(); {
		if off >= r.popTo.Load() {
			<-r.popWake
			continue
		}
		end := min(to, off+populateStep)
		populateTouched(r.m[off:end])
		off = end
	}
}

// pace lets the background population make all of the ring present once the writers
// have taken populateGo of it (Drain's goroutine: the one that stores popTo)
func (r *Recorder) pace() {
	taken := atomic.LoadUint64(r.u64(uint64(offRingTake)))
	if taken*r.bs >= populateGo && r.popTo.Load() != math.MaxUint64 {
		r.popTo.Store(math.MaxUint64)
		select {
		case r.popWake <- struct{}{}:
		default:
		}
	}
}

// touchSink keeps populateTouched's reads (atomic: the populating goroutine and the
// maker both store it).
var touchSink atomic.Uint32

// populateTouched makes b's pages present and writable (MADV_POPULATE_WRITE) and reads
// a byte of each 4 KiB page: on this VM a page's first touch in a process costs ~6.4 us
// even once present, unless a thread of the process touched it before (issue 49), so
// where the ring or a buffer ends up on 4 KiB pages (small folios were seen in 3 of ~15
// checks of a program's ring; drains of 9 MB that took 38 ms came before records were
// lost) the goroutine that populates pays that, not Drain. On 2 MiB pages it is one
// touch each. Reads only: the ring's bytes may be records a writer is writing.
func populateTouched(b []byte) {
	syscall.Madvise(b, 23 /* MADV_POPULATE_WRITE */)
	var s byte
	for i := 0; i < len(b); i += 4096 {
		s += b[i]
	}
	touchSink.Store(uint32(s))
}

// endPopulate stops the background population and waits for it.
func (r *Recorder) endPopulate() {
	if r.populated != nil {
		r.stopPopulate.Store(true)
		select {
		case r.popWake <- struct{}{}:
		default:
		}
		<-r.populated
		r.populated = nil
	}
}

type blockState struct {
	seq     uint32
	stuck   time.Time // when an uncommitted record that stops the copy was first seen
	checked time.Time // when its writer was last looked for
	peeked  time.Time // when it was last copied from while its writer held it
	gone    bool      // its writer is gone
	given   bool      // overwrite mode: given back for its gone writer
}

type piece struct {
	block    uint64
	from, to uint64
	records  uint64 // committed records in [from, to)
	free     bool   // the block is finished: give it back once copied
	spilled  bool   // given back once copied, before its chunk was written
}

// header field offsets (the Go mirror has the C layout: TestABILayout)
var (
	offLost      = unsafe.Offsetof(kprt.RawTraceHeader{}.Lost)
	offOverwrite = unsafe.Offsetof(kprt.RawTraceHeader{}.Overwritten)
	offNImages   = unsafe.Offsetof(kprt.RawTraceHeader{}.NImages)
	offRingFlags = unsafe.Offsetof(kprt.RawTraceHeader{}.RingFlags)
	offRingTake  = unsafe.Offsetof(kprt.RawTraceHeader{}.RingTake)
	offRingGive  = unsafe.Offsetof(kprt.RawTraceHeader{}.RingGive)
	offChunkLast = unsafe.Offsetof(kprt.RawTraceHeader{}.ChunkLast)
	offSpilled   = unsafe.Offsetof(kprt.RawTraceHeader{}.Spilled)
	offRingGrown = unsafe.Offsetof(kprt.RawTraceHeader{}.RingGrown)
	offSnapCount = unsafe.Offsetof(kprt.RawTraceHeader{}.SnapCount)
	offBlkDone   = unsafe.Offsetof(kprt.RawBlock{}.Done)
	offBlkDrain  = unsafe.Offsetof(kprt.RawBlock{}.Drained)
	offBlkSeq    = unsafe.Offsetof(kprt.RawBlock{}.Seq)
)

// Create makes the ring file at path (replacing a regular file there; anything else
// is refused): made under a temporary name beside it and renamed into place, so a
// program never sees half a header. The file is locked while the Recorder has it: a
// second Create of its path fails with ErrHeld.
func Create(path string, opt Options) (*Recorder, error) {
	if opt.BufferSize == 0 {
		opt.BufferSize = DefaultBufferSize
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = DefaultBlockSize
	}
	bs := opt.BlockSize
	if bs < MinBlockSize || bs&(bs-1) != 0 || bs > 1<<30 {
		return nil, fmt.Errorf("block size %d: want a power of two from %d", bs, MinBlockSize)
	}
	if opt.BufferSize > MaxBufferSize {
		return nil, fmt.Errorf("buffer size %d: at most %d GiB", opt.BufferSize, MaxBufferSize>>30)
	}
	n := opt.BufferSize / bs
	if n < 4 {
		return nil, fmt.Errorf("buffer size %d: room for %d blocks of %d bytes, want at least 4", opt.BufferSize, n, bs)
	}
	nmax := ringBlocks(opt, n, bs)
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file; refusing to replace it", path)
	}
	if held(path) { // before the ring's blocks are reserved; place makes sure
		return nil, ErrHeld
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("create trace file: %w", err)
	}
	// locked before it is anyone's to see (where the file system has no locks, the
	// recording goes on without; Check still finds a file replaced)
	lockOFD(f, syscall.F_WRLCK)
	r, err := setUp(f, n, nmax, bs, opt.Overwrite)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	if err := place(f.Name(), path, opt.KeepOld, &r.keptOld); err != nil {
		r.close()
		os.Remove(f.Name())
		if errors.Is(err, ErrHeld) {
			return nil, err
		}
		return nil, fmt.Errorf("create trace file: %w", err)
	}
	r.Path = path
	return r, nil
}

// ErrHeld is Create's error for a path where another Recorder's file is.
var ErrHeld = errors.New("another kprewrite record is writing it")

// The lock a Recorder holds on its file is an open file description's fcntl lock (Linux
// 3.15): fcntl locks are apart from the flock the runtimes and appendChunk take to
// append (a flock held for the recording would stop every program at its first
// record), and it lasts as long as the file is open in the Recorder, where a POSIX
// record lock would end with the process's first close of any descriptor of the file.
const (
	fOFDGetlk = 36 // F_OFD_GETLK
	fOFDSetlk = 37 // F_OFD_SETLK
)

// lockOFD takes a lock of typ (F_WRLCK, F_RDLCK) on all of f, without waiting.
func lockOFD(f *os.File, typ int16) error {
	lk := syscall.Flock_t{Type: typ}
	return syscall.FcntlFlock(f.Fd(), fOFDSetlk, &lk)
}

// isConflict reports whether a lock error says another holds a conflicting lock.
func isConflict(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

// held reports whether another Recorder has the file at path.
func held(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	return syscall.FcntlFlock(f.Fd(), fOFDGetlk, &lk) == nil && lk.Type != syscall.F_UNLCK
}

// place renames tmp (a Recorder's file, locked) to path unless another Recorder's file
// is there. The file at path is locked while it is replaced, and checked to be the one
// path names once locked, so that of two Recorders of one path the second finds the
// first one's file, never replaces it; where nothing is, tmp is placed only if nothing
// is there still. With keepOld, a non-empty file replaced is linked to path.old first.
func place(tmp, path string, keepOld bool, kept *bool) error {
	for try := 0; try < 100; try++ {
		old, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		typ := int16(syscall.F_WRLCK)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			// a file the user may not write (ETXTBSY, EACCES): a read lock, which
			// another Recorder's write lock refuses
			old, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			typ = syscall.F_RDLCK
		}
		if errors.Is(err, os.ErrNotExist) {
			err := renameNoReplace(tmp, path)
			if errors.Is(err, os.ErrExist) {
				continue // another file came: look at it
			}
			return err
		}
		if err != nil {
			return err
		}
		again, err := func() (bool, error) {
			defer old.Close() // (its lock with it, once path names tmp)
			st, err := old.Stat()
			if err != nil {
				return false, err
			}
			if !st.Mode().IsRegular() {
				return false, fmt.Errorf("%s: not a regular file; refusing to replace it", path)
			}
			if err := lockOFD(old, typ); isConflict(err) {
				return false, ErrHeld
			}
			if now, err := os.Lstat(path); err != nil || !os.SameFile(st, now) {
				return true, nil // replaced meanwhile
			}
			if keepOld && st.Size() > 0 {
				if err := keep(path); err != nil {
					return false, err
				}
				*kept = true
			}
			return false, os.Rename(tmp, path)
		}()
		if !again {
			return err
		}
	}
	return fmt.Errorf("%s keeps changing", path)
}

// keep links the file at path to path.old, in place of what was there: the file stays
// whole under its new name, locked by nobody once its recorder is gone.
func keep(path string) error {
	old := path + ".old"
	if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("keep the previous trace as %s: %w", old, err)
	}
	if err := os.Link(path, old); err != nil {
		return fmt.Errorf("keep the previous trace as %s: %w", old, err)
	}
	return nil
}

// renameNoReplace renames from to to unless to exists (os.ErrExist): renameat2's
// RENAME_NOREPLACE, else a hard link and the old name removed.
func renameNoReplace(from, to string) error {
	f, err := syscall.BytePtrFromString(from)
	if err != nil {
		return err
	}
	t, err := syscall.BytePtrFromString(to)
	if err != nil {
		return err
	}
	const atFDCWD, renameNoReplace = -100, 1
	fd := atFDCWD
	_, _, e := syscall.Syscall6(316 /* SYS_RENAMEAT2 */, uintptr(fd), uintptr(unsafe.Pointer(f)), uintptr(fd), uintptr(unsafe.Pointer(t)), renameNoReplace, 0)
	switch e {
	case 0:
		return nil
	case syscall.EINVAL, syscall.ENOSYS: // a file system without the flag
	default:
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: e}
	}
	if err := os.Link(from, to); err != nil {
		return err
	}
	return os.Remove(from)
}

// Check reports whether the Recorder's path still names the file it writes: an error
// saying the file was removed or replaced (by another file, left as it is) while
// recording, when not; what was written to it is in no file then.
func (r *Recorder) Check() error {
	st, err := r.f.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(r.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ErrRemoved
	case err != nil:
		return fmt.Errorf("cannot check it is still the file written: %w", err)
	case !os.SameFile(st, now):
		return ErrReplaced
	}
	return nil
}

// Check's errors.
var (
	ErrRemoved  = errors.New("was removed while recording")
	ErrReplaced = errors.New("was replaced by another file while recording (left as it is)")
)

// ringBlocks is how many blocks the ring may grow to (Options.RingMax).
func ringBlocks(opt Options, n, bs uint64) uint64 {
	if opt.Overwrite {
		return n
	}
	limit := opt.RingMax
	if limit == 0 {
		limit = min(growFactor*opt.BufferSize, maxGrow, memAvailable()/spillShare)
	}
	// (the blocks' count is a u32 in the header, and seqs from 2^31 name grown blocks)
	return min(max(n, limit/bs), 1<<31)
}

// inMemory says whether the file fd is on a file system whose files are memory
// (tmpfs, ramfs), where fallocate takes the pages themselves.
func inMemory(fd int) bool {
	var st syscall.Statfs_t
	if syscall.Fstatfs(fd, &st) != nil {
		return false
	}
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6
	return st.Type == tmpfsMagic || st.Type == ramfsMagic
}

// setUp lays out the file: the header, the ring of n blocks of bs bytes, the queue of
// nmax entries and the table of the extents the ring may grow by to nmax blocks (writers
// append them when the queue runs empty), room for counters.
func setUp(f *os.File, n, nmax, bs uint64, over bool) (*Recorder, error) {
	ring := n * bs
	qoff := kprt.TraceHeaderSize + ring
	e, next := extents(n, nmax, bs)
	qbytes := (nmax*8 + next*8 + 4095) &^ 4095
	csize := qbytes + countersSlack
	total := qoff + csize
	if err := f.Truncate(int64(total)); err != nil {
		return nil, fmt.Errorf("size trace file: %w", err)
	}
	fd := int(f.Fd())
	// the header, the ring and the queue get their blocks now: a page of a mapped file
	// without blocks, written when the disk is full, would be a SIGBUS in the program.
	// Not the blocks the ring may grow by: they are not in the file until a writer
	// appends them (rt_tracefile.c's kprw_ring_extend), and where that fails the ring
	// does not grow.
	ringEnd := kprt.TraceHeaderSize + ring
	err := syscall.Fallocate(fd, 0, 0, int64(ringEnd))
	noReserve := errors.Is(err, syscall.EOPNOTSUPP)
	if err == nil {
		err = syscall.Fallocate(fd, 0, int64(qoff), int64(qbytes))
	}
	if err != nil && !noReserve {
		return nil, fmt.Errorf("reserve %d bytes for the ring: %w", ringEnd+qbytes, err)
	}
	// Where the file system cannot reserve blocks, the ring is written once, so that a
	// program's write to a page never needs a block the full disk cannot give (a SIGBUS).
	// Reserved blocks read as zeros without it.
	if noReserve {
		zero := make([]byte, 1<<20)
		for off := uint64(0); off < ringEnd; off += uint64(len(zero)) {
			k := min(uint64(len(zero)), ringEnd-off)
			if _, err := f.WriteAt(zero[:k], int64(off)); err != nil {
				return nil, fmt.Errorf("write the ring: %w", err)
			}
		}
	}
	var h kprt.RawTraceHeader
	copy(h.Magic[:], kprt.TraceMagic)
	h.Version, h.DataOff, h.DataSize = kprt.TraceVersion, kprt.TraceHeaderSize, ring
	h.CountersOff, h.CountersSize, h.CountersUsed = qoff, csize, qbytes
	h.ClockID, h.BlockSize = 1, 4096
	h.CreatedRealNs = uint64(time.Now().UnixNano())
	h.CreatedMonoNs = monoNow()
	h.TsBase = h.CreatedMonoNs - min(h.CreatedMonoNs, 1e9)
	h.RingBlocks, h.RingBS, h.RingQueueOff, h.RingGive = uint32(nmax), bs, qoff, n
	if nmax > n {
		h.RingGrown, h.RingExtBlocks = n, uint32(e)
	}
	if over {
		h.RingFlags = kprt.RingOverwrite
	}
	h.RecorderPID = uint32(os.Getpid())
	var hb bytes.Buffer
	binary.Write(&hb, binary.LittleEndian, &h)
	m, err := syscall.Mmap(fd, 0, int(qoff+qbytes), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map trace file: %w", err)
	}
	// The ring's pages present and writable in the recorder (so in the page cache)
	// before the programs write them: a page the page cache does not hold yet costs the
	// program that first writes it an allocation (~6 us here). The header, the queue
	// and the first blocks now; the rest by a goroutine in the queue's order, ahead of
	// the writers, while the program starts (populating all of a 32 MiB ring here took
	// ~70 ms, which every `record` run paid before its program started).
	// on 2 MiB pages where the file system gives them (ext4's large folios; the kernel
	// aligns the mapping): populating a 32 MiB ring took ~70 ms on 4 KiB pages here, so
	// a fast writer met pages not yet there and allocated them itself (python3.11
	// --calls '*': 54 against 40 ns a record, issue 49), and each 4 KiB page's first
	// touch costs a process ~7 us on this VM even when present. The runtime asks the
	// same for its mapping.
	syscall.Madvise(m, 14 /* MADV_HUGEPAGE */)
	first := min(n, populateFirst/bs)
	populateTouched(m[:kprt.TraceHeaderSize+first*bs])
	populateTouched(m[qoff : qoff+qbytes])
	// The header and the queue are written through the mapping, after the pages are
	// there: a write(2) first gave offset 0 a small folio, so the ring's first 4 MiB
	// were on 4 KiB pages in every process (a program's first 16 MiB of records took
	// ~1,000 page faults, issue 49).
	copy(m, hb.Bytes())
	q := m[qoff : qoff+nmax*8]
	for i := uint64(0); i < nmax; i++ { // entry i of round 0: block i
		e := i
		if i >= n {
			// not filled yet: a generation no round has (as zero, it would read as
			// round 0's block 0 to a taker between a give's count and its entry)
			e = 0xffffffff << 32
		}
		binary.LittleEndian.PutUint64(q[i*8:], e)
	}
	// the first chunks' blocks reserved beyond the end (appendChunk goes on); not on
	// tmpfs, where a reserved block is memory taken now (256 MiB for a trace of a few
	// records) and an extending write waits for no journal
	prealloc := uint64(math.MaxUint64)
	if !inMemory(fd) {
		prealloc = total + preallocAhead
		syscall.Fallocate(fd, 0x1 /* KEEP_SIZE */, int64(total), preallocAhead)
	}
	r := &Recorder{f: f, m: m, n: nmax, n0: n, bs: bs, qoff: qoff, over: over, blocks: make([]blockState, nmax), prealloc: prealloc, t0: time.Now(),
		ext: make([][]byte, next), e: e, extOff: h.RingExtOff(),
		inflight:  make([]bool, nmax),
		maxBufs:   max(chunkBuffers, int(min(spillFactor*ring, maxSpill, memAvailable()/spillShare)/maxChunk)),
		populated: make(chan struct{})}
	r.jobs, r.results = make(chan *job, r.maxBufs), make(chan *job, r.maxBufs)
	r.spare, r.want, r.made = make(chan spareBuf, r.maxBufs), make(chan struct{}, r.maxBufs), make(chan struct{})
	r.popWake = make(chan struct{}, 1)
	r.popTo.Store(kprt.TraceHeaderSize + first*bs + populateLead)
	go r.maker()
	go r.populate(kprt.TraceHeaderSize+first*bs, kprt.TraceHeaderSize+n*bs) // (not what it may grow to)
	// one buffer now, filled as it is first used (a short run needs no other); the
	// next asked of the maker when a write is slow or a drain waits for one (askSpare,
	// awaitBuf): made at the start, 8 MiB of new memory took a short program's CPU here
	if err := r.newBuf(); err != nil {
		r.close()
		return nil, err
	}
	go r.writer()
	if d, err := os.OpenFile(f.Name(), os.O_WRONLY|syscall.O_DIRECT, 0); err == nil {
		r.direct = d
	}
	return r, nil
}

// newBuf makes a chunk buffer, present as it is first filled (on the recorder's CPU,
// not before the program starts; a short run needs one; the maker's are made present
// ahead), on 2 MiB pages where the
// kernel gives them (transparent huge pages): an O_DIRECT write pins 4 pages of a
// chunk instead of 2048, and the copy into it misses the TLB 512 times less.
func (r *Recorder) newBuf() error {
	raw, buf, err := makeBuf()
	if err != nil {
		return err
	}
	r.bufs = append(r.bufs, raw)
	r.free = append(r.free, buf)
	return nil
}

// memAvailable is /proc/meminfo's MemAvailable in bytes (maxSpill where it cannot be
// read: the bound is then maxSpill's alone)
func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return maxSpill * spillShare
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			if kb, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return maxSpill * spillShare
}

func makeBuf() (raw, buf []byte, err error) {
	raw, err = syscall.Mmap(-1, 0, maxChunk+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, fmt.Errorf("chunk buffer: %w", err)
	}
	at := (hugePage - uint64(uintptr(unsafe.Pointer(&raw[0])))%hugePage) % hugePage
	buf = raw[at : at+maxChunk : at+maxChunk]
	syscall.Madvise(buf, 14 /* MADV_HUGEPAGE */)
	return raw, buf, nil
}

// maker makes the chunk buffers Drain asks for ahead of need, present (MADV_POPULATE_WRITE):
// the second at the start, more while the disk is behind. Made on Drain's
// path, a buffer's first fill of fresh memory took 8-53 ms a drain on this VM (4 MB in
// 16 ms) while python3.11 wrote ~540 MB/s of records into a 32 MiB ring, which then
// filled (442,000-890,000 records lost in 1 of 6 runs, issue 49).
func (r *Recorder) maker() {
	defer close(r.made)
	for range r.want {
		raw, buf, err := makeBuf()
		if err != nil {
			r.spare <- spareBuf{}
			continue
		}
		populateTouched(buf)
		r.spare <- spareBuf{raw, buf}
	}
}

// askSpare asks the maker for one more buffer when the disk is behind (the chunks under
// way hold a buffer's worth of records or more, and the write under way has taken
// writeWait already) and fewer than two are free, within maxBufs. (Asked whenever a
// chunk was under way, as before 2026-11-30, the maker made 37 buffers of 8 MiB for
// python3.11's 134 MiB trace, with a disk faster than the program: each drain's chunk,
// ~1 MiB, holds a buffer while it is written; 296 MiB of new memory, whose zeroing was
// 27% of the run's samples. Asked with a buffer's worth under way, it still made 11
// for that trace, whose 8 MiB chunks the disk wrote in 2-7 ms each: 100-200 ms of CPU
// a buffer while the program ran, the drain starved of the CPU and the ring grown;
// issue 49, twenty-sixth session.)
func (r *Recorder) askSpare() {
	started := r.writeStart.Load()
	slow := started != 0 && r.clock()-started >= int64(writeWait)
	if slow && r.pendingBytes >= maxChunk && len(r.free) < 2 && len(r.bufs)+r.asked < r.maxBufs {
		r.asked++
		r.want <- struct{}{}
	}
}

// takeSpare takes the buffers the maker has made (false: none ready).
func (r *Recorder) takeSpare() bool {
	got := false
	for {
		select {
		case b := <-r.spare:
			got = r.addSpare(b) || got
		default:
			return got
		}
	}
}

// clock is the monotonic time since the recorder was set up, in ns, plus 1 (never 0:
// writeStart's "none")
func (r *Recorder) clock() int64 { return int64(time.Since(r.t0)) + 1 }

// addSpare adds a buffer the maker made (false: it could not make one).
func (r *Recorder) addSpare(b spareBuf) bool {
	r.asked--
	if b.raw == nil {
		return false
	}
	r.bufs = append(r.bufs, b.raw)
	r.free = append(r.free, b.buf)
	return true
}

// awaitBuf waits, with no buffer free, for a chunk under way to be written (its buffer
// then free) or for a spare the maker is making; after writeWait with neither, it asks
// the maker for one (when it may have more) and waits on. False: nothing to wait for
// (no chunk under way, no spare asked); with no buffer free every buffer is under way,
// so that is defensive. A fresh 8 MiB buffer took 100-200 ms to make present on this VM
// while the program ran (its pages new to the hypervisor too), a chunk's write 0.2-7
// ms: made on Drain's path instead of waiting for a write, it stalled the drain that
// long, the ring filled and grew (new pages again, in the program's threads), and
// python3.11's `--calls '*'` run under `record` took 1.3 s instead of 0.3 (issue 49,
// twenty-sixth session).
func (r *Recorder) awaitBuf() bool {
	if r.pending == 0 && r.asked == 0 {
		return false
	}
	var wait <-chan time.Time
	if r.asked == 0 {
		t := time.NewTimer(writeWait)
		defer t.Stop()
		wait = t.C
	}
	for {
		select {
		case j := <-r.results:
			r.finish(j)
			return true
		case b := <-r.spare:
			if r.addSpare(b) {
				return true
			}
			if r.pending == 0 && r.asked == 0 {
				return false
			}
		case <-wait:
			wait = nil
			if len(r.bufs)+r.asked < r.maxBufs {
				r.asked++
				r.want <- struct{}{}
			}
		}
	}
}

func monoNow() uint64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func (r *Recorder) u32(off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&r.m[off])) }
func (r *Recorder) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.m[off])) }

// Stats returns the counts so far.
func (r *Recorder) Stats() Stats {
	s := r.stats
	if r.m != nil {
		s.Lost = atomic.LoadUint64(r.u64(uint64(offLost)))
		s.Overwritten = atomic.LoadUint64(r.u64(uint64(offOverwrite)))
		s.Grown = (r.grown() - r.n0) * r.bs
	}
	return s
}

// Discard, before Finish, removes the Recorder's file if the path still names it, and
// puts back the file it replaced (KeepOld): a recording that is no trace leaves the
// previous one where it was.
func (r *Recorder) Discard() {
	if r.Check() != nil {
		return
	}
	os.Remove(r.Path)
	if r.keptOld {
		renameNoReplace(r.Path+".old", r.Path)
	}
}

// Images is how many rewritten images have joined the trace file so far: none after
// the program ran means nothing the recorder ran had probes. 0 once finished.
func (r *Recorder) Images() int {
	if r.m == nil {
		return 0
	}
	return int(atomic.LoadUint32(r.u32(uint64(offNImages))))
}

// Snapshots is how many snapshots the programs took (snapshot triggers, onmax()
// snapshot() actions): in overwrite mode, each is a Drain with snapshot set, so that the
// ring's records up to it reach the file before they are overwritten.
func (r *Recorder) Snapshots() uint64 {
	if r.m == nil {
		return 0
	}
	return atomic.LoadUint64(r.u64(uint64(offSnapCount)))
}

// Err is the first error writing the file (nothing is copied after it: the records
// stay in the ring, later ones are lost and counted).
func (r *Recorder) Err() error { return r.err }

// extents is how many blocks an extent of a ring growing from n to nmax blocks of bs
// bytes holds, and how many extents it may grow by.
func extents(n, nmax, bs uint64) (e, next uint64) {
	e = max(1, extentBytes/bs)
	return e, (nmax - n + e - 1) / e
}

// block is ring block i: in the file's ring, or in the extent the ring grew by that holds
// it, mapped here once a writer appended it (nil before).
func (r *Recorder) block(i uint64) []byte {
	if i < r.n0 {
		b := kprt.TraceHeaderSize + i*r.bs
		return r.m[b : b+r.bs : b+r.bs]
	}
	k, j := (i-r.n0)/r.e, (i-r.n0)%r.e
	if r.ext[k] == nil && !r.mapExtent(k) {
		return nil
	}
	return r.ext[k][j*r.bs : (j+1)*r.bs : (j+1)*r.bs]
}

// extentAt is extent k's file offset, 0 until a writer has appended it.
func (r *Recorder) extentAt(k uint64) uint64 { return atomic.LoadUint64(r.u64(r.extOff + k*8)) }

// mapExtent maps extent k, if a writer has appended it.
func (r *Recorder) mapExtent(k uint64) bool {
	at := r.extentAt(k)
	if at == 0 {
		return false
	}
	m, err := syscall.Mmap(int(r.f.Fd()), int64(at), int(r.e*r.bs), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return false
	}
	syscall.Madvise(m, 14 /* MADV_HUGEPAGE */)
	r.ext[k] = m
	return true
}

// word32 and word64 are the words at off in a block, for atomic access.
func word32(b []byte, off uintptr) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
func word64(b []byte, off uint64) *uint64  { return (*uint64)(unsafe.Pointer(&b[off])) }

// scan finds how far block i's records are committed from its drained offset: the
// end of the committed prefix, and whether the block is finished (its writer left it
// or is gone, and every record in it is committed or torn for good).
func (r *Recorder) scan(i uint64, blk []byte, now time.Time, final bool) (from, to, records uint64, finished bool) {
	st := &r.blocks[i]
	seq := atomic.LoadUint32(word32(blk, offBlkSeq))
	if seq != st.seq {
		*st = blockState{seq: seq}
	}
	from = max(uint64(atomic.LoadUint32(word32(blk, offBlkDrain))), kprt.BlockSize)
	left := atomic.LoadUint32(word32(blk, offBlkDone)) != 0
	to = from
	for to+kprt.CRecSize <= uint64(len(blk)) {
		w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&blk[to])))
		tsLo := atomic.LoadUint32((*uint32)(unsafe.Pointer(&blk[to+8])))
		rlen, commit, tsHi := uint16(w), uint16(w>>16), uint16(w>>48)
		if tsLo == 0 && tsHi == 0 {
			break // the records end here, for now
		}
		size := kprt.CRecBytes(rlen)
		if size > uint64(len(blk))-to {
			break // corrupt
		}
		if commit&kprt.CRecCommitted != 0 && commit&kprt.CRecDiscarded == 0 {
			records++
		}
		if commit&kprt.CRecCommitted == 0 {
			// being written, or its writer died while writing it
			if !(left || st.gone || final) {
				break
			}
			if st.stuck.IsZero() {
				st.stuck = now
			}
			if !st.gone && !final && now.Sub(st.stuck) < graceTorn {
				break
			}
		}
		to += size
	}
	if !left && !st.gone && now.Sub(st.checked) > 50*time.Millisecond {
		st.checked = now
		pid := atomic.LoadUint32(word32(blk, 8))
		tid := atomic.LoadUint32(word32(blk, 12))
		st.gone = writerGone(pid, tid)
	}
	// finished: left (or gone), and nothing after the copied records but zeros
	end := to+kprt.CRecSize > r.bs || atomic.LoadUint64(word64(blk, to)) == 0 && atomic.LoadUint64(word64(blk, to+8)) == 0
	finished = (left || st.gone) && end
	return from, to, records, finished
}

// held says whether block i is still its writer's and was copied from (or taken) less
// than heldPeek ago: Drain leaves it alone until its writer leaves it or heldPeek
// passes, so a slow writer's records still reach the file (and --live) within it.
func (r *Recorder) held(i uint64, blk []byte, now time.Time) bool {
	if atomic.LoadUint32(word32(blk, offBlkDone)) != 0 {
		return false
	}
	st := &r.blocks[i]
	if seq := atomic.LoadUint32(word32(blk, offBlkSeq)); seq != st.seq {
		*st = blockState{seq: seq, peeked: now} // newly taken: its first copy waits
		return true
	}
	if st.gone || now.Sub(st.peeked) >= heldPeek {
		st.peeked = now
		return false
	}
	return true
}

// writerGone says whether thread tid of process pid has ended (a zombie has).
func writerGone(pid, tid uint32) bool {
	if pid == 0 || tid == 0 {
		return true
	}
	if err := syscall.Tgkill(int(pid), int(tid), 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/task/" + strconv.Itoa(int(tid)) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	if k := bytes.LastIndexByte(b, ')'); k >= 0 && k+2 < len(b) {
		return b[k+2] == 'Z' || b[k+2] == 'X'
	}
	return false
}

// Drain copies what the ring holds into chunks and gives finished blocks back. With
// final, a record its writer left unfinished is torn now (the programs are gone).
// In overwrite mode it copies nothing unless snapshot is set, and gives back the
// oldest finished blocks only when the ring runs short. Chunks are written by another
// goroutine while the next ones are gathered (the disk's time overlaps the copy's);
// a block waits for its chunk to be written before it is scanned or given back
// again. Final and snapshot drains return once everything is written. It returns the
// bytes of records it gathered.
func (r *Recorder) Drain(final, snapshot bool) uint64 {
	r.pace()
	r.collect(final)
	now := time.Now()
	r.pieces = r.pieces[:0]
	for i := range r.live() {
		if r.inflight[i] {
			continue
		}
		blk := r.block(i)
		if blk == nil || atomic.LoadUint32(word32(blk, 0)) != kprt.BlockMagic {
			continue
		}
		if !final && !snapshot && r.held(i, blk, now) {
			continue
		}
		from, to, nrec, fin := r.scan(i, blk, now, final)
		if r.over && !snapshot {
			// writers give the blocks they leave back themselves; a block whose
			// writer is gone (without leaving it) is given back here, once
			st := &r.blocks[i]
			if fin && st.gone && !st.given && atomic.LoadUint32(word32(blk, offBlkDone)) == 0 {
				st.given = true
				atomic.StoreUint32(word32(blk, offBlkDone), 1)
				r.push(i)
			}
			continue
		}
		if to > from || fin {
			r.pieces = append(r.pieces, piece{block: i, from: from, to: to, records: nrec, free: fin && !r.over})
		}
	}
	gathered := r.gather()
	if final || snapshot {
		r.collect(true)
	}
	return gathered
}

// live yields the blocks Drain looks at: [0, taken) and [n0, grown). The queue's first
// round hands out block i as its entry i, so while writers have taken fewer than n0
// entries, the blocks from there on were never written, and looking at their headers
// would fault in pages the populating goroutine has not reached (the first drain of a
// 256 MiB ring took 241 ms over its 4,096 blocks while a program filled the ring, and
// lost 1.7 million of 20 million records; issue 49). The blocks the ring grew by are
// claimed in order from n0.
func (r *Recorder) live() iter.Seq[uint64] {
	taken := min(r.n0, atomic.LoadUint64(r.u64(uint64(offRingTake))))
	grown := r.grown()
	return func(yield func(uint64) bool) {
		for i := uint64(0); i < taken; i++ {
			if !yield(i) {
				return
			}
		}
		for i := r.n0; i < grown; i++ {
			if !yield(i) {
				return
			}
		}
	}
}

// grown is how many of the ring's blocks are in use: n0, and those writers claimed
// when the queue ran empty.
func (r *Recorder) grown() uint64 {
	return min(r.n, max(r.n0, atomic.LoadUint64(r.u64(uint64(offRingGrown)))))
}

// job is a chunk on its way to the file.
type job struct {
	buf    []byte
	size   uint64
	np     uint32
	pieces []piece
	off    uint64 // where it was written
	mark   uint64 // the recorder's spilled count with this chunk's pieces
	err    error
}

// writer writes the chunks Drain gathers, in order. After a write fails it writes no
// more: a later chunk that fitted would carry a mark that counts the failed one's
// spilled records as written.
func (r *Recorder) writer() {
	var failed error
	for j := range r.jobs {
		if failed != nil {
			j.err = failed
		} else {
			r.writeStart.Store(r.clock())
			j.off, j.err = r.appendChunk(j.buf, j.size, j.np, uint32(j.mark))
			r.writeStart.Store(0)
			failed = j.err
		}
		r.results <- j
	}
}

// collect finishes the written chunks: what they copied is marked drained in the
// ring, finished blocks are given back. all: waits for every chunk under way.
func (r *Recorder) collect(all bool) {
	for r.pending > 0 {
		var j *job
		if all {
			j = <-r.results
		} else {
			select {
			case j = <-r.results:
			default:
				return
			}
		}
		r.finish(j)
	}
}

func (r *Recorder) finish(j *job) {
	r.pending--
	r.pendingBytes -= j.size
	r.free = append(r.free, j.buf)
	if j.err != nil && r.err == nil {
		r.err = j.err
	}
	if j.err == nil && r.err == nil {
		r.written = j.mark
	}
	for _, p := range j.pieces {
		if p.spilled {
			if r.err == nil {
				r.stats.Records += p.records
			}
			continue // (the block is the writers' again)
		}
		r.inflight[p.block] = false
		if r.err != nil {
			continue // the records stay in the ring
		}
		atomic.StoreUint32(word32(r.block(p.block), offBlkDrain), uint32(p.to))
		r.stats.Records += p.records
		if p.free {
			r.give(p.block)
		}
	}
	if j.err == nil && j.np > 0 {
		r.stats.Bytes += (j.size + 4095) &^ 4095
		r.stats.Chunks++
	}
}

// gather copies the pieces into chunks and hands them to the writer.
func (r *Recorder) gather() uint64 {
	var gathered uint64
	for start := 0; start < len(r.pieces) && r.err == nil; {
		if len(r.free) == 0 {
			if !r.takeSpare() && !r.awaitBuf() {
				// (not met: with none free every buffer is under way, and its write
				// gives it back)
				r.err = errors.New("record: no chunk buffer free and none under way")
				break
			}
			continue
		}
		buf := r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
		w := uint64(kprt.ChunkSize)
		end, np := start, uint32(0)
		for ; end < len(r.pieces); end++ {
			p := &r.pieces[end]
			if p.to == p.from {
				continue
			}
			need := (kprt.BlockSize + p.to - p.from + 7) &^ 7
			if w+need > maxChunk {
				break
			}
			blk := r.block(p.block)
			copy(buf[w:], blk[:kprt.BlockSize])
			binary.LittleEndian.PutUint32(buf[w+4:], uint32(kprt.BlockSize+p.to-p.from))
			binary.LittleEndian.PutUint32(buf[w+uint64(offBlkDrain):], uint32(p.from))
			k := copy(buf[w+kprt.BlockSize:], blk[p.from:p.to])
			clear(buf[w+kprt.BlockSize+uint64(k) : w+need])
			w += need
			np++
			gathered += p.to - p.from
		}
		r.spill(r.pieces[start:end])
		j := &job{buf: buf, size: w, np: np, mark: r.spilled, pieces: append([]piece(nil), r.pieces[start:end]...)}
		for _, p := range j.pieces {
			r.inflight[p.block] = !p.spilled
		}
		r.pending++
		r.pendingBytes += j.size
		r.jobs <- j
		start = end
		r.askSpare()
	}
	return gathered
}

// spill gives the finished blocks among pieces back now that their records are in a
// chunk buffer (not in overwrite mode, whose writers give blocks back): the header's
// spilled counts their records first, so a recorder killed before their chunk is
// written leaves them counted as lost (a kill between that store and the block's
// magic going would count them twice: in the ring and as lost), and a chunk written
// carries the count as its mark.
func (r *Recorder) spill(pieces []piece) {
	for i := range pieces {
		p := &pieces[i]
		if !p.free {
			continue
		}
		r.spilled += p.records
		atomic.StoreUint64(r.u64(uint64(offSpilled)), r.spilled)
		p.free, p.spilled = false, true
		r.give(p.block)
	}
}

// appendChunk writes the chunk in buf (w bytes, np pieces after room for the chunk
// header, mark its spilled mark) at the end of the file and links it. Its room is taken
// under the file lock the runtimes take to append (the file's size moved past it), and
// written after: a writer that appends an extent to a growing ring waits for the lock,
// and a chunk's write takes milliseconds. With O_DIRECT the chunk starts on a page and
// is padded to whole pages. A chunk of no pieces writes nothing.
func (r *Recorder) appendChunk(buf []byte, w uint64, np, mark uint32) (uint64, error) {
	if np == 0 {
		return 0, nil
	}
	out, align := r.f, uint64(8)
	if r.direct != nil {
		out, align = r.direct, 4096
	}
	size := (w + align - 1) &^ (align - 1)
	clear(buf[w:size])
	off, was, err := r.room(size, align)
	if err != nil {
		return 0, err
	}
	prev := atomic.LoadUint64(r.u64(uint64(offChunkLast)))
	copy(buf, kprt.ChunkMagic)
	binary.LittleEndian.PutUint64(buf[8:], prev)
	binary.LittleEndian.PutUint64(buf[16:], size)
	binary.LittleEndian.PutUint32(buf[24:], np)
	binary.LittleEndian.PutUint32(buf[28:], mark)
	_, err = out.WriteAt(buf[:size], int64(off))
	if err != nil && r.direct != nil && errors.Is(err, syscall.EINVAL) {
		// the file system took the O_DIRECT open but not the write: through the cache
		r.direct.Close()
		r.direct = nil
		_, err = r.f.WriteAt(buf[:size], int64(off))
	}
	if err != nil {
		r.unroom(off+size, was) // no half chunk
		return 0, fmt.Errorf("write trace file: %w", err)
	}
	atomic.StoreUint64(r.u64(uint64(offChunkLast)), off)
	return off, nil
}

// atEnd runs fn with the file's size under the file lock the runtimes take to append
// (their appends, and the recorder's, compute where they go from the size).
func (r *Recorder) atEnd(fn func(size uint64) error) error {
	fd := int(r.f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock trace file: %w", err)
	}
	defer syscall.Flock(fd, syscall.LOCK_UN)
	st, err := r.f.Stat()
	if err != nil {
		return fmt.Errorf("trace file: %w", err)
	}
	return fn(uint64(st.Size()))
}

// room takes size bytes at the end of the file, aligned to align, under the file lock:
// their offset, and the file's size before.
func (r *Recorder) room(size, align uint64) (off, was uint64, err error) {
	err = r.atEnd(func(end uint64) error {
		was, off = end, (end+align-1)&^(align-1)
		if off+size > r.prealloc {
			// blocks reserved ahead of the chunks (the size unchanged): a write that
			// extends the file would allocate them, and wait for the journal, every time
			r.prealloc = off + preallocAhead
			syscall.Fallocate(int(r.f.Fd()), 0x1 /* KEEP_SIZE */, int64(off), preallocAhead)
		}
		if err := r.f.Truncate(int64(off + size)); err != nil {
			return fmt.Errorf("write trace file: %w", err)
		}
		return nil
	})
	return off, was, err
}

// unroom gives back the room of a chunk that was not written (ending at end), unless
// something was appended after it: the size before (was) again.
func (r *Recorder) unroom(end, was uint64) {
	r.atEnd(func(size uint64) error {
		if size == end {
			r.f.Truncate(int64(was))
		}
		return nil
	})
}

// give puts block i back in the queue, its magic cleared (readers skip it from now).
// While the queue holds free blocks enough (at least a quarter of the ring's first
// blocks: the recorder keeps up) the block goes back zeroed, its magic BlockZeroed, and
// the writer that takes it again writes its records at once; else its records are left
// and that writer zeroes it (trace version 4: the recorder's zeroing was 2 GB/s of its
// stores in a hot burst, which let it fall behind). A writer's zeroing, 64 KiB at once,
// is not hidden in its records' clock reads: ~2 ns a 32-byte record on a Zen 3 (issue 49).
func (r *Recorder) give(i uint64) {
	blk := r.block(i)
	atomic.StoreUint32(word32(blk, 0), 0)
	take := atomic.LoadUint64(r.u64(uint64(offRingTake)))
	give := atomic.LoadUint64(r.u64(uint64(offRingGive)))
	if give-take >= r.n0/4 && !r.over {
		clear(blk[4:])
		atomic.StoreUint32(word32(blk, 0), kprt.BlockZeroed)
	}
	r.blocks[i] = blockState{}
	r.push(i)
}

// push puts block i in the queue as its next entry (the runtime's ring_give: writers
// give blocks back too in overwrite mode).
func (r *Recorder) push(i uint64) {
	g := atomic.AddUint64(r.u64(uint64(offRingGive)), 1) - 1
	atomic.StoreUint64(r.u64(r.qoff+(g%r.n)*8), i|(g/r.n)<<32)
}

// Finish marks the ring finished (a program that starts writing now loses its
// records, counted) and closes the file. When no block is held, the pages of the ring
// and of the extents it grew by are given back to the file system: the file keeps its
// size, they read as zeros.
func (r *Recorder) Finish() error {
	r.endPopulate() // before the hole: a page populated after it would take a block again
	// done, and the extents' table read, under the file lock a runtime appends an extent
	// under (it looks at done there): an extent appended meanwhile (a runtime's thread
	// readies them ahead of its writers) is in the table read here, or never appended
	var exts []uint64
	done := func(uint64) error {
		fl := r.u32(uint64(offRingFlags))
		for {
			old := atomic.LoadUint32(fl)
			if atomic.CompareAndSwapUint32(fl, old, old|kprt.RingDone) {
				break
			}
		}
		exts = exts[:0]
		for k := range r.ext {
			if at := r.extentAt(uint64(k)); at != 0 {
				exts = append(exts, at)
			}
		}
		return nil
	}
	if r.atEnd(done) != nil {
		done(0) // (no lock: done all the same)
	}
	take := atomic.LoadUint64(r.u64(uint64(offRingTake)))
	give := atomic.LoadUint64(r.u64(uint64(offRingGive)))
	if give-take == r.grown() && r.err == nil && !r.over { // every block free: zero, copied out
		r.punch(kprt.TraceHeaderSize, r.n0*r.bs)
		for _, at := range exts {
			r.punch(at, r.e*r.bs)
		}
	}
	return r.close()
}

// punch gives the file's blocks in [off, off+n) back to the file system (they read as
// zeros).
func (r *Recorder) punch(off, n uint64) {
	syscall.Fallocate(int(r.f.Fd()), 0x1|0x2 /* KEEP_SIZE | PUNCH_HOLE */, int64(off), int64(n))
}

// trimReserve gives back the blocks reserved past the file's end, under the file lock
// (a writer appending an extent meanwhile would lose it to the size read before).
func (r *Recorder) trimReserve() {
	r.atEnd(func(size uint64) error { return r.f.Truncate(int64(size)) })
}

func (r *Recorder) close() error {
	if r.jobs != nil {
		r.collect(true)
		close(r.jobs)
		r.jobs = nil
	}
	r.trimReserve()
	if r.direct != nil {
		r.direct.Close()
		r.direct = nil
	}
	if r.want != nil {
		close(r.want)
		<-r.made
		r.want = nil
		r.takeSpare()
	}
	for _, b := range r.bufs {
		syscall.Munmap(b)
	}
	r.bufs, r.free = nil, nil
	r.endPopulate()
	if r.m != nil {
		// (records given back copied whose chunk a write error kept out of the file)
		r.stats.Lost = atomic.LoadUint64(r.u64(uint64(offLost))) + r.spilled - r.written
		r.stats.Overwritten = atomic.LoadUint64(r.u64(uint64(offOverwrite)))
		r.stats.Grown = (r.grown() - r.n0) * r.bs
		syscall.Munmap(r.m)
		r.m = nil
		for k, m := range r.ext {
			if m != nil {
				syscall.Munmap(m)
				r.ext[k] = nil
			}
		}
	}
	return r.f.Close()
}
