package tests

// C++ exceptions and forced unwinds (pthread_cancel, pthread_exit) through
// return-probed frames. The return trampoline has unwind information (an FDE in the
// new .eh_frame_hdr, whose personality routine writes the real return address back),
// so every unwind works wherever it is thrown: from the program, inside libstdc++
// (std::vector::at, std::stoi, operator new), in a static program, in threads. Only
// the calls the unwind leaves lose their return events (counted as misses); a probed
// frame that catches keeps its own.

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/ehframe"
	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// cxxThrowSrc: every throw passes through return-probed functions. at, conv and grab
// throw from inside libstdc++ (__throw_out_of_range_fmt, __throw_invalid_argument,
// operator new[]); mid catches leaf's exception and rethrows it to outer, which
// catches and returns; cleanup's destructor runs on the way (_Unwind_Resume); nest
// catches in an outer try block of its own and rethrows with std::rethrow_exception
// inside it; bt_leaf calls backtrace() and _Unwind_Backtrace under bt_mid's return
// probe. "threads" throws in 4 threads at once.
const cxxThrowSrc = `
#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <execinfo.h>
#include <unwind.h>

#define NI extern "C" __attribute__((noinline))

NI int at(int i) {
	static std::vector<int> v{1, 2, 3};
	return v.at(i);
}

NI int conv(const char *s) { return std::stoi(s); }

char *volatile kept;
NI long grab(long n) {
	kept = new char[n];
	kept[0] = 7;
	long r = kept[0];
	delete[] kept;
	return r;
}

NI int leaf(int n) {
	if (n == 7)
		throw std::runtime_error("seven");
	return n * 2;
}

NI int mid(int n) {
	try {
		return leaf(n) + 1;
	} catch (const std::runtime_error &) {
		std::printf("mid rethrows %d\n", n);
		throw;
	}
}

NI int outer(int n) {
	try {
		return mid(n);
	} catch (const std::exception &e) {
		std::printf("outer caught %s\n", e.what());
		return -1;
	}
}

struct Noisy {
	int n;
	~Noisy() { std::printf("~Noisy %d\n", n); }
};

NI int cleanup(int n) {
	Noisy x{n};
	return leaf(n) + x.n;
}

NI int nest(int n) {
	try {
		try {
			return mid(n);
		} catch (const std::logic_error &) {
			return -2;
		}
	} catch (...) {
		std::exception_ptr p = std::current_exception();
		try {
			std::rethrow_exception(p);
		} catch (const std::runtime_error &e) {
			std::printf("nest caught %s\n", e.what());
		}
		return -3;
	}
}

static _Unwind_Reason_Code count_frame(struct _Unwind_Context *, void *arg) {
	return ++*(int *)arg > 1000 ? _URC_END_OF_STACK : _URC_NO_REASON;
}

NI int bt_leaf(int n) {
	void *frames[64];
	int k = backtrace(frames, 64), m = 0;
	_Unwind_Backtrace(count_frame, &m);
	std::printf("backtrace %s, _Unwind_Backtrace %s\n", k >= 2 ? "ok" : "short", m >= 2 && m <= 1000 ? "ok" : "bad");
	return n;
}

NI int bt_mid(int n) { return bt_leaf(n) + 1; }

NI int tleaf(int n) {
	if (n % 3 == 0)
		throw std::runtime_error("three");
	return n;
}

NI int twork(int n) { return tleaf(n) + 1; }

static int threads() {
	std::atomic<int> ready{0};
	int caught[4] = {0}, sum[4] = {0};
	std::vector<std::thread> ts;
	for (int id = 0; id < 4; id++)
		ts.emplace_back([&, id] {
			ready++;
			while (ready < 4)
				;
			for (int i = 1; i <= 300; i++) {
				try {
					sum[id] += twork(i);
				} catch (const std::runtime_error &) {
					caught[id]++;
				}
			}
		});
	for (auto &t : ts)
		t.join();
	for (int id = 0; id < 4; id++)
		std::printf("thread %d: sum %d caught %d\n", id, sum[id], caught[id]);
	return 0;
}

int main(int argc, char **argv) {
	if (argc > 1 && std::strcmp(argv[1], "threads") == 0)
		return threads();
	for (int i = 2; i <= 3; i++) {
		try {
			std::printf("at %d -> %d\n", i, at(i));
		} catch (const std::out_of_range &) {
			std::printf("at %d: out_of_range\n", i);
		}
	}
	for (const char *s : {"42", "x"}) {
		try {
			std::printf("conv %s -> %d\n", s, conv(s));
		} catch (const std::invalid_argument &) {
			std::printf("conv %s: invalid_argument\n", s);
		}
	}
	for (long n : {16L, 1L << 62}) {
		try {
			std::printf("grab -> %ld\n", grab(n));
		} catch (const std::bad_alloc &) {
			std::printf("grab: bad_alloc\n");
		}
	}
	for (int n : {6, 7})
		std::printf("outer %d -> %d\n", n, outer(n));
	try {
		std::printf("cleanup -> %d\n", cleanup(7));
	} catch (const std::exception &e) {
		std::printf("main caught %s\n", e.what());
	}
	std::printf("nest -> %d\n", nest(7));
	std::printf("bt -> %d\n", bt_mid(1));
	return 0;
}
`

