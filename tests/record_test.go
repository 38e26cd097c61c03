package tests

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/internal/recorder"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// recordSrc calls work(t, i) n times in each of THREADS threads (none: the main
// thread), then exits 7; with a fourth argument it aborts after its calls instead, or,
// with "env", writes over its environment's strings first (as setproctitle does).
const recordSrc = `
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
static long n;
static void *run(void *arg) {
	long t = (long)arg, s = 0;
	for (long i = 0; i < n; i++)
		s += work(t, i);
	return (void *)s;
}
extern char **environ;
int main(int argc, char **argv) {
	n = atol(argv[1]);
	int env = argc > 3 && argv[3][0] == 'e';
	for (char **e = environ; env && *e; e++)
		for (char *p = *e; *p; p++)
			*p = 'x';
	int threads = atoi(argv[2]);
	if (threads == 0) {
		run(0);
	} else {
		pthread_t th[16];
		for (long t = 0; t < threads; t++)
			pthread_create(&th[t], NULL, run, (void *)(t + 1));
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
	}
	printf("done %ld\n", n);
	fflush(stdout);
	if (argc > 3 && !env)
		abort();
	return 7;
}
`

const recordDef = "p:b/w work a=%di b=%si"

// recordProg builds and rewrites recordSrc.
func recordProg(t *testing.T) string {
	t.Helper()
	prog := testprog.Build(t, recordSrc, "c", "-O2", "-pthread")
	out := filepath.Join(t.TempDir(), "rec.kp")
	rewriteWith(t, prog, out, []string{recordDef})
	return out
}

// checkSequences checks that every thread (by its first argument a) wrote b = 0..n-1,
// each once: nothing lost, torn or twice. (In time order, not always in call order:
// the runtime's clock may step back by a fraction of a microsecond when it re-anchors
// on the kernel's, and trace orders records by time.)
func checkSequences(t *testing.T, lines []traceLine, threads []int, n int) {
	t.Helper()
	calls := map[int][]int64{}
	re := regexp.MustCompile(`^ a=0x([0-9a-f]+) b=0x([0-9a-f]+)$`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l.Args)
		if l.Event != "w" || m == nil {
			t.Fatalf("unexpected line %+v", l)
		}
		a, _ := strconv.ParseInt(m[1], 16, 64)
		b, _ := strconv.ParseInt(m[2], 16, 64)
		calls[int(a)] = append(calls[int(a)], b)
	}
	for _, a := range threads {
		bs := calls[a]
		slices.Sort(bs)
		if len(bs) != n {
			t.Errorf("thread a=%d: %d records, want %d", a, len(bs), n)
		}
		for i, b := range bs {
			if b != int64(i) {
				t.Errorf("thread a=%d: call %d missing or twice", a, i)
				break
			}
		}
	}
	if len(calls) != len(threads) {
		t.Errorf("records of %d threads, want %d", len(calls), len(threads))
	}
}

var recordSummary = regexp.MustCompile(`kprewrite record: (\d+) records \(.*\) written to .*?(?:, (\d+) lost)?\n`)

// TestRecord runs a rewritten program under kprewrite record: its exit status and
// output are its own, every record reaches the file (one thread, then four at once,
// whose sequences must be whole), and the records are the ones the program writes
// on its own trace file.
func TestRecord(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	dir := t.TempDir()
	const n = 200000
	for _, threads := range []int{0, 4} {
		file := filepath.Join(dir, fmt.Sprintf("t%d.trace", threads))
		code, stdout, stderr := kp("record", "-o", file, "--", prog, strconv.Itoa(n), strconv.Itoa(threads))
		if code != 7 || stdout != fmt.Sprintf("done %d\n", n) {
			t.Fatalf("record: exit %d, stdout %q, stderr %s", code, stdout, stderr)
		}
		total := n * max(threads, 1)
		m := recordSummary.FindStringSubmatch(stderr)
		if m == nil || m[1] != strconv.Itoa(total) || m[2] != "" {
			t.Errorf("record's summary %q, want %d records and none lost", stderr, total)
		}
		_, text, terr := kp("trace", file)
		if !strings.Contains(text, fmt.Sprintf("entries-in-buffer/entries-written: %d/%d\n", total, total)) || terr != "" {
			t.Errorf("trace header:\n%s\n%s", clip(text, 400), terr)
		}
		lines := readTrace(t, file)
		ids := []int{0}
		if threads > 0 {
			ids = []int{1, 2, 3, 4}
		}
		checkSequences(t, lines, ids, n)
		checkSpilled(t, file)
	}
	// the same records as the program writes on its own
	direct := filepath.Join(dir, "direct.trace")
	r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"1000", "0"}, Env: []string{"KPREWRITE_TRACE=" + direct}})
	if r.Exit != 7 {
		t.Fatalf("direct run: %s", r)
	}
	rec := filepath.Join(dir, "small.trace")
	if code, _, stderr := kp("record", "-q", "-o", rec, "--", prog, "1000", "0"); code != 7 || stderr != "" {
		t.Fatalf("record -q: exit %d: %q", code, stderr)
	}
	a, b := readTrace(t, direct), readTrace(t, rec)
	if len(a) != 1000 || len(a) != len(b) {
		t.Fatalf("%d records direct, %d recorded", len(a), len(b))
	}
	for i := range a {
		if a[i].EA() != b[i].EA() || a[i].Comm != b[i].Comm {
			t.Fatalf("record %d: direct %+v, recorded %+v", i, a[i], b[i])
		}
	}
}

