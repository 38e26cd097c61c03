package tests

import (
	"os"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// TestMain runs the tests with KPREWRITE_QUIET=1 in the environment: a rewritten
// program that starts a trace says where on stderr, and the tests compare its stderr
// with the original program's. The tests of that line set KPREWRITE_QUIET=0.
func TestMain(m *testing.M) {
	k, v, _ := strings.Cut(testprog.Quiet, "=")
	os.Setenv(k, v)
	os.Exit(m.Run())
}
