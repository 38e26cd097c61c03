package kprewrite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/handlers"
	"github.com/kprewrite/kprewrite/internal/ldso"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/rewriter"
	"github.com/kprewrite/kprewrite/internal/srcprobe"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// ErrOptions is wrapped by the error of options that contradict each other.
var ErrOptions = errors.New("bad options")

// RewriteOptions are the probes and options of a rewrite: the flags of `kprewrite
// rewrite`, by the same names.
type RewriteOptions struct {
	// Definitions are kprobe-event definitions, DefinitionFiles files of them (one a
	// line, # comments), HandlerFiles C handler files (kprewrite.h, compiled with gcc).
	// With none of them the output is the probe-less rewrite: new segments and an
	// entry stub only.
	Definitions     []string
	DefinitionFiles []string
	HandlerFiles    []string
	// Filters are event filters, "GROUP/EVENT:EXPR" with the kernel's grammar
	// (Documentation/trace/events.rst, section 5), applied after a definitions file's
	// "filter" lines: a hit the filter refuses writes no record (its hit is still
	// counted). "GROUP/EVENT:0" removes the event's filter.
	Filters []string
	// Triggers are event triggers, "GROUP/EVENT:TRIGGER" with the kernel's grammar
	// (events.rst section 6: traceon, traceoff, enable_event:GROUP:EVENT,
	// disable_event:GROUP:EVENT, each with :COUNT and "if FILTER"; "!CMD" removes one),
	// applied in order after the definition files' "trigger" lines.
	Triggers []string
	// Calls are function-name globs (path.Match: "*" is every function): each function
	// proper that matches gets an entry and a return event, calls/NAME and
	// calls/NAME__return, which `kprewrite report`, `flamegraph` and `trace --format
	// chrome` show as calls; a function whose probe the analysis refuses is left out
	// (RewriteResult.Calls), never an error.
	Calls []string
	// DebugFile is the program's separate debug information for source-level
	// definitions (FUNC:LINE, FILE:LINE, FUNC@FILE, variables by name); "" looks in
	// the program, then /usr/lib/debug/.build-id, then its .gnu_debuglink file.
	DebugFile string

	NoOptimize    bool     // every probe is an int3 (k, b, r, rb)
	NoBoost       bool     // int3 probes are single-stepped (k, r)
	SingleStep    string   // how k and r run the copied instruction: "tf" (default) or "int3"
	VerifyRegions bool     // int3 on every byte of each would-be DCR; violations in the profile
	OptimizedOnly bool     // refuse probes that would need int3
	SkipRefused   bool     // leave out refused probes (RewriteResult.Skipped) instead of failing
	Exclude       []string // no probe in this code: function globs, 0xLO-0xHI, 0xLO+SIZE
	CountOnly     bool     // events count their hits, write no records
	ExitsOnly     bool     // with CountOnly or Exits: refuse return probes that would hook a return address
	// Exits records return events at their functions' rets where the analysis sees
	// them all (no tail call), instead of hooking the return address: no instances,
	// no maxactive misses, no return trampoline ([EXIT] in list). Return events with
	// a C handler or a fetch at the entry ($argN) keep hooking.
	Exits bool

	// TracePath is the default trace file of the rewritten program: "" for the output's
	// absolute path plus ".trace", "none" for none (KPREWRITE_TRACE still names one).
	TracePath string
	TraceSize uint64   // record area of a new trace file (0: the runtime's 64 MiB)
	Disable   []string // events registered disabled: "all", "EVENT", "GROUP/EVENT", "GROUP/*"
	Debug     bool     // the rewritten program reports its probe start-up on stderr
}

// RewriteResult is what a rewrite did.
type RewriteResult struct {
	Output   string
	Probes   []Probe  // every probe installed, by site, then in definition order
	Skipped  []string // with SkipRefused: the refused probes left out, and why
	Warnings []string // what the user should know about the rewritten program
	// Libraries are the rewritten copies of the libraries LIB:SITE definitions name,
	// which the program loads instead of the originals.
	Libraries []LibraryCopy
	// Calls is what RewriteOptions.Calls did.
	Calls CallsResult
}

// CallsResult is what RewriteOptions.Calls did: the functions traced as calls, and those
// left out because the analysis refused their entry or return probe.
type CallsResult struct {
	Traced  int
	LeftOut []string // "FUNC: why", in address order
}

// LibraryCopy is the rewritten copy of a library a program's definitions name.
type LibraryCopy struct {
	Library string // as the definitions name it (LIB of LIB:SITE)
	Input   string // the library the program's loader finds
	Output  string // the copy, OUT.libs/SONAME
}

