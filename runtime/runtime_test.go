package kprt_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	. "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// probeSpec and pointSpec describe probes by symbol names of testdata/probed.c.
type probeSpec struct {
	typ                   ProbeType
	flags                 ProbeFlags
	event                 int
	pre, post, entry, ret string
	maxactive, dataSize   uint32
	user                  string // FUser: the struct kprobe / kretprobe (handlers_test.go)
}

type pointSpec struct {
	site   string // label; its end label is site+"_e" (the DCR's end for XOptimized)
	xmode  XMode
	emu    EmuOp
	cc     uint8
	target string
	probes []probeSpec
	// verify makes the site what --verify-regions makes of a would-be-optimized one:
	// an XBoost point whose slot runs the whole DCR [site, site_e), and an int3 with a
	// PFInner point on every other byte. It lists the labels of the DCR's inner
	// instruction boundaries.
	verify []string
	// pflags are extra point flags; with PFInt3Step the slot is the copy then an int3
	pflags PointFlags
}

type probedBin struct {
	path      string
	syms      map[string]uint64
	enc       *Encoded
	specs     []pointSpec
	specPoint []int   // specs[i] is points[specPoint[i]]
	points    []Point // as given to Encode
}

func kprobe(pre, post string) probeSpec {
	return probeSpec{typ: TKprobe, event: -1, pre: pre, post: post}
}

func traced(p probeSpec, ev int) probeSpec {
	p.flags |= FTrace
	p.event = ev
	return p
}

var testEvents = []Event{
	{Group: "kprobes", Name: "add", ID: 100, Fetch: mustFetch("p:kprobes/add t_add a=%di b=%si:s32")},
	{Group: "kprobes", Name: "max", ID: 101},
	{Group: "grp2", Name: "depth", ID: 102, Flags: EFRetprobe, Fetch: mustFetch("r:grp2/depth t_depth $retval n=$arg1")},
}

func mustFetch(def string) []byte {
	p, err := eventdef.Parse(def)
	if err != nil {
		panic(err)
	}
	prog, err := eventdef.Compile(p, nil)
	if err != nil {
		panic(err)
	}
	return prog
}

// buildProbed compiles testdata/probed.c with the runtime object and rewrites it as
// the rewriter would: tables from Encode, slots, int3 at each site, kprewrite_rt_hdr_rel.
func buildProbed(t *testing.T, ldflags []string, specs []pointSpec) *probedBin {
	t.Helper()
	return buildRewritten(t, "testdata/probed.c", ldflags, specs)
}

