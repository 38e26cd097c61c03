package tests

import (
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// histSrc calls work(size, kind) with sizes from a known generator, from four named
// threads and a forked child (worker 4), half of the calls through call_a and half
// through call_b, and name() with one of three strings.
const histSrc = `
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static long n;
static volatile long sink;
__attribute__((noinline)) long work(long size, int kind) { sink += size; return size * 3 + kind; }
__attribute__((noinline)) long call_a(long size) { return work(size, (int)(size % 3)) + 1; }
__attribute__((noinline)) long call_b(long size) { return work(size, (int)(size % 3)) + 2; }
__attribute__((noinline)) int name(const char *s) { return (int)strlen(s); }
static const char *names[] = {"alpha", "beta", "gamma"};

static void *worker(void *arg) {
	long w = (long)arg;
	char nm[16];
	snprintf(nm, sizeof nm, w == 4 ? "child" : "w%ld", w);
	prctl(PR_SET_NAME, nm);
	unsigned long long x = (unsigned long long)w * 7919 + 1;
	long acc = 0;
	for (long i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		long size = (long)((x >> 33) % 100000);
		acc += (i & 1) ? call_b(size) : call_a(size);
		acc += name(names[size % 3]);
	}
	return (void *)acc;
}

int main(int argc, char **argv) {
	n = argc > 1 ? atol(argv[1]) : 1000;
	pid_t child = fork();
	if (child == 0) {
		worker((void *)4);
		_exit(0);
	}
	pthread_t t[4];
	for (long w = 0; w < 4; w++)
		pthread_create(&t[w], NULL, worker, (void *)w);
	for (int w = 0; w < 4; w++)
		pthread_join(t[w], NULL);
	int st;
	waitpid(child, &st, 0);
	printf("done\n");
	return 0;
}
`

// histSizes are the sizes histSrc's worker w passes, in order.
func histSizes(w, n int) []uint64 {
	x := uint64(w)*7919 + 1
	out := make([]uint64, n)
	for i := range out {
		x = x*6364136223846793005 + 1442695040888963407
		out[i] = (x >> 33) % 100000
	}
	return out
}

// histBlock is one histogram of `kprewrite hist`.
type histBlock struct {
	Info                 string
	Entries              map[string][]uint64 // key text (spaces squeezed) -> hitcount, values
	Order                []string
	Hits, Total, Dropped uint64
}

var (
	histEntryRe = regexp.MustCompile(`^\{ (.*) \}((?:\s+\w+: +-?[0-9a-f]+)+)\s*$`)
	histValRe   = regexp.MustCompile(`(\w+): +(-?[0-9a-f]+)`)
)

func parseHist(t *testing.T, out string) []histBlock {
	t.Helper()
	var bs []histBlock
	var b *histBlock
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "# trigger info: "):
			bs = append(bs, histBlock{Info: strings.TrimPrefix(line, "# trigger info: "), Entries: map[string][]uint64{}})
			b = &bs[len(bs)-1]
		case b == nil:
		case strings.HasPrefix(line, "{"):
			m := histEntryRe.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("hist line %q", line)
			}
			key := strings.Join(strings.Fields(m[1]), " ")
			var vals []uint64
			for _, v := range histValRe.FindAllStringSubmatch(m[2], -1) {
				x, err := strconv.ParseUint(v[2], 10, 64)
				if strings.HasPrefix(v[2], "-") { // a signed field's sum
					var y int64
					y, err = strconv.ParseInt(v[2], 10, 64)
					x = uint64(y)
				}
				if err != nil {
					t.Fatalf("hist line %q: %v", line, err)
				}
				vals = append(vals, x)
			}
			b.Entries[key] = vals
			b.Order = append(b.Order, key)
		case strings.HasPrefix(line, "    Hits: "):
			b.Hits, _ = strconv.ParseUint(strings.TrimPrefix(line, "    Hits: "), 10, 64)
		case strings.HasPrefix(line, "    Entries: "):
			b.Total, _ = strconv.ParseUint(strings.TrimPrefix(line, "    Entries: "), 10, 64)
		case strings.HasPrefix(line, "    Dropped: "):
			b.Dropped, _ = strconv.ParseUint(strings.TrimPrefix(line, "    Dropped: "), 10, 64)
		}
	}
	return bs
}

func histOf(t *testing.T, file string, args ...string) []histBlock {
	t.Helper()
	code, out, errs := kp(append(append([]string{"hist"}, args...), file)...)
	if code != 0 {
		t.Fatalf("kprewrite hist %s: exit %d: %s", file, code, errs)
	}
	return parseHist(t, out)
}

func findHist(t *testing.T, bs []histBlock, prefix string) histBlock {
	t.Helper()
	for _, b := range bs {
		if strings.HasPrefix(b.Info, prefix) {
			return b
		}
	}
	t.Fatalf("no histogram %q in %v", prefix, bs)
	return histBlock{}
}

func log2Bucket(v uint64) uint64 {
	if v <= 1 {
		return 0
	}
	return uint64(bits.Len64(v - 1))
}

