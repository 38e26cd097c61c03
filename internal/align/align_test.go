package align

import "testing"

func TestUp(t *testing.T) {
	for _, c := range []struct{ v, a, want uint64 }{
		{0, 0, 0}, {5, 1, 5}, {5, 0, 5}, {0, 16, 0}, {1, 16, 16}, {16, 16, 16}, {17, 16, 32}, {7, 3, 9}, {4097, 4096, 8192},
	} {
		if got := Up(c.v, c.a); got != c.want {
			t.Errorf("Up(%d, %d) = %d, want %d", c.v, c.a, got, c.want)
		}
	}
}