// checkSpilled: the recorder gave the ring's finished blocks back once copied, before
// their chunks were written (the header's spilled counts their records), and the last
// chunk written carries that count as its mark: every one reached the file.
func checkSpilled(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var h kprt.RawTraceHeader
	if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &h); err != nil {
		t.Fatal(err)
	}
	if h.Spilled == 0 || h.ChunkLast == 0 || h.ChunkLast+kprt.ChunkSize > uint64(len(b)) {
		t.Fatalf("%s: spilled %d, last chunk at %d of %d bytes", file, h.Spilled, h.ChunkLast, len(b))
	}
	if mark := binary.LittleEndian.Uint32(b[h.ChunkLast+28:]); mark != uint32(h.Spilled) {
		t.Errorf("%s: %d records spilled, the last chunk's mark %d", file, h.Spilled, mark)
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// TestRecordCompact: an event with two u64 fetchargs takes 32 bytes in the trace.
func TestRecordCompact(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "c.trace")
	if r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"5000", "0"}, Env: []string{"KPREWRITE_TRACE=" + file}}); r.Exit != 7 {
		t.Fatal(r)
	}
	s, _, err := tracefile.OpenStream(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	s.Each(func(r *tracefile.Record) error {
		if r.Size != 32 || len(r.Data) != 16 {
			t.Fatalf("record of %d bytes with %d of data, want 32 and 16", r.Size, len(r.Data))
		}
		n++
		return nil
	})
	if n != 5000 {
		t.Errorf("%d records", n)
	}
}

// TestRecordDrainStopped: a recorder that stops draining (stopped, or too slow) costs
// records, never the program, and every record is either in the file or counted as
// lost: the four threads' records and the lost count add up exactly. The ring may
// not grow here (RingMax: its size), or grows to 2 MiB and no further: the records it
// could not hold are lost, counted, and the reader finds those of the grown blocks.
func TestRecordDrainStopped(t *testing.T) {
	for _, max := range []uint64{1 << 20, 2 << 20} {
		t.Run(fmt.Sprint(max>>20, "M"), func(t *testing.T) {
			st := drainStopped(t, 50000, 4, max)
			if want := max - 1<<20; st.Lost == 0 || st.Grown != want {
				t.Errorf("the ring grew by %d bytes, want %d; %d lost, want some", st.Grown, want, st.Lost)
			}
		})
	}
}

// TestRecordRingGrows: a recorder that does not drain while the program runs, with a
// ring of 1 MiB that may grow to 16 MiB: the program's 6.4 MB of records all wait in
// the blocks its writers took when the queue ran empty, none lost (issue 49).
func TestRecordRingGrows(t *testing.T) {
	st := drainStopped(t, 50000, 4, 16<<20)
	if st.Lost != 0 || st.Grown < 5<<20 || st.Grown > 15<<20 {
		t.Errorf("%d lost, the ring grew by %d bytes: want none lost, 5-15 MiB grown", st.Lost, st.Grown)
	}
}

// TestRecordRingGrownReused: the blocks a ring grew by, in extents one program's writers
// appended to the file, are given back by the recorder and taken by the next program,
// which maps them from the file: two runs of 200,000 records each, under a recorder
// that drains only between them, lose none. The recorder gives blocks back unzeroed: a
// writer that took one again without zeroing it would leave the first run's records
// after its own, read twice.
func TestRecordRingGrownReused(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "g.trace")
	rec, err := recorder.Create(file, recorder.Options{BufferSize: 1 << 20, BlockSize: 8 << 10, RingMax: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const n, threads = 50000, 4
	var grown []uint64
	for run := 0; run < 2; run++ {
		r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{strconv.Itoa(n), strconv.Itoa(threads)}, Env: []string{"KPREWRITE_TRACE=" + file}})
		if r.Exit != 7 || r.Stdout != fmt.Sprintf("done %d\n", n) {
			t.Fatalf("run %d: %s", run, r)
		}
		rec.Drain(true, false)
		grown = append(grown, ringGrown(t, file))
	}
	st, s := finishOpen(t, rec, file)
	if s.Count != 2*n*threads || s.Lost != 0 || s.Torn != 0 || st.Records != 2*n*threads {
		t.Errorf("%d records in the file, %d lost, %d torn (recorder: %d copied); want %d, none lost", s.Count, s.Lost, s.Torn, st.Records, 2*n*threads)
	}
	// the first run grew the ring, the second took the blocks it grew by from the queue
	// (a run that could not would have grown it as much again)
	if n0 := uint64(1 << 20 / (8 << 10)); grown[0] <= n0 || grown[1]-n0 > (grown[0]-n0)*3/2 {
		t.Errorf("blocks in use after each run: %d, want more than %d after the first, and not half as many again after the second", grown, n0)
	}
}