// cxxThrowFuncs have an entry (p:cx/F) and a return (r:cx/F_ret) event each.
var cxxThrowFuncs = []struct{ fn, args, ret string }{
	{"at", "i=%di:s32", "s32"}, {"conv", "s=+0(%di):string", "s32"}, {"grab", "n=%di:s64", "s64"},
	{"leaf", "n=%di:s32", "s32"}, {"mid", "n=%di:s32", "s32"}, {"outer", "n=%di:s32", "s32"},
	{"cleanup", "n=%di:s32", "s32"}, {"nest", "n=%di:s32", "s32"}, {"bt_mid", "n=%di:s32", "s32"},
	{"twork", "n=%di:s32", "s32"},
}

// a second return probe on mid: its instances and mid_ret's share mid's return-address
// word (a chain, which the personality routine unwinds as one frame)
func cxxThrowDefs() []string {
	var defs []string
	for _, f := range cxxThrowFuncs {
		defs = append(defs, fmt.Sprintf("p:cx/%s %s %s", f.fn, f.fn, f.args), fmt.Sprintf("r:cx/%s_ret %s ret=$retval:%s", f.fn, f.fn, f.ret))
	}
	return append(defs, "r:cx/mid_ret2 mid n=$arg1:s32 ret=$retval:s32")
}

// cxxThrowWant is the whole trace of the main run: an entry record for every call, a
// return record for every call that returned; none for the calls an exception left
// (at 3, conv "x", grab 1<<62, leaf 7 three times, mid 7 twice, cleanup 7), and the
// frames that caught (outer 7, nest 7) still return. mid's two return events run newest
// definition first, as the uprobe tracer runs them (TestKernelDifferentialChainedReturns).
var cxxThrowWant = []string{
	"at i=2", "at_ret ret=3", "at i=3",
	`conv s="42"`, "conv_ret ret=42", `conv s="x"`,
	"grab n=16", "grab_ret ret=7", "grab n=4611686018427387904",
	"outer n=6", "mid n=6", "leaf n=6", "leaf_ret ret=12", "mid_ret2 n=6 ret=13", "mid_ret ret=13", "outer_ret ret=13",
	"outer n=7", "mid n=7", "leaf n=7", "outer_ret ret=-1",
	"cleanup n=7", "leaf n=7",
	"nest n=7", "mid n=7", "leaf n=7", "nest_ret ret=-3",
	"bt_mid n=1", "bt_mid_ret ret=2",
}

// cxxThrowMisses are the lost return events `kprewrite profile` shows per return event.
var cxxThrowMisses = map[string]uint64{"at_ret": 1, "conv_ret": 1, "grab_ret": 1, "leaf_ret": 3, "mid_ret": 2, "mid_ret2": 2,
	"outer_ret": 0, "cleanup_ret": 1, "nest_ret": 0, "bt_mid_ret": 0}

