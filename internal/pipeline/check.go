package pipeline

import (
	"fmt"
	"sort"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/ldso"
	"github.com/kprewrite/kprewrite/internal/probedefs"
)

// CheckedImage is the check of one image: the program's, or a library's that
// LIB:SITE definitions name.
type CheckedImage struct {
	Path    string // the file analysed
	Library string // as the definitions name it (LIB of LIB:SITE); "" for the program
	Sites   []CheckedSite
}

// CheckedSite is one probe site and what the analysis says of it.
type CheckedSite struct {
	analysis.Site
	Def *probedefs.Probe // the definition checked; nil for a function entry
	// Exits, for a return probe the analysis does not refuse: where --count-only
	// counts its returns, or why it hooks the return address (ExitsWhy).
	Exits    []analysis.Site
	ExitsWhy string
	// TraceExits: where --exits records its returns, or why it cannot (TraceWhy).
	TraceExits []analysis.Site
	TraceWhy   string
}

// Check analyses the program at path, and the libraries its LIB:SITE definitions
// name, the way a rewrite would: the sites the definitions name, or every function
// entry when there are none. The program's image comes first, then each library's
// in order of first appearance.
func Check(path string, d Definitions) ([]CheckedImage, error) {
	defs, _, err := parseDefinitions(path, d)
	if err != nil {
		return nil, err
	}
	own, libs := probedefs.SplitLibraries(defs)
	prog, err := checkImage(path, own, len(defs) == 0)
	if err != nil {
		return nil, err
	}
	images := []CheckedImage{prog}
	var search *ldso.Search
	for _, l := range libs {
		if search == nil {
			if search, err = ldso.New(path); err != nil {
				return nil, fmt.Errorf("find the libraries of %s: %w", path, err)
			}
		}
		lp, err := search.Find(l.Lib)
		if err != nil {
			return nil, fmt.Errorf("%s: library %w", l.Defs[0].Origin, err)
		}
		img, err := checkImage(lp, l.Defs, false)
		if err != nil {
			return nil, err
		}
		img.Library = l.Lib
		images = append(images, img)
	}
	return images, nil
}

// checkImage checks the definitions defs in the ELF file at path, or every function
// entry when entries.
func checkImage(path string, defs []probedefs.Probe, entries bool) (CheckedImage, error) {
	img := CheckedImage{Path: path}
	f, err := elfio.Open(path)
	if err != nil {
		return img, err
	}
	defer f.Close()
	bin, err := analysis.Analyze(f, analysis.Options{})
	if err != nil {
		return img, fmt.Errorf("analyse %s: %w", path, err)
	}
	if entries {
		for _, s := range bin.EntrySites() {
			img.Sites = append(img.Sites, CheckedSite{Site: s})
		}
		return img, nil
	}
	if err := probedefs.Resolve(f, bin.Funcs, defs); err != nil {
		return img, err
	}
	for i := range defs {
		img.Sites = append(img.Sites, checkDef(bin, defs, i))
	}
	return img, nil
}

// checkDef checks definition i of defs, whose other sites are probes too.
func checkDef(bin *analysis.Binary, defs []probedefs.Probe, i int) CheckedSite {
	d := defs[i]
	var others []uint64
	for j, o := range defs {
		if j != i && o.Addr != d.Addr {
			others = append(others, o.Addr)
		}
	}
	cs := CheckedSite{Site: bin.Check(analysis.SiteRequest{Addr: d.Addr, Return: d.Def.Return, OtherProbes: others}), Def: &defs[i]}
	if !d.Def.Return || cs.Verdict == analysis.Refuse {
		return cs
	}
	othersAt := func(uint64) []uint64 { return others }
	cs.Exits, cs.ExitsWhy = bin.Exits(cs.Addr, othersAt)
	sortSites(cs.Exits)
	if cs.TraceWhy = probedefs.NoExit(d); cs.TraceWhy == "" {
		cs.TraceExits, cs.TraceWhy = bin.ExitsAfter(cs.Addr, othersAt)
		sortSites(cs.TraceExits)
	}
	if bin.IsGoCode(cs.Addr) { // never hooked: refused instead
		cs.ExitsWhy, cs.TraceWhy = goRefused(cs.ExitsWhy), goRefused(cs.TraceWhy)
	}
	return cs
}

// goRefused is why a Go function's return probe is refused ("" stays "").
func goRefused(why string) string {
	if why == "" {
		return ""
	}
	return GoRefusedPrefix + why
}

// GoRefusedPrefix starts the reason a Go function's return probe cannot go at its
// exits: it is refused, never hooked.
const GoRefusedPrefix = "refused (a Go function's return address is never hooked): "

func sortSites(s []analysis.Site) {
	sort.Slice(s, func(i, j int) bool { return s[i].Addr < s[j].Addr })
}
