package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// daemonSrc closes its standard streams, opens its data file as fds 0-2 (a daemon's
// way), writes its own line, then truncates its trace file and calls the probed function:
// the runtime's "shrank" diagnostic must not land in the data file.
const daemonSrc = `#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__attribute__((noinline)) long work(long a) { return a * 2; }
int main(int argc, char **argv) {
	long s = 0;
	if (argc < 3) { /* "keep" as a second argument: the streams as they are */
		close(0); close(1); close(2);
		int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd != 0 || dup(fd) != 1 || dup(fd) != 2)
			return 3;
	}
	for (int i = 0; i < 10; i++)
		s += work(i);
	if (truncate(getenv("KPREWRITE_TRACE"), 4096) != 0)
		return 4;
	for (int i = 0; i < 10; i++)
		s += work(i);
	const char *mine = "the daemon's own line\n";
	write(2, mine, strlen(mine));
	return s == 180 ? 0 : 5;
}
`

// TestDiagnosticsNotIntoDataFile: the runtime's messages go to fd 2 only while it is
// the stderr the program started with (issue 50, item 4): a daemon that reopened fd 2
// as its data file finds only its own bytes there; run with its stderr untouched, the
// same program's diagnostic does reach stderr.
func TestDiagnosticsNotIntoDataFile(t *testing.T) {
	prog := testprog.Build(t, daemonSrc, "c", "-O2")
	dir := t.TempDir()
	bin := filepath.Join(dir, "daemon.kp")
	rewriteWith(t, prog, bin, []string{"p:d/w work a=%di:s64"}, "--no-optimize")
	data := filepath.Join(dir, "data")
	env := []string{"KPREWRITE_TRACE=" + filepath.Join(dir, "d.trace")}
	res := testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{data}, Extra: env})
	if res.Exit != 0 {
		t.Fatalf("the daemon: %v", res)
	}
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "the daemon's own line\n" {
		t.Fatalf("the data file holds %q, want only the daemon's own line", b)
	}
	os.Remove(filepath.Join(dir, "d.trace"))
	res = testprog.Run(t, testprog.Cmd{Path: bin, Args: []string{data, "keep"}, Extra: env})
	if res.Exit != 0 || !strings.Contains(res.Stderr, "shrank") {
		t.Fatalf("with its stderr kept, the diagnostic is missing: %v", res)
	}
}