// buildRewritten compiles src (which defines kp_tables, kp_state and kp_slots) with the
// runtime object and rewrites it: int3 points get slots and an int3, XOptimized points a
// detour buffer (Detour: the template with its fields patched, the DCR copied as it is,
// which the test programs make position-independent, and a jmp back) and SiteJmp.
// Each of tweaks may change the tables before they are encoded.
func buildRewritten(t testing.TB, src string, ldflags []string, specs []pointSpec, tweaks ...func(*Tables, *elf.File)) *probedBin {
	t.Helper()
	needGCC(t)
	cc := "gcc"
	if len(ldflags) > 0 && ldflags[0] == "musl" {
		if _, err := exec.LookPath("musl-gcc"); err != nil {
			t.Skip("musl-gcc not installed (Debian package musl-tools)")
		}
		cc, ldflags = "musl-gcc", ldflags[1:]
	}
	dir := t.TempDir()
	obj := filepath.Join(dir, "kprewrite_rt.o")
	if err := os.WriteFile(obj, Object, 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append([]string{"-O1", "-pthread", "-Iinclude", "-o", exe, src, obj,
		"-Wl,-e,kprewrite_rt_entry"}, ldflags...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, symSize := map[string]uint64{}, map[string]uint64{}
	ss, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		syms[s.Name], symSize[s.Name] = s.Value, s.Size
	}
	img, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	fileOff := func(va uint64) uint64 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && va >= p.Vaddr && va < p.Vaddr+p.Filesz {
				return p.Off + va - p.Vaddr
			}
		}
		t.Fatalf("vaddr %#x not in the file", va)
		return 0
	}
	sym := func(name string) uint64 {
		if name == "" {
			return 0
		}
		v, ok := syms[name]
		if !ok {
			t.Fatalf("no symbol %s", name)
		}
		return v
	}
	bytesAt := func(va, n uint64) []byte { return append([]byte(nil), img[fileOff(va):fileOff(va)+n]...) }

	tabs := &Tables{OrigEntry: sym("_start"), Events: testEvents, TracePath: filepath.Join(dir, "default.trace"), ImageID: 0x1234}
	tabs.Init, tabs.Exit = syms[SymUserInit], syms[SymUserExit] // C handlers' hooks, when the program has them
	slot := sym("kp_slots")
	var int3s []uint64
	type detour struct {
		point    int // index in tabs.Points
		at, site uint64
		dcr      []byte
	}
	var detours []detour
	var specPoint []int
	for _, s := range specs {
		site := sym(s.site)
		n := sym(s.site+"_e") - site
		orig := bytesAt(site, n)
		pt := Point{Site: site, XMode: s.xmode, InsnLen: uint8(n), Orig: orig, EmuOp: s.emu, EmuCC: s.cc, Target: sym(s.target)}
		for _, p := range s.probes {
			pt.Probes = append(pt.Probes, Probe{Type: p.typ, Flags: p.flags, Event: p.event, MaxActive: p.maxactive,
				DataSize: p.dataSize, PreHandler: sym(p.pre), PostHandler: sym(p.post), EntryHandler: sym(p.entry),
				RetHandler: sym(p.ret), User: sym(p.user)})
		}
		switch {
		case s.xmode == XOptimized:
			pt.Slot, pt.SlotLen, pt.Orig = slot, uint8(n), orig[:min(n, 16)]
			detours = append(detours, detour{point: len(tabs.Points), at: slot, site: site, dcr: orig})
			dl, err := trampolines.DetourLen(int(n))
			if err != nil {
				t.Fatal(err)
			}
			slot += uint64(dl+15) &^ 15
		case s.verify != nil:
			// the site: the whole DCR in its slot, then jmp site+L
			bounds := map[uint64]bool{}
			first := n
			for _, l := range s.verify {
				bounds[sym(l)-site] = true
				first = min(first, sym(l)-site)
			}
			jb, err := trampolines.JmpRel32(slot+n, site+n)
			if err != nil {
				t.Fatal(err)
			}
			copy(img[fileOff(slot):], append(orig, jb...))
			pt.Slot, pt.SlotLen, pt.InsnLen, pt.Orig = slot, uint8(n), uint8(first), orig[:first]
			for off := uint64(1); off < n; off++ {
				in := Point{Site: site + off, XMode: XBoost, PFlags: PFInner, Target: site, InsnLen: 1,
					Probes: []Probe{{Type: TVerify, Event: -1}}}
				if bounds[off] {
					// an instruction boundary: the rest of the DCR is a suffix of the site's slot
					in.Slot, in.SlotLen = slot+off, uint8(n-off)
				}
				tabs.Points = append(tabs.Points, in)
				int3s = append(int3s, site+off)
			}
			slot += (n + SlotJmpBackLen + 15) &^ 15
		case s.xmode != XEmulate:
			pt.Slot, pt.SlotLen = slot, uint8(n)
			jb, err := trampolines.JmpRel32(slot+n, site+n)
			if err != nil {
				t.Fatal(err)
			}
			if s.pflags&PFInt3Step != 0 {
				jb = []byte{0xcc}
			}
			copy(img[fileOff(slot):], append(orig, jb...))
			slot += 32
		}
		pt.PFlags |= s.pflags
		if s.xmode != XOptimized {
			int3s = append(int3s, site)
		}
		specPoint = append(specPoint, len(tabs.Points))
		tabs.Points = append(tabs.Points, pt)
	}
	if slot > sym("kp_slots")+8192 {
		t.Fatalf("kp_slots too small")
	}
	for _, tw := range tweaks {
		tw(tabs, f)
	}
	enc, err := tabs.Encode(sym("kp_tables"), sym("kp_state"))
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(enc.RO)) > symSize["kp_tables"] || enc.StateSize > symSize["kp_state"] {
		t.Fatalf("tables too big for the test program: %d, %d", len(enc.RO), enc.StateSize)
	}
	for _, d := range detours {
		n := uint64(len(d.dcr))
		b, err := trampolines.Detour(d.at, enc.PointIndex[d.point], enc.GateAddr(d.point), sym(SymOptBody), d.dcr, d.site+n)
		if err != nil {
			t.Fatal(err)
		}
		copy(img[fileOff(d.at):], b)
		j, err := trampolines.SiteJmp(d.site, int(n), d.at)
		if err != nil {
			t.Fatal(err)
		}
		copy(img[fileOff(d.site):], j)
	}
	copy(img[fileOff(sym("kp_tables")):], enc.RO)
	binary.LittleEndian.PutUint64(img[fileOff(sym(SymHdrRel)):], uint64(HdrRel(sym(SymHdrRel), sym("kp_tables"))))
	for _, a := range int3s {
		img[fileOff(a)] = 0xcc
	}
	if err := os.WriteFile(exe, img, 0o755); err != nil {
		t.Fatal(err)
	}
	return &probedBin{path: exe, syms: syms, enc: enc, specs: specs, specPoint: specPoint, points: tabs.Points}
}