// finishOpen finishes rec's recording into file and opens the trace (closed at the
// test's end): the recorder's counts and the reader's.
func finishOpen(t *testing.T, rec *recorder.Recorder, file string) (recorder.Stats, *tracefile.Stream) {
	t.Helper()
	if err := rec.Finish(); err != nil {
		t.Fatal(err)
	}
	s, _, err := tracefile.OpenStream(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return rec.Stats(), s
}

// ringGrown is the header's count of a ring's blocks in use.
func ringGrown(t *testing.T, file string) uint64 {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h kprt.RawTraceHeader
	if err := binary.Read(f, binary.LittleEndian, &h); err != nil {
		t.Fatal(err)
	}
	return h.RingGrown
}

// TestRecordRingGrowsEnvGone: a program that writes over its environment (setproctitle:
// nginx, postgres), where KPREWRITE_TRACE's value was, still grows its ring: the
// runtime appends extents to the file by the path it copied when it opened the file. A
// static program: its runtime starts from the entry point and reads the environment
// where the kernel put it (a dynamic one's reads a copy of /proc/self/environ).
func TestRecordRingGrowsEnvGone(t *testing.T) {
	testprog.Need(t, "gcc")
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libc.a"); err != nil {
		t.Skip("no static libc (libc6-dev's libc.a)")
	}
	bin := testprog.Build(t, recordSrc, "c", "-O2", "-pthread", "-static")
	prog := filepath.Join(t.TempDir(), "static.kp")
	rewriteWith(t, bin, prog, []string{recordDef})
	st := drainStoppedProg(t, prog, 50000, 4, 16<<20, "env")
	if st.Lost != 0 || st.Grown < 5<<20 {
		t.Errorf("%d lost, the ring grew by %d bytes: want none lost, 5 MiB or more grown", st.Lost, st.Grown)
	}
}

// TestRecordRingFull: four threads outrun a recorder whose ring (256 KiB of 8 KiB
// blocks) may grow to 512 KiB only, while it drains: records may be lost, counted, and
// every other one is in the file once; no block is handed to two writers (a queue
// entry not yet filled read as block 0 once, and a block's records went missing).
func TestRecordRingFull(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "f.trace")
	const n, threads = 200000, 4
	code, stdout, stderr := kp("record", "--buffer-size", "256K", "--buffer-max", "512K", "--block-size", "8K", "-o", file, "--", prog, strconv.Itoa(n), strconv.Itoa(threads))
	if code != 7 || stdout != fmt.Sprintf("done %d\n", n) {
		t.Fatalf("record: exit %d, stdout %q: %s", code, stdout, stderr)
	}
	s, _, err := tracefile.OpenStream(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if uint64(s.Count)+s.Lost != n*threads || s.Torn != 0 {
		t.Fatalf("%d records + %d lost, %d torn, want %d in all", s.Count, s.Lost, s.Torn, n*threads)
	}
	seen := map[[2]int64]bool{}
	re := regexp.MustCompile(`^ a=0x([0-9a-f]+) b=0x([0-9a-f]+)$`)
	for _, l := range readTrace(t, file) {
		m := re.FindStringSubmatch(l.Args)
		if m == nil {
			t.Fatalf("unexpected line %+v", l)
		}
		a, _ := strconv.ParseInt(m[1], 16, 64)
		b, _ := strconv.ParseInt(m[2], 16, 64)
		if k := [2]int64{a, b}; a < 1 || a > threads || b >= n || seen[k] {
			t.Fatalf("record a=%d b=%d: not the program's, or twice", a, b)
		} else {
			seen[k] = true
		}
	}
	t.Logf("%d records, %d lost: %s", s.Count, s.Lost, stderr)
}

// drainStopped runs recordProg's n calls in each of threads threads into a ring of 1
// MiB in 8 KiB blocks that may grow to max bytes, and drains it only once they are
// done; every record is in the file or counted as lost, none torn, and the recorder
// copied what the file holds.
func drainStopped(t *testing.T, n, threads int, max uint64) recorder.Stats {
	t.Helper()
	testprog.Need(t, "gcc")
	return drainStoppedProg(t, recordProg(t), n, threads, max)
}

