package kprt_test

import (
	"encoding/binary"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
)

// TestHistCheckMatchesGo runs the runtime's check of hist programs (src/rt_hist.c)
// and evhist.CheckProgram on the same programs, well-formed ones and thousands of
// damaged copies, and requires the same verdicts and table sizes: a program the
// runtime accepts is one whose tables the Go side lays out the same way.
func TestHistCheckMatchesGo(t *testing.T) {
	needGCC(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "histcheck")
	cmd := exec.Command("gcc", "-O1", "-fno-builtin", "-fno-stack-protector", "-Iinclude", "-Isrc", "-o", exe,
		"testdata/histcheck.c", "src/rt_hist.c", "src/rt_filter.c", "src/rt_util.c", "src/nofault.S")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	p, err := eventdef.Parse("p:g/ev func size=%di:u64 n=%si:s32 s=+0(%dx):string")
	if err != nil {
		t.Fatal(err)
	}
	fs := evfilter.Fields(p)
	parse := func(in string) *evhist.Spec {
		s, err := evhist.Parse(in, fs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var progs [][]byte
	for _, in := range []string{"keys=size", "keys=size.log2:vals=n:size=128", "keys=s,common_pid.execname:vals=size,n",
		"keys=comm,cpu,n.buckets=10:vals=size.hex:size=131072", "keys=__probe_ip.sym:pause", "keys=n:ts0=common_timestamp.usecs+3", "keys=stacktrace,n:vals=size",
		"keys=n:m=size:onmax($m).save(s,comm,size):onmax($m).snapshot()", "keys=comm:c=n:onchange($c).save(cpu)", "keys=n:m=size+n:onmax($m).snapshot()"} {
		progs = append(progs, parse(in).Program(nil))
	}
	sy, _ := evhist.ParseSynthetic("lat u64 lat; s64 d")
	sy.ID, sy.Disabled = 7, true // recorded: the program ends with a record block
	sf, err := evfilter.Parse("lat > 5 || d < -1", sy.Fields(), evfilter.AnySymbols{})
	if err != nil {
		t.Fatal(err)
	}
	sy.Filter = sf.Program() // and the event's filter after it
	entry := evhist.Named{Group: "g", Event: "in", Key: "in", Spec: parse("keys=n:ts0=common_timestamp.usecs")}
	ret := evhist.Named{Group: "g", Event: "out", Key: "out", Spec: parse("keys=n:l=common_timestamp.usecs-$ts0:onmatch(g.in).trace(lat,$l,$ts0)")}
	filtered := parse("keys=n.log2:vals=size")
	filtered.Filter = "lat > 5 && d < 0" // its "if", on the synthetic event's fields
	targets := []evhist.Named{{Group: "synthetic", Event: "lat", Key: "t1", Spec: parse("keys=size")}, {Group: "synthetic", Event: "lat", Key: "t2", Spec: filtered}}
	if err := evhist.LinkAll([]evhist.Named{entry, ret}, map[string]*evhist.Synthetic{"lat": sy}, map[string][]evhist.Named{"lat": targets}); err != nil {
		t.Fatal(err)
	}
	progs = append(progs, ret.Spec.Program(func(k string, _ uint32) uint32 {
		return map[string]uint32{"in": 0, "out": 5000, "t1": 90000, "t2": 99000, evhist.SwitchKey("lat"): 120000}[k]
	}))
	rng := rand.New(rand.NewSource(1))
	good := len(progs)
	for i := 0; i < 3000; i++ {
		q := append([]byte(nil), progs[rng.Intn(good)]...)
		switch rng.Intn(3) {
		case 0: // a byte changed
			q[rng.Intn(len(q))] = byte(rng.Intn(256))
		case 1: // a few bits flipped in the header or the first fields
			for k := 0; k < 1+rng.Intn(3); k++ {
				j := rng.Intn(min(len(q), 64))
				q[j] ^= 1 << rng.Intn(8)
			}
		case 2: // cut or grown
			if rng.Intn(2) == 0 {
				q = q[:rng.Intn(len(q))]
			} else {
				q = append(q, make([]byte, 1+rng.Intn(20))...)
			}
		}
		progs = append(progs, q)
	}
	var in []byte
	for _, q := range progs {
		in = binary.LittleEndian.AppendUint32(in, uint32(len(q)))
		in = append(in, q...)
	}
	file := filepath.Join(dir, "in")
	if err := os.WriteFile(file, in, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, file).Output()
	if err != nil || len(out) != 16*len(progs) {
		t.Fatalf("histcheck: %v, %d bytes for %d programs", err, len(out), len(progs))
	}
	accepted := 0
	for i, q := range progs {
		cw := binary.LittleEndian.Uint64(out[16*i:])
		gw, gerr := evhist.CheckProgram(q)
		if gerr != nil {
			gw = 0
		}
		if cw != uint64(gw) {
			t.Errorf("program %d (%x): runtime %d words, Go %d (%v)", i, q, cw, gw, gerr)
		}
		if i < good && cw == 0 {
			t.Errorf("well-formed program %d refused", i)
		}
		if cw != 0 {
			accepted++
		}
	}
	t.Logf("%d programs, %d accepted by both", len(progs), accepted)
}