// TestHistKnownDistribution: hist triggers on a program whose calls are known (five
// workers: four threads and a forked child) give exactly the buckets, counts and sums
// the sizes' generator predicts: log2 and linear buckets, a value summed per key, a
// condition, compound and string keys, .execname, .sym on return addresses, and a
// table too small for its keys (entries and drops).
func TestHistKnownDistribution(t *testing.T) {
	prog := testprog.Build(t, histSrc, "c", "-O2", "-pthread")
	const n = 3000
	var all []uint64
	byWorker := map[int][]uint64{}
	for w := 0; w < 5; w++ {
		byWorker[w] = histSizes(w, n)
		all = append(all, byWorker[w]...)
	}
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		dir := t.TempDir()
		kpd := filepath.Join(dir, "hist")
		flags := []string{"--disable", "h/w", "--disable", "h/n",
			"--trigger", "h/w:hist:keys=size.log2",
			"--trigger", "h/w:hist:keys=kind:vals=size,hitcount:sort=kind",
			"--trigger", "h/w:hist:keys=size.buckets=10000:sort=size if kind == 1",
			"--trigger", "h/w:hist:keys=ra.sym:vals=size",
			"--trigger", "h/w:hist:keys=common_pid.execname,kind:sort=hitcount.descending",
			"--trigger", "h/w:hist:keys=size:size=128",
			"--trigger", "h/n:hist:key=s:sort=s.descending",
		}
		flags = append(flags, modeFlags...)
		rewriteWith(t, prog, kpd, []string{"p:h/w work size=%di kind=%si:s32 ra=+0(%sp):x64", "p:h/n name s=+0(%di):string"}, flags...)
		if out := testprog.MustRun(t, kpd, strconv.Itoa(n)); strings.TrimSpace(out) != "done" {
			t.Fatalf("program said %q", out)
		}
		bs := histOf(t, kpd+".trace")
		total := uint64(len(all))

		log2 := findHist(t, bs, "hist:keys=size.log2:vals=hitcount:sort=hitcount:size=2048")
		want := map[string]uint64{}
		for _, s := range all {
			want[fmt.Sprintf("size: ~ 2^%d", log2Bucket(s))]++
		}
		checkCounts(t, log2, want, total)
		for i := 1; i < len(log2.Order); i++ { // sort=hitcount, ascending
			if log2.Entries[log2.Order[i-1]][0] > log2.Entries[log2.Order[i]][0] {
				t.Errorf("log2 histogram not sorted by hitcount: %v", log2.Order)
			}
		}

		kinds := findHist(t, bs, "hist:keys=kind:vals=hitcount,size:sort=kind")
		sums := map[string][]uint64{}
		for _, s := range all {
			k := fmt.Sprintf("kind: %d", s%3)
			if sums[k] == nil {
				sums[k] = []uint64{0, 0}
			}
			sums[k][0]++
			sums[k][1] += s
		}
		for k, v := range sums {
			if g := kinds.Entries[k]; len(g) != 2 || g[0] != v[0] || g[1] != v[1] {
				t.Errorf("kind histogram %q: %v, want %v", k, g, v)
			}
		}
		if strings.Join(kinds.Order, "|") != "kind: 0|kind: 1|kind: 2" {
			t.Errorf("kind histogram order %q, want by kind", kinds.Order)
		}

		lin := findHist(t, bs, "hist:keys=size.buckets=10000:vals=hitcount:sort=size.buckets=10000:size=2048 if kind == 1")
		want = map[string]uint64{}
		var cond uint64
		for _, s := range all {
			if s%3 == 1 {
				b := s / 10000 * 10000
				want[fmt.Sprintf("size: ~ %d-%d", b, b+9999)]++
				cond++
			}
		}
		checkCounts(t, lin, want, cond)

		callers := findHist(t, bs, "hist:keys=ra.sym:vals=hitcount,size")
		want = map[string]uint64{}
		for _, s := range all[:0] {
			_ = s
		}
		var a, b uint64
		for w := 0; w < 5; w++ {
			a += uint64((n + 1) / 2)
			b += uint64(n / 2)
		}
		got := map[string]uint64{}
		for k, v := range callers.Entries {
			f := strings.Fields(k) // "ra: [addr] call_a"
			if len(f) != 3 {
				t.Fatalf("sym key %q", k)
			}
			got[f[2]] += v[0]
		}
		if got["call_a"] != a || got["call_b"] != b || len(got) != 2 {
			t.Errorf("callers %v, want call_a %d call_b %d", got, a, b)
		}

		pids := findHist(t, bs, "hist:keys=common_pid.execname,kind:vals=hitcount:sort=hitcount.descending")
		perName := map[string]uint64{}
		for k, v := range pids.Entries {
			perName[strings.Fields(strings.TrimPrefix(k, "common_pid: "))[0]] += v[0]
		}
		for _, nm := range []string{"w0", "w1", "w2", "w3", "child"} {
			if perName[nm] != n {
				t.Errorf("execname %s: %d hits, want %d (%v)", nm, perName[nm], n, perName)
			}
		}
		for i := 1; i < len(pids.Order); i++ {
			if pids.Entries[pids.Order[i-1]][0] < pids.Entries[pids.Order[i]][0] {
				t.Errorf("execname histogram not sorted by hitcount descending: %v", pids.Order)
			}
		}

		small := findHist(t, bs, "hist:keys=size:vals=hitcount:sort=hitcount:size=128")
		var kept uint64
		for _, v := range small.Entries {
			kept += v[0]
		}
		if small.Total != 128 || len(small.Entries) != 128 || small.Hits != total || kept+small.Dropped != total || small.Dropped == 0 {
			t.Errorf("size=128: entries %d (%d lines), hits %d, kept %d + dropped %d; want 128 entries and %d hits", small.Total, len(small.Entries), small.Hits, kept, small.Dropped, total)
		}

		strs := findHist(t, bs, "hist:keys=s:vals=hitcount:sort=s.descending")
		want = map[string]uint64{}
		names := []string{"alpha", "beta", "gamma"}
		for _, s := range all {
			want["s: "+names[s%3]]++
		}
		checkCounts(t, strs, want, total)
		if strings.Join(strs.Order, "|") != "s: gamma|s: beta|s: alpha" {
			t.Errorf("string keys order %q", strs.Order)
		}
		// the events were soft-disabled: the histograms counted, nothing recorded
		if lines := readTrace(t, kpd+".trace", kpd); len(lines) != 0 {
			t.Errorf("%d records of soft-disabled events", len(lines))
		}
	})
}

func checkCounts(t *testing.T, b histBlock, want map[string]uint64, hits uint64) {
	t.Helper()
	for k, v := range want {
		if g := b.Entries[k]; len(g) == 0 || g[0] != v {
			t.Errorf("%s: %q: %v, want hitcount %d", b.Info, k, g, v)
		}
	}
	if len(b.Entries) != len(want) || b.Hits != hits || b.Total != uint64(len(want)) || b.Dropped != 0 {
		t.Errorf("%s: %d entries, hits %d, dropped %d; want %d entries, %d hits\n%v", b.Info, len(b.Entries), b.Hits, b.Dropped, len(want), hits, b.Entries)
	}
}