type runResult struct {
	out    string
	vals   map[string]string
	status syscall.WaitStatus
	trace  *tracefile.Trace
}

func (b *probedBin) run(t *testing.T, mode string, env ...string) *runResult {
	t.Helper()
	tr := filepath.Join(filepath.Dir(b.path), "run-"+mode+".trace")
	os.Remove(tr) // runs append to an existing trace file
	cmd := exec.Command(b.path, mode)
	cmd.Env = append([]string{"KPREWRITE_TRACE=" + tr}, env...)
	out, err := cmd.Output()
	r := &runResult{out: string(out), vals: map[string]string{}}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.status = ee.Sys().(syscall.WaitStatus)
		t.Logf("%s: %v, stderr: %s", mode, err, ee.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(r.out) {
		if k, v, ok := strings.Cut(f, "="); ok {
			r.vals[k] = v
		}
	}
	if data, err := os.ReadFile(tr); err == nil {
		r.trace, err = tracefile.ParseTrace(data)
		if err != nil {
			t.Fatalf("trace: %v", err)
		}
	}
	return r
}

func (r *runResult) want(t *testing.T, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if got := r.vals[kv[i]]; got != kv[i+1] {
			t.Errorf("%s = %q, want %q (output %q)", kv[i], got, kv[i+1], r.out)
		}
	}
}

func (r *runResult) num(t *testing.T, k string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(r.vals[k], 10, 64)
	if err != nil {
		t.Fatalf("%s: %v (output %q)", k, err, r.out)
	}
	return n
}

// counter returns the trace file counters of spec point i, probe j.
func (b *probedBin) counter(t *testing.T, r *runResult, i, j int) tracefile.Counter {
	t.Helper()
	if r.trace == nil || len(r.trace.Images) != 1 {
		t.Fatalf("no trace counters")
	}
	return r.trace.Images[0].Counters[b.enc.ProbeIndex[b.specPoint[i]][j]]
}

var basicSpecs = []pointSpec{
	{site: "t_add_s0", xmode: XSStep, probes: []probeSpec{traced(kprobe("pre_add", "post_add"), 0)}},
	{site: "t_mul_s0", xmode: XBoost, probes: []probeSpec{kprobe("pre_mul", "")}},
	{site: "t_calladd_s0", xmode: XEmulate, emu: EmuCall, target: "t_add",
		probes: []probeSpec{kprobe("pre_agg1", ""), kprobe("pre_agg2", "")}},
	{site: "t_max_s0", xmode: XEmulate, emu: EmuJcc, cc: 0xd, target: "t_max_ret", probes: []probeSpec{traced(kprobe("", ""), 1)}},
	{site: "t_skip_s0", xmode: XBoost, probes: []probeSpec{kprobe("pre_skip", "")}},
}

func TestProbesBasic(t *testing.T) {
	for _, link := range []struct {
		name  string
		flags []string
	}{{"pie", nil}, {"nopie", []string{"-no-pie"}}, {"static", []string{"-static"}}, {"static-pie", []string{"-static-pie"}},
		{"musl-static", []string{"musl", "-static"}}, {"musl-pie", []string{"musl"}}} {
		t.Run(link.name, func(t *testing.T) {
			b := buildProbed(t, link.flags, basicSpecs)
			r := b.run(t, "basic")
			if r.status != 0 {
				t.Fatalf("exit %v", r.status)
			}
			// k probe: pre sees ip = site+1, post runs after the single-step with ip fixed
			r.want(t, "add", "7", "n_pre_add", "1", "n_post_add", "1", "bad_add", "0", "post_ip_off", "4")
			// b probe (slot + jmp back)
			r.want(t, "mul", "42", "n_pre_mul", "1")
			// emulated call and jcc, two aggregated probes run in order, a pre handler
			// that moves ip skips the instruction
			r.want(t, "calladd", "30", "max1", "9", "max2", "9", "agg", "1/1", "order", "12")
			r.want(t, "skip1", "2", "skip100", "-1")
			// two signals per k hit, one per b/emulated hit
			r.want(t, "traps", "8", "steps", "2", "boosts", "2", "emulated", "3", "foreign", "0", "records", "4")
			if r.trace == nil || len(r.trace.Records) != 4 {
				t.Fatalf("trace: %+v", r.trace)
			}
			rec := r.trace.Records[0]
			if rec.EventID != 100 || rec.IP != b.syms["t_add_s0"] || rec.Type != RecKprobe || rec.CommString() != "probed" ||
				rec.ImageID != 0x1234 {
				t.Errorf("first record %+v", rec)
			}
			// the fetch program ran: a=%di (x64) b=%si (s32)
			if len(rec.Data) != 12 || binary.LittleEndian.Uint64(rec.Data) != 3 || binary.LittleEndian.Uint32(rec.Data[8:]) != 4 {
				t.Errorf("first record data %x, want a=3 b=4", rec.Data)
			}
			if c := b.counter(t, r, 0, 0); c.Hit != 2 || c.NMissed != 0 {
				t.Errorf("t_add counters %+v", c)
			}
			if c := b.counter(t, r, 3, 0); c.Hit != 2 {
				t.Errorf("t_max counters %+v", c)
			}
		})
	}
}

