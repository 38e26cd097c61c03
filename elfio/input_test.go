package elfio

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Inputs that are not regular files are refused before anything reads them: reading
// /dev/zero never ended, a FIFO without a writer hung, a 100 GB sparse file ran the
// process out of memory (issue 13).
func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse")
	if err := os.WriteFile(sparse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 100<<30); err != nil {
		t.Skipf("no 100 GiB sparse file here: %v", err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "not a regular file (a character device)",
		"/dev/null": "not a regular file (a character device)",
		fifo:        "not a regular file (a FIFO)",
		dir:         "not a regular file (a directory)",
		sparse:      "too large to be a program",
	} {
		f, err := Open(path)
		if err == nil {
			f.Close()
			t.Errorf("%s: opened", path)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), path+": ") {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// Open maps the input; Close releases it, and the file is what Parse sees.
func TestOpenMapsAndCloses(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	f, err := Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(exe)
	if err != nil || !bytes.Equal(f.Data, want) {
		t.Fatalf("mapped bytes differ from the file (%v)", err)
	}
	if err := f.Close(); err != nil || f.Data != nil {
		t.Fatalf("close: %v, data %d bytes", err, len(f.Data))
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// recorder records the sizes of the writes it gets.
type recorder struct {
	bytes.Buffer
	sizes []int
}

func (r *recorder) Write(b []byte) (int, error) {
	r.sizes = append(r.sizes, len(b))
	return r.Buffer.Write(b)
}

// An Output writes what Bytes returns, in writes of writeChunk bytes (the last
// shorter), whatever its pieces: the kernel then keeps the new segments in large
// page-cache folios (writeChunk).
func TestOutputWriteTo(t *testing.T) {
	base := bytes.Repeat([]byte("input..."), writeChunk/4)
	var released int // bytes of the input handed to release (copied before), a chunk at most each
	var r recorder
	ob := &outputBuilder{base: base, release: func(b []byte) {
		if len(b) > writeChunk {
			t.Errorf("release of %d bytes in one piece", len(b))
		}
		released += len(b)
	}}
	ob.put(0, []byte("HDR"))
	ob.put(100, []byte("patch"))
	ob.putFill(uint64(len(base))+10, 5000, 0xcc)
	ob.put(uint64(len(base))+writeChunk, []byte("tail"))
	out, err := ob.build(uint64(len(base)) + writeChunk + 100)
	if err != nil {
		t.Fatal(err)
	}
	n, err := out.WriteTo(&r)
	if err != nil || uint64(n) != out.Size() || !bytes.Equal(r.Bytes(), out.Bytes()) {
		t.Fatalf("WriteTo wrote %d bytes (%v), differing from Bytes", n, err)
	}
	if released != len(base)-3-5 { // every byte of the input kept, none of the pieces over it
		t.Errorf("released %d bytes of the input, want %d", released, len(base)-8)
	}
	b := out.Bytes()
	if string(b[:3]) != "HDR" || string(b[3:8]) != "ut..." || string(b[100:105]) != "patch" || b[len(base)+9] != 0 || b[len(base)+10] != 0xcc ||
		b[len(base)+5010] != 0 || string(b[len(base)+writeChunk:][:4]) != "tail" {
		t.Errorf("pieces misplaced")
	}
	for i, s := range r.sizes {
		if s != writeChunk && i != len(r.sizes)-1 {
			t.Errorf("write %d is %d bytes", i, s)
		}
	}
	ob.put(102, []byte("x"))
	if _, err := ob.build(uint64(len(base)) + writeChunk + 100); err == nil {
		t.Error("overlapping pieces accepted")
	}
	var _ io.WriterTo = out
}
