package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// TestLiveFrameRoundTrip: an entry's filter and triggers (programs and texts) and its
// state word's flag come back as they were encoded, with and without each other.
func TestLiveFrameRoundTrip(t *testing.T) {
	fr := &LiveFrame{ImageID: 7, NEvents: 3, Events: []LiveEvent{
		{Probe: 1, ID: 1 << 20, HitsOff: 4096, Def: "p:t/n work a=%di:s64", Fetch: []byte{1, 2, 3}},
		{Probe: 2, ID: 1<<20 + 1, Return: true, HitsOff: 4104, Def: "r:t/r work $retval", Fetch: []byte{4},
			Filter: []byte{9, 9}, FilterText: "arg1 > 1"},
		{Probe: 1, ID: 1<<20 + 2, HitsOff: 4112, State: true, Def: "p:t/m work", Trig: []byte{5, 6, 7, 8, 9},
			Triggers: []string{"traceoff:count=1 if a == 3", "traceon:unlimited"}},
		{Probe: 1, ID: 1<<20 + 3, HitsOff: 4120, Def: "p:t/k work", Filter: []byte{1}, FilterText: "a == 1",
			Trig: []byte{2}, Triggers: []string{"snapshot:unlimited"}},
	}}
	got, n, err := DecodeLiveFrame(fr.Encode())
	if err != nil || n != len(fr.Encode()) {
		t.Fatalf("decode: %v (%d bytes of %d)", err, n, len(fr.Encode()))
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", fr) { // (an empty part decodes as empty, not nil)
		t.Errorf("round trip:\n got %+v\nwant %+v", got, fr)
	}
}

// TestLiveFrameRoundTripFree: a frame with an event at a prepared site and one at a free
// live point (its point and slot after its filter) decodes to what was encoded, and
// the free one says where it is placed; a frame cut inside the point is refused.
func TestLiveFrameRoundTripFree(t *testing.T) {
	point := make([]byte, kprt.PointSize)
	binary.LittleEndian.PutUint64(point, 0x1214)                    // site
	binary.LittleEndian.PutUint64(point[kprt.PointSize-8:], 0x1210) // the address asked for
	fr := &LiveFrame{ImageID: 7, NEvents: 3, Events: []LiveEvent{
		{Probe: 1, ID: 1 << 20, HitsOff: 4096, Def: "p:t/n work a=%di", Fetch: []byte{1, 2, 3}},
		{Probe: 9, ID: 1<<20 + 1, HitsOff: 4104, Def: "p:t/m work+4", Fetch: []byte{4}, Filter: []byte{5, 6},
			FilterText: "a > 1", Point: point, Slot: bytes.Repeat([]byte{0xcc}, kprt.FreeSlot)},
	}}
	b := fr.Encode()
	got, size, err := DecodeLiveFrame(b)
	if err != nil || size != len(b) {
		t.Fatalf("decode: %v, size %d of %d", err, size, len(b))
	}
	if !reflect.DeepEqual(got, fr) {
		t.Fatalf("decoded %+v, want %+v", got, fr)
	}
	if _, _, ok := got.Events[0].At(); ok {
		t.Error("an event at a prepared site says it is placed at a free point")
	}
	if site, addr, ok := got.Events[1].At(); !ok || site != 0x1214 || addr != 0x1210 {
		t.Errorf("At() = %#x, %#x, %v; want 0x1214, 0x1210, true", site, addr, ok)
	}
	cut := append([]byte(nil), b[:len(b)-16]...)
	binary.LittleEndian.PutUint32(cut[24:], uint32(len(cut)))
	if _, _, err := DecodeLiveFrame(cut); !errors.Is(err, ErrLiveFrame) {
		t.Errorf("a frame cut inside the point: %v, want ErrLiveFrame", err)
	}
}