func TestProbesDisable(t *testing.T) {
	b := buildProbed(t, nil, basicSpecs)
	r := b.run(t, "basic", "KPREWRITE_DISABLE=kprobes/add,max")
	r.want(t, "add", "7", "n_pre_add", "0", "n_post_add", "0", "n_pre_mul", "1", "records", "0", "max1", "9")
	r = b.run(t, "basic", "KPREWRITE_DISABLE=all")
	r.want(t, "add", "7", "n_pre_add", "0", "n_pre_mul", "0", "calladd", "30", "agg", "0/0", "skip100", "101", "records", "0")
	r = b.run(t, "basic", "KPREWRITE_DISABLE=kprobes/*")
	r.want(t, "n_pre_add", "0", "n_pre_mul", "1", "records", "0")
}

func TestNestedHitIsMissed(t *testing.T) {
	b := buildProbed(t, nil, []pointSpec{
		{site: "t_calladd_s0", xmode: XEmulate, emu: EmuCall, target: "t_add", probes: []probeSpec{traced(kprobe("pre_nest", ""), 0)}},
		{site: "t_mul_s0", xmode: XBoost, probes: []probeSpec{traced(kprobe("pre_mul", ""), 1)}},
	})
	r := b.run(t, "nested")
	r.want(t, "calladd", "3", "nested", "42", "n_pre_mul", "0")
	if c := b.counter(t, r, 1, 0); c.Hit != 0 || c.NMissed != 1 {
		t.Errorf("t_mul counters %+v, want 0 hits 1 missed", c)
	}
}

func TestKretprobe(t *testing.T) {
	b := buildProbed(t, nil, []pointSpec{
		{site: "t_depth_s0", xmode: XBoost, probes: []probeSpec{{typ: TKretprobe, flags: FTrace, event: 2,
			entry: "entry_depth", ret: "ret_depth", maxactive: 3, dataSize: 8}}},
	})
	r := b.run(t, "kretprobe")
	// t_depth(5): 6 frames, 3 instances: the 3 outer frames get them, 3 are missed
	r.want(t, "depth5", "15", "depth2", "3", "n_entry", "6", "n_ret", "6", "ret_bad", "0", "vals", "6,10,15,0,1")
	r.want(t, "rettramps", "6")
	if c := b.counter(t, r, 0, 0); c.Hit != 6 || c.NMissed != 3 {
		t.Errorf("counters %+v, want 6 hits 3 missed", c)
	}
	if len(r.trace.Records) != 6 {
		t.Fatalf("%d records", len(r.trace.Records))
	}
	for _, rec := range r.trace.Records {
		if rec.Type != RecKretprobe || rec.EventID != 102 || rec.RetIP == 0 || len(rec.Data) != 16 {
			t.Fatalf("record %+v", rec)
		}
		// $retval, and $arg1 saved at entry in the instance: retval = n(n+1)/2
		ret, n := binary.LittleEndian.Uint64(rec.Data), binary.LittleEndian.Uint64(rec.Data[8:])
		if ret != n*(n+1)/2 {
			t.Errorf("record $retval=%d n=%d", ret, n)
		}
	}
}

func TestKretprobeLongjmp(t *testing.T) {
	b := buildProbed(t, nil, []pointSpec{
		{site: "t_cb_s0", xmode: XBoost, probes: []probeSpec{{typ: TKretprobe, event: -1, ret: "ret_cb", maxactive: 1}}},
	})
	r := b.run(t, "longjmp")
	// ten frames left by longjmp; each one's instance is reclaimed by the next entry
	r.want(t, "jumped", "10", "r", "42", "n_cb_ret", "1")
	if r.status != 0 {
		t.Fatalf("exit %v", r.status)
	}
}

