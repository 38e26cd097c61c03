package trampolines

import (
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// The detour template reader is internal: these tests stay in the package.

func TestParseTemplateGarbage(t *testing.T) {
	if _, err := parseTemplate([]byte("not an object")); err == nil {
		t.Error("garbage parsed as an object")
	}
}

// FuzzParseTemplate feeds damaged runtime objects to the template reader: it must fail
// cleanly or return offsets inside the template.
func FuzzParseTemplate(f *testing.F) {
	f.Add(kprt.Object)
	f.Add(kprt.Object[:len(kprt.Object)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := parseTemplate(b)
		if err != nil {
			return
		}
		for _, off := range []int{tm.Gate, tm.Index, tm.Call} {
			if off < 0 || off+4 > len(tm.Code) {
				t.Fatalf("field at %d of a %d-byte template", off, len(tm.Code))
			}
		}
		if tm.Entry < 0 || tm.Entry >= len(tm.Code) {
			t.Fatalf("entry %d of %d", tm.Entry, len(tm.Code))
		}
	})
}
