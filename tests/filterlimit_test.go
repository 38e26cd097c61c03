package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// orTerms is a filter of n predicates on recordDef's b: b == 0 || ... || b == n-1.
func orTerms(n int) string {
	terms := make([]string, n)
	for i := range terms {
		terms[i] = fmt.Sprintf("b == %d", i)
	}
	return strings.Join(terms, " || ")
}

// TestFilterSizeLimit: a filter whose program the runtime could not hold is refused
// where it is given, naming the limit, by check and rewrite alike (the -f file's line
// with it) and by `kprewrite filter`; one under the limit is applied by the program
// (issue 50, item 13). Before, rewrite failed with "inline filter: malformed filter
// program" where check accepted, and `kprewrite filter` showed as current a filter the
// program called malformed and ignored.
func TestFilterSizeLimit(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, recordSrc, "c", "-O2", "-pthread")
	dir := t.TempDir()
	for _, n := range []int{3000, 4000, 10000} {
		defs := filepath.Join(dir, fmt.Sprintf("defs%d", n))
		os.WriteFile(defs, []byte(recordDef+"\n# too many\nfilter b/w:"+orTerms(n)+"\n"), 0o644)
		out := filepath.Join(dir, "big.kp")
		for _, cmd := range [][]string{{"check", "-f", defs, prog}, {"rewrite", "-o", out, "-f", defs, prog}} {
			code, _, stderr := kp(cmd...)
			if code != 1 || !strings.Contains(stderr, defs+":3: filter of b/w: Too many terms") ||
				!strings.Contains(stderr, fmt.Sprintf("%d predicates", n)) || !strings.Contains(stderr, "runtime's limit is 65528") {
				t.Errorf("%s of %d predicates: exit %d, want 1 naming %s:3 and the limit:\n%.600s", cmd[0], n, code, defs, stderr)
			}
			if len(stderr) > 2000 {
				t.Errorf("%s: a %d-byte message", cmd[0], len(stderr))
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("rewrite of %d predicates left %s", n, out)
		}
	}

	// at run time: refused over the limit, applied under it
	out := filepath.Join(dir, "rec.kp")
	rewriteWith(t, prog, out, []string{recordDef})
	trace := filepath.Join(dir, "t.trace")
	run := func() {
		t.Helper()
		r := testprog.Run(t, testprog.Cmd{Path: out, Args: []string{"5000", "0"}, Extra: []string{"KPREWRITE_TRACE=" + trace, "KPREWRITE_APPEND=1"}}) // (both runs in one trace)
		if r.Exit != 7 || r.Stderr != "" {
			t.Fatalf("run: %s", r)
		}
	}
	run()
	if code, _, stderr := kp("filter", trace, "b/w", orTerms(3000)); code != 1 || !strings.Contains(stderr, "runtime's limit is 65528") {
		t.Errorf("filter of 3000 predicates: exit %d, want 1 naming the limit:\n%.600s", code, stderr)
	}
	if code, _, stderr := kp("filter", trace, "b/w", orTerms(2000)); code != 0 {
		t.Fatalf("filter of 2000 predicates: exit %d: %.600s", code, stderr)
	}
	run()
	if n := len(readTrace(t, trace)); n != 5000+2000 {
		t.Errorf("%d records, want 5000 of the first run and 2000 the filter of the second keeps", n)
	}
}

// TestLongDefinitionLine: a -f line longer than 64 KiB (a long filter) is read whole:
// accepted when it is right, refused with its file and line when it is not (was:
// "bufio.Scanner: token too long", no line).
func TestLongDefinitionLine(t *testing.T) {
	testprog.Need(t, "gcc")
	prog := testprog.Build(t, recordSrc, "c", "-O2", "-pthread")
	dir := t.TempDir()
	long := orTerms(1000) + strings.Repeat(" ", 2<<20) // 2 MiB of spaces after it
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(recordDef+"\nfilter b/w:"+long+"\n"), 0o644)
	if code, _, stderr := kp("rewrite", "-o", filepath.Join(dir, "ok.kp"), "-f", good, prog); code != 0 {
		t.Errorf("rewrite with a %d-byte filter line: exit %d: %.600s", len(long), code, stderr)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(recordDef+"\n\nfilter b/w:"+strings.Repeat("b == 1 || ", 7000)+"nosuch == 1\n"), 0o644)
	code, _, stderr := kp("check", "-f", bad, prog)
	if code != 1 || !strings.Contains(stderr, bad+":3: filter of b/w") || strings.Contains(stderr, "token too long") {
		t.Errorf("check of a bad 70 KiB filter line: exit %d, want 1 naming %s:3:\n%.600s", code, bad, stderr)
	}
}