// drainStoppedProg is drainStopped of prog, a rewrite of recordSrc, given extra arguments.
func drainStoppedProg(t *testing.T, prog string, n, threads int, max uint64, extra ...string) recorder.Stats {
	t.Helper()
	file := filepath.Join(t.TempDir(), "s.trace")
	rec, err := recorder.Create(file, recorder.Options{BufferSize: 1 << 20, BlockSize: 8 << 10, RingMax: max})
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{strconv.Itoa(n), strconv.Itoa(threads)}, extra...)
	r := testprog.Run(t, testprog.Cmd{Path: prog, Args: args, Env: []string{"KPREWRITE_TRACE=" + file}})
	if r.Exit != 7 || r.Stdout != fmt.Sprintf("done %d\n", n) {
		t.Fatalf("program under a stopped recorder: %s", r)
	}
	rec.Drain(true, false)
	st, s := finishOpen(t, rec, file)
	if uint64(s.Count)+s.Lost != uint64(n*threads) || s.Torn != 0 || st.Records != uint64(s.Count) || st.Lost != s.Lost {
		t.Errorf("%d records in the file + %d lost (recorder: %d copied, %d lost), %d torn; want %d in all",
			s.Count, s.Lost, st.Records, st.Lost, s.Torn, n*threads)
	}
	return st
}