// Probe is one probe of a rewritten binary.
type Probe struct {
	Event  string // GROUP/EVENT
	Kind   string // k, b, o (jump-optimized), r, rb, ro
	Addr   uint64 // the address the definition asked for
	Site   uint64 // the probed instruction (after an endbr64 at a function entry)
	Symbol string // the function holding Site, when known
	Offset uint64 // Site - the function's address
	// Exit: a count site of a --count-only return event at one of its function's
	// returns ([EXIT] in list).
	Exit bool
}

// Rewrite writes to output a copy of the ELF executable at input with the probes of
// opt installed, atomically (nothing is left at output on error) and with the input's
// permission bits. The input is never modified: an output that is the input or one of
// opt's files is refused; the same input and options give the same bytes.
func Rewrite(input, output string, opt RewriteOptions) (*RewriteResult, error) {
	inputs := append([]string{input, opt.DebugFile}, opt.DefinitionFiles...)
	if err := outfile.Check(output, append(inputs, opt.HandlerFiles...)...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOptions, err)
	}
	ro, err := opt.internal(output)
	if err != nil {
		return nil, err
	}
	defs, synth, err := rewriter.ParseDefs(opt.Definitions, opt.DefinitionFiles, opt.Filters, opt.Triggers, sourceTranslator(input, opt.DebugFile))
	if err != nil {
		return nil, err
	}
	ro.Synthetic = synth
	var warnings []string
	if len(opt.HandlerFiles) > 0 {
		set, err := handlers.Compile(context.Background(), opt.HandlerFiles, handlers.Options{})
		if err != nil {
			return nil, err
		}
		warnings = append(warnings, set.Warnings...)
		if defs, err = rewriter.HandlerDefs(defs, set); err != nil {
			return nil, err
		}
		ro.Handlers = set
	}
	f, err := elfio.Open(input)
	if err != nil {
		return nil, err
	}
	defer f.Close() // after the output, which refers to the input's mapping, is written
	defs, libs := rewriter.SplitLibraries(defs)
	var copies []libraryCopy
	if len(libs) > 0 {
		if f.IsSharedLibrary() {
			return nil, fmt.Errorf("%s: %w", libs[0].Defs[0].Origin, ErrLibraryInLibrary)
		}
		handlersIn, err := handlerImage(input, defs, libs)
		if err != nil {
			return nil, err
		}
		copies, err = rewriteLibraries(input, output, libs, handlersIn, ro)
		if handlersIn != "" {
			ro.Handlers = nil // linked into that library's copy
		}
		defer func() { // after the copies, which refer to the libraries' mappings, are written
			for _, c := range copies {
				c.close()
			}
		}()
		if err != nil {
			return nil, err
		}
		for _, c := range copies {
			ro.Needed = append(ro.Needed, elfio.Needed{Names: c.names, Path: c.needed})
		}
	}
	res, err := rewriteImage(f, defs, opt.Calls, ro)
	if err != nil {
		return nil, err
	}
	// the library copies first, then the program that loads them; on an error none
	// is left behind
	var written []string
	undo := func() {
		for _, w := range written {
			os.Remove(w)
		}
		if len(copies) > 0 {
			os.Remove(libraryDir(output)) // only when empty
		}
	}
	for _, c := range copies {
		if err := os.MkdirAll(filepath.Dir(c.path), 0o777); err != nil {
			undo()
			return nil, fmt.Errorf("library copies: %w", err)
		}
		if err := elfio.WriteFileAtomic(c.path, c.res.Image, outputMode(c.input)); err != nil {
			undo()
			return nil, err
		}
		written = append(written, c.path)
	}
	if err := elfio.WriteFileAtomic(output, res.Image, outputMode(input)); err != nil {
		undo()
		return nil, err
	}
	out := &RewriteResult{Output: output, Warnings: append(warnings, res.Warnings...)}
	out.Skipped, out.Calls = refusals(res)
	if res.Desc != nil {
		out.Probes = listProbes(res.Desc)
	}
	for _, c := range copies {
		out.Libraries = append(out.Libraries, LibraryCopy{Library: c.lib, Input: c.input, Output: c.path})
		skipped, _ := refusals(c.res)
		out.Skipped = append(out.Skipped, skipped...)
		out.Warnings = append(out.Warnings, c.res.Warnings...)
		if c.res.Desc != nil {
			out.Probes = append(out.Probes, listProbes(c.res.Desc)...)
		}
	}
	return out, nil
}

// ErrHandlersSpanImages refuses a C handler file set whose probes are in more than one
// image: its code and data are linked into one image, which runs them.
var ErrHandlersSpanImages = errors.New("the C handlers' probes are in more than one image: one set of handler files is linked into one image (the program or one library); give each image's probes their own rewrite")

