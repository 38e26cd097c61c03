package recentid

import "testing"

// TestCache: each (image, id) is looked up once while its image is the last one, nil
// values too; another image starts over; large ids are looked up every time.
func TestCache(t *testing.T) {
	var c Cache[int]
	calls := map[[2]uint64]int{}
	lookup := func(image uint64, id uint32) *int {
		calls[[2]uint64{image, uint64(id)}]++
		if id == 3 {
			return nil
		}
		v := int(image)*100 + int(id)
		return &v
	}
	for round := 0; round < 3; round++ {
		for _, id := range []uint32{1, 3, 7} {
			v := c.Get(5, id, lookup)
			if id == 3 && v != nil || id != 3 && *v != 500+int(id) {
				t.Fatalf("Get(5, %d) = %v", id, v)
			}
		}
	}
	if *c.Get(6, 1, lookup) != 601 || *c.Get(5, 1, lookup) != 501 {
		t.Fatal("wrong value after switching images")
	}
	c.Get(5, maxID+1, lookup)
	c.Get(5, maxID+1, lookup)
	want := map[[2]uint64]int{{5, 1}: 2, {5, 3}: 1, {5, 7}: 1, {6, 1}: 1, {5, maxID + 1}: 2}
	for k, n := range want {
		if calls[k] != n {
			t.Errorf("lookup %v ran %d times, want %d", k, calls[k], n)
		}
	}
}
