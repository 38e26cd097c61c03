package pipeline

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/ldso"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	"github.com/kprewrite/kprewrite/internal/rewriter"
)

// ErrHandlersSpanImages refuses a C handler file set whose probes are in more than one
// image: its code and data are linked into one image, which runs them.
var ErrHandlersSpanImages = errors.New("the C handlers' probes are in more than one image: one set of handler files is linked into one image (the program or one library); give each image's probes their own rewrite")

// ErrLibraryInLibrary refuses LIB:SITE definitions in the rewrite of a library.
var ErrLibraryInLibrary = errors.New("LIB:SITE definitions name other libraries: rewrite the program that loads them (or each library on its own)")

// libraryDir is where the rewrite of a program puts the rewritten copies of the
// libraries its definitions name: OUT.libs beside OUT.
func libraryDir(output string) string { return output + ".libs" }

// libraryCopy is the rewrite of one library a program's definitions name.
type libraryCopy struct {
	lib    string   // as the definitions name it
	input  string   // the library the program's loader would load
	path   string   // the copy: OUT.libs/SONAME
	soname string   // its name there, and its image's name in trace files
	needed string   // the program's DT_NEEDED for it: $ORIGIN/OUT.libs/SONAME
	names  []string // the program's DT_NEEDED names that load it now
	res    *rewriter.Result
	close  func() error
}

func closeAll(copies []libraryCopy) {
	for _, c := range copies {
		c.close()
	}
}

// rewriteLibraries rewrites the libraries that libs name, for the program f whose
// own definitions are own, and sets up ro for the program's rewrite: the copies as
// its needed libraries, and no C handlers when they went into a library's copy. The
// copies it returns, also with an error, hold their libraries open until closed.
func rewriteLibraries(f *elfio.File, output string, own []probedefs.Probe, libs []probedefs.LibraryDefs, ro *rewriter.Options) ([]libraryCopy, error) {
	if len(libs) == 0 {
		return nil, nil
	}
	if f.IsSharedLibrary() {
		return nil, fmt.Errorf("%s: %w", libs[0].Defs[0].Origin, ErrLibraryInLibrary)
	}
	handlersIn, err := handlerImage(f.Path, own, libs)
	if err != nil {
		return nil, err
	}
	copies, err := rewriteEachLibrary(f.Path, output, libs, handlersIn, *ro)
	if handlersIn != "" {
		ro.Handlers = nil // linked into that library's copy
	}
	if err != nil {
		return copies, err
	}
	for _, c := range copies {
		ro.Needed = append(ro.Needed, elfio.Needed{Names: c.names, Path: c.needed})
	}
	return copies, nil
}

// handlerImage says which library's copy the C handlers are linked into: the library
// (as LIB:SITE names it) that holds every probe they declare, or "" for the program
// (probes in the program, or none).
func handlerImage(input string, own []probedefs.Probe, libs []probedefs.LibraryDefs) (string, error) {
	var where []string
	if slices.ContainsFunc(own, func(p probedefs.Probe) bool { return p.Handler != nil }) {
		where = append(where, input)
	}
	for _, l := range libs {
		if slices.ContainsFunc(l.Defs, func(p probedefs.Probe) bool { return p.Handler != nil }) {
			where = append(where, l.Lib)
		}
	}
	switch {
	case len(where) > 1:
		return "", fmt.Errorf("%w (%s)", ErrHandlersSpanImages, strings.Join(where, ", "))
	case len(where) == 1 && where[0] != input:
		return where[0], nil
	}
	return "", nil
}

// findLibraries finds each library the definitions name as the program's loader
// would; two names of one file are one group.
func findLibraries(search *ldso.Search, libs []probedefs.LibraryDefs) (groups []probedefs.LibraryDefs, paths []string, err error) {
next:
	for _, l := range libs {
		p, err := search.Find(l.Lib)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: library %w", l.Defs[0].Origin, err)
		}
		for i := range paths {
			if outfile.Same(p, paths[i]) { // two names of one library: one copy
				groups[i].Defs = append(groups[i].Defs, l.Defs...)
				continue next
			}
		}
		groups = append(groups, l)
		paths = append(paths, p)
	}
	return groups, paths, nil
}

// rewriteEachLibrary rewrites each library the definitions name into OUT.libs, named
// by its soname, with the program's trace file as its default.
func rewriteEachLibrary(input, output string, libs []probedefs.LibraryDefs, handlersIn string, ro rewriter.Options) (copies []libraryCopy, err error) {
	search, err := ldso.New(input)
	if err != nil {
		return nil, fmt.Errorf("find the libraries of %s: %w", input, err)
	}
	groups, paths, err := findLibraries(search, libs)
	if err != nil {
		return nil, err
	}
	dir := libraryDir(output)
	seen := map[string]string{}
	for i, g := range groups {
		lf, err := elfio.Open(paths[i])
		if err != nil {
			return copies, err
		}
		copies = append(copies, libraryCopy{lib: g.Lib, input: paths[i], close: lf.Close})
		c := &copies[len(copies)-1]
		if err := c.name(lf, g, dir, seen, search); err != nil {
			return copies, err
		}
		lro := ro
		lro.Handlers, lro.Needed, lro.Synthetic = nil, nil, nil
		if handlersIn != "" && slices.ContainsFunc(g.Defs, func(p probedefs.Probe) bool { return p.Handler != nil }) {
			lro.Handlers = ro.Handlers
		}
		lro.ImageName = c.soname // the program's trace file: ro.TracePath
		if c.res, err = rewriteImage(lf, g.Defs, funcGlobs{}, lro); err != nil {
			return copies, err
		}
	}
	return copies, nil
}

// name names the copy of library lf (group g) by its soname in dir, and finds the
// names the program's DT_NEEDED may load it by; seen maps the sonames taken to their
// libraries.
func (c *libraryCopy) name(lf *elfio.File, g probedefs.LibraryDefs, dir string, seen map[string]string, search *ldso.Search) error {
	if !lf.IsSharedLibrary() {
		return fmt.Errorf("%s: %s (%s) is not a shared library", g.Defs[0].Origin, g.Lib, c.input)
	}
	name := lf.Soname()
	if name == "" {
		name = filepath.Base(c.input)
	}
	if other, ok := seen[name]; ok {
		return fmt.Errorf("%s: %s and %s have the same soname %s: their copies would be one file", g.Defs[0].Origin, other, c.input, name)
	}
	seen[name] = c.input
	c.soname = name
	c.path = filepath.Join(dir, name)
	c.needed = "$ORIGIN/" + filepath.Base(dir) + "/" + name
	c.names = []string{name}
	for _, o := range search.Closure() { // the names the program's DT_NEEDED may use
		if o.Name != name && outfile.Same(o.Path, c.input) {
			c.names = append(c.names, o.Name)
		}
	}
	return nil
}
