package outfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("a"), 0o644)
	os.WriteFile(b, []byte("b"), 0o644)
	hard, sym := filepath.Join(dir, "hard"), filepath.Join(dir, "sym")
	os.Link(a, hard)
	os.Symlink("a", sym)
	for _, c := range []struct {
		out    string
		inputs []string
		same   bool
	}{
		{a, []string{a}, true},
		{a, []string{b, "", a}, true},
		{hard, []string{a}, true},
		{sym, []string{a}, true},
		{filepath.Join(dir, ".", "x", "..", "a"), []string{a}, true},
		{filepath.Join(dir, "new"), []string{filepath.Join(dir, "sub", "..", "new")}, true}, // neither exists
		{b, []string{a}, false},
		{filepath.Join(dir, "new"), []string{a}, false},
		{"", []string{""}, false},
		{"-", []string{"-"}, false},
	} {
		err := Check(c.out, c.inputs...)
		if (err != nil) != c.same || err != nil && !strings.HasSuffix(err.Error(), ": kprewrite never modifies its input") {
			t.Errorf("Check(%s, %q) = %v, want same %v", c.out, c.inputs, err, c.same)
		}
	}
}
