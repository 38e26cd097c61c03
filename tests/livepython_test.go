package tests

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// livePyLoop runs a JSON round for each line on stdin and prints its checksum: the
// program's own result, which the rewrite must not change.
const livePyLoop = `import json, sys, zlib
d = {"k%d" % i: [i, i * 2.5, str(i), {"x": [1, 2, 3], "y": None}] for i in range(60)}
for line in sys.stdin:
    s = 0
    for _ in range(5):
        s = zlib.crc32(json.dumps(json.loads(json.dumps(d))).encode(), s)
    print("round", s, flush=True)
`

// TestLivePythonPrepared: python3.11 rewritten with --prepare '*' (every function's
// entry and return prepared, nothing armed) holds the original's bytes at every
// prepared site, in the file and in the running process; `kprewrite enable
// 'prepared/*'` while it runs a workload arms its 13,000 events (sites change, entry and
// return records appear), `disable` puts every original byte of its text back and
// records stop; every round's result is the original python's.
func TestLivePythonPrepared(t *testing.T) {
	py := realBin(t, "python3.11")
	dir := t.TempDir()
	kpd := filepath.Join(dir, "python3.11")
	tr := kpd + ".trace"
	rewriteWith(t, py, kpd, nil, "--prepare", "*")
	sites := preparedSites(t, kpd)
	if len(sites) < 1000 {
		t.Fatalf("%d prepared sites in python3.11, want thousands", len(sites))
	}
	origText, textAddr := textOf(t, py)
	fileText, _ := textOf(t, kpd)
	if n := armedSites(origText, fileText, textAddr, sites); n != 0 {
		t.Errorf("%d prepared sites of the rewrite's file differ from the original's", n)
	}
	want := pyRounds(t, exec.Command(py, "-c", livePyLoop), 3)

	cmd := exec.Command(kpd, "-c", livePyLoop)
	cmd.Env = append(os.Environ(), "KPREWRITE_TRACE="+tr)
	p := startCmd(t, cmd)
	defer cmd.Process.Kill()
	round := func(what string) {
		t.Helper()
		p.stdin.Write([]byte("go\n"))
		if !p.lines.Scan() || p.lines.Text() != want[0] {
			t.Fatalf("%s: python said %q, want %q (stderr %q)", what, p.lines.Text(), want[0], p.stderr.String())
		}
	}
	round("before any event")
	mem := func() []byte {
		t.Helper()
		return procMem(t, cmd.Process.Pid, textAddr, len(origText))
	}
	if n := armedSites(origText, mem(), textAddr, sites); n != 0 {
		t.Errorf("%d prepared sites differ from the original's in the running process", n)
	}
	off := recordCount(t, tr)
	kpOK(t, "enable", tr, "prepared/*")
	// (a site that starts with a jmp or an int3 holds the same first byte armed)
	same := 0
	for _, s := range sites {
		if b := origText[s-textAddr]; b == 0xe9 || b == 0xcc {
			same++
		}
	}
	armed := 0
	for try := 0; try < 500 && armed < len(sites)-same; try++ {
		time.Sleep(10 * time.Millisecond)
		armed = armedSites(origText, mem(), textAddr, sites)
	}
	if armed < len(sites)-same {
		t.Fatalf("%d of %d prepared sites armed after enable (%d start with a jmp or int3)", armed, len(sites), same)
	}
	round("while on")
	entries, returns := 0, 0
	for _, l := range readTrace(t, tr)[off:] {
		if strings.HasSuffix(l.Event, "__return") {
			returns++
		} else {
			entries++
		}
	}
	if entries < 1000 || returns < 1000 {
		t.Errorf("while on: %d entry and %d return records, want thousands of each", entries, returns)
	}
	t.Logf("%d of %d prepared sites armed; %d entry and %d return records in a round", armed, len(sites), entries, returns)
	kpOK(t, "disable", tr, "prepared/*")
	var now []byte
	for try := 0; try < 500; try++ {
		if now = mem(); bytes.Equal(now, origText) || armedSites(origText, now, textAddr, sites) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := armedSites(origText, now, textAddr, sites); n != 0 {
		t.Fatalf("%d prepared sites still differ from the original's after disable", n)
	}
	onRecs := recordCount(t, tr)
	round("after disable")
	round("after disable, again")
	if n := recordCount(t, tr); n != onRecs {
		t.Errorf("%d records written after every event was switched off", n-onRecs)
	}
	p.stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python: %v, stderr %q", err, p.stderr.String())
	}
}

// preparedSites are the sites `kprewrite list` shows [PREPARED] in bin.
func preparedSites(t *testing.T, bin string) []uint64 {
	t.Helper()
	seen := map[uint64]bool{}
	var sites []uint64
	for _, l := range strings.Split(kpOK(t, "list", bin), "\n") {
		var a uint64
		if !strings.Contains(l, "[PREPARED]") {
			continue
		}
		if _, err := fmt.Sscanf(l, "%x", &a); err == nil && !seen[a] {
			seen[a] = true
			sites = append(sites, a)
		}
	}
	return sites
}

// textOf is the .text section of the non-PIE executable bin and its address.
func textOf(t *testing.T, bin string) ([]byte, uint64) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Skipf("%s is a PIE: this test reads its text at link-time addresses", bin)
	}
	s := f.Section(".text")
	b, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	return b, s.Addr
}

// armedSites counts the sites whose first byte in text (at addr) is not orig's.
func armedSites(orig, text []byte, addr uint64, sites []uint64) int {
	n := 0
	for _, s := range sites {
		if o := s - addr; s >= addr && o < uint64(len(orig)) && text[o] != orig[o] {
			n++
		}
	}
	return n
}

// procMem reads n bytes at addr of process pid.
func procMem(t *testing.T, pid int, addr uint64, n int) []byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		t.Fatal(err)
	}
	return b
}

// recordCount is the number of records in trace file tr.
func recordCount(t *testing.T, tr string) int {
	t.Helper()
	return len(readTrace(t, tr))
}

// pyRounds runs cmd for n rounds of livePyLoop and returns its lines.
func pyRounds(t *testing.T, cmd *exec.Cmd, n int) []string {
	t.Helper()
	cmd.Stdin = strings.NewReader(strings.Repeat("go\n", n))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != n || lines[0] != lines[n-1] {
		t.Fatalf("%s: %q, want %d equal rounds", cmd.Path, out, n)
	}
	return lines
}
