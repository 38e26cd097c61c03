package tests

// Events at sites no rewrite prepared (issue 46): `kprewrite probe` runs the analysis
// on the rewritten binary and places a boosted, single-stepped or emulated int3 at a
// free live point of a live-capable image, while the program runs.

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/internal/tracectl"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// liveFreeSrc is livePhasedSrc with work() of several instructions and other(), and
// a prepare() the live-capable rewrite prepares (nothing else is).
const liveFreeSrc = `#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a, long b) { long r = a * 3 + b; if (r & 1) r += a << 2; return r ^ (b * 7); }
__attribute__((noinline)) long other(long a) { return a + 1; }
__attribute__((noinline)) long prepare(long a) { return a - 1; }
int main(void) {
	static const int calls[] = {0, 100, 50, 25};
	long s = 0;
	char c;
	for (int phase = 0; phase < 4; phase++) {
		for (int i = 0; i < calls[phase]; i++)
			s += work(i, phase) + other(i);
		printf("phase %d\n", phase);
		fflush(stdout);
		if (read(0, &c, 1) != 1)
			return 2;
	}
	printf("sum %ld\n", prepare(s));
	return 0;
}
`

// eachInsn decodes function fn of the ELF file at path from its start, calling each
// with an instruction's offset in fn, the instruction and fn's code from its start,
// until each says stop.
func eachInsn(t *testing.T, path, fn string, each func(off uint64, in x86dec.Inst, code []byte) bool) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr, _ := siteOf(t, path, fn)
	text := f.Section(".text")
	code, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	code = code[addr-text.Addr:]
	for off := uint64(0); ; {
		in, err := x86dec.Decode(code[off:], addr+off)
		if err != nil {
			t.Fatal(err)
		}
		if !each(off, in, code) {
			return
		}
		off += uint64(in.Len)
	}
}

// secondInsn is the offset in function fn of the ELF file at path of its second
// instruction, and that instruction's first byte.
func secondInsn(t *testing.T, path, fn string) (uint64, byte) {
	t.Helper()
	var off uint64
	var b byte
	eachInsn(t, path, fn, func(o uint64, in x86dec.Inst, code []byte) bool {
		off, b = uint64(in.Len), code[in.Len]
		return false
	})
	return off, b
}

// retOffset is the offset of the first ret in function fn of the ELF file at path.
func retOffset(t *testing.T, path, fn string) uint64 {
	t.Helper()
	at := ^uint64(0)
	eachInsn(t, path, fn, func(off uint64, in x86dec.Inst, _ []byte) bool {
		if in.Kind == x86dec.KindRet {
			at = off
		}
		return at == ^uint64(0) && off < 256
	})
	if at == ^uint64(0) {
		t.Fatalf("%s: no ret in %s", path, fn)
	}
	return at
}