// unwindBuilds are the builds the unwind tests run on.
var unwindBuilds = []struct {
	name  string
	flags []string
}{
	{"O0-pie", []string{"-O0", "-pthread", "-pie", "-fPIE"}},
	{"O2-pie", []string{"-O2", "-pthread", "-pie", "-fPIE"}},
	{"O0-nopie", []string{"-O0", "-pthread", "-no-pie"}},
	{"O2-nopie", []string{"-O2", "-pthread", "-no-pie"}},
	{"O2-static", []string{"-O2", "-pthread", "-static"}},
	// nongnu libunwind's _Unwind_RaiseException (linked before libstdc++, so
	// __cxa_throw binds to it): an unwinder whose context is not libgcc's
	{"O2-pie-libunwind", []string{"-O2", "-pthread", "-pie", "-fPIE", libunwindSO}},
}

const libunwindSO = "/usr/lib/x86_64-linux-gnu/libunwind.so.8"

// unwindModes: jump-optimized return probes (ro, the default) and int3 ones (rb).
var unwindModes = []struct {
	name, flag string
	args       []string
}{{"ro", "r[OPTIMIZED]", nil}, {"rb", "r[BOOSTED]", []string{"--no-optimize"}}}

// TestCxxThrowThroughRetprobes: the rewritten program prints exactly what the original
// prints and exits 0 (no std::terminate), the trace holds exactly the expected
// records, and the lost return events are the profile's misses; 4 threads throwing
// at once lose exactly the returns of the calls that threw.
func TestCxxThrowThroughRetprobes(t *testing.T) {
	for _, b := range unwindBuilds {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			if strings.HasSuffix(b.name, "libunwind") {
				testprog.Need(t, libunwindSO)
			}
			prog := testprog.Build(t, cxxThrowSrc, "c++", b.flags...)
			if strings.HasSuffix(b.name, "libunwind") {
				r := testprog.Run(t, testprog.Cmd{Path: prog, Extra: []string{"LD_DEBUG=bindings"}})
				if !regexp.MustCompile("to \\S*libunwind\\.so\\.8 \\[0\\]: normal symbol `_Unwind_RaiseException'").MatchString(r.Stderr) {
					t.Fatalf("_Unwind_RaiseException is not libunwind's:\n%s", testprog.Clip(r.Stderr, 3000))
				}
			}
			for _, m := range unwindModes {
				t.Run(m.name, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "prog")
					args := append([]string{"rewrite", "-o", out}, m.args...)
					for _, d := range cxxThrowDefs() {
						args = append(args, "-e", d)
					}
					code, _, stderr := kp(append(args, prog)...)
					if code != 0 {
						t.Fatalf("rewrite: exit %d: %s", code, stderr)
					}
					if !strings.Contains(stderr, "that call's return event is lost") {
						t.Errorf("rewrite warning: %q", stderr)
					}
					list := listFlags(t, out)
					for _, f := range cxxThrowFuncs {
						if m.name == "rb" || b.name == "O2-pie" {
							// every entry is optimizable at -O2 PIE; elsewhere some may stay int3
							if !strings.Contains(list[f.fn+"+0x0"], m.flag) {
								t.Errorf("%s: %q, want %s", f.fn, list[f.fn+"+0x0"], m.flag)
							}
						}
					}

					tr := filepath.Join(dir, "run.trace")
					res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
					for _, s := range []string{"at 3: out_of_range\n", "conv x: invalid_argument\n", "grab: bad_alloc\n",
						"mid rethrows 7\nouter caught seven\nouter 7 -> -1\n", "~Noisy 7\nmain caught seven\n",
						"nest caught seven\nnest -> -3\n", "backtrace ok, _Unwind_Backtrace ok\nbt -> 2\n"} {
						if !strings.Contains(res.Stdout, s) {
							t.Errorf("output lacks %q:\n%s", s, res)
						}
					}
					if res.Exit != 0 || res.Stderr != "" {
						t.Fatalf("run: %s", res)
					}
					sameLines(t, eas(readTrace(t, tr, out)), cxxThrowWant)
					prof := profile(t, tr, out)
					for ev, miss := range cxxThrowMisses {
						if prof[ev][1] != miss {
							t.Errorf("profile %s: %v, want %d misses", ev, prof[ev], miss)
						}
					}

					// 4 threads: 300 calls each, every third one throws
					ttr := filepath.Join(dir, "threads.trace")
					res = testprog.Same(t, prog, out, testprog.Cmd{Args: []string{"threads"}, Extra: []string{"KPREWRITE_TRACE=" + ttr}}, nil)
					if res.Exit != 0 || strings.Count(res.Stdout, "caught 100\n") != 4 {
						t.Fatalf("threads: %s", res)
					}
					n := map[string]int{}
					for _, l := range readTrace(t, ttr, out) {
						n[l.Event]++
					}
					if n["twork"] != 1200 || n["twork_ret"] != 800 || len(n) != 2 {
						t.Errorf("threads trace: %v, want 1200 twork and 800 twork_ret records", n)
					}
					if p := profile(t, ttr, out)["twork_ret"]; p != [2]uint64{800, 400} {
						t.Errorf("threads profile twork_ret: %v, want 800 hits and 400 misses", p)
					}
				})
			}
		})
	}
}

