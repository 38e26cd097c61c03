package probedefs

import (
	"debug/elf"
	"fmt"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/ldso"
)

// missingHint is what follows "no symbol NAME in FILE": the library among the program's
// DT_NEEDED closure that defines NAME, first in load order (the one the dynamic linker
// binds), as a definition to write instead (LIB:NAME); else the names of f's functions
// nearest to NAME (a typing error); else "".
func missingHint(f *elfio.File, byName map[string][]elfio.Symbol, name string) string {
	if lib := definingLibrary(f.Path, name); lib != "" {
		return fmt.Sprintf("; %s defines it: write %s:%s", lib, lib, name)
	}
	var funcs []string
	for n, syms := range byName {
		for _, s := range syms {
			if s.Type == elf.STT_FUNC {
				funcs = append(funcs, n)
				break
			}
		}
	}
	if near := eventdef.Nearest(name, funcs); len(near) > 0 {
		return "; did you mean " + eventdef.OrList(near) + "?"
	}
	return ""
}

// definingLibrary returns the DT_NEEDED name of the first library the program at path
// loads that defines the function name, "" when none does (or path is no dynamic
// program).
func definingLibrary(path, name string) string {
	search, err := ldso.New(path)
	if err != nil {
		return ""
	}
	for _, o := range search.Closure() {
		ef, err := elf.Open(o.Path)
		if err != nil {
			continue
		}
		syms, _ := ef.DynamicSymbols()
		ef.Close()
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if s.Name == name && s.Section != elf.SHN_UNDEF && (t == elf.STT_FUNC || t == 10 /* STT_GNU_IFUNC */) {
				return o.Name
			}
		}
	}
	return ""
}