// TestRecordKilled: kprewrite record killed with SIGKILL while the program runs: the
// program goes on to its usual end, and the file holds what was copied and what the
// ring still holds (grown by extents), the rest counted as lost: nothing twice, nothing
// torn.
func TestRecordKilled(t *testing.T) {
	testprog.Need(t, "gcc", "go")
	prog := recordProg(t)
	dir := t.TempDir()
	bin := buildKprewrite(t, dir)
	file := filepath.Join(dir, "k.trace")
	out := filepath.Join(dir, "out")
	// the program waits for the recorder's death: it starts its calls once the file
	// exists, and records go on after the kill
	const n, threads = 400000, 2
	cmd := exec.Command(bin, "record", "-q", "--buffer-size", "1M", "--block-size", "8K", "-o", file, "--",
		"sh", "-c", `: > "$1.started"; while [ ! -e "$1.go" ]; do sleep 0.01; done; exec "$2" "$3" "$4" > "$5"`, "sh", file, prog,
		strconv.Itoa(n), strconv.Itoa(threads), out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3000; i++ { // the recorder has started the program
		if _, err := os.Stat(file + ".started"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	os.WriteFile(file+".go", nil, 0o644)
	for i := 0; i < 3000; i++ { // the program, orphaned, ends on its own
		if b, _ := os.ReadFile(out); string(b) == fmt.Sprintf("done %d\n", n) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b, _ := os.ReadFile(out); string(b) != fmt.Sprintf("done %d\n", n) {
		t.Fatalf("the program's output after the recorder was killed: %q", b)
	}
	time.Sleep(100 * time.Millisecond) // its exit
	s, _, err := tracefile.OpenStream(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if uint64(s.Count)+s.Lost != n*threads || s.Torn != 0 || s.Count == 0 {
		t.Errorf("%d records + %d lost, %d torn, want %d in all", s.Count, s.Lost, s.Torn, n*threads)
	}
	// with no recorder the ring (1 MiB) grew by the extents its writers appended to the
	// file (to 16 MiB), and the reader found their records there: more than the ring holds
	if s.Count < 2<<20/32 {
		t.Errorf("%d records: want more than the 1 MiB ring holds, from the extents it grew by", s.Count)
	}
	_, text, _ := kp("trace", file)
	if !strings.Contains(text, fmt.Sprintf("# lost: %d records", s.Lost)) {
		t.Errorf("trace does not say how many were lost:\n%s", clip(text, 300))
	}
}

// TestRecordCrash: the recorded program aborts: record's status is the signal's
// (128+6, as a shell says) and every record it wrote is in the file.
func TestRecordCrash(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "a.trace")
	code, _, stderr := kp("record", "-q", "-o", file, "--", prog, "30000", "0", "abort")
	if code != 128+6 {
		t.Fatalf("record of an aborting program: exit %d: %s", code, stderr)
	}
	checkSequences(t, readTrace(t, file), []int{0}, 30000)
}

// TestRecordOverwrite: --overwrite keeps the most recent records: the last calls are
// all there, the first are not, and what is kept of the thread is one unbroken
// stretch of its calls up to the last.
func TestRecordOverwrite(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "o.trace")
	const n = 300000
	code, _, stderr := kp("record", "-q", "--overwrite", "--buffer-size", "1M", "--block-size", "8K", "-o", file, "--", prog, strconv.Itoa(n), "0")
	if code != 7 {
		t.Fatalf("record --overwrite: exit %d: %s", code, stderr)
	}
	lines := readTrace(t, file)
	if len(lines) == 0 || len(lines) >= n {
		t.Fatalf("%d records kept of %d", len(lines), n)
	}
	re := regexp.MustCompile(`b=0x([0-9a-f]+)$`)
	var bs []int64
	for _, l := range lines {
		m := re.FindStringSubmatch(l.Args)
		if m == nil {
			t.Fatalf("line %+v", l)
		}
		b, _ := strconv.ParseInt(m[1], 16, 64)
		bs = append(bs, b)
	}
	slices.Sort(bs) // time order is not always call order (checkSequences)
	if bs[len(bs)-1] != n-1 {
		t.Errorf("the last record kept is call %d, want %d", bs[len(bs)-1], n-1)
	}
	for i := 1; i < len(bs); i++ {
		if bs[i] != bs[i-1]+1 {
			t.Fatalf("calls %d then %d: the kept records are not the most recent stretch", bs[i-1], bs[i])
		}
	}
	// at least half the ring's worth: 1 MiB of 32-byte records
	if len(bs) < (1<<20)/32/2 {
		t.Errorf("only %d records kept", len(bs))
	}
}

// TestRecordLive: record --live prints every record while the program runs, the same
// lines trace prints afterwards.
func TestRecordLive(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	file := filepath.Join(t.TempDir(), "l.trace")
	code, stdout, stderr := kp("record", "-q", "--live", "-o", file, "--", prog, "20000", "2")
	if code != 7 {
		t.Fatalf("record --live: exit %d: %s", code, stderr)
	}
	var live []string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.Contains(l, " w: ") {
			live = append(live, l)
		}
	}
	_, text, _ := kp("trace", "--no-header", file)
	after := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(live) != 40000 || len(after) != 40000 {
		t.Fatalf("%d lines live, %d after", len(live), len(after))
	}
	seen := map[string]int{}
	for _, l := range live {
		seen[l]++
	}
	for _, l := range after {
		if seen[l]--; seen[l] < 0 {
			t.Fatalf("line %q not printed live (or twice after)", l)
		}
	}
}

// TestRecordFullDisk: the file system fills up while record copies: the program
// finishes as usual, the file keeps what was written, and trace says how many
// records were lost.
func TestRecordFullDisk(t *testing.T) {
	testprog.Need(t, "gcc")
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	prog := recordProg(t)
	small := filepath.Join(t.TempDir(), "small")
	os.Mkdir(small, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", small).Run() })
	file := filepath.Join(small, "f.trace")
	// 1M records are 32 MB: more than the file system holds beside the 4 MiB ring
	const n = 1000000
	code, stdout, stderr := kp("record", "--buffer-size", "4M", "--block-size", "8K", "-o", file, "--", prog, strconv.Itoa(n), "0")
	if code != 7 || stdout != fmt.Sprintf("done %d\n", n) {
		t.Fatalf("record on a full disk: exit %d, stdout %q: %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "no space left on device") {
		t.Errorf("record does not say the disk is full: %s", stderr)
	}
	s, _, err := tracefile.OpenStream(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Count == 0 || s.Lost == 0 || uint64(s.Count)+s.Lost != n {
		t.Errorf("%d records + %d lost, want %d in all", s.Count, s.Lost, n)
	}
}

// aheadSrc calls work() n times on one thread and, every 10,000 calls, looks at the
// minor faults of the runtime's thread named kprw-ahead (it ends 50 ms after the last
// request, so it may be gone by the end); then prints the most it saw ("ahead none"
// without one): the pages it made.
const aheadSrc = `
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
static long ahead_faults(long faults) {
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[64], buf[512];
	while (d && (e = readdir(d))) {
		snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t k = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[k] = 0;
		char *end = strrchr(buf, ')');
		long now = -1;
		if (!strstr(buf, "(kprw-ahead)") || !end)
			continue;
		/* after the comm: state ppid pgrp session tty tpgid flags minflt */
		sscanf(end + 2, "%*c %*d %*d %*d %*d %*d %*u %ld", &now);
		faults = now > faults ? now : faults;
	}
	if (d)
		closedir(d);
	return faults;
}
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = 0, faults = -1;
	for (long i = 0; i < n; i++) {
		s += work(1, i);
		if (i % 10000 == 9999)
			faults = ahead_faults(faults);
	}
	faults = ahead_faults(faults);
	if (faults < 0)
		printf("ahead none %ld\n", s & 1);
	else
		printf("ahead %ld\n", faults);
	return 7;
}
`

// TestRecordRingGrowsAhead: while the recorder does not drain, a program's writer takes
// the ring's blocks until the queue runs low, and from then on the process's runtime
// thread (kprw-ahead) appends the extents the ring grows by and makes their pages ahead
// of the writer's claims (a grown block's pages are new memory: ~5 ms a 2 MiB page on
// this VM, which the writer paid, issue 49): the thread made pages, and every one of the
// 1,000,000 records is in the file.
func TestRecordRingGrowsAhead(t *testing.T) {
	testprog.Need(t, "gcc")
	bin := testprog.Build(t, aheadSrc, "c", "-O2")
	prog := filepath.Join(t.TempDir(), "ahead.kp")
	rewriteWith(t, bin, prog, []string{recordDef})
	file := filepath.Join(t.TempDir(), "a.trace")
	rec, err := recorder.Create(file, recorder.Options{BufferSize: 1 << 20, RingMax: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000000
	r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{strconv.Itoa(n)}, Env: []string{"KPREWRITE_TRACE=" + file}})
	var faults int
	if _, err := fmt.Sscanf(r.Stdout, "ahead %d\n", &faults); r.Exit != 7 || err != nil || faults <= 0 {
		t.Fatalf("want the kprw-ahead thread to have made pages: %s", r)
	}
	rec.Drain(true, false)
	st, s := finishOpen(t, rec, file)
	if s.Count != n || s.Lost != 0 || s.Torn != 0 || st.Grown < 16<<20 {
		t.Errorf("%d records in the file, %d lost, %d torn, the ring grew by %d bytes; want %d, none lost, 16 MiB or more grown", s.Count, s.Lost, s.Torn, st.Grown, n)
	}
	t.Logf("the ring grew by %d bytes; the thread's minor faults: %d", st.Grown, faults)
}

// TestRecordNoBurstNoThread: a program that never outruns its recorder gets no runtime
// thread (kprw-ahead starts at the ring's first growth need: a process with one more
// thread cannot unshare(CLONE_NEWUSER)), nor one whose 1,000 records fit in the chunks
// its own trace file was opened with; the recorder's file is of format 4, a file the
// program writes alone of format 3 (the same records, which older readers take).
func TestRecordNoBurstNoThread(t *testing.T) {
	testprog.Need(t, "gcc")
	bin := testprog.Build(t, aheadSrc, "c", "-O2")
	dir := t.TempDir()
	prog := filepath.Join(dir, "ahead.kp")
	rewriteWith(t, bin, prog, []string{recordDef})
	file := filepath.Join(dir, "n.trace")
	code, stdout, stderr := kp("record", "-q", "-o", file, "--", prog, "1000")
	if code != 7 || !strings.HasPrefix(stdout, "ahead none") {
		t.Fatalf("record: exit %d, stdout %q (want no kprw-ahead thread): %s", code, stdout, stderr)
	}
	direct := filepath.Join(dir, "d.trace")
	if r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{"1000"}, Env: []string{"KPREWRITE_TRACE=" + direct}}); r.Exit != 7 || !strings.HasPrefix(r.Stdout, "ahead none") {
		t.Fatalf("run directly: %s (want no kprw-ahead thread)", r)
	}
	for f, want := range map[string]uint32{file: kprt.TraceVersion, direct: kprt.TraceVersionDirect} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h kprt.RawTraceHeader
		if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &h); err != nil || h.Version != want {
			t.Errorf("%s: version %d (%v), want %d", f, h.Version, err, want)
		}
		if s := readTrace(t, f); len(s) != 1000 {
			t.Errorf("%s: %d records, want 1000", f, len(s))
		}
	}
}

// threadsC is a C function for the test programs: the threads of the process
const threadsC = `#include <dirent.h>
static int threads(void) {
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}
`

const unshareSrc = `
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
` + threadsC + `/* argv[1] calls of work() in each of argv[2] bursts (default 1); the most threads seen
 * every 1,000 calls; after each burst, waits (at most 10 s) until the process is
 * single-threaded again; then unshare(CLONE_NEWUSER) */
int main(int argc, char **argv) {
	long n = atol(argv[1]), bursts = argc > 2 ? atol(argv[2]) : 1, s = 0;
	for (long b = 0; b < bursts; b++) {
		int most = threads();
		for (long i = 0; i < n; i++) {
			s += work(1, i);
			if (i % 1000 == 999) {
				int t = threads();
				most = t > most ? t : most;
			}
		}
		struct timespec ms = {0, 10000000};
		for (int k = 0; k < 1000 && threads() > 1; k++)
			nanosleep(&ms, 0);
		printf("burst %d ", most);
	}
	int t = threads(), r = unshare(CLONE_NEWUSER);
	printf("threads %d unshare %s %ld\n", t, r ? strerror(errno) : "ok", s & 1);
	return 0;
}
`

// TestDirectRunUnshareUserNS: a rewritten program run directly keeps its threads its
// own while its records fit in the chunks its trace file was opened with, so that it
// can still unshare(CLONE_NEWUSER) or setns into a user namespace (both refuse a
// process with more than one thread: container launchers and sandboxes do this); the
// runtime's thread that readies the file ahead of the writers starts when a run records
// more and ends once nothing was asked of it for 50 ms, so after a burst the program is
// single-threaded again and unshare works; the next burst starts the thread again; every
// record is kept either way. Under record the same program keeps one thread.
func TestDirectRunUnshareUserNS(t *testing.T) {
	testprog.Need(t, "gcc")
	bin := testprog.Build(t, unshareSrc, "c", "-O2")
	if r := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{"10"}}); r.Exit != 0 || !strings.HasPrefix(r.Stdout, "burst 1 threads 1 unshare ok") {
		t.Skipf("unshare(CLONE_NEWUSER) is refused here to the program itself: %s", r)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "unshare.kp")
	rewriteWith(t, bin, prog, []string{recordDef})
	for _, c := range []struct {
		n, bursts int
		want      string
	}{
		{1000, 1, "burst 1 threads 1 unshare ok"},
		// the thread in each burst, gone after it
		{100000, 3, "burst 2 burst 2 burst 2 threads 1 unshare ok"},
	} {
		file := filepath.Join(dir, fmt.Sprintf("d%d.trace", c.n))
		r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{fmt.Sprint(c.n), fmt.Sprint(c.bursts)}, Env: []string{"KPREWRITE_TRACE=" + file}})
		if r.Exit != 0 || !strings.HasPrefix(r.Stdout, c.want) {
			t.Errorf("%d records %d times, run directly: %s, want %q first", c.n, c.bursts, r, c.want)
		}
		if s := readTrace(t, file); len(s) != c.n*c.bursts {
			t.Errorf("%d records %d times, run directly: %d in the trace", c.n, c.bursts, len(s))
		}
	}
	file := filepath.Join(dir, "r.trace")
	code, stdout, stderr := kp("record", "-q", "-o", file, "--", prog, "1000")
	if code != 0 || !strings.HasPrefix(stdout, "burst 1 threads 1 unshare ok") {
		t.Errorf("record: exit %d, stdout %q: %s", code, stdout, stderr)
	}
}