// TestHistPauseContClear: a histogram given ":pause" counts nothing until
// `kprewrite hist --cont`; it persists in the trace file across runs; --clear empties
// it; a recorded (not soft-disabled) event keeps its records beside its histogram.
func TestHistPauseContClear(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // later runs add to the first run's trace
	prog := testprog.Build(t, histSrc, "c", "-O2", "-pthread")
	kpd := filepath.Join(t.TempDir(), "hist")
	rewriteWith(t, prog, kpd, []string{"p:h/w work size=%di kind=%si:s32"},
		"--trigger", "h/w:hist:keys=kind:pause", "--trigger", "h/w:hist:keys=kind:vals=size")
	tr := kpd + ".trace"
	testprog.MustRun(t, kpd, "100")
	bs := histOf(t, tr)
	paused := findHist(t, bs, "hist:keys=kind:vals=hitcount:sort=hitcount:size=2048 [paused]")
	if paused.Hits != 0 || len(paused.Entries) != 0 {
		t.Errorf("paused histogram counted %d hits", paused.Hits)
	}
	active := findHist(t, bs, "hist:keys=kind:vals=hitcount,size:sort=hitcount:size=2048 [active]")
	if active.Hits != 500 {
		t.Errorf("active histogram: %d hits, want 500", active.Hits)
	}
	if lines := readTrace(t, tr, kpd); len(lines) != 500 {
		t.Errorf("%d records, want 500", len(lines))
	}
	if code, _, e := kp("hist", "--cont", "--event", "h/w", tr); code != 0 {
		t.Fatalf("hist --cont: %s", e)
	}
	testprog.MustRun(t, kpd, "100")
	bs = histOf(t, tr)
	if b := findHist(t, bs, "hist:keys=kind:vals=hitcount:sort=hitcount:size=2048 [active]"); b.Hits != 500 {
		t.Errorf("continued histogram: %d hits, want 500 (the second run)", b.Hits)
	}
	if b := findHist(t, bs, "hist:keys=kind:vals=hitcount,size"); b.Hits != 1000 {
		t.Errorf("histogram across two runs: %d hits, want 1000", b.Hits)
	}
	if code, _, e := kp("hist", "--clear", tr); code != 0 {
		t.Fatalf("hist --clear: %s", e)
	}
	for _, b := range histOf(t, tr) {
		if b.Hits != 0 || len(b.Entries) != 0 {
			t.Errorf("cleared %s: %d hits", b.Info, b.Hits)
		}
	}
	if code, _, _ := kp("hist", "--event", "nosuch", tr); code == 0 {
		t.Error("hist of an unknown event succeeded")
	}
}

// TestHistRefused: bad hist triggers are refused with the kernel's reasons and no
// output is written.
func TestHistRefused(t *testing.T) {
	prog := testprog.Build(t, histSrc, "c", "-O2", "-pthread")
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		triggers []string
		want     string
	}{
		{[]string{"h/w:hist:keys=nosuch"}, "Couldn't find field"},
		{[]string{"h/w:hist:keys=size.bogus"}, "Invalid field modifier"},
		{[]string{"h/w:hist:vals=size"}, "Missing keys"},
		{[]string{"h/w:hist:keys=size,kind,common_pid,common_cpu"}, "Too many keys"},
		{[]string{"h/w:hist:keys=size:sort=nosuch"}, "Sort field must be a key or a val"},
		{[]string{"h/w:hist:keys=size", "h/w:hist:keys=size"}, "Hist trigger already exists"},
		{[]string{"h/w:hist:keys=size:cont"}, "Can't clear or continue a nonexistent hist trigger"},
		{[]string{"h/w:hist:keys=size:size=1000000"}, "Size must be between"},
		{[]string{"h/w:hist:keys=size if nosuch > 1"}, "Field not found"},
		{[]string{"h/w:hist:keys=size:lat=common_timestamp-$ts0"}, "Couldn't find variable"},
		{[]string{"h/w:hist:keys=size:onmatch(h.w).trace(nosuch,$x)"}, "Couldn't find synthetic event"},
		{[]string{"h/w:hist:keys=size:onmax($x).save(size)"}, "Couldn't find onmax or onchange variable"},
	} {
		args := []string{"rewrite", "-o", out, "-e", "p:h/w work size=%di kind=%si:s32"}
		for _, tr := range c.triggers {
			args = append(args, "--trigger", tr)
		}
		code, _, stderr := kp(append(args, prog)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want an error saying %q", c.triggers, code, stderr, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v: output written", c.triggers)
		}
	}
}

// latSrc sleeps 3 ms four times and 24 ms twice in each of two threads and a forked
// child.
const latSrc = `
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
__attribute__((noinline)) int sleepy(int ms) { struct timespec ts = {0, ms * 1000000L}; nanosleep(&ts, 0); return ms; }
static void *worker(void *a) { for (int i = 0; i < 6; i++) sleepy(i < 4 ? 3 : 24); return a; }
int main(void) {
	pid_t c = fork();
	if (c == 0) { worker(0); _exit(0); }
	pthread_t t[2];
	for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, 0);
	for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
	waitpid(c, 0, 0);
	return 0;
}
`