// handlerImage says which library's copy the C handlers are linked into: the library
// (as LIB:SITE names it) that holds every probe they declare, or "" for the program
// (probes in the program, or none).
func handlerImage(input string, own []rewriter.Probe, libs []rewriter.LibraryDefs) (string, error) {
	var where []string
	if slices.ContainsFunc(own, func(p rewriter.Probe) bool { return p.Handler != nil }) {
		where = append(where, input)
	}
	for _, l := range libs {
		if slices.ContainsFunc(l.Defs, func(p rewriter.Probe) bool { return p.Handler != nil }) {
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
	needed string   // the program's DT_NEEDED for it: $ORIGIN/OUT.libs/SONAME
	names  []string // the program's DT_NEEDED names that load it now
	res    *rewriter.Result
	close  func() error
}

// rewriteImage analyses f and rewrites it with defs, its own definitions.
func rewriteImage(f *elfio.File, defs []rewriter.Probe, calls []string, ro rewriter.Options) (*rewriter.Result, error) {
	// before the analysis: refused anyway by rewriter.Rewrite
	if err := rewriter.CheckRewritable(f, defs); err != nil {
		return nil, err
	}
	if len(defs) > 0 || len(calls) > 0 {
		bin, err := analysis.Analyze(f, analysis.Options{})
		if err != nil {
			return nil, fmt.Errorf("analyse %s: %w", f.Path, err)
		}
		if len(calls) > 0 {
			gen, err := rewriter.CallProbes(bin, calls, defs)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrOptions, err)
			}
			defs = append(defs, gen...)
		}
		if err := rewriter.Resolve(f, bin.Funcs, defs); err != nil {
			return nil, err
		}
		ro.Analysis = bin
	}
	return rewriter.Rewrite(f, defs, ro)
}

// refusals sorts a rewrite's refused probes: the user's (left out with SkipRefused),
// and the functions --calls left out; it counts the functions --calls traced.
func refusals(res *rewriter.Result) (skipped []string, calls CallsResult) {
	if res.Plan == nil {
		return nil, calls
	}
	out := map[string]bool{}
	for _, r := range res.Refused {
		req := res.Plan.Requests[r.Request]
		if !req.Optional {
			skipped = append(skipped, r.Err.Error())
			continue
		}
		if fn := strings.TrimPrefix(req.Name, "--calls "); !out[fn] {
			out[fn] = true
			why := r.Err.Error()
			if _, after, ok := strings.Cut(why, ": "); ok {
				why = after // the origin is the function
			}
			calls.LeftOut = append(calls.LeftOut, fn+": "+why)
		}
	}
	seen := map[string]bool{}
	for _, req := range res.Plan.Requests {
		if fn, ok := strings.CutPrefix(req.Name, "--calls "); ok && req.Optional && !out[fn] && !seen[fn] {
			seen[fn] = true
			calls.Traced++
		}
	}
	return skipped, calls
}

// rewriteLibraries rewrites each library the definitions name (found as the program's
// loader finds it; two names of one file are one copy) into OUT.libs, named by its
// soname, with the program's trace file as its default. The copies it returns, also
// with an error, hold their libraries open until closed.
func rewriteLibraries(input, output string, libs []rewriter.LibraryDefs, handlersIn string, ro rewriter.Options) (copies []libraryCopy, err error) {
	search, err := ldso.New(input)
	if err != nil {
		return nil, fmt.Errorf("find the libraries of %s: %w", input, err)
	}
	var groups []rewriter.LibraryDefs
	var paths []string
next:
	for _, l := range libs {
		p, err := search.Find(l.Lib)
		if err != nil {
			return nil, fmt.Errorf("%s: library %w", l.Defs[0].Origin, err)
		}
		for i := range paths {
			if sameFile(p, paths[i]) { // two names of one library: one copy
				groups[i].Defs = append(groups[i].Defs, l.Defs...)
				continue next
			}
		}
		groups = append(groups, l)
		paths = append(paths, p)
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
		if !lf.IsSharedLibrary() {
			return copies, fmt.Errorf("%s: %s (%s) is not a shared library", g.Defs[0].Origin, g.Lib, paths[i])
		}
		name := lf.Soname()
		if name == "" {
			name = filepath.Base(paths[i])
		}
		if other, ok := seen[name]; ok {
			return copies, fmt.Errorf("%s: %s and %s have the same soname %s: their copies would be one file", g.Defs[0].Origin, other, paths[i], name)
		}
		seen[name] = paths[i]
		c.path = filepath.Join(dir, name)
		c.needed = "$ORIGIN/" + filepath.Base(dir) + "/" + name
		c.names = []string{name}
		for _, o := range search.Closure() { // the names the program's DT_NEEDED may use
			if o.Name != name && sameFile(o.Path, paths[i]) {
				c.names = append(c.names, o.Name)
			}
		}
		lro := ro
		lro.Handlers, lro.Needed, lro.Synthetic = nil, nil, nil
		if handlersIn != "" && slices.ContainsFunc(g.Defs, func(p rewriter.Probe) bool { return p.Handler != nil }) {
			lro.Handlers = ro.Handlers
		}
		lro.ImageName = name // the program's trace file: ro.TracePath
		if c.res, err = rewriteImage(lf, g.Defs, nil, lro); err != nil {
			return copies, err
		}
	}
	return copies, nil
}

