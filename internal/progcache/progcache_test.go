package progcache

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEvictLRU: past Max, the least recently used entries go first, never the one
// just made; an entry whose source changed is made again.
func TestEvictLRU(t *testing.T) {
	c := &Cache{Dir: t.TempDir(), Max: 1 << 40}
	src := filepath.Join(t.TempDir(), "lib")
	os.WriteFile(src, []byte("v1"), 0o644)
	builds := 0
	build := func(dir string) ([]string, error) {
		builds++
		return []string{src}, os.WriteFile(filepath.Join(dir, "prog"), make([]byte, 64<<10), 0o755)
	}
	var dirs []string
	for i, key := range []string{"a", "b", "c"} {
		d, hit, err := c.Get(key, build)
		if err != nil || hit {
			t.Fatalf("Get(%s): %v, hit %v", key, err, hit)
		}
		old := time.Now().Add(time.Duration(i-10) * time.Minute) // a used first, then b, then c
		os.Chtimes(filepath.Join(d, usedName), old, old)
		dirs = append(dirs, d)
	}
	if _, hit, _ := c.Get("a", build); !hit || builds != 3 {
		t.Fatalf("Get(a) again: hit %v after %d builds, want a hit", hit, builds)
	}
	// a is now the most recently used; room for two entries: b goes
	_, total := c.entries()
	c.Max = total - 1
	c.Evict("")
	for i, want := range []bool{true, false, true} {
		if _, err := os.Stat(dirs[i]); (err == nil) != want {
			t.Errorf("entry %d there: %v, want %v", i, err == nil, want)
		}
	}
	os.WriteFile(src, []byte("v2"), 0o644)
	if _, hit, err := c.Get("a", build); hit || err != nil || builds != 4 {
		t.Errorf("Get(a) after its source changed: hit %v, %v, %d builds; want a new build", hit, err, builds)
	}
	if n, _, err := c.Clean(); n != 2 || err != nil {
		t.Errorf("Clean: %d entries, %v; want 2", n, err)
	}
}