// TestHistLatency is the kernel's wakeup-latency recipe applied to a function's entry
// and return: a variable ts0 kept per thread at entry, the latency computed at return
// from it and passed by onmatch() to a synthetic event, whose histograms have exactly
// the calls of each duration, across threads and a fork. The durations are what the
// events' own records say (the records and the histograms read one clock at each hit;
// a record prints microseconds from a base, so a latency read from records is within
// 1 us of the histogram's), so a machine slow to wake a thread cannot fail it; each
// call takes at least what it sleeps.
func TestHistLatency(t *testing.T) {
	prog := testprog.Build(t, latSrc, "c", "-O2", "-pthread")
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := filepath.Join(t.TempDir(), "lat")
		flags := []string{
			"--trigger", "h/in:hist:keys=common_pid:ts0=common_timestamp.usecs",
			"--trigger", "h/out:hist:keys=common_pid:lat=common_timestamp.usecs-$ts0:onmatch(h.in).trace(sleep_lat,$lat)",
			"--trigger", "synthetic/sleep_lat:hist:keys=lat.log2",
			"--trigger", "synthetic/sleep_lat:hist:keys=lat.buckets=1000:sort=lat",
			"--trigger", "synthetic/sleep_lat:hist:keys=lat.log2:vals=lat if lat >= 10000",
		}
		flags = append(flags, modeFlags...)
		rewriteWith(t, prog, kpd, []string{"s:sleep_lat u64 lat", "p:h/in sleepy ms=%di:s32", "r:h/out sleepy"}, flags...)
		testprog.MustRun(t, kpd)
		lats := recordLatencies(t, kpd)
		// the filtered histogram: the calls of 10 ms and more (a call within 1 us of
		// that would be on either side: none is, or the check says so)
		var long []uint64
		for _, l := range lats {
			if l+1 >= 10000 && l <= 10001 {
				t.Fatalf("a call took %d us, too close to the filter's 10000 to check", l)
			}
			if l >= 10000 {
				long = append(long, l)
			}
		}
		checkNear(t, findHist(t, histOf(t, kpd+".trace"), "hist:keys=lat.log2:vals=hitcount,lat:"), long, func(us uint64) string {
			return fmt.Sprintf("lat: ~ 2^%d", log2Bucket(us))
		})
		bs := histOf(t, kpd+".trace")
		checkNear(t, findHist(t, bs, "hist:keys=lat.log2:vals=hitcount:"), lats, func(us uint64) string {
			return fmt.Sprintf("lat: ~ 2^%d", log2Bucket(us))
		})
		checkNear(t, findHist(t, bs, "hist:keys=lat.buckets=1000:"), lats, func(us uint64) string {
			return fmt.Sprintf("lat: ~ %d-%d", us/1000*1000, us/1000*1000+999)
		})
		for _, ev := range []string{"hist:keys=common_pid:vals=hitcount:ts0=", "hist:keys=common_pid:vals=hitcount:lat="} {
			b := findHist(t, bs, ev)
			if len(b.Entries) != 3 || b.Hits != 18 {
				t.Errorf("%s: %d threads, %d hits; want 3 and 18", b.Info, len(b.Entries), b.Hits)
			}
		}
	})
}

// recordLatencies pairs each thread's h/in and h/out records of latSrc's sleepy calls
// and returns each call's duration in microseconds, checking that it is at least the
// sleep it asked for: 12 calls of 3 ms and 6 of 24 ms.
func recordLatencies(t *testing.T, kpd string) []uint64 {
	t.Helper()
	us := func(ts string) uint64 {
		var sec, usec uint64
		if _, err := fmt.Sscanf(ts, "%d.%d", &sec, &usec); err != nil {
			t.Fatalf("timestamp %q", ts)
		}
		return sec*1000000 + usec
	}
	type open struct {
		at uint64
		ms int
	}
	pending := map[int]open{}
	var lats []uint64
	n3, n24 := 0, 0
	last := map[int]uint64{} // each thread's last call's latency, for its sleep_lat record
	nsynth := 0
	for _, l := range readTrace(t, kpd+".trace", kpd) {
		switch l.Event {
		case "in":
			var ms int
			if _, err := fmt.Sscanf(strings.TrimSpace(l.Args), "ms=%d", &ms); err != nil {
				t.Fatalf("h/in record %q", l.Args)
			}
			pending[l.PID] = open{us(l.TS), ms}
		case "out":
			o, ok := pending[l.PID]
			if !ok {
				t.Fatalf("h/out of thread %d without its h/in", l.PID)
			}
			delete(pending, l.PID)
			lat := us(l.TS) - o.at
			if lat+1 < uint64(o.ms)*1000 {
				t.Errorf("a call sleeping %d ms took %d us", o.ms, lat)
			}
			if o.ms == 3 {
				n3++
			} else {
				n24++
			}
			lats = append(lats, lat)
			last[l.PID] = lat
		case "sleep_lat": // the synthetic event onmatch() generated, right after its h/out
			var lat uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(l.Args), "lat=%d", &lat); err != nil {
				t.Fatalf("sleep_lat record %q", l.Args)
			}
			want, ok := last[l.PID]
			if !ok || lat+1 < want || lat > want+1 {
				t.Errorf("thread %d: sleep_lat lat=%d, its last call took %d us (from its records)", l.PID, lat, want)
			}
			delete(last, l.PID)
			nsynth++
		}
	}
	if n3 != 12 || n24 != 6 || len(pending) != 0 {
		t.Fatalf("records of %d calls of 3 ms and %d of 24 ms, %d unfinished; want 12 and 6", n3, n24, len(pending))
	}
	if nsynth != 18 || len(last) != 0 {
		t.Errorf("%d sleep_lat records, %d calls without one; want one after each of the 18 calls", nsynth, len(last))
	}
	return lats
}

// checkNear checks a histogram of the latencies lats (each within 1 us of the one the
// histogram saw) bucketed by bucket: every bucket holds at least the calls that are in
// it whatever that microsecond, at most those that may be, and they add up.
func checkNear(t *testing.T, b histBlock, lats []uint64, bucket func(uint64) string) {
	t.Helper()
	lo, hi := map[string]uint64{}, map[string]uint64{}
	for _, l := range lats {
		may := map[string]bool{bucket(l): true, bucket(l + 1): true}
		if l > 0 {
			may[bucket(l-1)] = true
		}
		for k := range may {
			hi[k]++
			if len(may) == 1 {
				lo[k]++
			}
		}
	}
	var sum uint64
	for k, v := range b.Entries {
		sum += v[0]
		if v[0] < lo[k] || v[0] > hi[k] {
			t.Errorf("%s: %q: %d calls, want %d to %d (from the records)", b.Info, k, v[0], lo[k], hi[k])
		}
	}
	for k, n := range lo {
		if n > 0 && len(b.Entries[k]) == 0 {
			t.Errorf("%s: no bucket %q, want %d calls", b.Info, k, n)
		}
	}
	if sum != uint64(len(lats)) || b.Hits != uint64(len(lats)) || b.Dropped != 0 {
		t.Errorf("%s: %d calls in buckets, %d hits, %d dropped; want %d\n%v", b.Info, sum, b.Hits, b.Dropped, len(lats), b.Entries)
	}
}

