package eventdef

import (
	"slices"
	"testing"
)

// TestNearest: a typing error (a swap, a letter more, less or wrong) finds the name
// meant; a name farther away finds nothing.
func TestNearest(t *testing.T) {
	names := []string{"work", "worker", "main", "malloc", "calloc", "di", "si", "dx"}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"wrok", []string{"work"}},
		{"wor", []string{"work"}},
		{"workerz", []string{"worker"}},
		{"mallco", []string{"malloc"}},
		{"dii", []string{"di"}},
		{"xyz", nil},
		{"completely", nil},
		{"work", []string{}}, // itself is no suggestion; nearest others are 2 away
	} {
		got := Nearest(c.name, names)
		if len(got) == 0 && len(c.want) == 0 {
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Nearest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if s := OrList([]string{"a", "b", "c"}); s != "a, b or c" {
		t.Errorf("OrList: %q", s)
	}
}