// seccompSrc installs a seccomp filter that kills the process at any clone or clone3
// (a sandbox's), or with argv[2] "refuse" one that refuses (EPERM) clone, clone3,
// madvise, ftruncate, fallocate, flock and prctl, then calls work() argv[1] times
const seccompSrc = `
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
int main(int argc, char **argv) {
	int refuse = argc > 2 && strcmp(argv[2], "refuse") == 0;
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 7, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 6, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refuse ? SYS_madvise : SYS_clone, 5, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refuse ? SYS_ftruncate : SYS_clone, 4, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refuse ? SYS_fallocate : SYS_clone, 3, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refuse ? SYS_flock : SYS_clone, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refuse ? SYS_prctl : SYS_clone, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, refuse ? SECCOMP_RET_ERRNO | EPERM : SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		perror("seccomp");
		return 2;
	}
	long n = atol(argv[1]), s = 0;
	for (long i = 0; i < n; i++)
		s += work(1, i);
	printf("done %ld\n", s);
	return 0;
}
`

// allowSrc runs argv[1] under a seccomp filter that allows everything (a container's)
const allowSrc = `
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(int argc, char **argv) {
	struct sock_filter f[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
	struct sock_fprog prog = {1, f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		perror("seccomp");
		return 2;
	}
	execv(argv[1], argv + 1);
	perror(argv[1]);
	return 3;
}
`