// TestHistPython: python3.11 (the interpreter's PyObject_Malloc) encoding and
// decoding JSON, its event recorded and histogrammed in one run: the log2 histogram
// of the sizes and the per-thread sums equal what the records say.
func TestHistPython(t *testing.T) {
	bin := realBin(t, "python3.11")
	kpd := filepath.Join(t.TempDir(), "py")
	rewriteWith(t, bin, kpd, []string{"p:py/malloc PyObject_Malloc size=%di:u64"},
		"--trigger", "py/malloc:hist:keys=size.log2:sort=size",
		"--trigger", "py/malloc:hist:keys=common_pid.execname:vals=size")
	testprog.MustRun(t, kpd, "-c", `import json; d = [{"id": i, "tags": ["a", "b"], "v": i * 0.5} for i in range(500)]; [json.loads(json.dumps(d)) for _ in range(5)]`)
	checkSizeHists(t, kpd+".trace", readTrace(t, kpd+".trace", kpd), 1000, "hist:keys=common_pid.execname:vals=hitcount,size")
}

// checkSizeHists checks a trace file's histograms of an event with a size field against
// its records (lines, at least min of them): the size.log2 histogram holds their
// buckets, the per-thread one (pidHist) their count and sum.
func checkSizeHists(t *testing.T, tr string, lines []traceLine, min int, pidHist string) {
	t.Helper()
	want := map[string]uint64{}
	var sum uint64
	for _, l := range lines {
		var size uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(l.Args), "size=%d", &size); err != nil {
			t.Fatalf("record %q: %v", l.Args, err)
		}
		want[fmt.Sprintf("size: ~ 2^%d", log2Bucket(size))]++
		sum += size
	}
	if len(lines) < min {
		t.Fatalf("%d records, want at least %d", len(lines), min)
	}
	bs := histOf(t, tr)
	checkCounts(t, findHist(t, bs, "hist:keys=size.log2:"), want, uint64(len(lines)))
	pids := findHist(t, bs, pidHist)
	var hits, total uint64
	for _, v := range pids.Entries {
		hits += v[0]
		total += v[1]
	}
	if hits != uint64(len(lines)) || total != sum {
		t.Errorf("per thread: %d hits of %d bytes; the records say %d of %d", hits, total, len(lines), sum)
	}
}

// TestHistPythonLibcMalloc: python3.11 with the C library's malloc probed in its
// rewritten copy of libc.so.6 (issue 16's real program, now that shared objects work):
// a histogram of the sizes and one per thread over a JSON workload hold exactly what
// the records of the same calls say.
func TestHistPythonLibcMalloc(t *testing.T) {
	bin := realBin(t, "python3.11")
	kpd := filepath.Join(t.TempDir(), "py")
	rewriteWith(t, bin, kpd, []string{"p:libc/malloc libc.so.6:malloc size=%di:u64"},
		"--trigger", "libc/malloc:hist:keys=size.log2:sort=size",
		"--trigger", "libc/malloc:hist:keys=common_pid:vals=size")
	testprog.MustRun(t, kpd, "-c", `import json; d = [{"id": i, "tags": ["a" * (i % 700)], "v": i * 0.5} for i in range(2000)]; [json.loads(json.dumps(d)) for _ in range(3)]`)
	checkSizeHists(t, kpd+".trace", readTrace(t, kpd+".trace"), 100, "hist:keys=common_pid:vals=hitcount,size")
}

const shareSrc = `
__attribute__((noinline)) long take(long n) { __asm__ volatile(""); return n; }
int main(void) { long s = 0; for (long n = 1; n <= 100; n++) s += take(n); return s != 5050; }
`

// TestHistPercentGraphRefused: .percent and .graph are refused where the kernel refuses
// them (their columns are tests/cases/hist-percent-graph).
func TestHistPercentGraphRefused(t *testing.T) {
	prog := testprog.Build(t, shareSrc, "c", "-O2")
	// the kernel's refusals: a key or a variable cannot take them, nor a second modifier
	for _, bad := range []string{"hist:keys=n.percent", "hist:keys=n:vals=n.hex.graph", "hist:keys=n:x=n.percent"} {
		code, _, errs := kp("check", "-e", "p:s/take take n=%di:u64", "--trigger", "s/take:"+bad, prog)
		if code == 0 || !strings.Contains(errs, "Invalid field modifier") {
			t.Errorf("%s: exit %d, %q; want Invalid field modifier", bad, code, errs)
		}
	}
}

const namedSrc = `
__attribute__((noinline)) long a(long n) { __asm__ volatile(""); return n; }
__attribute__((noinline)) long b(long n) { __asm__ volatile(""); return n + 1; }
int main(void) { long s = 0; for (long n = 1; n <= 40; n++) s += a(n) + (n % 4 == 0 ? b(n * 100) : 0); return s == 0; }
`

// TestHistNamedRefused: a named hist trigger unlike the first of its name is refused
// with the kernel's message (two named alike share one table: tests/cases/hist-named).
func TestHistNamedRefused(t *testing.T) {
	prog := testprog.Build(t, namedSrc, "c", "-O2")
	code, _, errs := kp("check", "-e", "p:nm/a a n=%di:u64", "-e", "p:nm/b b n=%di:u64",
		"--trigger", "nm/a:hist:name=both:keys=n.log2", "--trigger", "nm/b:hist:name=both:keys=n", prog)
	if code == 0 || !strings.Contains(errs, "Named hist trigger doesn't match existing named trigger") {
		t.Errorf("unlike named triggers: exit %d, %q", code, errs)
	}
}

// synthSrc calls work(n) for n < 100.
const synthSrc = `
#include <stdio.h>
__attribute__((noinline)) int work(int n) { __asm__ volatile(""); return n + 1; }
int main(void) { long s = 0; for (int i = 0; i < 100; i++) s += work(i); printf("%ld\n", s); return 0; }
`

