// Package layoutdoc makes the layout table of docs/design.md (folder and role) from the
// package comments, one row per Go package directory of the module.
//
// A row's role is the first sentence of the package comment (doc.go's, where there is
// one), as `go doc` shows it; the table lies between the lines Begin and End of
// docs/design.md. `go generate .` in the module root rewrites it (the //go:generate line
// of the root package's doc.go runs ./internal/layoutdoc/cmd), and the root package's
// TestLayoutTable fails when the committed table differs from the comments. A new
// package is found by walking the tree: it needs a package comment and a regeneration.
package layoutdoc

import (
	"errors"
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The markers around the generated table in docs/design.md.
const (
	Begin = "<!-- layout:begin (generated from the package comments by `go generate .`; do not edit) -->"
	End   = "<!-- layout:end -->"
)

// DocFile is the file the table lives in, relative to the module root.
const DocFile = "docs/design.md"

// Regenerate is the command that rewrites the table, run in the module root.
const Regenerate = "go generate ."

// Package is one row of the table.
type Package struct {
	Dir  string // slash-separated, relative to the module root ("." for the root)
	Name string // the package clause's name (without _test)
	Role string // the first sentence of the package comment
}

// Packages walks the module rooted at root and returns its Go packages in path order,
// the root first. Directories named testdata or vendor, or whose name starts with '.'
// or '_', are skipped as the go command skips them, and so are nested modules (a
// directory with a go.mod of its own). A package without a package comment is an
// error naming it.
func Packages(root string) ([]Package, error) {
	var pkgs []Package
	var errs []error
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			name := d.Name()
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		pkg, ok, err := readPackage(p, rel)
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			pkgs = append(pkgs, pkg)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Dir < pkgs[j].Dir }) // "." first
	return pkgs, nil
}

// readPackage reads the package clauses and comments of dir's .go files. ok is false
// when dir has none. The comment is doc.go's, else the first one of the other files
// (by name), test files last, since a package made only of tests (tests/) may carry it
// there.
func readPackage(dir, rel string) (pkg Package, ok bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return pkg, false, err
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
			files = append(files, e.Name())
		}
	}
	if len(files) == 0 {
		return pkg, false, nil
	}
	rank := func(name string) int {
		switch {
		case name == "doc.go":
			return 0
		case !strings.HasSuffix(name, "_test.go"):
			return 1
		}
		return 2
	}
	sort.SliceStable(files, func(i, j int) bool { return rank(files[i]) < rank(files[j]) })
	pkg = Package{Dir: rel}
	fset := token.NewFileSet()
	var comment string
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return pkg, false, err
		}
		pname := f.Name.Name
		if strings.HasSuffix(pname, "_test") && strings.HasSuffix(name, "_test.go") {
			continue // an external test package: not the package's comment
		}
		if pkg.Name == "" {
			pkg.Name = pname
		}
		if comment == "" && f.Doc != nil {
			comment = f.Doc.Text()
		}
	}
	if pkg.Name == "" { // only external tests
		return pkg, false, nil
	}
	pkg.Role = synopsis(comment)
	if pkg.Role == "" {
		return pkg, false, fmt.Errorf("%s: package %s has no package comment: add a doc.go whose first sentence says what the package is for (\"// Package %s ...\"), then run %s", rel, pkg.Name, pkg.Name, Regenerate)
	}
	return pkg, true, nil
}

// synopsis is the first sentence of a package comment, as `go doc` and pkg.go.dev
// show it; a first paragraph that ends with a colon (it introduces an example) ends
// with a period here.
func synopsis(comment string) string {
	s := new(doc.Package).Synopsis(comment)
	if strings.HasSuffix(s, ":") {
		s = strings.TrimSuffix(s, ":") + "."
	}
	return s
}

// Table is the markdown table of pkgs, without the markers.
func Table(pkgs []Package) string {
	var b strings.Builder
	b.WriteString("| folder | role |\n| --- | --- |\n")
	for _, p := range pkgs {
		folder := "`" + p.Dir + "/`"
		switch {
		case p.Dir == ".":
			folder = "`.` (module root, package `" + p.Name + "`)"
		case p.Name != "main" && p.Name != path.Base(p.Dir):
			folder += " (package `" + p.Name + "`)"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", folder, strings.ReplaceAll(p.Role, "|", `\|`))
	}
	return b.String()
}

// Splice returns text with what lies between its Begin and End lines replaced by
// table.
func Splice(text, table string) (string, error) {
	i := strings.Index(text, Begin+"\n")
	j := strings.Index(text, "\n"+End)
	if i < 0 || j < 0 || j < i {
		return "", fmt.Errorf("%s: no %q line followed by a %q line", DocFile, Begin, End)
	}
	return text[:i+len(Begin)+1] + table + text[j+1:], nil
}

// Generate returns the contents docs/design.md should have in the module rooted at
// root, and what it has.
func Generate(root string) (want, have string, err error) {
	pkgs, err := Packages(root)
	if err != nil {
		return "", "", err
	}
	b, err := os.ReadFile(filepath.Join(root, DocFile))
	if err != nil {
		return "", "", err
	}
	have = string(b)
	want, err = Splice(have, Table(pkgs))
	return want, have, err
}