// cancelSrc: a thread blocked in read() inside a return-probed function is canceled
// (pthread_cancel), another leaves two return-probed functions with pthread_exit. With
// -fexceptions the cleanup handlers are landing pads the forced unwind must reach
// through the trampoline (without unwind information it stopped there and skipped
// waiter's handler).
const cancelSrc = `
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define NI __attribute__((noinline))

static int fds[2];

static void cleanup(void *what) { printf("cleanup %s\n", (const char *)what); }

NI int blocked(int fd) {
	char c = 0;
	pthread_cleanup_push(cleanup, "blocked");
	if (read(fd, &c, 1) != 1)
		c = -1;
	pthread_cleanup_pop(0);
	return c;
}

NI int waiter(int fd) {
	int r;
	pthread_cleanup_push(cleanup, "waiter");
	r = blocked(fd) + 1;
	pthread_cleanup_pop(0);
	return r;
}

NI int exiter(int n) {
	if (n > 0)
		pthread_exit((void *)(long)n);
	return n;
}

NI int exit_outer(int n) {
	int r;
	pthread_cleanup_push(cleanup, "exit_outer");
	r = exiter(n) + 1;
	pthread_cleanup_pop(0);
	return r;
}

static void *t_cancel(void *a) { return (void *)(long)waiter(fds[0]); }
static void *t_exit(void *a) { return (void *)(long)exit_outer(5); }

int main(void) {
	pthread_t t;
	void *r;
	if (pipe(fds) != 0 || write(fds[1], "A", 1) != 1)
		return 2;
	printf("waiter -> %d\n", waiter(fds[0])); /* returns: 'A' + 1 */
	pthread_create(&t, NULL, t_cancel, NULL);
	pthread_cancel(t); /* acted on in read(), inside blocked() */
	pthread_join(t, &r);
	printf("canceled: %s\n", r == PTHREAD_CANCELED ? "yes" : "no");
	pthread_create(&t, NULL, t_exit, NULL);
	pthread_join(t, &r);
	printf("exited with %ld\n", (long)r);
	printf("exit_outer -> %d\n", exit_outer(0));
	return 0;
}
`

var cancelDefs = []string{
	"p:cn/waiter waiter fd=%di:s32", "r:cn/waiter_ret waiter ret=$retval:s32",
	"p:cn/blocked blocked fd=%di:s32", "r:cn/blocked_ret blocked ret=$retval:s32",
	"p:cn/exit_outer exit_outer n=%di:s32", "r:cn/exit_outer_ret exit_outer ret=$retval:s32",
	"p:cn/exiter exiter n=%di:s32", "r:cn/exiter_ret exiter ret=$retval:s32",
}

var cancelWant = []string{
	"waiter fd=3", "blocked fd=3", "blocked_ret ret=65", "waiter_ret ret=66",
	"waiter fd=3", "blocked fd=3",
	"exit_outer n=5", "exiter n=5",
	"exit_outer n=0", "exiter n=0", "exiter_ret ret=0", "exit_outer_ret ret=1",
}