// TestLiveProbeUnprepared: events added to a running program at an instruction in the
// middle of a function (boosted), at its ret (emulated) and at another function's
// entry, none prepared, record what the same definitions given at rewrite time
// record; removing them puts the original bytes back; a site the analysis refuses is
// an error that changes nothing.
func TestLiveProbeUnprepared(t *testing.T) {
	prog := testprog.Build(t, liveFreeSrc, "c", "-O2")
	n, midOrig := secondInsn(t, prog, "work")
	ret := retOffset(t, prog, "work")
	defs := []string{fmt.Sprintf("p:t/m work+%d a=%%di:s64 b=%%si:s64", n), "p:t/o other a=%di:s64",
		fmt.Sprintf("p:t/x work+%d r=%%ax:s64", ret)}
	dir := t.TempDir()

	// the same definitions given at rewrite time: the records to match
	ref := filepath.Join(dir, "ref.kp")
	rewriteWith(t, prog, ref, defs, "--no-optimize")
	p := startPhased(t, ref)
	defer p.cmd.Process.Kill()
	for phase := 0; phase < 4; phase++ {
		if phase > 0 {
			p.next(t, phase)
		} else {
			p.step(t, 0)
		}
	}
	p.finish(t, "sum 39300")
	want := readTrace(t, ref+".trace", ref)

	bin := filepath.Join(dir, "live.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare")
	workAddr, _ := siteOf(t, prog, "work")
	otherAddr, otherOrig := siteOf(t, prog, "other")
	q := startPhased(t, bin)
	defer q.cmd.Process.Kill()
	pid := q.cmd.Process.Pid
	q.step(t, 0)
	code, _, stderr := kp("probe", fmt.Sprint(pid), "p:t/z work+1 a=%di")
	if code != 1 || !strings.Contains(stderr, "not-boundary") || !strings.Contains(stderr, "work+0x1") {
		t.Fatalf("an event inside an instruction: exit %d, %q; want 1 and the analysis's refusal (not-boundary at work+0x1)", code, stderr)
	}
	if out := kpOK(t, "probe", tr); out != "" {
		t.Fatalf("after a refused event the file lists %q, want nothing added", out)
	}
	kpOK(t, append([]string{"probe", fmt.Sprint(pid)}, defs...)...)
	waitByte(t, pid, bin, workAddr+n, 0xcc)
	waitByte(t, pid, bin, otherAddr, 0xcc)
	if out := kpOK(t, "list", tr); strings.Count(out, "[LIVE]") != 3 || !strings.Contains(out, fmt.Sprintf("work+%#x", n)) || !strings.Contains(out, "other+0x0") {
		t.Fatalf("list %s: %q, want t/m at work+%#x, t/x at its ret and t/o at other, [LIVE]", tr, out, n)
	}
	q.next(t, 1) // 100 calls of each
	kpOK(t, "probe", tr, "-:t/m", "-:t/o", "-:t/x")
	if b := memByte(t, pid, bin, workAddr+n); b != midOrig {
		t.Errorf("t/m removed: work+%d holds %#x, want the original %#x", n, b, midOrig)
	}
	if b := memByte(t, pid, bin, otherAddr); b != otherOrig {
		t.Errorf("t/o removed: other holds %#x, want the original %#x", b, otherOrig)
	}
	q.next(t, 2)
	q.next(t, 3)
	q.finish(t, "sum 39300")
	compareLiveFree(t, readTrace(t, tr, bin), want, map[string]uint64{"m": workAddr + n, "o": otherAddr, "x": workAddr + ret})
}

// compareLiveFree checks the live run's records against the first 100 of each event
// of the rewrite-time run (its phase 1): the same fields, at the site's address.
func compareLiveFree(t *testing.T, got, want []traceLine, sites map[string]uint64) {
	t.Helper()
	by := func(ls []traceLine) map[string][]traceLine {
		m := map[string][]traceLine{}
		for _, l := range ls {
			m[l.Event] = append(m[l.Event], l)
		}
		return m
	}
	g, w := by(got), by(want)
	for ev, site := range sites {
		if len(g[ev]) != 100 || len(w[ev]) != 175 {
			t.Fatalf("t/%s: %d live records and %d at rewrite time, want 100 and 175", ev, len(g[ev]), len(w[ev]))
		}
		for i, l := range g[ev] {
			if l.EA() != w[ev][i].EA() {
				t.Fatalf("t/%s record %d: live %q, rewrite time %q", ev, i, l.EA(), w[ev][i].EA())
			}
			if !strings.Contains(l.Head, fmt.Sprintf("%03x)", site&0xfff)) {
				t.Fatalf("t/%s record %d: %q does not name the site %#x", ev, i, l.Head, site)
			}
		}
	}
}

// liveFreeStressSrc runs four threads calling many(i) until stdin closes, each result
// checked against an unprobed copy of the same code (manyCheck): a slot run wrong, or
// an int3 the runtime does not know, shows. many() has more instructions than an
// image has free live points.
var liveFreeStressSrc = `#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#define STEP a = a * 7 + 3; a ^= a >> 5;
#define STEPS STEP STEP STEP STEP STEP STEP STEP STEP STEP STEP
__attribute__((noinline)) long many(long a) { STEPS STEPS STEPS return a; }
__attribute__((noinline)) long manyCheck(long a) { STEPS STEPS STEPS return a; }
__attribute__((noinline)) long prepare(long a) { return a - 1; }
static volatile int stop, bad;
static void *loop(void *arg) {
	(void)arg;
	for (long i = 0; !stop; i++)
		if (many(i) != manyCheck(i))
			bad = 1;
	return NULL;
}
int main(void) {
	pthread_t t[4];
	char c;
	for (int k = 0; k < 4; k++)
		pthread_create(&t[k], NULL, loop, NULL);
	while (read(0, &c, 1) == 1)
		;
	stop = 1;
	for (int k = 0; k < 4; k++)
		pthread_join(t[k], NULL);
	printf("%s %ld\n", bad ? "bad" : "ok", prepare(1));
	return 0;
}
`

