package infile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRefusesNonRegular: a FIFO without a writer, a directory and a device are refused
// at once with the kind named; a regular file is read.
func TestRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "reg")
	os.WriteFile(reg, []byte("data"), 0o644)
	for path, kind := range map[string]string{fifo: "a FIFO", dir: "a directory", "/dev/null": "a character device"} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), path+": not a regular file ("+kind+")") {
				t.Errorf("ReadFile(%s): %v", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ReadFile(%s) blocks", path)
		}
		if err := Check(path); err == nil || !strings.Contains(err.Error(), kind) {
			t.Errorf("Check(%s): %v", path, err)
		}
	}
	if b, err := ReadFile(reg); err != nil || string(b) != "data" {
		t.Errorf("ReadFile(reg): %q %v", b, err)
	}
	if err := Check(reg); err != nil {
		t.Error(err)
	}
}