// TestForcedUnwindThroughRetprobes: pthread_cancel and pthread_exit unwind through
// return-probed frames in a C program: same output (every cleanup handler runs), same
// exit status, the entry records of every call and the return records of the calls
// that returned, one miss per unwound return probe.
func TestForcedUnwindThroughRetprobes(t *testing.T) {
	builds := []struct {
		name  string
		flags []string
		// lost returns the profile counts; without -fexceptions glibc's cleanup
		// handlers are setjmp buffers, and its unwind stop function longjmps to the
		// caller that registered one (waiter, exit_outer) as soon as the unwind
		// reaches the callee's trampoline frame, before the frame's personality
		// routine runs: blocked's and exiter's instances are then left stale
		// (reclaimed once the thread is dead), not counted
		misses uint64
	}{
		{"O2-pie-fexceptions", []string{"-O2", "-pthread", "-fexceptions"}, 1},
		{"O0-nopie", []string{"-O0", "-pthread", "-no-pie"}, 0},
		{"O2-static-fexceptions", []string{"-O2", "-pthread", "-static", "-fexceptions"}, 1},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prog := testprog.Build(t, cancelSrc, "c", b.flags...)
			for _, m := range unwindModes {
				t.Run(m.name, func(t *testing.T) {
					dir := t.TempDir()
					out := filepath.Join(dir, "prog")
					rewriteWith(t, prog, out, cancelDefs, m.args...)
					tr := filepath.Join(dir, "run.trace")
					res := testprog.Same(t, prog, out, testprog.Cmd{Extra: []string{"KPREWRITE_TRACE=" + tr}}, nil)
					want := "waiter -> 66\ncleanup blocked\ncleanup waiter\ncanceled: yes\ncleanup exit_outer\nexited with 5\nexit_outer -> 1\n"
					if res.Exit != 0 || res.Stdout != want || res.Stderr != "" {
						t.Fatalf("run: %s\nwant stdout %q", res, want)
					}
					sameLines(t, eas(readTrace(t, tr, out)), cancelWant)
					prof := profile(t, tr, out)
					for ev, p := range map[string][2]uint64{"waiter_ret": {1, 1}, "blocked_ret": {1, b.misses}, "exit_outer_ret": {1, 1}, "exiter_ret": {1, b.misses}} {
						if prof[ev] != p {
							t.Errorf("profile %s: %v, want %v", ev, prof[ev], p)
						}
					}
				})
			}
		})
	}
}

// ehHdrOf returns the .eh_frame_hdr PT_GNU_EH_FRAME names (nil without one) and how
// many PT_GNU_EH_FRAME headers there are.
func ehHdrOf(t *testing.T, f *elfio.File) (*ehframe.Hdr, int) {
	t.Helper()
	var h *ehframe.Hdr
	n := 0
	for _, p := range f.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME {
			continue
		}
		n++
		b, err := f.Bytes(p.Vaddr, p.Filesz)
		if err != nil {
			t.Fatalf("%s: PT_GNU_EH_FRAME: %v", f.Path, err)
		}
		hdr, err := ehframe.ParseHdr(b, p.Vaddr)
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		if s := f.Section(".eh_frame_hdr"); s == nil || s.Addr != p.Vaddr || s.Size != p.Filesz {
			t.Errorf("%s: .eh_frame_hdr section %+v is not PT_GNU_EH_FRAME %+v", f.Path, s, p)
		}
		h = &hdr
	}
	return h, n
}

