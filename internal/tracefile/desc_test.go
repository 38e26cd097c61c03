package tracefile

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"reflect"
	"testing"
)

// TestDescLean: the description (version 3 and later) leaves out what follows from the entry
// before, and reads back to the same Desc whatever the entries are: ids and indexes
// that skip, events -1, sites apart from addresses, origins that do not follow a
// line of the same file (another file, none, a name without a line, a line with a
// leading zero). Version 4 has the image id in the frame's header, where SetImageID
// changes it without compressing again; version 3 and 2 frames still read. Events'
// goroutine-id offsets (GoID) survive.
func TestDescLean(t *testing.T) {
	d := &Desc{ImageID: 7, Image: "x", Input: "y", PIE: true,
		Events: []DescEvent{
			{ID: 1, Group: "g", Name: "a", Def: "p:g/a f", Origin: "defs:1", GoID: 1},
			{ID: 2, Group: "g", Name: "b", Def: "p:g/b f+1", Origin: "defs:2"},
			{ID: 3, Group: "g", Name: "c", Def: "p:g/c h", Origin: "defs:4"},
			{ID: 9, Group: "g", Name: "d", Def: "r:g/d h", Origin: "", Return: true, GoID: 9},
			{ID: 10, Group: "g", Name: "e", Def: "p:g/e h", Origin: "-e #1"},
			{ID: 11, Group: "g", Name: "f", Def: "p:g/f h", Origin: "defs:05"},
			{ID: 12, Group: "g", Name: "g", Def: "p:g/g h", Origin: "defs:6", Disabled: true, Filter: `a == 1 && s ~ "x*"`},
			{ID: 13, Group: "g", Name: "h", Def: "p:g/h h", Origin: "defs:7"},
		},
		Probes: []DescProbe{
			{Index: 0, Event: 0, Kind: "o", Addr: 0x1000, Site: 0x1000, Symbol: "f"},
			{Index: 1, Event: 1, Kind: "o", Addr: 0x1000, Site: 0x1004, Symbol: "f", Offset: 4},
			{Index: 2, Event: -1, Kind: "k", Addr: 0x2000, Site: 0x2000},
			{Index: 3, Event: 0, Kind: "b", Addr: 0x2000, Site: 0x2000, Exit: true},
			{Index: 4, Event: 1, Kind: "r", Addr: 0x3000, Site: 0x3000, Symbol: "h"},
		},
		Symbols: []DescSymbol{{Addr: 0x1000, Size: 16, Name: "f"}},
	}
	b, err := d.Marshal(0x4000)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(b[8:]) != 4 {
		t.Fatalf("version %d", binary.LittleEndian.Uint32(b[8:]))
	}
	got, err := ParseDesc(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Events, d.Events) || !reflect.DeepEqual(got.Probes, d.Probes) || !reflect.DeepEqual(got.Symbols, d.Symbols) ||
		got.ImageID != 7 || got.TablesAddr() != 0x4000 {
		t.Fatalf("round trip:\n%+v\n%+v\nwant\n%+v\n%+v", got.Events, got.Probes, d.Events, d.Probes)
	}
	js, err := DescJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	// what follows from the entry before is left out: b's id and origin, a's and b's
	// index and event, a's site
	for _, s := range []string{`"image_id"`, `"id":2`, `"origin":"defs:2"`, `"origin":"defs:7"`, `"i":1`, `"e":1,"kind":"o","addr":4096,"site"`} {
		if bytes.Contains(js, []byte(s)) {
			t.Errorf("%s is in the lean JSON: %s", s, js)
		}
	}
	for _, s := range []string{`"id":9`, `"origin":""`, `"origin":"defs:4"`, `"origin":"defs:05"`, `"origin":"defs:6"`, `"e":-1`, `"site":4100`} {
		if !bytes.Contains(js, []byte(s)) {
			t.Errorf("%s is not in the lean JSON: %s", s, js)
		}
	}
	d.SetImageID(b, 0x1122334455667788)
	if got, err := ParseDesc(b); err != nil || got.ImageID != 0x1122334455667788 || d.ImageID != got.ImageID {
		t.Fatalf("SetImageID: %v %+v", err, got)
	}
	if f, ok := FindDesc(append(b[:len(b):len(b)], 0xff, 0xff)); !ok || len(f) != len(b) {
		t.Fatalf("FindDesc: %d bytes of %d", len(f), len(b))
	}
	// version 3: the id in the JSON, a 24-byte header
	v3 := []byte(DescMagic + "\x03\x00\x00\x00")
	lean := mustDeflate(t, []byte(`{"image_id":9,"image":"x","input":"y","pie":false,"events":[{"id":5,"group":"g","name":"a","def":"p:g/a f"}],`+
		`"probes":[{"kind":"o","addr":16}]}`))
	v3 = binary.LittleEndian.AppendUint32(v3, uint32(len(lean)))
	v3 = binary.LittleEndian.AppendUint64(v3, 0x4000)
	v3 = append(v3, lean...)
	d3, err := ParseDesc(v3)
	if err != nil || d3.ImageID != 9 || d3.Events[0].ID != 5 || d3.Probes[0].Site != 16 || d3.TablesAddr() != 0x4000 {
		t.Fatalf("version 3: %v %+v", err, d3)
	}
	// the version 2 form of the same description
	old := []byte(DescMagic + "\x02\x00\x00\x00")
	full := mustDeflate(t, []byte(`{"image_id":7,"events":[{"id":5,"group":"g","name":"a","def":"p:g/a f","origin":"o:1"}],`+
		`"probes":[{"index":0,"event":0,"kind":"o","addr":16,"site":20,"symbol":"f","offset":4}]}`))
	old = binary.LittleEndian.AppendUint32(old, uint32(len(full)))
	old = binary.LittleEndian.AppendUint64(old, 0x4000)
	old = append(old, full...)
	d2, err := ParseDesc(old)
	if err != nil || d2.Events[0].ID != 5 || d2.Events[0].Origin != "o:1" || d2.Probes[0].Site != 20 || d2.Probes[0].Event != 0 {
		t.Fatalf("version 2: %v %+v", err, d2)
	}
}

func mustDeflate(t *testing.T, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	w, err := flate.NewWriter(&z, flate.DefaultCompression)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	w.Close()
	return z.Bytes()
}
