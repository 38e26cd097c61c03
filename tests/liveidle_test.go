package tests

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// idleSrc calls two functions a prepared rewrite may take events at.
const idleSrc = `#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a) { return a * 3 + 1; }
__attribute__((noinline)) long other(long a) { return a - 7; }
int main(void) {
	char c;
	printf("ready\n");
	fflush(stdout);
	long s = read(0, &c, 1); /* (a test's go: 0 at the end of its input) */
	s = 0;
	for (int i = 0; i < 1000; i++)
		s += work(i) + other(i);
	printf("sum %ld\n", s);
	return 0;
}
`

// idleImage reads the probe tables' header of the rewritten binary at path.
func idleImage(t *testing.T, path string) *tracefile.Image {
	t.Helper()
	f, err := elfio.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	im, err := tracefile.ReadImage(f)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// TestIdleImageFlag: an image whose every probe is of a live event switched off
// (--prepare, --calls with every event --disable'd and its returns hooked) is idle
// (HFIdle: start-up leaves its tables to the live-probe thread); one with an event
// armed at start-up, or with return events at exits, is not.
func TestIdleImageFlag(t *testing.T) {
	prog := testprog.Build(t, idleSrc, "c", "-O2")
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		defs  []string
		flags []string
		idle  bool
	}{
		{"prepare", nil, []string{"--prepare", "work", "--prepare", "other"}, true},
		{"disabled", []string{"p:t/w work a=%di:s64"}, []string{"--disable", "t/w"}, true},
		{"armed", []string{"p:t/w work a=%di:s64"}, nil, false},
		{"prepare-and-armed", []string{"p:t/o other"}, []string{"--prepare", "work"}, false},
		{"calls-disabled", nil, []string{"--calls", "work", "--disable", "calls/*"}, true},
		{"calls-hooked", nil, []string{"--calls", "work", "--calls-hook", "--disable", "calls/*"}, true},
		{"calls-exits", nil, []string{"--calls", "work"}, false},
	} {
		bin := filepath.Join(dir, c.name)
		rewriteWith(t, prog, bin, c.defs, c.flags...)
		if idle := idleImage(t, bin).Header.Flags&kprt.HFIdle != 0; idle != c.idle {
			t.Errorf("%s: idle %v, want %v", c.name, idle, c.idle)
		}
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "KPREWRITE_TRACE="+bin+".trace", "KPREWRITE_QUIET=1")
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "ready\nsum 1992000\n" {
			t.Errorf("%s: %v, output %q", c.name, err, out)
		}
	}
}

// TestIdleImageBadTables: the live-probe thread checks an idle image's tables, which
// start-up took unchecked, when an event is first added: with a point's sites out of
// order (the second point's site made the first's), the program runs as the original,
// says the tables are inconsistent and arms nothing; its code keeps the original bytes.
func TestIdleImageBadTables(t *testing.T) {
	prog := testprog.Build(t, idleSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "idle")
	tr := bin + ".trace"
	rewriteWith(t, prog, bin, nil, "--prepare", "work", "--prepare", "other")
	im := idleImage(t, bin)
	if im.Header.Flags&kprt.HFIdle == 0 || im.Header.NPoints < 2 {
		t.Fatalf("flags %#x, %d points: want an idle image with two points", im.Header.Flags, im.Header.NPoints)
	}
	corruptSite(t, bin, im.Header.Points+kprt.PointSize, im.Points[0].Site)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "KPREWRITE_TRACE="+tr, "KPREWRITE_QUIET=1")
	stdin, _ := cmd.StdinPipe()
	errs, _ := cmd.StderrPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the program: %q", lines.Text())
	}
	kp("probe", tr, "p:t/w work a=%di:s64") // (whatever it answers: the program must say why nothing is armed)
	said := bufio.NewScanner(errs)
	const want = "inconsistent kprewrite probe tables (an idle image's): no live probe is armed"
	var seen []string
	for said.Scan() && !strings.Contains(said.Text(), want) {
		seen = append(seen, said.Text())
	}
	if !strings.Contains(said.Text(), want) {
		t.Fatalf("stderr %q, want the inconsistent tables said", seen)
	}
	if b := memByte(t, cmd.Process.Pid, bin, im.Points[0].Site); b != im.Points[0].Orig[0] {
		t.Errorf("work's site holds %#x in memory, want the original %#x", b, im.Points[0].Orig[0])
	}
	stdin.Close()
	go io.Copy(io.Discard, errs)
	if !lines.Scan() || lines.Text() != "sum 1992000" {
		t.Errorf("the program: %q, want sum 1992000", lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the program: %v", err)
	}
	if b := bytesAt(t, bin, im.Points[0].Site, 1)[0]; b != im.Points[0].Orig[0] {
		t.Errorf("work's site holds %#x in the file, want the original %#x", b, im.Points[0].Orig[0])
	}
}

