package tests

// Events at sites no rewrite prepared (issue 46): `kprewrite probe` runs the analysis
// on the rewritten binary and places a boosted, single-stepped or emulated int3 at a
// free live point of a live-capable image, while the program runs.

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

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

// secondInsn is the offset in function fn of the ELF file at path of its second
// instruction, and that instruction's first byte.
func secondInsn(t *testing.T, path, fn string) (uint64, byte) {
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
	off := addr - text.Addr
	in, err := x86dec.Decode(code[off:], addr)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(in.Len), code[off+uint64(in.Len)]
}

// TestLiveProbeUnprepared: events added to a running program at an instruction in the
// middle of a function and at another function's entry, neither prepared, record what
// the same definitions given at rewrite time record; removing them puts the original
// bytes back; a site the analysis refuses is an error that changes nothing.
func TestLiveProbeUnprepared(t *testing.T) {
	prog := testprog.Build(t, liveFreeSrc, "c", "-O2")
	n, midOrig := secondInsn(t, prog, "work")
	defs := []string{fmt.Sprintf("p:t/m work+%d a=%%di:s64 b=%%si:s64", n), "p:t/o other a=%di:s64"}
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
	if out := kpOK(t, "list", tr); strings.Count(out, "[LIVE]") != 2 || !strings.Contains(out, fmt.Sprintf("work+%#x", n)) || !strings.Contains(out, "other+0x0") {
		t.Fatalf("list %s: %q, want t/m at work+%#x and t/o at other, [LIVE]", tr, out, n)
	}
	q.next(t, 1) // 100 calls of each
	kpOK(t, "probe", tr, "-:t/m", "-:t/o")
	if b := memByte(t, pid, bin, workAddr+n); b != midOrig {
		t.Errorf("t/m removed: work+%d holds %#x, want the original %#x", n, b, midOrig)
	}
	if b := memByte(t, pid, bin, otherAddr); b != otherOrig {
		t.Errorf("t/o removed: other holds %#x, want the original %#x", b, otherOrig)
	}
	q.next(t, 2)
	q.next(t, 3)
	q.finish(t, "sum 39300")
	compareLiveFree(t, readTrace(t, tr, bin), want, map[string]uint64{"m": workAddr + n, "o": otherAddr})
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
