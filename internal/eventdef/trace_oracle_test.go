package eventdef

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// oracleEvent is one probe event of the trace oracle test, written for
// kprewrite (ours) and for the kernel's uprobe tracer (kernel). The two
// differ only where uprobes lack a feature; the argument names match, so
// the printed text must too. SITE, GV and GS are replaced by the probe
// point and the addresses of gv and gs. firstOnly events are compared on
// the first call only: on the second their fetches fault in a place where
// the kernel leaves stale bytes.
type oracleEvent struct {
	ours, kernel string
	firstOnly    bool
}

var oracleEvents = []oracleEvent{
	{ours: "p:kpwtest/e1 SITE %di %di:u8 %di:s8 %di:x8 %di:u16 %di:s16 %di:x16 %di:u32 %di:s32 %di:x32 %di:u64 %di:s64 %di:x64 %di:char %si:char hi=%si:b4@60/64 lo=%di:b3@1/8 ip=%ip"},
	{ours: `p:kpwtest/e2 SITE +0(%dx):string s2=+0(%dx):ustring +u0(%dx):string nm=+8(%cx):string ar=+40(%cx):s64[3] by=+64(%cx):char[4] bx=+64(%cx):x8[4] sh=+68(%cx):s16[2] c=%r8:char ux=+u64(%cx):x32 a=+0(%cx):s32 au=+0(%cx):u32`},
	{ours: `p:kpwtest/e3 SITE bf=+4(%cx):b4@0/32 bf2=+4(%cx):b5@4/32 bfa=+4(%cx):b4@0/32[2] s=$stack s0=$stack0 s1=$stack1 a7=$arg7 a8=$arg8:s64 co=$comm co2=$COMM:string im=\123 imn=\-5:s32 imx=\0x10:x8`,
		kernel: `p:kpwtest/e3 SITE bf=+4(%cx):b4@0/32 bf2=+4(%cx):b5@4/32 bfa=+4(%cx):b4@0/32[2] s=$stack s0=$stack0 s1=$stack1 a7=$stack1 a8=$stack2:s64 co=$comm co2=$COMM:string im=\123 imn=\-5:s32 imx=\0x10:x8`},
	{ours: `p:kpwtest/e4 SITE gv=@gv gvx=@gv:x32 gvb=@gv+1:x8[3] gsn=@gs+8:string gsa=+0(@gs):s32`,
		kernel: `p:kpwtest/e4 SITE gv=@GV gvx=@GV:x32 gvb=@GV1:x8[3] gsn=@GS8:string gsa=+0(@GS):s32`},
	{ours: `p:kpwtest/e5 SITE a1=$arg1 a2=$arg2:s32 a3=$arg3 a4=$arg4:x32 a5=$arg5:u8 a6=$arg6:s16 a9=$arg9`,
		kernel: `p:kpwtest/e5 SITE a1=%di a2=%si:s32 a3=%dx a4=%cx:x32 a5=%r8:u8 a6=%r9:s16 a9=$stack3`},
	{ours: `p:kpwtest/e6 SITE strs=+16(%cx):string[3] us=+u16(%cx):ustring[2] deep=+0(+72(%cx)):s32 deep2=+8(+72(+72(%cx))):string ps=+16(%cx):x64[3]`,
		firstOnly: true},
	{ours: `r:kpwtest/r1 SITE $retval rv=$retval:s64 rs=$stack r0=+0($stack):x64 r32=$retval:s32`},
	{ours: `p:kpwtest/r2 SITE%return rv=$retval:u16 ip=%ip`},
}

type region struct {
	addr uint64
	data []byte
	hit  int // the call whose stack this is, or -1
}

type hit struct {
	regs [PtRegsSize / 8]uint64
	ip   uint64
	ret  uint64
	rv   uint64
}

