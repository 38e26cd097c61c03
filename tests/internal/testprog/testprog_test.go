package testprog

import (
	"strings"
	"testing"
	"time"
)

func TestBuildRunCompare(t *testing.T) {
	src := `#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
int main(int argc, char **argv) {
	char buf[64];
	if (fgets(buf, sizeof buf, stdin)) printf("in:%s", buf);
	printf("argv0=%s args=%d env=%s\n", argv[0], argc - 1, getenv("TP_X") ? getenv("TP_X") : "-");
	fprintf(stderr, "err\n");
	if (argc > 1 && argv[1][0] == 's') raise(SIGSEGV);
	if (argc > 1 && argv[1][0] == 'h') for (;;) ;
	return 3;
}
`
	p := Build(t, src, "c", "-O1")
	r := Run(t, Cmd{Path: p, Argv0: "prog", Stdin: "hello\n", Extra: []string{"TP_X=1"}})
	if r.Exit != 3 || r.Signal != "" || r.Stdout != "in:hello\nargv0=prog args=0 env=1\n" || r.Stderr != "err\n" {
		t.Fatalf("got %s", r)
	}
	s := Run(t, Cmd{Path: p, Args: []string{"segv"}})
	if s.Exit != -1 || s.Signal != "segmentation fault" {
		t.Fatalf("got %s", s)
	}
	h := Run(t, Cmd{Path: p, Args: []string{"hang"}, Timeout: 300 * time.Millisecond})
	if !h.TimedOut || h.Exit != -1 {
		t.Fatalf("got %s", h)
	}
	if d := r.Diff(s); !strings.Contains(d, "status") || !strings.Contains(d, "stdout differs") {
		t.Errorf("diff %q", d)
	}
	if d := r.Diff(r); d != "" {
		t.Errorf("a result differs from itself: %q", d)
	}
	Same(t, p, p, Cmd{Args: []string{"x"}}, nil)
	if w := NewWarnings(t, p, p, time.Minute, "readelf", "-a", "-W"); len(w) != 0 {
		t.Errorf("warnings %v", w)
	}
	if HashFile(t, p) == "" {
		t.Error("empty hash")
	}
	cxx := Build(t, "#include <iostream>\nint main(){ std::cout << \"ok\" << std::endl; }\n", "c++")
	if out := MustRun(t, cxx); out != "ok\n" {
		t.Errorf("c++ program printed %q", out)
	}
}