// insnOffsets are the offsets in function fn of the ELF file at path of its first n
// instructions.
func insnOffsets(t *testing.T, path, fn string, n int) []uint64 {
	t.Helper()
	var offs []uint64
	eachInsn(t, path, fn, func(off uint64, _ x86dec.Inst, _ []byte) bool {
		offs = append(offs, off)
		return len(offs) < n
	})
	return offs
}

// TestLiveProbeUnpreparedReuse adds and removes an event at one instruction of many()
// after another, more than there are free live points, while four threads call it: a
// free point is placed at another site only once no thread is at its old one. The
// program computes right throughout, every event is armed (has hits before it is
// removed), and every hit of an event armed is a record.
func TestLiveProbeUnpreparedReuse(t *testing.T) {
	prog := testprog.Build(t, liveFreeStressSrc, "c", "-O2", "-pthread")
	const cycles = 70 // (64 free points: the last ones are placed again elsewhere)
	offs := insnOffsets(t, prog, "many", cycles)
	bin := filepath.Join(t.TempDir(), "reuse.kp")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "prepare")
	_, hits, nev := cycleLive(t, bin, tr, len(offs), func(i int) (string, string) {
		name := fmt.Sprintf("t/e%d", i)
		return name, fmt.Sprintf("p:%s many+%d a=%%di:s64", name, offs[i])
	})
	t.Logf("%d events added and removed, %d hits recorded", nev, hits)
}

// cycleLive runs bin (liveFreeStressSrc rewritten), adds n events one after another
// (def(i): the event's name and definition), waits for each to be armed (a hit) and
// removes it, then lets the program end: it computed right (ok 0), and every hit
// counted is a record. It returns the records, the hits and the events added.
func cycleLive(t *testing.T, bin, tr string, n int, def func(i int) (name, def string)) ([]traceLine, uint64, int) {
	t.Helper()
	cmd := exec.Command(bin)
	// each event records for as long as its removal takes on a loaded machine: room
	// past the default 64 MiB, so that records == hits does not hang on the scheduler
	cmd.Env = append(os.Environ(), "KPREWRITE_TRACE_SIZE=1G")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	f := openWhenThere(t, tr)
	defer f.Close()
	f.AddBinary(bin)
	for i := range n {
		name, d := def(i)
		if _, err := f.AddLive(d); err != nil {
			t.Fatalf("cycle %d: %v (stderr %q)", i, err, stderr.String())
		}
		f.WaitApplied(2 * time.Second)
		waitHits(t, f, name)
		if _, err := f.RemoveLive(name); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		f.WaitApplied(2 * time.Second)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil || strings.TrimSpace(stdout.String()) != "ok 0" {
		t.Fatalf("the program: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	var hits uint64
	evs, _ := f.Live()
	for _, e := range evs {
		hits += e.Hits
	}
	recs := readTrace(t, tr, bin)
	if uint64(len(recs)) != hits {
		t.Errorf("%d records for %d hits", len(recs), hits)
	}
	return recs, hits, len(evs)
}

// waitHits waits until the event added at run time named name has a hit: it is armed
// (the threads calling it may not run for a while on a busy machine).
func waitHits(t *testing.T, f *tracectl.File, name string) {
	t.Helper()
	for try := 0; try < 5000; try++ {
		evs, err := f.Live()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Group+"/"+e.Name == name && e.Hits > 0 {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: no hit in 5 s: it was not armed", name)
}

// openWhenThere opens the trace file at tr once the program has made it and
// described its image there.
func openWhenThere(t *testing.T, tr string) *tracectl.File {
	t.Helper()
	for try := 0; try < 2000; try++ {
		if f, err := tracectl.Open(tr); err == nil {
			if ds := f.Descs(); len(ds) > 0 && ds[0] != nil {
				return f
			}
			f.Close()
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: no trace file", tr)
	return nil
}
