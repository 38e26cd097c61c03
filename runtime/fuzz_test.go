package kprt_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

func FuzzEncode(f *testing.F) {
	f.Add(uint64(0x401000), uint8(XBoost), uint8(3), uint8(1), 2, "grp", "ev", []byte{1})
	f.Add(uint64(0), uint8(XEmulate), uint8(0), uint8(9), 70, "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, site uint64, xmode, insnLen, emu uint8, nprobes int, grp, name string, fetch []byte) {
		if nprobes < 0 || nprobes > 100 {
			return
		}
		pt := Point{Site: site, Slot: site + 0x1000, XMode: XMode(xmode), InsnLen: insnLen, SlotLen: insnLen, EmuOp: EmuOp(emu)}
		for i := 0; i < nprobes; i++ {
			pt.Probes = append(pt.Probes, Probe{Type: TKprobe, Event: 0, Flags: FTrace})
		}
		tabs := &Tables{Points: []Point{pt}, Events: []Event{{Group: grp, Name: name, Fetch: fetch}}, TracePath: name}
		enc, err := tabs.Encode(0x10000, 0x20000)
		if err != nil {
			return
		}
		var h RawHeader
		if err := binary.Read(bytes.NewReader(enc.RO), binary.LittleEndian, &h); err != nil {
			t.Fatal(err)
		}
		if h.Magic != Magic || h.NProbes != uint32(nprobes) || h.Points != 0x10000+HeaderSize ||
			enc.StateSize != uint64(nprobes)*ProbeStateSize || len(enc.RO)%8 != 0 {
			t.Fatalf("header %+v", h)
		}
		// every string pointer lands inside the blob, NUL-terminated
		var ev RawEvent
		binary.Read(bytes.NewReader(enc.RO[h.Events-0x10000:]), binary.LittleEndian, &ev)
		for _, a := range []uint64{ev.Group, ev.Name, h.TracePath} {
			if a == 0 {
				continue
			}
			o := a - 0x10000
			if o >= uint64(len(enc.RO)) || bytes.IndexByte(enc.RO[o:], 0) < 0 {
				t.Fatalf("string at %#x outside the blob", a)
			}
		}
	})
}
