package kprewrite_test

import (
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/layoutdoc"
)

// TestLayoutTable checks that the layout table of docs/design.md is the one the
// package comments make: one row per Go package directory of the module, found by
// walking the tree, so a new package fails here until the table is regenerated.
func TestLayoutTable(t *testing.T) {
	want, have, err := layoutdoc.Generate(".")
	if err != nil {
		t.Fatal(err)
	}
	if want == have {
		return
	}
	wl, hl := strings.Split(want, "\n"), strings.Split(have, "\n")
	i := 0
	for i < len(wl) && i < len(hl) && wl[i] == hl[i] {
		i++
	}
	line := func(l []string) string {
		if i < len(l) {
			return l[i]
		}
		return "(end of file)"
	}
	t.Errorf("%s: the layout table differs from the package comments; run `%s` in the module root and commit the result\nfirst difference, line %d:\n have: %s\n want: %s",
		layoutdoc.DocFile, layoutdoc.Regenerate, i+1, line(hl), line(wl))
}