// synthRewrite rewrites synthSrc's program with the synthetic event d (neg, n) that
// work's return generates from its entry's n, and flags: the trace file is KPD.trace.
func synthRewrite(t *testing.T, prog string, flags []string) (kpd string) {
	t.Helper()
	kpd = filepath.Join(t.TempDir(), "synth")
	flags = append([]string{
		"--trigger", "app/in:hist:keys=common_pid:u=n",
		"--trigger", "app/out:hist:keys=common_pid:neg=$u-1000:onmatch(app.in).trace(d,$neg,$u)",
	}, flags...)
	rewriteWith(t, prog, kpd, []string{"s:d s32 neg; u64 n", "p:app/in work n=%di:s32", "r:app/out work"}, flags...)
	return kpd
}

// TestSyntheticRecords: an onmatch() trace action writes its synthetic event's record
// right after the record of the hit that generated it, its fields printed as the
// kernel prints a synthetic event (signed at their type's size); a synthetic event
// rewritten with --disable writes none until `kprewrite enable` switches it on; `format`
// describes it and the JSON export carries its fields.
func TestSyntheticRecords(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // later runs add to the first run's trace
	prog := testprog.Build(t, synthSrc, "c", "-O2")
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := synthRewrite(t, prog, append([]string{
			"--disable", "synthetic/d",
			"--trigger", "synthetic/d:hist:keys=n.buckets=10:pause",
		}, modeFlags...))
		tr := kpd + ".trace"
		testprog.MustRun(t, kpd)
		for _, l := range readTrace(t, tr, kpd) {
			if l.Event == "d" {
				t.Fatalf("a synthetic event rewritten disabled wrote %q", l.Args)
			}
		}
		// its histogram, rewritten paused, counted nothing; continued, it counts
		if b := findHist(t, histOf(t, tr), "hist:keys=n.buckets=10:"); !strings.HasSuffix(b.Info, "[paused]") || b.Hits != 0 {
			t.Errorf("a synthetic event's histogram rewritten paused: %s, %d hits", b.Info, b.Hits)
		}
		if code, _, e := kp("hist", "--cont", "--event", "synthetic/d", tr); code != 0 {
			t.Fatalf("hist --cont: %s", e)
		}
		if code, o, e := kp("enable", tr, "synthetic/d"); code != 0 || !strings.Contains(o, "synthetic/d (prog): enabled (was disabled)") {
			t.Fatalf("enable synthetic/d: exit %d\n%s%s", code, o, e)
		}
		testprog.MustRun(t, kpd)
		lines := readTrace(t, tr, kpd)
		var got []string
		for i, l := range lines {
			if l.Event != "d" {
				continue
			}
			if i == 0 || lines[i-1].Event != "out" || lines[i-1].PID != l.PID {
				t.Fatalf("record %d, %q, does not follow its hit's out record", i, l.Args)
			}
			got = append(got, strings.TrimSpace(l.Args))
		}
		var want []string
		for n := 0; n < 100; n++ {
			want = append(want, fmt.Sprintf("neg=%d n=%d", n-1000, n))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("synthetic records:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if b := findHist(t, histOf(t, tr), "hist:keys=n.buckets=10:"); b.Hits != 100 || len(b.Entries) != 10 {
			t.Errorf("the synthetic event's histogram, continued: %d hits in %d entries, want 100 in 10", b.Hits, len(b.Entries))
		}
		// its trigger and filter files: the rewrite's histogram, live state; no filter
		if code, o, e := kp("trigger", tr, "synthetic/d"); code != 0 || o != "synthetic/d (prog):\nhist:keys=n.buckets=10:vals=hitcount:sort=hitcount:size=2048 [active]\n" {
			t.Errorf("trigger FILE synthetic/d: exit %d\n%s%s", code, o, e)
		}
		if code, o, e := kp("filter", tr, "synthetic/d"); code != 0 || o != "synthetic/d (prog): none\n" {
			t.Errorf("filter FILE synthetic/d: exit %d\n%s%s", code, o, e)
		}
		code, o, e := kp("format", "--event", "synthetic/d", kpd)
		if code != 0 || !strings.Contains(o, "\tfield:s32 neg;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:u64 n;\toffset:16;\tsize:8;\tsigned:0;\n") ||
			!strings.Contains(o, `print fmt: "neg=%d, n=%llu", REC->neg, REC->n`) {
			t.Errorf("format of synthetic/d: exit %d\n%s%s", code, o, e)
		}
		code, o, e = kp("trace", "--format", "json", tr)
		if code != 0 || strings.Count(o, `"type":"synthetic","group":"synthetic","event":"d"`) != 100 || !strings.Contains(o, `"fields":{"neg":-901,"n":99}`) {
			t.Errorf("JSON export: exit %d, %d synthetic records\n%s", code, strings.Count(o, `"type":"synthetic"`), e)
		}
		// KPREWRITE_CONTROL: the next run of a fresh trace file with its records on,
		// then with them off again
		for _, on := range []bool{true, false} {
			ctl := filepath.Join(filepath.Dir(kpd), "run.ctl")
			sw := map[bool]string{true: "--enable", false: "--disable"}[on]
			if code, o, e := kp("control", "-o", ctl, sw, "synthetic/d", kpd); code != 0 {
				t.Fatalf("control %s synthetic/d: exit %d\n%s%s", sw, code, o, e)
			}
			os.Remove(tr)
			if res := testprog.Run(t, testprog.Cmd{Path: kpd, Extra: []string{"KPREWRITE_CONTROL=" + ctl}}); res.Exit != 0 || res.Stderr != "" {
				t.Fatal(res)
			}
			n := 0
			for _, l := range readTrace(t, tr, kpd) {
				if l.Event == "d" {
					n++
				}
			}
			if want := map[bool]int{true: 100, false: 0}[on]; n != want {
				t.Errorf("KPREWRITE_CONTROL with %s synthetic/d: %d records, want %d", sw, n, want)
			}
		}
	})
}