// TestDirectRunUnderSeccomp: a program that puts itself under a seccomp filter that
// kills it at a clone (sandboxes forbid new threads) records 200,000 events directly:
// the runtime starts no thread to ready the trace file (its writers do it themselves),
// the program ends normally, and every record is kept; so with a filter that refuses
// (EPERM) every call the runtime would ready, grow or lock the file with or start its
// thread with (its pages then fault in as written). A program started under a filter
// (a container's, which allows threads) gets the thread as before.
func TestDirectRunUnderSeccomp(t *testing.T) {
	testprog.Need(t, "gcc")
	bin := testprog.Build(t, seccompSrc, "c", "-O2")
	dir := t.TempDir()
	prog := filepath.Join(dir, "seccomp.kp")
	rewriteWith(t, bin, prog, []string{recordDef})
	const n = 200000
	file := filepath.Join(dir, "s.trace")
	r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{strconv.Itoa(n)}, Env: []string{"KPREWRITE_TRACE=" + file}})
	if want := fmt.Sprintf("done %d\n", n+n*(n-1)/2); r.Exit != 0 || r.Stdout != want {
		t.Fatalf("run directly under a seccomp filter: %s, want exit 0 and %q", r, want)
	}
	if s := readTrace(t, file); len(s) != n {
		t.Errorf("%d records in the trace, want %d", len(s), n)
	}
	// a filter that refuses what the runtime would ready the file with (madvise), grow
	// it with or start its thread with: the pages fault in as written, every record kept
	// (a refused madvise read as a full disk: 6,264 of 200,000 kept)
	file = filepath.Join(dir, "refused.trace")
	r = testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{strconv.Itoa(n), "refuse"}, Env: []string{"KPREWRITE_TRACE=" + file}})
	if want := fmt.Sprintf("done %d\n", n+n*(n-1)/2); r.Exit != 0 || r.Stdout != want || strings.Contains(r.Stderr, "lost") {
		t.Fatalf("run directly under a filter that refuses madvise, ftruncate, fallocate, flock, prctl and clone: %s, want exit 0, %q and no loss said", r, want)
	}
	if s := readTrace(t, file); len(s) != n {
		t.Errorf("under a refusing filter: %d records in the trace, want %d", len(s), n)
	}
	wrap := testprog.Build(t, allowSrc, "c", "-O2")
	ahead := filepath.Join(dir, "ahead.kp")
	rewriteWith(t, testprog.Build(t, aheadSrc, "c", "-O2"), ahead, []string{recordDef})
	file = filepath.Join(dir, "a.trace")
	r = testprog.Run(t, testprog.Cmd{Path: wrap, Args: []string{ahead, strconv.Itoa(n)}, Env: []string{"KPREWRITE_TRACE=" + file}})
	if r.Exit != 7 || !strings.HasPrefix(r.Stdout, "ahead ") || strings.HasPrefix(r.Stdout, "ahead none") {
		t.Errorf("started under a filter that allows threads: %s, want the kprw-ahead thread seen", r)
	}
	if s := readTrace(t, file); len(s) != n {
		t.Errorf("started under a filter: %d records in the trace, want %d", len(s), n)
	}
}

