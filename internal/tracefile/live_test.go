package tracefile

import (
	"fmt"
	"testing"
)

// TestLiveFrameRoundTrip: an entry's filter and triggers (programs and texts) come back
// as they were encoded, with and without each other.
func TestLiveFrameRoundTrip(t *testing.T) {
	fr := &LiveFrame{ImageID: 7, NEvents: 3, Events: []LiveEvent{
		{Probe: 1, ID: 1 << 20, HitsOff: 4096, Def: "p:t/n work a=%di:s64", Fetch: []byte{1, 2, 3}},
		{Probe: 2, ID: 1<<20 + 1, Return: true, HitsOff: 4104, Def: "r:t/r work $retval", Fetch: []byte{4},
			Filter: []byte{9, 9}, FilterText: "arg1 > 1"},
		{Probe: 1, ID: 1<<20 + 2, HitsOff: 4112, Def: "p:t/m work", Trig: []byte{5, 6, 7, 8, 9},
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