func TestTraceMatchesKernel(t *testing.T) {
	needOracle(t)
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kpwprog")
	out, err := exec.Command(gcc, "-O1", "-g", "-no-pie", "-fno-pie", "-fno-omit-frame-pointer",
		"-o", bin, "testdata/probed.c").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	syms, fileOff := elfSymbols(t, bin, "target")

	// The kernel's return probes replace the return address on the stack
	// with their trampoline's, so learn the real ones (code addresses do
	// not change, the binary is not PIE) from a run without probes.
	plain, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	_, plainHits := parseProgramOutput(t, string(plain))
	resolve := func(s string) (uint64, bool) { v, ok := syms[s]; return v, ok }

	// Define the kernel's events, enabled in a tracing instance of our own.
	repl := strings.NewReplacer(
		"SITE", bin+":"+hexs(fileOff),
		"GV1", hexs(syms["gv"]+1), "GV", hexs(syms["gv"]),
		"GS8", hexs(syms["gs"]+8), "GS", hexs(syms["gs"]))
	probes := map[string]*Probe{}
	firstOnly := map[string]bool{}
	defer removeOracleEvents(t)
	for _, ev := range oracleEvents {
		p, err := Parse(strings.Replace(ev.ours, "SITE", "target", 1))
		if err != nil {
			t.Fatal(err)
		}
		probes[p.Event] = p
		firstOnly[p.Event] = ev.firstOnly
		kdef := ev.kernel
		if kdef == "" {
			kdef = ev.ours
		}
		kdef = repl.Replace(kdef)
		if err := writeUprobeEvents(kdef); err != nil {
			msg, pos, _ := kernelError(strings.Join(strings.Fields(kdef), " "))
			t.Fatalf("kernel refused %q: %v: %s at %d", kdef, err, msg, pos)
		}
	}
	inst := tracefs + "/instances/kpwtest"
	if err := os.Mkdir(inst, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	defer os.Remove(inst)
	if err := os.WriteFile(inst+"/events/"+oracleGroup+"/enable", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	stdout, runErr := exec.Command(bin).Output()
	os.WriteFile(inst+"/events/"+oracleGroup+"/enable", []byte("0"), 0)
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	trace, err := os.ReadFile(inst + "/trace")
	if err != nil {
		t.Fatal(err)
	}

	regions, hits := parseProgramOutput(t, string(stdout))
	for i := range hits {
		hits[i].ret = plainHits[i].ret
		for _, r := range regions {
			if r.addr == hits[i].regs[offSP/8] {
				binary.LittleEndian.PutUint64(r.data, hits[i].ret)
			}
		}
	}
	// memory of call k: the globals and its own stack dump.
	memOf := func(k int) func(uint64, []byte) bool {
		return func(addr uint64, buf []byte) bool {
			for _, r := range regions {
				if (r.hit == -1 || r.hit == k) && addr >= r.addr && addr-r.addr+uint64(len(buf)) <= uint64(len(r.data)) {
					copy(buf, r.data[addr-r.addr:])
					return true
				}
			}
			return false
		}
	}

	records := splitTrace(string(trace))
	seen := map[string]int{}
	compared := 0
	for _, rec := range records {
		name, _, _ := strings.Cut(rec, ":")
		p := probes[name]
		if p == nil {
			t.Errorf("unexpected trace record %q", rec)
			continue
		}
		call := seen[name]
		seen[name]++
		if call >= len(hits) {
			t.Errorf("more %s records than calls", name)
			continue
		}
		if call > 0 && firstOnly[name] {
			continue
		}
		h := hits[call]
		prog, err := Compile(p, resolve)
		if err != nil {
			t.Fatal(err)
		}
		m := &Machine{Regs: h.regs, Mem: memOf(call), Comm: "kpwprog"}
		ed, err := RunEntry(prog, m)
		if err != nil {
			t.Fatal(err)
		}
		if p.Return {
			m.Regs[offAX/8] = h.rv
			m.Regs[offSP/8] += 8
			m.Regs[16] = h.ret // ip
			m.EntryData = ed
		}
		record, err := Run(prog, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := FormatEvent(p, h.ip, h.ret, record, FormatOptions{})
		if err != nil {
			t.Fatal(err)
		}
		compared++
		if testing.Verbose() {
			t.Logf("call %d: %q", call+1, rec)
		}
		if got != rec {
			t.Errorf("call %d, event %s:\n kernel: %q\n ours:   %q", call+1, name, rec, got)
		}
	}
	for name := range probes {
		if seen[name] != len(hits) {
			t.Errorf("event %s: %d records for %d calls", name, seen[name], len(hits))
		}
	}
	t.Logf("%d trace records compared with the kernel's", compared)
}

func hexs(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// elfSymbols returns the symbol addresses of a binary and the file offset
// of the function fn.
func elfSymbols(t *testing.T, path, fn string) (map[string]uint64, uint64) {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ss, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, s := range ss {
		m[s.Name] = s.Value
	}
	addr, ok := m[fn]
	if !ok {
		t.Fatalf("no symbol %s", fn)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return m, addr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("%s is in no PT_LOAD", fn)
	return nil, 0
}

func parseProgramOutput(t *testing.T, out string) ([]region, []hit) {
	var regions []region
	var hits []hit
	for _, line := range strings.Split(out, "\n") {
		w := strings.Fields(line)
		switch {
		case len(w) == 3 && w[0] == "MEM":
			a, err1 := strconv.ParseUint(w[1], 16, 64)
			d, err2 := hex.DecodeString(w[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("bad line %q", line)
			}
			regions = append(regions, region{a, d, len(hits) - 1})
		case len(w) > 0 && w[0] == "HIT":
			var h hit
			for _, kv := range w[1:] {
				k, v, _ := strings.Cut(kv, "=")
				n, err := strconv.ParseUint(v, 16, 64)
				if err != nil {
					t.Fatalf("bad line %q", line)
				}
				switch k {
				case "ip":
					h.ip = n
					h.regs[16] = n
				case "ret":
					h.ret = n
				default:
					off, ok := RegOffset(k)
					if !ok {
						t.Fatalf("bad register %q", k)
					}
					h.regs[off/8] = n
				}
			}
			hits = append(hits, h)
		case len(w) == 2 && w[0] == "RET":
			n, err := strconv.ParseUint(w[1], 16, 64)
			if err != nil || len(hits) == 0 {
				t.Fatalf("bad line %q", line)
			}
			hits[len(hits)-1].rv = n
		}
	}
	if len(hits) != 2 {
		t.Fatalf("program output has %d calls:\n%s", len(hits), out)
	}
	return regions, hits
}

// traceHead matches the columns before the event name of a trace line:
// task-pid, [cpu], flags, timestamp.
var traceHead = regexp.MustCompile(`(?m)^\s*\S.*?-\d+\s+\[\d+\]\s+\S+\s+\d+\.\d+: `)

// splitTrace returns the "EVENT: ..." text of each record; strings may
// hold newlines, so records are split at line heads, not at newlines.
func splitTrace(trace string) []string {
	var out []string
	locs := traceHead.FindAllStringIndex(trace, -1)
	for i, l := range locs {
		end := len(trace)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		out = append(out, strings.TrimSuffix(trace[l[1]:end], "\n"))
	}
	return out
}
