package ldso

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kprewrite/kprewrite/internal/infile"
)

// SystemDirs are the loader's built-in search path after the cache (Debian's glibc on
// x86-64, as `ld.so --help` lists it).
var SystemDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}

// ErrNotFound reports a library the loader would not find for the program.
var ErrNotFound = errors.New("not found")

// Object is a shared object the program loads.
type Object struct {
	Name   string // as DT_NEEDED names it
	Path   string // where the loader finds it
	Soname string // its DT_SONAME ("" when none)
}

// object is what the search reads from an ELF file's dynamic section.
type object struct {
	path           string
	needed         []string
	rpath, runpath []string // expanded ($ORIGIN), split
	hasRunpath     bool
	soname         string
	nodeflib       bool // DF_1_NODEFLIB: no cache, no system directories
	neededName     string
}

// Search finds shared objects for one program.
type Search struct {
	exe     *object
	cache   Cache
	closure []*object // the NEEDED closure in load order, the executable first
	missing []string  // needed names not found: "NAME (needed by PATH)"
}

// New reads the program at path, the loader's cache and the program's NEEDED closure.
func New(path string) (*Search, error) {
	cache, err := ReadCache(CachePath)
	if err != nil {
		return nil, err
	}
	return NewWithCache(path, cache)
}

// NewWithCache is New with the cache given.
func NewWithCache(path string, cache Cache) (*Search, error) {
	exe, err := readObject(path, true)
	if err != nil {
		return nil, err
	}
	s := &Search{exe: exe, cache: cache}
	s.load()
	return s, nil
}

// load walks the NEEDED closure breadth first, as ld.so loads it.
func (s *Search) load() {
	s.closure = []*object{s.exe}
	for i := 0; i < len(s.closure); i++ {
		o := s.closure[i]
		for _, name := range o.needed {
			if s.loaded(name) != nil {
				continue
			}
			p, err := s.searchFrom(o, name)
			if err != nil {
				s.missing = append(s.missing, fmt.Sprintf("%s (needed by %s)", name, o.path))
				continue
			}
			lib, err := readObject(p, false)
			if err != nil {
				s.missing = append(s.missing, fmt.Sprintf("%s (needed by %s): %v", name, o.path, err))
				continue
			}
			lib.neededName = name
			s.closure = append(s.closure, lib)
		}
	}
}

// loaded returns the object of the closure a request for name would reuse: the
// loader matches the name it was loaded by, its soname, or its path.
func (s *Search) loaded(name string) *object {
	for _, o := range s.closure[1:] {
		if o.neededName == name || (o.soname != "" && o.soname == name) || o.path == name {
			return o
		}
	}
	return nil
}

// Closure returns the shared objects the program loads at start-up, in load order.
func (s *Search) Closure() []Object {
	out := make([]Object, 0, len(s.closure)-1)
	for _, o := range s.closure[1:] {
		out = append(out, Object{Name: o.neededName, Path: o.path, Soname: o.soname})
	}
	return out
}

// Missing lists the needed libraries the loader would not find.
func (s *Search) Missing() []string { return s.missing }

// Find returns the path of lib for the program: lib itself when it is a path (it has
// a '/'); a library of the program's NEEDED closure by name or soname; otherwise
// where dlopen(lib) from the executable would find it.
func (s *Search) Find(lib string) (string, error) {
	if strings.IndexByte(lib, '/') >= 0 {
		if err := checkELF(lib); err != nil {
			return "", err
		}
		return lib, nil
	}
	if o := s.loaded(lib); o != nil {
		return o.path, nil
	}
	p, err := s.searchFrom(s.exe, lib)
	if err != nil {
		return "", fmt.Errorf("%s: %w for %s (searched its RPATH/RUNPATH, %s and %s)", lib, err, s.exe.path, CachePath, strings.Join(SystemDirs, ", "))
	}
	return p, nil
}

// searchFrom finds name as ld.so does for a request from object o.
func (s *Search) searchFrom(o *object, name string) (string, error) {
	if strings.IndexByte(name, '/') >= 0 {
		return name, checkELF(name)
	}
	var dirs []string
	if !o.hasRunpath {
		dirs = append(dirs, o.rpath...)
		if o != s.exe && !s.exe.hasRunpath {
			dirs = append(dirs, s.exe.rpath...)
		}
	}
	dirs = append(dirs, o.runpath...)
	for _, d := range dirs {
		if p := filepath.Join(d, name); checkELF(p) == nil {
			return p, nil
		}
	}
	if o.nodeflib {
		return "", ErrNotFound
	}
	if p, ok := s.cache[name]; ok && checkELF(p) == nil {
		return p, nil
	}
	for _, d := range SystemDirs {
		if p := filepath.Join(d, name); checkELF(p) == nil {
			return p, nil
		}
	}
	return "", ErrNotFound
}

// checkELF accepts what the loader would load: a readable x86-64 ELF64 file.
func checkELF(path string) error {
	f, err := infile.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var h [20]byte
	if _, err := f.ReadAt(h[:], 0); err != nil || string(h[:4]) != elf.ELFMAG || elf.Class(h[4]) != elf.ELFCLASS64 ||
		elf.Machine(uint16(h[18])|uint16(h[19])<<8) != elf.EM_X86_64 {
		return fmt.Errorf("%s: not an x86-64 ELF64 object", path)
	}
	return nil
}

// readObject reads the dynamic section of the object at path. debug/elf may panic on
// a malformed file: that is an error here.
func readObject(path string, exe bool) (o *object, err error) {
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, fmt.Errorf("%s: malformed ELF file: %v", path, r)
		}
	}()
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	o = &object{path: path}
	origin := filepath.Dir(path)
	if exe {
		// the executable's $ORIGIN is where it really is (ld.so reads
		// /proc/self/exe, links resolved)
		if r, err := filepath.EvalSymlinks(path); err == nil {
			origin = filepath.Dir(r)
		}
		if a, err := filepath.Abs(origin); err == nil {
			origin = a
		}
	}
	if f.Type != elf.ET_DYN && f.Type != elf.ET_EXEC {
		return nil, fmt.Errorf("%s: not an executable or shared object (%v)", path, f.Type)
	}
	if f.Section(".dynamic") == nil && dynamicProg(f) == nil {
		return o, nil // static: needs nothing
	}
	if o.needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sonames, _ := f.DynString(elf.DT_SONAME)
	if len(sonames) > 0 {
		o.soname = sonames[0]
	}
	rpath, _ := f.DynString(elf.DT_RPATH)
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	o.hasRunpath = len(runpath) > 0
	o.rpath = expand(rpath, origin)
	o.runpath = expand(runpath, origin)
	if v, err := f.DynValue(elf.DT_FLAGS_1); err == nil {
		for _, x := range v {
			o.nodeflib = o.nodeflib || x&uint64(elf.DF_1_NODEFLIB) != 0
		}
	}
	return o, nil
}

func dynamicProg(f *elf.File) *elf.Prog {
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			return p
		}
	}
	return nil
}

// expand splits search paths at ':' and replaces $ORIGIN; entries naming $LIB or
// $PLATFORM are left out (see the package's documentation), and an empty entry is the
// current directory, as for ld.so.
func expand(paths []string, origin string) []string {
	var out []string
	for _, p := range paths {
		for _, d := range strings.Split(p, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			if strings.Contains(d, "$") {
				continue
			}
			if d == "" {
				d = "."
			}
			out = append(out, d)
		}
	}
	return out
}