func TestThreads(t *testing.T) {
	for _, libc := range []string{"glibc", "musl"} {
		t.Run(libc, func(t *testing.T) {
			var flags []string
			if libc == "musl" {
				flags = []string{"musl"}
			}
			testThreads(t, buildProbed(t, flags, basicSpecs[:1]))
		})
	}
}

func testThreads(t *testing.T, b *probedBin) {
	start := time.Now()
	r := b.run(t, "threads")
	t.Logf("40000 single-stepped hits with a trace record each on 8 threads: %v (%.1f us per hit, 2 cores)",
		time.Since(start), float64(time.Since(start).Microseconds())/40000)
	r.want(t, "bad", "0", "n_pre_add", "40000", "n_post_add", "40000", "bad_add", "0", "traps", "40000", "steps", "40000")
	if c := b.counter(t, r, 0, 0); c.Hit != 40000 || c.NMissed != 0 {
		t.Errorf("counters %+v", c)
	}
	if n := len(r.trace.Records); n != 40000 || r.trace.Torn != 0 {
		t.Errorf("%d records, %d torn", n, r.trace.Torn)
	}
	tids := map[uint32]int{}
	for _, rec := range r.trace.Records {
		tids[rec.TID]++
	}
	if len(tids) != 8 {
		t.Errorf("records from %d threads, want 8", len(tids))
	}

	// a small file: what does not fit is counted as lost, nothing is torn
	r = b.run(t, "threads", "KPREWRITE_TRACE_SIZE=64K")
	if got := uint64(len(r.trace.Records)) + r.trace.Lost; got != 40000 || r.trace.Lost == 0 {
		t.Errorf("%d records + %d lost, want 40000 with some lost", len(r.trace.Records), r.trace.Lost)
	}
	// a written record is its hit, a lost one is counted: every hit once
	if c := b.counter(t, r, 0, 0); c.Hit != 40000 || c.NMissed != 0 {
		t.Errorf("small file: counters %+v, want 40000 hits", c)
	}
}

func TestForkSharesTrace(t *testing.T) {
	b := buildProbed(t, nil, basicSpecs[:1])
	r := b.run(t, "fork")
	r.want(t, "child_status", "0")
	parent, child := uint32(r.num(t, "parent")), uint32(r.num(t, "child"))
	n := map[uint32]int{}
	for _, rec := range r.trace.Records {
		n[rec.PID]++
	}
	if n[parent] != 2 || n[child] != 11 || len(n) != 2 {
		t.Errorf("records per pid %v, want parent %d: 2, child %d: 11", n, parent, child)
	}
	if c := b.counter(t, r, 0, 0); c.Hit != 13 {
		t.Errorf("counters %+v, want 13 hits from both processes", c)
	}
	// each process wrote its few records into a first block of one granule of its own
	if h := r.trace.Header; h.BlockSize != 4096 || h.Head != 2*4096 {
		t.Errorf("block size %d, %d bytes of blocks given out, want 2 blocks of 4096", h.BlockSize, h.Head)
	}
}

func TestCrashKeepsRecords(t *testing.T) {
	b := buildProbed(t, nil, basicSpecs[:1])
	r := b.run(t, "crash")
	if !r.status.Signaled() || r.status.Signal() != syscall.SIGSEGV {
		t.Fatalf("status %v, want SIGSEGV", r.status)
	}
	if len(r.trace.Records) != 7 {
		t.Errorf("%d records after the crash, want 7", len(r.trace.Records))
	}
}

func TestForeignSigtrap(t *testing.T) {
	b := buildProbed(t, nil, basicSpecs[:1])
	r := b.run(t, "foreign")
	if !r.status.Signaled() || r.status.Signal() != syscall.SIGTRAP {
		t.Fatalf("status %v, want death by SIGTRAP as without the runtime", r.status)
	}
	if len(r.trace.Records) != 1 {
		t.Errorf("%d records", len(r.trace.Records))
	}
}

func TestDefaultTracePathAndSecure(t *testing.T) {
	b := buildProbed(t, nil, basicSpecs[:1])
	cmd := exec.Command(b.path, "basic")
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(b.path), "default.trace"))
	if err != nil {
		t.Fatalf("default trace file: %v", err)
	}
	tr, err := tracefile.ParseTrace(data)
	if err != nil || len(tr.Records) != 2 {
		t.Fatalf("default trace: %v, %+v", err, tr)
	}
	_ = fmt.Sprint()
}
