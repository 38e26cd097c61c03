package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// TestLiveFrameRoundTrip: a frame with an event at a prepared site and one at a free
// live point (its point and slot after its filter) decodes to what was encoded, and
// the free one says where it is placed; a frame cut inside the point is refused.
func TestLiveFrameRoundTrip(t *testing.T) {
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
