package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

func testDesc() *Desc {
	return &Desc{
		ImageID: 0xabc, Image: "prog", Input: "prog",
		Events: []DescEvent{
			{ID: 1, Group: "g", Name: "add", Def: "p:g/add add a=%di:s32 s=+0(%si):string"},
			{ID: 2, Group: "g", Name: "ret", Def: "r:g/ret add $retval"},
			{ID: 3, Group: "g", Name: "sym", Def: "p:g/sym add f=%di:symbol"},
		},
		Probes: []DescProbe{
			{Index: 0, Event: 0, Kind: "b", Addr: 0x1130, Site: 0x1134, Symbol: "add", Offset: 4},
			{Index: 1, Event: 1, Kind: "rb", Addr: 0x1130, Site: 0x1134, Symbol: "add", Offset: 4},
			{Index: 2, Event: 2, Kind: "b", Addr: 0x1130, Site: 0x1134, Symbol: "add", Offset: 4},
		},
		Symbols: []DescSymbol{{Addr: 0x1130, Size: 0x20, Name: "add"}, {Addr: 0x1150, Size: 0x10, Name: "main"}},
	}
}

func record(t *testing.T, d *Desc, ev int, bias, ts uint64, regs eventdef.Machine) Record {
	t.Helper()
	p, err := eventdef.Parse(d.Events[ev].Def)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := eventdef.Compile(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := eventdef.Run(prog, &regs)
	if err != nil {
		t.Fatal(err)
	}
	r := Record{Data: data}
	r.EventID = d.Events[ev].ID
	r.ImageID = d.ImageID
	r.TID, r.PID, r.CPU, r.TsNs, r.IP, r.Bias = 4242, 4242, 1, ts, 0x1134, bias
	copy(r.Comm[:], "prog")
	if d.Events[ev].Def[0] == 'r' {
		r.Type = kprt.RecKretprobe
		r.RetIP = bias + 0x1160
	}
	return r
}

func TestWriteTrace(t *testing.T) {
	d := testDesc()
	var regs [21]uint64
	regs[14] = 0xfffffffe // di
	regs[13] = 0x9000     // si
	regs[10] = 77         // ax
	mem := map[uint64]byte{}
	for i, c := range []byte("hi\x00") {
		mem[0x9000+uint64(i)] = c
	}
	m := eventdef.Machine{Regs: regs, Mem: func(addr uint64, buf []byte) bool {
		for i := range buf {
			c, ok := mem[addr+uint64(i)]
			if !ok {
				return false
			}
			buf[i] = c
		}
		return true
	}}
	bias := uint64(0x555555554000)
	msym := m
	msym.Regs[14] = bias + 0x1155
	tr := &Trace{Lost: 3, Records: []Record{
		record(t, d, 1, bias, 2_000_000_500, m), // later, printed second
		record(t, d, 0, bias, 1_500_000_000, m),
		record(t, d, 2, bias, 3_000_000_000, msym),
	}}
	unknown := tr.Records[0]
	unknown.EventID = 99
	unknown.TsNs = 4_000_000_000
	tr.Records = append(tr.Records, unknown)
	var out, errOut bytes.Buffer
	s, err := NewStream(encodeTrace(tr.Records, tr.Lost, 4096))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteTrace(&out, &errOut, s, Descs{d.ImageID: d}, true); err != nil {
		t.Fatal(err)
	}
	want := `# tracer: kprewrite
#
# entries-in-buffer/entries-written: 4/7
# clock: tsc
# lost: 3 records did not fit in the trace file
#
#           TASK-PID     CPU#   TIMESTAMP  FUNCTION
#              | |         |       |         |
            prog-4242    [001]     1.500000: add: (0x555555555130) a=-2 s="hi"
            prog-4242    [001]     2.000000: ret: (0x555555555160 <- 0x555555555130) arg1=0x4d
            prog-4242    [001]     3.000000: sym: (0x555555555130) f=main+0x5/0x10
`
	if out.String() != want {
		t.Errorf("trace:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(errOut.String(), "event 99 of image 0xabc") {
		t.Errorf("stderr: %q", errOut.String())
	}
}

func TestProfile(t *testing.T) {
	d := testDesc()
	other := &Desc{ImageID: 7, Image: "other", Events: []DescEvent{{ID: 1, Group: "h", Name: "x", Def: "p:h/x f"}}, Probes: []DescProbe{{Event: 0}}}
	tr := &Trace{Images: []TraceImage{
		{ImageID: 0xabc, Counters: []Counter{{Hit: 5, NMissed: 1}, {Hit: 3, NMissed: 2}, {Hit: 0, NMissed: 0}}},
		{ImageID: 7, Counters: []Counter{{Hit: 9, NMissed: 0}}},
		{ImageID: 8, Counters: []Counter{{Hit: 1, NMissed: 0}}},
	}}
	lines, unknown := Profile(tr, Descs{0xabc: d, 7: other})
	if unknown != 1 || len(lines) != 4 {
		t.Fatalf("%d unknown, lines %+v", unknown, lines)
	}
	if l := lines[1]; l.Name != "ret" || l.Event != "g/ret" || l.Hit != 3 || l.NMissed != 2 || l.Image != "prog" {
		t.Errorf("line %+v", l)
	}
	if l := lines[3]; l.Image != "other" || l.Hit != 9 {
		t.Errorf("line %+v", l)
	}
}

func TestDescRoundTrip(t *testing.T) {
	d := testDesc()
	b, err := d.Marshal(0x4000)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%8 != 0 || string(b[:8]) != DescMagic {
		t.Fatalf("frame % x", b[:16])
	}
	frame, ok := FindDesc(append(b, 1, 2, 3))
	if !ok || !bytes.Equal(frame, b) {
		t.Fatal("FindDesc")
	}
	e, err := ParseDesc(frame)
	if err != nil || e.TablesAddr() != 0x4000 || len(e.Events) != 3 || e.Probes[1].Kind != "rb" {
		t.Fatalf("%v %+v", err, e)
	}
	if n, off, size, ok := e.Symbolize(0x1155); !ok || n != "main" || off != 5 || size != 0x10 {
		t.Errorf("symbolize: %s %d %d %v", n, off, size, ok)
	}
	if _, _, _, ok := e.Symbolize(0x1170); ok {
		t.Error("symbolized past the last function")
	}
	bad := append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(bad[12:], 1<<30)
	if _, err := ParseDesc(bad); !errors.Is(err, ErrDesc) {
		t.Errorf("oversized length: %v", err)
	}
	d.Probes[2].Event = 9
	b, _ = d.Marshal(0)
	if _, err := ParseDesc(b); !errors.Is(err, ErrDesc) {
		t.Errorf("probe of a missing event: %v", err)
	}
}

// FuzzParseDesc: no input makes the description parser panic.
func FuzzParseDesc(f *testing.F) {
	b, _ := testDesc().Marshal(0x1000)
	f.Add(b)
	f.Add([]byte(DescMagic + "\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if frame, ok := FindDesc(data); ok {
			if d, err := ParseDesc(frame); err == nil {
				d.Symbolize(0x1000)
				d.EventByID(1)
			}
		}
	})
}

// FuzzParseTables: no section contents make the table reader panic.
func FuzzParseTables(f *testing.F) {
	tabs := &kprt.Tables{OrigEntry: 0x1000, Points: []kprt.Point{{Site: 0x1130, Slot: 0x9000, XMode: kprt.XBoost, InsnLen: 1, SlotLen: 1,
		Orig: []byte{0x55}, Probes: []kprt.Probe{{Type: kprt.TKprobe, Event: 0, Flags: kprt.FTrace}}}},
		Events: []kprt.Event{{Group: "g", Name: "e", ID: 1}}, ImageID: 5}
	enc, err := tabs.Encode(0x8000, 0xa000)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc.RO, uint64(0))
	f.Add(enc.RO, uint64(8))
	f.Fuzz(func(t *testing.T, data []byte, skew uint64) {
		im, err := parseTables(data, 0x8000, 0x8000+skew%256)
		if err == nil {
			for i := range im.Probes {
				im.PointOf(i)
			}
		}
	})
}