// TestHistOnlyPath: an event that writes no record and has hist triggers only (the
// runtime's hist_hit path: the data fetched by its plan, the histograms updated,
// nothing else), hit by four threads and a forked child: a log2 histogram, a compound
// key with common_pid and an "if", a table too small for its keys (drops) hold exactly
// the calls; switched on with `kprewrite enable`, the same histograms keep counting on
// the general path beside the records.
func TestHistOnlyPath(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // switched on for the next run, which adds to the file
	prog := testprog.Build(t, histSrc, "c", "-O2", "-pthread")
	const n = 2000
	var all []uint64
	for w := 0; w < 5; w++ {
		all = append(all, histSizes(w, n)...)
	}
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := filepath.Join(t.TempDir(), "hist")
		flags := append([]string{"--disable", "h/w",
			"--trigger", "h/w:hist:keys=size.log2",
			"--trigger", "h/w:hist:keys=kind,common_pid:vals=size if kind == 1",
			"--trigger", "h/w:hist:keys=size:size=128",
		}, modeFlags...)
		rewriteWith(t, prog, kpd, []string{"p:h/w work size=%di kind=%si:s32"}, flags...)
		check := func(runs uint64) {
			t.Helper()
			bs := histOf(t, kpd+".trace")
			want := map[string]uint64{}
			var ones, sum1 uint64
			for _, s := range all {
				want[fmt.Sprintf("size: ~ 2^%d", log2Bucket(s))] += runs
				if s%3 == 1 {
					ones += runs
					sum1 += s * runs
				}
			}
			checkCounts(t, findHist(t, bs, "hist:keys=size.log2:vals=hitcount:"), want, runs*uint64(len(all)))
			pids := findHist(t, bs, "hist:keys=kind,common_pid:vals=hitcount,size:")
			var hits, sum uint64
			for k, v := range pids.Entries {
				if !strings.HasPrefix(k, "kind: 1, common_pid: ") || len(v) != 2 {
					t.Errorf("compound key entry %q %v", k, v)
				}
				hits += v[0]
				sum += v[1]
			}
			if len(pids.Entries) != 5*int(runs) || hits != ones || sum != sum1 {
				t.Errorf("kind 1 by thread: %d entries, %d hits, size %d; want %d, %d, %d", len(pids.Entries), hits, sum, 5*runs, ones, sum1)
			}
			small := findHist(t, bs, "hist:keys=size:vals=hitcount:sort=hitcount:size=128")
			var kept uint64
			for _, v := range small.Entries {
				kept += v[0]
			}
			// (Hits counts every hit, a dropped one too, as the kernel's map->hits)
			if len(small.Entries) != 128 || small.Dropped == 0 || small.Hits != runs*uint64(len(all)) || kept+small.Dropped != small.Hits {
				t.Errorf("a table of 128 entries: %d entries holding %d hits, %d hits, %d dropped; want 128 entries and %d hits", len(small.Entries), kept, small.Hits, small.Dropped, runs*uint64(len(all)))
			}
		}
		testprog.MustRun(t, kpd, strconv.Itoa(n))
		if lines := readTrace(t, kpd+".trace", kpd); len(lines) != 0 {
			t.Fatalf("a switched-off event wrote %d records", len(lines))
		}
		check(1)
		if code, o, e := kp("enable", kpd+".trace", "h/w"); code != 0 {
			t.Fatalf("enable: %s%s", o, e)
		}
		testprog.MustRun(t, kpd, strconv.Itoa(n))
		if lines := readTrace(t, kpd+".trace", kpd); len(lines) != len(all) {
			t.Errorf("switched on: %d records, want %d", len(lines), len(all))
		}
		check(2)
	})
}

// TestSyntheticRunTimeHist: histograms added to a synthetic event at run time, as to
// any event's trigger file: for a running program's next hits (kprewrite trigger FILE
// synthetic/NAME), and for the next run (KPREWRITE_CONTROL). They count what the
// action generates, beside the rewrite's, and are paused, continued and removed the
// kernel's way; the rewrite's stays (the generating histogram feeds it).
func TestSyntheticRunTimeHist(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // later runs add to the first run's trace
	prog := testprog.Build(t, synthSrc, "c", "-O2")
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := synthRewrite(t, prog, append([]string{
			"--trigger", "synthetic/d:hist:keys=n.buckets=10",
		}, modeFlags...))
		tr := kpd + ".trace"
		testprog.MustRun(t, kpd)
		const added = "hist:keys=neg:vals=hitcount,n:sort=neg:size=2048"
		if code, o, e := kp("trigger", tr, "synthetic/d", "hist:keys=neg:vals=n:sort=neg"); code != 0 ||
			o != tr+": synthetic/d (prog): triggers now:\n  hist:keys=n.buckets=10:vals=hitcount:sort=hitcount:size=2048 [active]\n  "+added+" [active]\n" {
			t.Fatalf("trigger FILE synthetic/d HIST: exit %d\n%s%s", code, o, e)
		}
		testprog.MustRun(t, kpd)
		check := func(hits uint64, state string) {
			t.Helper()
			bs := histOf(t, tr)
			b := findHist(t, bs, added)
			if !strings.HasSuffix(b.Info, state) || b.Hits != hits {
				t.Fatalf("the run-time histogram: %s, %d hits, want %s and %d", b.Info, b.Hits, state, hits)
			}
			if hits > 0 {
				for n := 0; n < 100; n++ {
					if v := b.Entries[fmt.Sprintf("neg: %d", n-1000)]; len(v) != 2 || v[0] != hits/100 || v[1] != uint64(n)*(hits/100) {
						t.Fatalf("the run-time histogram's entry of neg %d: %v", n-1000, v)
					}
				}
			}
		}
		check(100, "[active]")
		// paused: the next run adds nothing to it; continued: it counts again
		if code, _, e := kp("trigger", tr, "synthetic/d", "hist:keys=neg:vals=n:sort=neg:pause"); code != 0 {
			t.Fatalf("pause: %s", e)
		}
		testprog.MustRun(t, kpd)
		check(100, "[paused]")
		if code, _, e := kp("trigger", tr, "synthetic/d", "hist:keys=neg:vals=n:sort=neg:cont"); code != 0 {
			t.Fatalf("cont: %s", e)
		}
		testprog.MustRun(t, kpd)
		check(200, "[active]")
		if r := findHist(t, histOf(t, tr), "hist:keys=n.buckets=10:"); r.Hits != 400 {
			t.Errorf("the rewrite's histogram of the synthetic event: %d hits after 4 runs, want 400", r.Hits)
		}
		// the rewrite's cannot be removed; the run-time one can; a second like it is EEXIST
		if code, _, e := kp("trigger", tr, "synthetic/d", "!hist:keys=n.buckets=10"); code == 0 || !strings.Contains(e, "given when rewriting") {
			t.Errorf("removing the rewrite's histogram: exit %d %s", code, e)
		}
		if code, _, e := kp("trigger", tr, "synthetic/d", "hist:keys=neg:vals=n:sort=neg"); code == 0 || !strings.Contains(e, "File exists") && !strings.Contains(e, "EEXIST") {
			t.Errorf("a second histogram like the first: exit %d %s", code, e)
		}
		if code, _, e := kp("trigger", tr, "synthetic/d", "traceoff"); code == 0 || !strings.Contains(e, "hist triggers only") {
			t.Errorf("traceoff on a synthetic event: exit %d %s", code, e)
		}
		if code, o, e := kp("trigger", tr, "synthetic/d", "!hist:keys=neg:vals=n:sort=neg"); code != 0 || strings.Contains(o, "keys=neg") {
			t.Errorf("removing the run-time histogram: exit %d\n%s%s", code, o, e)
		}
		// KPREWRITE_CONTROL: a fresh trace file's histogram, placed by the first run
		ctl := filepath.Join(filepath.Dir(kpd), "run.ctl")
		if code, o, e := kp("control", "-o", ctl, "--trigger", "synthetic/d:hist:keys=n.log2", kpd); code != 0 {
			t.Fatalf("control --trigger synthetic/d:...: exit %d\n%s%s", code, o, e)
		}
		os.Remove(tr)
		if res := testprog.Run(t, testprog.Cmd{Path: kpd, Extra: []string{"KPREWRITE_CONTROL=" + ctl}}); res.Exit != 0 || res.Stderr != "" {
			t.Fatal(res)
		}
		want := map[string]uint64{}
		for n := uint64(0); n < 100; n++ {
			want[fmt.Sprintf("n: ~ 2^%d", log2Bucket(n))]++
		}
		checkCounts(t, findHist(t, histOf(t, tr), "hist:keys=n.log2:"), want, 100)
	})
}

