package kprewrite

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/pipeline"
	"github.com/kprewrite/kprewrite/internal/rewriter"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// ErrOptions is wrapped by the error of options that contradict each other.
var ErrOptions = pipeline.ErrOptions

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
	// Prepare are function-name globs: each function proper that matches gets
	// placeholders at its entry and return (group "prepared", recording nothing) on which
	// `kprewrite probe` adds events to the running program; their sites keep the
	// original bytes while no event rides them, where the analysis allows it.
	Prepare []string
	// LivePoints is how many free live points an image with prepared sites or live
	// events reserves for events `kprewrite probe` adds at sites no rewrite prepared:
	// 0 the default (64), -1 none, at most 1024; a quarter as many more (at least one)
	// take return events (r:) at unprepared functions.
	LivePoints int
	// DebugFile is the program's separate debug information for source-level
	// definitions (FUNC:LINE, FILE:LINE, FUNC@FILE, variables by name); "" looks in
	// the program, then /usr/lib/debug/.build-id, then its .gnu_debuglink file.
	DebugFile string
	// KernelTypes keeps the kernel's default types for untyped fetchargs (x64,
	// $retval too), as the kernel's uprobe tracer prints them. Without it an untyped
	// argument register (%di, %si, %dx, %cx, %r8, %r9, $argN) at a C function's entry,
	// and an untyped $retval of a return probe, take the type of the parameter or the
	// result from the program's own DWARF, where it has some (docs/tracing.md).
	KernelTypes bool

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
	// CallsHook makes the return events of Calls hook the return address of every
	// function, as Exits off does for the others. By default they are recorded at the
	// rets of each function whose exits the analysis sees all (no return trampoline, no
	// misprediction at the return), and hook the others; a call that longjmp or an
	// exception leaves then writes no return and counts no miss (report ends it by the
	// stack pointer either way: "lost returns").
	CallsHook bool

	// TracePath is the default trace file of the rewritten program: "" for the output's
	// absolute path plus ".trace", "none" for none (KPREWRITE_TRACE still names one).
	TracePath string
	TraceSize uint64   // record area of a new trace file (0: the runtime's 64 MiB)
	Disable   []string // events registered disabled: "all", "EVENT", "GROUP/EVENT", "GROUP/*"
	Debug     bool     // the rewritten program reports its probe start-up on stderr
	// Clock is what record times are (the kernel's trace_clock): "tsc" (the default,
	// CLOCK_MONOTONIC from rdtsc), "mono" (clock_gettime), "counter" (an order, no
	// time); KPREWRITE_CLOCK overrides it at run time.
	Clock string
}

// Clocks are the record clocks RewriteOptions.Clock takes.
var Clocks = []string{"tsc", "mono", "counter"}

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
	res, err := pipeline.Rewrite(input, output, pipeline.Options{
		Definitions: pipeline.Definitions{Exprs: opt.Definitions, Files: opt.DefinitionFiles, Filters: opt.Filters,
			Triggers: opt.Triggers, DebugFile: opt.DebugFile, KernelTypes: opt.KernelTypes},
		HandlerFiles: opt.HandlerFiles, Calls: opt.Calls, Prepare: opt.Prepare, Assembly: ro})
	if err != nil {
		return nil, err
	}
	return rewriteResult(output, res), nil
}

// rewriteResult maps what the pipeline wrote to the API's result: the program's
// probes, then each library copy's.
func rewriteResult(output string, res *pipeline.Result) *RewriteResult {
	prog := res.Program
	out := &RewriteResult{Output: output, Warnings: append(res.Warnings, prog.Warnings...)}
	out.Skipped, out.Calls = refusals(prog)
	if prog.Desc != nil {
		out.Probes = listProbes(prog.Desc)
	}
	for _, c := range res.Libraries {
		out.Libraries = append(out.Libraries, LibraryCopy{Library: c.Lib, Input: c.Input, Output: c.Output})
		skipped, _ := refusals(c.Result)
		out.Skipped = append(out.Skipped, skipped...)
		out.Warnings = append(out.Warnings, c.Result.Warnings...)
		if c.Result.Desc != nil {
			out.Probes = append(out.Probes, listProbes(c.Result.Desc)...)
		}
	}
	return out
}

// ErrHandlersSpanImages refuses a C handler file set whose probes are in more than one
// image: its code and data are linked into one image, which runs them.
var ErrHandlersSpanImages = pipeline.ErrHandlersSpanImages

// ErrLibraryInLibrary refuses LIB:SITE definitions in the rewrite of a library.
var ErrLibraryInLibrary = pipeline.ErrLibraryInLibrary

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

// internal checks the options and turns them into the rewriter's.
func (opt *RewriteOptions) internal(output string) (rewriter.Options, error) {
	ro := rewriter.Options{NoBoost: opt.NoBoost, SkipRefused: opt.SkipRefused, Debug: opt.Debug, ImageName: filepath.Base(output),
		NoOptimize: opt.NoOptimize, VerifyRegions: opt.VerifyRegions, Exclude: opt.Exclude, OptimizedOnly: opt.OptimizedOnly,
		CountOnly: opt.CountOnly, ExitsOnly: opt.ExitsOnly, TraceExits: opt.Exits, CallsHook: opt.CallsHook, TraceSize: opt.TraceSize, Disable: opt.Disable, Clock: opt.Clock,
		LivePoints: opt.LivePoints}
	if opt.LivePoints < -1 || opt.LivePoints > rewriter.MaxFree {
		return ro, fmt.Errorf("%w: live points %d: want 0 (the default, 64), -1 (none) or up to %d", ErrOptions, opt.LivePoints, rewriter.MaxFree)
	}
	if opt.Clock != "" && !slices.Contains(Clocks, opt.Clock) {
		return ro, fmt.Errorf("%w: clock %q: want tsc, mono or counter", ErrOptions, opt.Clock)
	}
	if opt.TraceSize != 0 && (opt.TraceSize < kprt.MinTraceSize || opt.TraceSize > kprt.MaxTraceSize) {
		return ro, fmt.Errorf("trace size %d bytes: the runtime's record area is 4K to 64G", opt.TraceSize)
	}
	if opt.ExitsOnly && (!opt.CountOnly && !opt.Exits || opt.NoOptimize) {
		return ro, fmt.Errorf("%w: --exits-only needs --count-only or --exits (and jump-optimized probes: not --no-optimize)", ErrOptions)
	}
	if opt.CallsHook && opt.Exits {
		return ro, fmt.Errorf("%w: --calls-hook and --exits exclude each other", ErrOptions)
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
