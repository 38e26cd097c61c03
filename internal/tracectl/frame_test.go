package tracectl

import (
	"bytes"
	"reflect"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

func sampleFrame() *Frame {
	return &Frame{ImageID: 0x1234, NEvents: 5, Entries: map[uint32]*Entry{
		3: {Flags: kprt.CEFilter | kprt.CETrig, Filter: []byte("FLTR+"), Trig: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9},
			FilterText: "a > 1", Triggers: []string{"traceoff:count=1", "hist:keys=a:vals=hitcount:sort=hitcount:size=2048 [active]"}},
		0: {Flags: kprt.CEDisable},
		4: {Flags: kprt.CEFilter},
		// synthetic event 2's run-time histograms
		kprt.CtlSynth | 2: {Flags: kprt.CETrig, Trig: []byte{9, 8, 7}, Triggers: []string{"hist:keys=n:vals=hitcount:sort=hitcount:size=2048 [active]"}},
	}}
}

func TestFrameRoundTrip(t *testing.T) {
	fr := sampleFrame()
	b, err := fr.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%8 != 0 {
		t.Errorf("frame of %d bytes, want a multiple of 8", len(b))
	}
	again, _ := fr.Encode()
	if !bytes.Equal(b, again) {
		t.Error("the same frame encodes to different bytes")
	}
	got, n, err := DecodeFrame(append(b, 0xff, 0xff))
	if err != nil || n != len(b) {
		t.Fatalf("decode: %v (%d of %d bytes)", err, n, len(b))
	}
	if !reflect.DeepEqual(got, fr) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, fr)
	}
	file, err := EncodeControlFile([]*Frame{fr, {ImageID: 9, NEvents: 1, Entries: map[uint32]*Entry{}}})
	if err != nil {
		t.Fatal(err)
	}
	frames, err := DecodeControlFile(file)
	if err != nil || len(frames) != 2 || frames[1].ImageID != 9 {
		t.Fatalf("control file: %v %v", frames, err)
	}
	// every truncation and a few corruptions are errors, never a panic
	for k := 0; k < len(b); k++ {
		if _, _, err := DecodeFrame(b[:k]); err == nil {
			t.Errorf("a frame cut to %d bytes decoded", k)
		}
	}
	bad := append([]byte(nil), b...)
	bad[48] = 7 // the first entry's event past NEvents
	if _, _, err := DecodeFrame(bad); err == nil {
		t.Error("an entry for event 7 of 5 decoded")
	}
	fr.Entries[kprt.CtlSynth|kprt.CtlMaxSynth] = &Entry{Flags: kprt.CETrig}
	if b, err := fr.Encode(); err != nil {
		t.Fatal(err)
	} else if _, _, err := DecodeFrame(b); err == nil {
		t.Errorf("an entry for synthetic event %d decoded (at most %d)", kprt.CtlMaxSynth, kprt.CtlMaxSynth)
	}
}

// FuzzDecodeFrame: a trace file's frames are another program's writing; reading them
// never panics, and what decodes encodes to the same bytes.
func FuzzDecodeFrame(f *testing.F) {
	b, _ := sampleFrame().Encode()
	f.Add(b)
	file, _ := EncodeControlFile([]*Frame{sampleFrame()})
	f.Add(file)
	f.Fuzz(func(t *testing.T, b []byte) {
		DecodeControlFile(b)
		fr, n, err := DecodeFrame(b)
		if err != nil {
			return
		}
		again, err := fr.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := DecodeFrame(again); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		_ = n
	})
}
