package tests

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestRecordOverwriteCounts: under `record --overwrite` every hit is counted (profile,
// as the kernel's uprobe_profile, does not depend on the ring) and the header's
// entries-written is every record written: the ones kept plus the ones overwritten,
// which trace names as such (issue 50, item 3). Before, profile showed the hits the
// ring kept (13,685 of 500,000) and entries-written equalled entries-in-buffer.
func TestRecordOverwriteCounts(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := recordProg(t)
	const total = 500000
	for _, threads := range []int{0, 4} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			per := total / max(threads, 1)
			file := filepath.Join(t.TempDir(), "o.trace")
			code, _, stderr := kp("record", "-q", "--overwrite", "--buffer-size", "1M", "-o", file, "--", prog, strconv.Itoa(per), strconv.Itoa(threads))
			if code != 7 {
				t.Fatalf("record --overwrite: exit %d: %s", code, stderr)
			}
			if hits := profileHits(t, file, "w"); hits != total {
				t.Errorf("profile: %d hits of w, want %d", hits, total)
			}
			kept, written, over := traceEntries(t, file)
			if over == 0 || kept == 0 || written != kept+over {
				t.Errorf("entries-in-buffer/written %d/%d, overwritten %d: want written = kept + overwritten, both > 0", kept, written, over)
			}
			if written != total {
				t.Errorf("entries-written %d, want %d (no record is lost in an overwrite ring)", written, total)
			}
			if n := len(readTrace(t, file)); n != kept {
				t.Errorf("trace prints %d records, the header says %d are in the buffer", n, kept)
			}
		})
	}
}

// profileHits returns the hits profile shows for event ev of the trace file.
func profileHits(t *testing.T, file, ev string) uint64 {
	t.Helper()
	code, out, stderr := kp("profile", file)
	if code != 0 {
		t.Fatalf("profile: exit %d: %s", code, stderr)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == ev {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("profile line %q", l)
			}
			return n
		}
	}
	t.Fatalf("profile shows no %s:\n%s", ev, out)
	return 0
}

// traceEntries returns trace's header counts: entries in the buffer, written, and
// overwritten (0 when not said).
func traceEntries(t *testing.T, file string) (kept, written, over int) {
	t.Helper()
	code, out, stderr := kp("trace", file)
	if code != 0 {
		t.Fatalf("trace: exit %d: %s", code, stderr)
	}
	m := regexp.MustCompile(`(?m)^# entries-in-buffer/entries-written: (\d+)/(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("trace: no entries-written line:\n%.500s", out)
	}
	kept, _ = strconv.Atoi(m[1])
	written, _ = strconv.Atoi(m[2])
	if o := regexp.MustCompile(`(?m)^# overwritten: (\d+) records`).FindStringSubmatch(out); o != nil {
		over, _ = strconv.Atoi(o[1])
	}
	return kept, written, over
}