// forkBurstSrc: a burst of argv[1] calls of work(), 100 ms idle (the runtime's readying
// thread ends), a fork whose child bursts as many and exits, then the parent's second
// burst (its thread starts again: the most threads it saw); waits (at most 10 s) for
// one thread and prints the threads then
const forkBurstSrc = `
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a, long b) { __asm__ volatile(""); return a + b; }
` + threadsC + `static int most; /* the most threads a burst saw, every 1,000 calls */
static long burst(long n) {
	long s = 0;
	most = 0;
	for (long i = 0; i < n; i++) {
		s += work(1, i);
		if (i % 1000 == 999 && threads() > most)
			most = threads();
	}
	return s;
}
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = burst(n);
	usleep(100000);
	pid_t p = fork();
	if (p == 0)
		_exit(burst(n) == 1);
	int st = 0;
	waitpid(p, &st, 0);
	s += burst(n);
	int t = threads();
	for (int k = 0; k < 1000 && t > 1; k++) {
		usleep(10000);
		t = threads();
	}
	printf("child %d second burst %d threads %d %ld\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1, most, t, s & 1);
	return 0;
}
`

// TestDirectRunBurstsAroundFork: the readying thread of a program run directly ends
// after a burst, a fork child (which has none of its parent's threads) readies its own
// chunks for its burst, and the parent's next burst starts the thread again: all three
// bursts' records are in the trace, and the parent ends single-threaded.
func TestDirectRunBurstsAroundFork(t *testing.T) {
	testprog.Need(t, "gcc")
	bin := testprog.Build(t, forkBurstSrc, "c", "-O2")
	dir := t.TempDir()
	prog := filepath.Join(dir, "fork.kp")
	rewriteWith(t, bin, prog, []string{recordDef})
	const n = 300000 // 9.6 MB a burst: past what the thread readied ahead of the first
	file := filepath.Join(dir, "f.trace")
	r := testprog.Run(t, testprog.Cmd{Path: prog, Args: []string{strconv.Itoa(n)}, Env: []string{"KPREWRITE_TRACE=" + file}})
	if r.Exit != 0 || !strings.HasPrefix(r.Stdout, "child 0 second burst 2 threads 1 ") {
		t.Fatalf("bursts around a fork, run directly: %s, want the child's exit 0, the thread in the second burst and one thread at the end", r)
	}
	if s := readTrace(t, file); len(s) != 3*n {
		t.Errorf("%d records in the trace, want %d (three bursts)", len(s), 3*n)
	}
}