// TestSyntheticFilter: a synthetic event's filter, as the kernel's synthetic event's
// filter file: its records that fail it are not written, its histograms count them all
// the same; given when rewriting (--filter synthetic/NAME:EXPR), changed for a running
// program's next hits (kprewrite filter FILE synthetic/NAME EXPR, 0 removing it) and for
// the next run (kprewrite control --filter).
func TestSyntheticFilter(t *testing.T) {
	t.Setenv("KPREWRITE_APPEND", "1") // later runs add to the first run's trace
	prog := testprog.Build(t, synthSrc, "c", "-O2")
	forProbeModes(t, func(t *testing.T, modeFlags []string) {
		kpd := synthRewrite(t, prog, append([]string{
			"--trigger", "synthetic/d:hist:keys=n.buckets=10",
			"--filter", "synthetic/d:n >= 90",
		}, modeFlags...))
		tr := kpd + ".trace"
		records := func() []string {
			t.Helper()
			var got []string
			for _, l := range readTrace(t, tr, kpd) {
				if l.Event == "d" {
					got = append(got, strings.TrimSpace(l.Args))
				}
			}
			return got
		}
		span := func(from, to int) []string {
			var want []string
			for n := from; n < to; n++ {
				want = append(want, fmt.Sprintf("neg=%d n=%d", n-1000, n))
			}
			return want
		}
		testprog.MustRun(t, kpd)
		if got := records(); strings.Join(got, "\n") != strings.Join(span(90, 100), "\n") {
			t.Errorf("records with the rewrite's filter n >= 90:\n%s", strings.Join(got, "\n"))
		}
		if b := findHist(t, histOf(t, tr), "hist:keys=n.buckets=10:"); b.Hits != 100 {
			t.Errorf("the synthetic event's histogram counted %d, want 100 (a filter refuses records only)", b.Hits)
		}
		if code, o, e := kp("filter", tr, "synthetic/d"); code != 0 || o != "synthetic/d (prog): n >= 90\n" {
			t.Errorf("filter FILE synthetic/d: exit %d\n%s%s", code, o, e)
		}
		// at run time: another filter, then none
		if code, o, e := kp("filter", tr, "synthetic/d", "neg < -995"); code != 0 || !strings.Contains(o, "synthetic/d (prog): filter neg < -995 (was n >= 90)") {
			t.Fatalf("filter FILE synthetic/d EXPR: exit %d\n%s%s", code, o, e)
		}
		testprog.MustRun(t, kpd) // the same trace file: the first run's records, then this one's
		if got := records(); strings.Join(got, "\n") != strings.Join(append(span(90, 100), span(0, 5)...), "\n") {
			t.Errorf("records with the run-time filter neg < -995:\n%s", strings.Join(got, "\n"))
		}
		if code, _, e := kp("filter", tr, "synthetic/d", "0"); code != 0 {
			t.Fatalf("filter FILE synthetic/d 0: %s", e)
		}
		testprog.MustRun(t, kpd)
		if got := records(); len(got) != 10+5+100 {
			t.Errorf("%d records after the filter was removed, want 10 + 5 + 100", len(got))
		}
		// a bad filter: the kernel's message
		if code, _, e := kp("filter", tr, "synthetic/d", "nosuch > 1"); code == 0 || !strings.Contains(e, "Field not found") {
			t.Errorf("a bad filter: exit %d %s", code, e)
		}
		// KPREWRITE_CONTROL
		ctl := filepath.Join(filepath.Dir(kpd), "run.ctl")
		if code, o, e := kp("control", "-o", ctl, "--filter", "synthetic/d:n < 3", kpd); code != 0 {
			t.Fatalf("control --filter synthetic/d: exit %d\n%s%s", code, o, e)
		}
		os.Remove(tr)
		if res := testprog.Run(t, testprog.Cmd{Path: kpd, Extra: []string{"KPREWRITE_CONTROL=" + ctl}}); res.Exit != 0 || res.Stderr != "" {
			t.Fatal(res)
		}
		if got := records(); strings.Join(got, "\n") != strings.Join(span(0, 3), "\n") {
			t.Errorf("records with KPREWRITE_CONTROL's filter n < 3:\n%s", strings.Join(got, "\n"))
		}
	})
}
