package progcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMax bounds a cache's size when KPREWRITE_CACHE_MAX does not.
const DefaultMax = 2 << 30

// Cache is a directory of rewritten programs, one entry (a directory) per key.
type Cache struct {
	Dir string
	Max int64 // bytes the entries may take on disk; the least recently used go first
}

// Default is the user's cache: $XDG_CACHE_HOME/kprewrite, else ~/.cache/kprewrite,
// bounded by KPREWRITE_CACHE_MAX (a byte count with an optional K, M or G suffix).
func Default() (*Cache, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if !filepath.IsAbs(base) { // the XDG rule: a relative value is ignored
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("cache directory: %w (set XDG_CACHE_HOME)", err)
		}
		base = filepath.Join(home, ".cache")
	}
	c := &Cache{Dir: filepath.Join(base, "kprewrite"), Max: DefaultMax}
	if s := os.Getenv("KPREWRITE_CACHE_MAX"); s != "" {
		n, err := parseSize(s)
		if err != nil {
			return nil, fmt.Errorf("KPREWRITE_CACHE_MAX: %w", err)
		}
		c.Max = n
	}
	return c, nil
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	if i := strings.IndexAny(s, "KkMmGg"); i == len(s)-1 && i > 0 {
		mult = map[byte]int64{'k': 1 << 10, 'm': 1 << 20, 'g': 1 << 30}[s[i]|0x20]
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("bad size %q (want a byte count with an optional K, M or G suffix)", s)
	}
	return n * mult, nil
}

// Key hashes what a rewrite's output depends on: the tool that rewrites (its
// executable), the program (its path, which its libraries are found from, and its
// contents), the files opt names (files, by contents) and opt itself (as JSON).
func Key(program string, files []string, opt any) (string, error) {
	h := sha256.New()
	tool, err := toolHash()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "kprewrite cache 1\ntool %s\nprogram %s\n", tool, program)
	for _, f := range append([]string{program}, files...) {
		sum, err := FileHash(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "file %q %s\n", f, sum)
	}
	b, err := json.Marshal(opt)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))[:40], nil
}

var tool struct {
	once sync.Once
	sum  string
	err  error
}

// toolHash is the hash of the running executable: another build of kprewrite may
// rewrite differently, whatever its version says.
func toolHash() (string, error) {
	tool.once.Do(func() {
		exe, err := os.Executable()
		if err == nil {
			tool.sum, err = FileHash(exe)
		}
		if err != nil {
			tool.err = fmt.Errorf("cache key: the kprewrite executable: %w", err)
		}
	})
	return tool.sum, tool.err
}

// FileHash is the SHA-256 of the file at path.
func FileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// manifest is what an entry holds besides its files: the files outside it that its
// contents were made from and may change without the key changing (the libraries a
// definition names, found as the loader finds them), with their hashes.
type manifest struct {
	Sources map[string]string `json:"sources"`
}

const (
	manifestName = "manifest.json"
	usedName     = "used" // its mtime: when the entry was last used (LRU)
)

// Get returns the directory of the entry for key, made by build (given an empty
// directory; it returns the files outside the directory its output depends on) when
// there is none or its sources changed. hit reports that the entry was there.
func (c *Cache) Get(key string, build func(dir string) (sources []string, err error)) (dir string, hit bool, err error) {
	dir = filepath.Join(c.Dir, key)
	if c.valid(dir) {
		touch(filepath.Join(dir, usedName))
		return dir, true, nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return "", false, fmt.Errorf("cache: %w", err)
	}
	tmp, err := os.MkdirTemp(c.Dir, ".new-")
	if err != nil {
		return "", false, fmt.Errorf("cache: %w", err)
	}
	defer os.RemoveAll(tmp) // (gone once renamed)
	if err := c.fill(tmp, build); err != nil {
		return "", false, err
	}
	os.RemoveAll(dir) // a stale entry (its sources changed)
	if err := os.Rename(tmp, dir); err != nil && !c.valid(dir) {
		// (another process may have placed the same entry meanwhile: then it is used)
		return "", false, fmt.Errorf("cache: %w", err)
	}
	c.Evict(dir)
	return dir, false, nil
}

// fill builds an entry into dir and writes its manifest and use stamp.
func (c *Cache) fill(dir string, build func(string) ([]string, error)) error {
	sources, err := build(dir)
	if err != nil {
		return err
	}
	m := manifest{Sources: map[string]string{}}
	for _, s := range sources {
		if m.Sources[s], err = FileHash(s); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, manifestName), b, 0o644); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, usedName), nil, 0o644)
}

// valid reports whether the entry at dir is complete and its sources unchanged.
func (c *Cache) valid(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return false
	}
	var m manifest
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	for s, sum := range m.Sources {
		if now, err := FileHash(s); err != nil || now != sum {
			return false
		}
	}
	return true
}

func touch(path string) {
	now := time.Now()
	if os.Chtimes(path, now, now) != nil {
		os.WriteFile(path, nil, 0o644)
	}
}

type entry struct {
	dir  string
	used time.Time
	size int64
}

// Evict removes the least recently used entries, never keep, until the entries take
// at most c.Max bytes of disk.
func (c *Cache) Evict(keep string) {
	ents, total := c.entries()
	sort.Slice(ents, func(i, j int) bool { return ents[i].used.Before(ents[j].used) })
	for _, e := range ents {
		if total <= c.Max {
			return
		}
		if e.dir != keep && os.RemoveAll(e.dir) == nil {
			total -= e.size
		}
	}
}

// Clean removes every entry (and what an interrupted build left); it returns how many
// entries and bytes it removed.
func (c *Cache) Clean() (n int, bytes int64, err error) {
	ents, _ := c.entries()
	for _, e := range ents {
		if err := os.RemoveAll(e.dir); err != nil {
			return n, bytes, fmt.Errorf("cache: %w", err)
		}
		n++
		bytes += e.size
	}
	left, _ := filepath.Glob(filepath.Join(c.Dir, ".new-*"))
	for _, d := range left {
		os.RemoveAll(d)
	}
	return n, bytes, nil
}

// entries lists the cache's entries with their last use and disk size.
func (c *Cache) entries() ([]entry, int64) {
	des, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return nil, 0
	}
	var out []entry
	var total int64
	for _, de := range des {
		if !de.IsDir() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		e := entry{dir: filepath.Join(c.Dir, de.Name()), size: diskUsage(filepath.Join(c.Dir, de.Name()))}
		if st, err := os.Stat(filepath.Join(e.dir, usedName)); err == nil {
			e.used = st.ModTime()
		}
		out = append(out, e)
		total += e.size
	}
	return out, total
}

// diskUsage is the disk the files under dir take (their blocks, not their sizes).
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// Rewritten returns the path of program's rewrite in the cache, and whether it was
// there: the entry of Key(program, files, opt) holds it under program's base name
// (the name the rewritten program runs as), made by rewrite(out) when missing or
// stale; rewrite returns the files outside the entry its output depends on (the
// libraries it copied).
func (c *Cache) Rewritten(program string, files []string, opt any, rewrite func(out string) ([]string, error)) (string, bool, error) {
	key, err := Key(program, files, opt)
	if err != nil {
		return "", false, err
	}
	name := filepath.Base(program)
	dir, hit, err := c.Get(key, func(dir string) ([]string, error) { return rewrite(filepath.Join(dir, name)) })
	if err != nil {
		return "", false, err
	}
	return filepath.Join(dir, name), hit, nil
}