// sourceTranslator translates the source-level definitions of the program at path
// with its debug information (read at the first one).
func sourceTranslator(path, debugFile string) rewriter.Translator {
	r := &srcprobe.Resolver{Binary: path, DebugFile: debugFile}
	return r.Translate
}

// internal checks the options and turns them into the rewriter's.
func (opt *RewriteOptions) internal(output string) (rewriter.Options, error) {
	ro := rewriter.Options{NoBoost: opt.NoBoost, SkipRefused: opt.SkipRefused, Debug: opt.Debug, ImageName: filepath.Base(output),
		NoOptimize: opt.NoOptimize, VerifyRegions: opt.VerifyRegions, Exclude: opt.Exclude, OptimizedOnly: opt.OptimizedOnly,
		CountOnly: opt.CountOnly, ExitsOnly: opt.ExitsOnly, TraceExits: opt.Exits, TraceSize: opt.TraceSize, Disable: opt.Disable}
	if opt.ExitsOnly && (!opt.CountOnly && !opt.Exits || opt.NoOptimize) {
		return ro, fmt.Errorf("%w: --exits-only needs --count-only or --exits (and jump-optimized probes: not --no-optimize)", ErrOptions)
	}
	if opt.Exits && (opt.CountOnly || opt.NoOptimize || opt.VerifyRegions) {
		return ro, fmt.Errorf("%w: --exits records return events at jump-optimized exits: not with --count-only (which counts at exits already), --no-optimize or --verify-regions", ErrOptions)
	}
	switch opt.SingleStep {
	case "", "tf":
	case "int3":
		ro.Int3Step = true
	default:
		return ro, fmt.Errorf("%w: --single-step %q: want tf or int3", ErrOptions, opt.SingleStep)
	}
	if opt.OptimizedOnly && opt.NoOptimize {
		return ro, fmt.Errorf("%w: --optimized-only and --no-optimize exclude each other", ErrOptions)
	}
	switch opt.TracePath {
	case "":
		abs, err := filepath.Abs(output)
		if err != nil {
			return ro, fmt.Errorf("default trace path: %w", err)
		}
		ro.TracePath = abs + tracefile.Suffix
	case "none":
	default:
		ro.TracePath = opt.TracePath
	}
	return ro, nil
}

// listProbes lists the probes of a description by site, then in definition order,
// without --verify-regions' inner bytes.
func listProbes(d *tracefile.Desc) []Probe {
	ps := make([]tracefile.DescProbe, 0, len(d.Probes))
	for _, p := range d.Probes {
		if p.Kind != tracefile.KindVerify && p.Event >= 0 && p.Event < len(d.Events) {
			ps = append(ps, p)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Site != ps[j].Site {
			return ps[i].Site < ps[j].Site
		}
		return ps[i].Event < ps[j].Event
	})
	out := make([]Probe, 0, len(ps))
	for _, p := range ps {
		e := d.Events[p.Event]
		out = append(out, Probe{Event: e.Group + "/" + e.Name, Kind: p.Kind, Addr: p.Addr, Site: p.Site,
			Symbol: p.Symbol, Offset: p.Offset, Exit: p.Exit})
	}
	return out
}

// sameFile reports whether a and b name the same file (or the same path, when one
// does not exist).
func sameFile(a, b string) bool { return outfile.Same(a, b) }

// outputMode is the mode a linker would give the output: read and write for all, and
// execute where the input has it, masked by the umask.
func outputMode(input string) os.FileMode {
	mode := os.FileMode(0o666)
	if st, err := os.Stat(input); err == nil {
		mode |= st.Mode().Perm() & 0o111
	}
	return mode &^ umask()
}

// umask reads the process's umask from /proc (Linux 4.7 and later) rather than
// setting it to read it back, which would race with other goroutines creating files.
func umask() os.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m) & 0o777
				}
			}
		}
	}
	return 0o022
}
