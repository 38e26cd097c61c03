package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An existing output that is not a regular file (or a link to one) is never replaced:
// as root, "-o /dev/null" replaced the machine's /dev/null (issue 13).
func TestWriteFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "null")
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link, "/dev/null"} {
		before, _ := os.Lstat(p)
		err := WriteFile(p, bytes.NewReader([]byte("x")), 0o755)
		if err == nil || !strings.Contains(err.Error(), "is not a regular file") {
			t.Errorf("%s: %v", p, err)
		}
		after, _ := os.Lstat(p)
		if !os.SameFile(before, after) || before.Mode() != after.Mode() {
			t.Errorf("%s was replaced", p)
		}
	}
	// a link to a regular file is replaced by the new file; its target is untouched
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("old"), 0o644)
	link2 := filepath.Join(dir, "link2")
	os.Symlink(target, link2)
	if err := WriteFile(link2, bytes.NewReader([]byte("new")), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "old" {
		t.Errorf("the link's target was written: %q", b)
	}
	if st, _ := os.Lstat(link2); !st.Mode().IsRegular() {
		t.Errorf("the link was not replaced by a regular file: %v", st.Mode())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := WriteFile(path, bytes.NewReader([]byte("one")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, bytes.NewReader([]byte("two")), 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	st, _ := os.Stat(path)
	if err != nil || string(b) != "two" || st.Mode().Perm() != 0o700 {
		t.Fatalf("got %q %v %v", b, st.Mode(), err)
	}
	// Failure: renaming over a directory fails and leaves no temporary file.
	sub := filepath.Join(dir, "sub")
	os.MkdirAll(filepath.Join(sub, "x"), 0o755)
	if err := WriteFile(sub, bytes.NewReader([]byte("three")), 0o755); err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("got %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v after a failed write", names)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "out"), nil, 0o644); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

// TestWriteFileNamesTheUsersPath: a directory that does not exist, or a file where a
// directory should be, is reported with the user's path and its directory, never the
// temporary file's name (issue 47: "reported under a temporary file's name").
func TestWriteFileNamesTheUsersPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "nodir", "out"), "write " + filepath.Join(dir, "nodir", "out") + ": directory " + filepath.Join(dir, "nodir") + " does not exist"},
		{filepath.Join(file, "out"), "write " + filepath.Join(file, "out") + ": cannot create a file in " + file + ": not a directory"},
	} {
		err := WriteFile(c.path, bytes.NewReader([]byte("x")), 0o644)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), ".tmp-") {
			t.Errorf("WriteFile(%s): %v, want %q and no temporary name", c.path, err, c.want)
		}
	}
	if err := WriteFile(filepath.Join(dir, "nodir", "out"), bytes.NewReader(nil), 0o644); !os.IsNotExist(err) && !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the error no longer says ErrNotExist: %v", err)
	}
}
