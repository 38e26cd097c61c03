package kprt_test

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// testdata/control.ctl is a control file `kprewrite control` made for a rewrite of
// tests/ctlfile_test.go's ctlSrc (two events, the second with a rewrite's hist
// trigger): a filter, a hist trigger placed at start-up and a count trigger on the
// first, a count trigger, a histogram and a switch on the second. ctlcheck.c reads it
// with the runtime's own reader for an image of the frame's id and event count.

// ctlCheckExe builds testdata/ctlcheck.c with the runtime's control file reader
// (src/rt_ctl.c) and what it calls
func ctlCheckExe(t testing.TB) string {
	t.Helper()
	needGCC(t)
	exe := filepath.Join(t.TempDir(), "ctlcheck")
	cmd := exec.Command("gcc", "-O1", "-g", "-fno-builtin", "-fno-stack-protector", "-Iinclude", "-Isrc", "-o", exe,
		"-Wl,--wrap=kprw_mmap_anon", "testdata/ctlcheck.c", "src/rt_ctl.c", "src/rt_trigger.c", "src/rt_hist.c",
		"src/rt_filter.c", "src/rt_util.c", "src/nofault.S")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return exe
}

type ctlRun struct {
	installed bool
	stdout    string
	stderr    string
}

// runCtlCheck has the runtime's reader read ctl for an image of id and nevents events
func runCtlCheck(t testing.TB, exe, dir string, ctl []byte, id uint64, nevents uint32) ctlRun {
	t.Helper()
	file := filepath.Join(dir, "in.ctl")
	if err := os.WriteFile(file, ctl, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, file, strconv.FormatUint(id, 10), strconv.FormatUint(uint64(nevents), 10), filepath.Join(dir, "t.trace"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("the runtime's reader on %x: %v\nstdout: %s\nstderr: %s", ctl, err, o.String(), e.String())
	}
	if n := strings.Count(e.String(), "\n"); n > 1 {
		t.Fatalf("the runtime's reader on %x: %d stderr lines:\n%s", ctl, n, e.String())
	}
	return ctlRun{installed: strings.HasPrefix(o.String(), "installed\n"), stdout: o.String(), stderr: e.String()}
}

// ctlSeed is testdata/control.ctl and the image id and event count of its frame
func ctlSeed(t testing.TB) ([]byte, uint64, uint32) {
	t.Helper()
	b, err := os.ReadFile("testdata/control.ctl")
	if err != nil {
		t.Fatal(err)
	}
	// KPRW_CTLFILE_MAGIC, then the frame: magic, prev, image_id, size, nentries, nevents
	return b, binary.LittleEndian.Uint64(b[8+16:]), binary.LittleEndian.Uint32(b[8+32:])
}

// TestControlFileReader: the runtime's reader of KPREWRITE_CONTROL installs the file as
// made, and copies with each byte in turn set to 0xff, 400 with a random byte changed
// and 20 cut short are installed or refused with one stderr line, never a fault (was: a
// count stored past the control area, SIGSEGV in walk_blob).
func TestControlFileReader(t *testing.T) {
	exe := ctlCheckExe(t)
	dir := t.TempDir()
	good, id, nev := ctlSeed(t)
	r := runCtlCheck(t, exe, dir, good, id, nev)
	if r.stdout != "installed\nevent 0 filter triggers\nevent 1 triggers\n" || r.stderr != "" {
		t.Fatalf("the control file as made: %+v", r)
	}
	var bads [][]byte
	for i := range good {
		if good[i] != 0xff {
			bad := append([]byte(nil), good...)
			bad[i] = 0xff
			bads = append(bads, bad)
		}
	}
	rng := rand.New(rand.NewSource(50))
	for i := 0; i < 420; i++ {
		bad := append([]byte(nil), good...)
		if i < 20 {
			bad = bad[:rng.Intn(len(bad))]
		} else {
			bad[rng.Intn(len(bad))] ^= byte(1 + rng.Intn(255))
		}
		bads = append(bads, bad)
	}
	installed, refused := 0, 0
	for _, bad := range bads {
		r := runCtlCheck(t, exe, dir, bad, id, nev)
		if r.installed {
			installed++
		}
		if r.stderr != "" {
			refused++
		}
	}
	t.Logf("%d damaged copies: %d installed, %d said malformed or ignored", len(bads), installed, refused)
}

// FuzzControlFile runs the runtime's reader of KPREWRITE_CONTROL on mutated control
// files: installed or refused with one stderr line, never a fault.
func FuzzControlFile(f *testing.F) {
	good, id, nev := ctlSeed(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	exe := ctlCheckExe(f)
	f.Fuzz(func(t *testing.T, ctl []byte) {
		runCtlCheck(t, exe, t.TempDir(), ctl, id, nev)
	})
}