// corruptSite writes site over the site field of the point at vaddr in the ELF at path.
func corruptSite(t *testing.T, path string, vaddr, site uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(elfio.SecRodata)
	f.Close()
	if s == nil || vaddr < s.Addr || vaddr+8 > s.Addr+s.Size {
		t.Fatalf("%s: no %s holding %#x", path, elfio.SecRodata, vaddr)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], site)
	if _, err := w.WriteAt(b[:], int64(s.Offset+vaddr-s.Addr)); err != nil {
		t.Fatal(err)
	}
}

// TestTraceNone: KPREWRITE_TRACE=none is off, as `rewrite --trace none` and an empty
// value are: the program runs as the original and no file is written, neither one named
// none in its directory nor the rewrite's default trace file.
func TestTraceNone(t *testing.T) {
	prog := testprog.Build(t, idleSrc, "c", "-O2")
	dir := t.TempDir()
	bin := filepath.Join(dir, "traced")
	rewriteWith(t, prog, bin, []string{"p:t/w work a=%di:s64"})
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KPREWRITE_TRACE=none")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "ready\nsum 1992000\n" {
		t.Fatalf("the program: %v, output %q", err, out)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "traced" {
			t.Errorf("%s written with KPREWRITE_TRACE=none", e.Name())
		}
	}
}

// liveCallsSrc's work has its ret far enough from its entry for an exit point (its
// return event at its exit, as --calls records it when the event is not live); its
// result is livePhasedSrc's.
var liveCallsSrc = livePhased(`static volatile long g;
__attribute__((noinline)) long work(long a, long b) { g += a; g ^= b; return a * 3 + b; }`,
	`s += work(i, phase);`)

// TestLiveCallsDisabled: `--calls FUNC --disable 'calls/*'` leaves the original bytes
// everywhere in the function (its return event hooks the return address at the entry
// instead of taking its exits, whose jmps would stay: a live event's sites must be the
// original's while it is off), records nothing until `enable 'calls/*'`, then an entry
// and a return a call, nothing after `disable`; the program's result is the original's.
func TestLiveCallsDisabled(t *testing.T) {
	prog := testprog.Build(t, liveCallsSrc, "c", "-O2")
	bin := filepath.Join(t.TempDir(), "calls")
	tr := bin + ".trace"
	if _, list, _ := kp("list", rewriteOut(t, prog, "--calls", "work")); !strings.Contains(list, "[EXIT]") {
		t.Skipf("work's return event is not at its exit when it is armed (list:\n%s): not the case this test is about", list)
	}
	rewriteWith(t, prog, bin, nil, "--calls", "work", "--disable", "calls/*")
	if _, list, _ := kp("list", bin); strings.Contains(list, "[EXIT]") || strings.Count(list, "[LIVE]") != 2 {
		t.Errorf("list:\n%s\nwant work's entry and return events live, none at an exit", list)
	}
	addr, size := funcSize(t, prog, "work")
	_, orig := siteBytes(t, prog, "work", int(size))
	if _, code := siteBytes(t, bin, "work", int(size)); !bytes.Equal(code, orig) {
		t.Errorf("work in the rewrite: % x\nwant the original's % x", code, orig)
	}
	p := startPhased(t, bin)
	defer p.cmd.Process.Kill()
	p.step(t, 0)
	kpOK(t, "enable", tr, "calls/*")
	waitByte(t, p.cmd.Process.Pid, bin, addr, 0xe9) // (the switch is asynchronous)
	p.next(t, 1)                                    // 100 calls
	kpOK(t, "disable", tr, "calls/*")
	waitByte(t, p.cmd.Process.Pid, bin, addr, orig[0])
	p.next(t, 2) // 50 calls: none recorded
	p.next(t, 3)
	p.finish(t, "sum 19700")
	entries, returns := 0, 0
	for _, l := range readTrace(t, tr, bin) {
		if strings.HasSuffix(l.Event, "__return") || strings.Contains(l.Event, "return") {
			returns++
		} else {
			entries++
		}
	}
	if entries != 100 || returns != 100 {
		t.Errorf("%d entry and %d return records, want 100 each (the calls of phase 1)", entries, returns)
	}
}

// funcSize is fn's address and size in the ELF at path.
func funcSize(t *testing.T, path, fn string) (uint64, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == fn && s.Size > 0 {
			return s.Value, s.Size
		}
	}
	t.Fatalf("%s: no %s with a size", path, fn)
	return 0, 0
}

// rewriteOut rewrites prog with flags into a new file and returns its path.
func rewriteOut(t *testing.T, prog string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	rewriteWith(t, prog, out, nil, flags...)
	return out
}
