package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/handlers"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	"github.com/kprewrite/kprewrite/internal/rewriter"
	"github.com/kprewrite/kprewrite/internal/srcprobe"
)

// ErrOptions is wrapped by the error of options that contradict each other or do not
// parse (kprewrite.ErrOptions is this error).
var ErrOptions = errors.New("bad options")

// Definitions are where a rewrite's or a check's events come from, as the flags of
// `kprewrite rewrite` give them.
type Definitions struct {
	Exprs, Files      []string // -e definitions, -f files of them
	Filters, Triggers []string // --filter, --trigger
	DebugFile         string   // the program's separate debug information (source-level definitions)
	KernelTypes       bool     // untyped fetchargs keep the kernel's default types (no DWARF types)
}

// Options are a rewrite's definitions and the assembly's options.
type Options struct {
	Definitions
	HandlerFiles []string // C handler files, compiled with gcc
	Calls        []string // --calls globs
	Prepare      []string // --prepare globs
	Assembly     rewriter.Options
}

// Result is what a rewrite wrote.
type Result struct {
	Program   *rewriter.Result // the program's (or the library's) image
	Libraries []Library        // the rewritten copies of the libraries the definitions name
	Warnings  []string         // the C handlers' compiler warnings
}

// Library is the rewritten copy of a library a program's definitions name.
type Library struct {
	Lib    string // as the definitions name it (LIB of LIB:SITE)
	Input  string // the library the program's loader finds
	Output string // the copy, OUT.libs/SONAME
	Result *rewriter.Result
}

// Rewrite writes to output a copy of the ELF file at input with the probes the
// options define, and the rewritten copies of the libraries they name beside it;
// on an error nothing is left behind.
func Rewrite(input, output string, opt Options) (*Result, error) {
	defs, warnings, err := readDefinitions(input, &opt)
	if err != nil {
		return nil, err
	}
	f, err := elfio.Open(input)
	if err != nil {
		return nil, err
	}
	defer f.Close() // after the output, which refers to the input's mapping, is written
	own, libs := probedefs.SplitLibraries(defs)
	copies, err := rewriteLibraries(f, output, own, libs, &opt.Assembly)
	defer closeAll(copies) // after the copies, which refer to the libraries' mappings, are written
	if err != nil {
		return nil, err
	}
	res, err := rewriteImage(f, own, funcGlobs{opt.Calls, opt.Prepare}, opt.Assembly)
	if err != nil {
		return nil, err
	}
	if err := writeAll(input, output, res, copies); err != nil {
		return nil, err
	}
	out := &Result{Program: res, Warnings: warnings}
	for _, c := range copies {
		out.Libraries = append(out.Libraries, Library{Lib: c.lib, Input: c.input, Output: c.path, Result: c.res})
	}
	return out, nil
}

// readDefinitions parses the definitions (source-level ones through the program's
// debug information) and compiles the C handler files, whose probes join the
// definitions; the synthetic events and the handlers go into the assembly's options.
func readDefinitions(input string, opt *Options) ([]probedefs.Probe, []string, error) {
	defs, synth, err := parseDefinitions(input, opt.Definitions)
	if err != nil {
		return nil, nil, err
	}
	opt.Assembly.Synthetic = synth
	if len(opt.HandlerFiles) == 0 {
		return defs, nil, nil
	}
	set, err := handlers.Compile(context.Background(), opt.HandlerFiles, handlers.Options{})
	if err != nil {
		return nil, nil, err
	}
	if defs, err = probedefs.HandlerDefs(defs, set); err != nil {
		return nil, nil, err
	}
	opt.Assembly.Handlers = set
	return defs, set.Warnings, nil
}

// parseDefinitions parses d, translating source-level definitions with the debug
// information of the program at path (read at the first one).
func parseDefinitions(path string, d Definitions) ([]probedefs.Probe, *probedefs.Synthetics, error) {
	r := &srcprobe.Resolver{Binary: path, DebugFile: d.DebugFile, KernelTypes: d.KernelTypes}
	return probedefs.ParseDefs(d.Exprs, d.Files, d.Filters, d.Triggers, r.Translate)
}

// rewriteImage analyses f, adds the --calls probes, resolves defs (f's own
// definitions) and assembles the rewritten image.
func rewriteImage(f *elfio.File, defs []probedefs.Probe, fg funcGlobs, ro rewriter.Options) (*rewriter.Result, error) {
	if err := CheckRewritable(f, defs); err != nil {
		return nil, err
	}
	if len(defs) > 0 || len(fg.calls) > 0 || len(fg.prepare) > 0 {
		bin, err := analysis.Analyze(f, analysis.Options{})
		if err != nil {
			return nil, fmt.Errorf("analyse %s: %w", f.Path, err)
		}
		if defs, err = fg.add(bin, defs); err != nil {
			return nil, err
		}
		if err := probedefs.Resolve(f, bin.Funcs, defs); err != nil {
			return nil, err
		}
		ro.Analysis = bin
	}
	return rewriter.Rewrite(f, defs, ro)
}

// ErrDynamicLoader refuses the dynamic loader as the input of a rewrite: it relocates
// itself and runs no DT_INIT, so a runtime in it would never start.
var ErrDynamicLoader = errors.New("is the dynamic loader: it cannot be rewritten (it runs no DT_INIT, so its runtime would never start and its probes never fire)")

// CheckRewritable refuses a rewrite whose probes would never fire: the dynamic loader
// as the input (ErrDynamicLoader), or a library whose dynamic section has no room for
// the DT_INIT that starts its runtime (elfio.LibraryPatches). The probes are the
// input's own: a program's LIB:SITE definitions go to the rewrites of their libraries.
// It runs before the analysis, which would be wasted on such an input.
func CheckRewritable(f *elfio.File, probes []probedefs.Probe) error {
	if f.IsDynamicLoader() {
		return fmt.Errorf("%s: %w", f.Path, ErrDynamicLoader)
	}
	if f.IsSharedLibrary() && len(probes) > 0 {
		if _, _, err := f.LibraryPatches(0); err != nil {
			return err
		}
	}
	return nil
}

// funcGlobs are the function globs of --calls and --prepare.
type funcGlobs struct{ calls, prepare []string }

// add appends the probes of fg's globs to defs: --calls events, then --prepare
// placeholders.
func (fg funcGlobs) add(bin *analysis.Binary, defs []probedefs.Probe) ([]probedefs.Probe, error) {
	if len(fg.calls) > 0 {
		gen, err := probedefs.CallProbes(bin, fg.calls, defs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		defs = append(defs, gen...)
	}
	if len(fg.prepare) > 0 {
		gen, err := probedefs.PrepareProbes(bin, fg.prepare, defs)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrOptions, err)
		}
		defs = append(defs, gen...)
	}
	return defs, nil
}
