package kprewrite

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/kprewrite/kprewrite/internal/export"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// ExportFormat is a format Export writes.
type ExportFormat string

// The formats of Export, and the commands that write the same bytes.
const (
	// FormatChrome is the Trace Event Format (Perfetto, chrome://tracing,
	// speedscope): calls as slices, other records as instant events (`kprewrite
	// trace --format chrome`).
	FormatChrome ExportFormat = "chrome"
	// FormatJSONL is one JSON object per record, one a line (`kprewrite trace
	// --format json`).
	FormatJSONL ExportFormat = "jsonl"
	// FormatPprof is the calls as a gzipped pprof profile, for go tool pprof
	// (`kprewrite profile --format pprof`).
	FormatPprof ExportFormat = "pprof"
	// FormatFolded is flamegraph.pl's folded stacks, self nanoseconds per stack
	// (`kprewrite flamegraph --format folded`).
	FormatFolded ExportFormat = "folded"
	// FormatFlameSVG is a flame graph as a standalone SVG (`kprewrite flamegraph`).
	FormatFlameSVG ExportFormat = "svg"
)

// ExportOptions are the options of the commands behind the formats.
type ExportOptions struct {
	// Threads gives each thread a tower of its own (its comm-tid at the bottom) in
	// FormatFolded and FormatFlameSVG (`flamegraph --threads`).
	Threads bool
	// Title is FormatFlameSVG's title ("": "Flame graph of " and path's base name).
	Title string
	// Warnings receives, once per reason, why records were left out (their image
	// has no description, or they do not decode), as the commands print them on
	// standard error; nil discards them.
	Warnings io.Writer
}

// Export writes the trace file at path to w in a format other tools read, the bytes
// the command named at the format writes. Calls (the entry and return events of the
// same function, RewriteOptions.Calls) make the slices, stacks and profile; the
// descriptions that name the events come from where ReadTrace finds them (the file,
// binaries, path without ".trace"). Export streams: memory grows with the threads
// and distinct call stacks, not with the trace's length.
func Export(path string, w io.Writer, format ExportFormat, opt ExportOptions, binaries ...string) error {
	switch format {
	case FormatChrome, FormatJSONL, FormatPprof, FormatFolded, FormatFlameSVG:
	default:
		return fmt.Errorf("export %s: unknown format %q (chrome, jsonl, pprof, folded or svg)", path, format)
	}
	in, done, err := openExport(path, binaries, opt.Warnings)
	if err != nil {
		return err
	}
	defer done()
	switch format {
	case FormatChrome:
		err = export.WriteChrome(w, in)
	case FormatJSONL:
		err = export.WriteJSONLines(w, in)
	default:
		err = exportStacks(path, w, format, opt, in)
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", path, err)
	}
	return nil
}

// exportStacks writes the formats made of the calls by call stack.
func exportStacks(path string, w io.Writer, format ExportFormat, opt ExportOptions, in *export.Input) error {
	// pprof has no threads: its samples' stacks are the calls' (as `profile` writes it)
	st, err := export.BuildStacks(in, opt.Threads && format != FormatPprof)
	if err != nil {
		return err
	}
	switch format {
	case FormatPprof:
		return export.WritePprof(w, st)
	case FormatFolded:
		return export.WriteFolded(w, st)
	}
	title := opt.Title
	if title == "" {
		title = "Flame graph of " + filepath.Base(path)
	}
	return export.WriteFlameSVG(w, st, title)
}

// openExport opens the trace file at path for an export; done releases it.
func openExport(path string, bins []string, warnings io.Writer) (*export.Input, func(), error) {
	s, descs, err := tracefile.OpenStream(path, bins)
	if err != nil {
		return nil, nil, err
	}
	in := &export.Input{Stream: s, Descs: descs, Errors: warnings, Command: "kprewrite"}
	return in, func() { s.Close() }, nil
}

// ReportOptions are the options of `kprewrite report`.
type ReportOptions struct {
	// Sort is the column the functions are sorted by, largest first: "total" (""),
	// "self", "calls", "avg", "min", "max", or "func" (by name).
	Sort string
	// Threads makes one line per thread and function instead of per function.
	Threads bool
}

// CallReport is a trace's calls per function, what `kprewrite report` prints.
type CallReport struct {
	Funcs []FuncStats
	// Total is the sum of the functions' self times: the time in probed functions.
	Total time.Duration
	// Clock is the trace's clock (Trace.Clock): under "counter" the times are counts
	// of records, not durations, and String does not print them.
	Clock string
	rep   *export.Report
}

// FuncStats is one function's calls (one thread's, with ReportOptions.Threads).
type FuncStats struct {
	Func   string
	Image  string
	Thread string // "comm-tid" with ReportOptions.Threads
	Calls  uint64
	// Total is the time inside the function, its recursive calls counted once (the
	// outermost call's); Self leaves out the calls it made. Min, Max and Avg are of
	// single calls (each recursive call its own).
	Total, Self, Min, Max, Avg time.Duration
	// LostReturns counts calls whose return was lost: their time ends where the
	// trace shows it.
	LostReturns uint64
}

// String is the report as `kprewrite report` prints it ("" for a CallReport that
// Report did not make).
func (r *CallReport) String() string {
	if r.rep == nil {
		return ""
	}
	var b strings.Builder
	r.rep.Write(&b, 0)
	return b.String()
}

// Diff is how each function changed from base (the trace before a change) to r, as
// `kprewrite report --diff BASE` prints it: total and self time and calls of both and
// the change in per cent, in r's order, functions only in base last.
func (r *CallReport) Diff(base *CallReport) string {
	if r.rep == nil || base == nil || base.rep == nil {
		return ""
	}
	var b strings.Builder
	r.rep.WriteDiff(&b, base.rep, 0)
	return b.String()
}

// Report reads the trace file at path and sums its calls per function (the entry
// and return events of the same function on the same thread, RewriteOptions.Calls),
// like `kprewrite report` and uftrace report. binaries are as ReadTrace's.
func Report(path string, opt ReportOptions, binaries ...string) (*CallReport, error) {
	if opt.Sort == "" {
		opt.Sort = "total"
	}
	if err := (&export.Report{}).Sort(opt.Sort); err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	in, done, err := openExport(path, binaries, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	rep, err := export.BuildReport(in, opt.Threads)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	rep.Sort(opt.Sort) // (the key is known good: checked above)
	out := &CallReport{Total: time.Duration(rep.Total), Clock: rep.Clock, rep: rep}
	for _, s := range rep.Funcs {
		out.Funcs = append(out.Funcs, FuncStats{Func: s.Func, Image: s.Image, Thread: s.Thread, Calls: s.Calls,
			Total: time.Duration(s.Total), Self: time.Duration(s.Self), Min: time.Duration(s.Min),
			Max: time.Duration(s.Max), Avg: time.Duration(s.Avg), LostReturns: s.Lost})
	}
	return out, nil
}