// TestRetprobeEHFrameHdr: with return probes, the rewritten executable's
// PT_GNU_EH_FRAME names a new .eh_frame_hdr whose table is the original one (none in a
// static program, which has no header and registers its FDEs itself) plus the
// trampoline's FDE,
// covering the pad byte before it and its first byte, in the runtime's data, with the
// runtime's CIE. Without return probes the header is left alone.
func TestRetprobeEHFrameHdr(t *testing.T) {
	for _, b := range []struct {
		name  string
		flags []string
	}{{"pie", []string{"-O2"}}, {"static", []string{"-O2", "-static"}}, {"nohdr", []string{"-O2", "-Wl,--no-eh-frame-hdr"}}} {
		t.Run(b.name, func(t *testing.T) {
			prog := testprog.Build(t, cxxThrowSrc, "c++", append(b.flags, "-pthread")...)
			dir := t.TempDir()
			out, outP := filepath.Join(dir, "ret"), filepath.Join(dir, "entry")
			rewriteWith(t, prog, out, []string{"r:cx/leaf leaf", "p:cx/mid mid"})
			rewriteWith(t, prog, outP, []string{"p:cx/mid mid"})
			f, err := elfio.Open(prog)
			if err != nil {
				t.Fatal(err)
			}
			g, err := elfio.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			gp, err := elfio.Open(outP)
			if err != nil {
				t.Fatal(err)
			}
			orig, n0 := ehHdrOf(t, f)
			var want []ehframe.HdrEntry
			if b.name != "pie" {
				// none: a static program's own FDEs stay found through crtbeginT's
				// registry only; without --eh-frame-hdr a dynamic program's are not
				// found at all, and still are not (its exceptions terminate, as before)
				if orig != nil || n0 != 0 {
					t.Fatalf("%s input has PT_GNU_EH_FRAME", b.name)
				}
			} else {
				if orig == nil || n0 != 1 {
					t.Fatalf("input has %d PT_GNU_EH_FRAME", n0)
				}
				want = append(want, orig.Table...)
			}
			if h, n := ehHdrOf(t, gp); b.name != "pie" && n != 0 || b.name == "pie" && (n != 1 || fmt.Sprint(h) != fmt.Sprint(orig)) {
				t.Errorf("entry probes only: %d PT_GNU_EH_FRAME, table changed: %v", n, h != nil && fmt.Sprint(h) != fmt.Sprint(orig))
			}

			h, n := ehHdrOf(t, g)
			if n != 1 {
				t.Fatalf("%d PT_GNU_EH_FRAME headers, want 1", n)
			}
			syms := symbolTable(t, out)
			tramp, ehAt := syms["kprewrite_rt_rettramp"], syms["kprewrite_rt_eh_frame"]
			data := g.Section(".kprewrite.data")
			if tramp == 0 || ehAt == 0 || data == nil || ehAt < data.Addr || ehAt >= data.Addr+data.Size {
				t.Fatalf("trampoline %#x, eh_frame %#x, .kprewrite.data %+v", tramp, ehAt, data)
			}
			var ours *ehframe.HdrEntry
			got := h.Table[:0:0]
			for i, e := range h.Table {
				if i > 0 && h.Table[i-1].Loc >= e.Loc {
					t.Fatalf("table not sorted at %d: %+v", i, h.Table[i-1:i+1])
				}
				if e.Loc == tramp-1 {
					ours = &h.Table[i]
					continue
				}
				got = append(got, e)
			}
			sort.Slice(want, func(i, j int) bool { return want[i].Loc < want[j].Loc })
			if ours == nil || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("table: ours %+v; %d other entries, want the %d original ones", ours, len(got), len(want))
			}
			if eh := f.Section(".eh_frame"); b.name == "pie" && h.EhFrame != eh.Addr || b.name != "pie" && h.EhFrame != ehAt {
				t.Errorf("eh_frame_ptr %#x, want .eh_frame at %#x (pie) or the trampoline's CIE at %#x", h.EhFrame, eh.Addr, ehAt)
			}
			var size uint64
			for _, s := range g.Symbols {
				if s.Name == "kprewrite_rt_eh_frame" {
					size = s.Size
				}
			}
			blob, err := g.Bytes(ehAt, size)
			if err != nil {
				t.Fatal(err)
			}
			fdes, err := ehframe.Parse(blob, ehAt, 0, 0)
			if err != nil || len(fdes) != 1 || ehAt+fdes[0].Offset != ours.FDE || fdes[0].Start != tramp-1 || fdes[0].End != tramp+1 {
				t.Errorf("trampoline FDE %+v (%v), want [%#x, %#x) at %#x", fdes, err, tramp-1, tramp+1, ours.FDE)
			}
			if b.name == "nohdr" {
				res := testprog.Same(t, prog, out, testprog.Cmd{}, nil)
				if res.Signal != "aborted" || !strings.Contains(res.Stderr, "terminate called") {
					t.Errorf("without .eh_frame_hdr the program's own exceptions terminate it, rewritten too: %s", res)
				}
			}
		})
	}
}
