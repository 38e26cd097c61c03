package mmapfile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRelease: a released part of a mapping reads the same bytes afterwards, whatever
// its alignment; a slice shorter than a page is left alone.
func TestRelease(t *testing.T) {
	want := make([]byte, 5*os.Getpagesize()+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := Map(path, 1<<30, "a test file")
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(data)
	for _, r := range [][2]int{{0, len(data)}, {17, 3 * os.Getpagesize()}, {100, 200}, {len(data) - 5, len(data)}} {
		Release(data[r[0]:r[1]])
		if !bytes.Equal(data, want) {
			t.Fatalf("after releasing [%d, %d) the mapping reads other bytes", r[0], r[1])
		}
	}
	Release(nil)
}
