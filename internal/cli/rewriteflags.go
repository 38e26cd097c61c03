package cli

import (
	"flag"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/rewriter"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// rewriteFlags are the probes and options of rewrite, which record takes too.
type rewriteFlags struct {
	exprs, files, filters, triggers, hfiles, calls, prepare, excludes, disables multiFlag

	noBoost, noOpt, verify, optOnly, skip, countOnly, exitsOnly, exits, callsHook, debug, kernelTypes *bool
	singleStep, trace, traceSize, debugFile, clock                                                    *string
	livePoints                                                                                        *int
}

// addRewriteFlags defines rewrite's flags but -o in fs; --trace (the rewritten
// program's default trace file) only withTrace: record names the trace file itself.
func addRewriteFlags(fs *flag.FlagSet, withTrace bool) *rewriteFlags {
	f := &rewriteFlags{}
	fs.Var(&f.exprs, "e", "probe event definition, e.g. 'p:grp/ev func+4 a=%di' or 'r:ev func $retval' (repeatable)")
	fs.Var(&f.files, "f", "file of probe event definitions, one per line (repeatable)")
	fs.Var(&f.triggers, "trigger", "`GROUP/EVENT:TRIGGER`: run TRIGGER, in the kernel's grammar (events.rst section 6), at each hit of the event: traceon, traceoff (every event's records), enable_event:GROUP:EVENT, disable_event:GROUP:EVENT (that event's records), each with :COUNT (fire at most COUNT times) and 'if FILTER'; hist:keys=...[:vals=...][:sort=...][:size=N][:pause] [if FILTER] (a histogram in the trace file, printed by kprewrite hist); an event rewritten with --disable that has triggers or is their target starts soft-disabled (armed, records nothing until enabled); '!CMD' removes one (repeatable; also a definitions file's 'trigger GROUP/EVENT:TRIGGER' lines)")
	fs.Var(&f.filters, "filter", "`GROUP/EVENT:EXPR`: record only the hits of the event for which EXPR, a filter in the kernel's grammar (events.rst section 5: fields by name, == != < <= > >= &, ~ \"glob\" on strings, && || ! and parentheses), is true; the runtime runs it before writing the record; GROUP/EVENT:0 removes it (repeatable; also a definitions file's 'filter GROUP/EVENT:EXPR' lines)")
	fs.Var(&f.hfiles, "handlers", "`FILE.c`: C handler file declaring probes with DEFINE_KPROBE/DEFINE_KRETPROBE (kprewrite.h, see kprewrite include), compiled with gcc and linked in (repeatable)")
	f.noBoost = fs.Bool("no-boost", false, "single-step every int3 probe (kinds k and r, two traps per hit); with --no-optimize, every probe")
	f.singleStep = fs.String("single-step", "tf", "how a single-stepped probe (k, r) runs its copied instruction: tf (the trap flag, as kprobes.rst describes; an int3 then a debug trap per hit) or int3 (the copy ends with a second int3, as x86 kprobes do since Linux 5.15; ~2.7x cheaper)")
	f.noOpt = fs.Bool("no-optimize", false, "no jump-optimized probes: every probe is an int3 (kinds k, b, r, rb)")
	f.verify = fs.Bool("verify-regions", false, "instead of a jmp, put an int3 on each would-be-optimized probe and on every other byte of its DCR; the program runs correctly and kprewrite profile reports every byte reached (violations)")
	f.optOnly = fs.Bool("optimized-only", false, "refuse probes that cannot be jump-optimized (with --skip-refused: leave them out); for programs that take SIGTRAP over, such as Go programs")
	fs.Var(&f.calls, "calls", "`GLOB`: an entry and a return event, calls/NAME and calls/NAME__return, on every function whose name matches GLOB ('*': all; repeatable), for report, flamegraph and trace --format chrome; functions whose probes the analysis refuses, or that nothing calls (fragments, where a return probe would break the program), are left out and counted, never an error")
	fs.Var(&f.prepare, "prepare", "`GLOB`: prepare the entry and the return of every function whose name matches GLOB for events added while the program runs (kprewrite probe TRACE 'p:grp/ev FUNC ...'): detours, copies and tables are written, the sites keep their original bytes until an event is added (repeatable)")
	f.livePoints = fs.Int("live-points", rewriter.NFree, "`N` free live points a program with prepared sites or --disable'd events reserves for events kprewrite probe adds at sites no rewrite prepared (0: none, at most 1024); N/4 more (at least one) take return events at unprepared functions")
	fs.Var(&f.excludes, "exclude", "no probe in this code: a function-name glob ('Builtins_*') or an address range 0xLO-0xHI or 0xLO+SIZE (repeatable); for code the program copies and runs elsewhere")
	f.skip = fs.Bool("skip-refused", false, "leave out probes the analysis refuses (reported on stderr) instead of failing")
	f.trace = new(string)
	if withTrace {
		f.trace = fs.String("trace", "", "default trace file of the rewritten program (default: OUT"+TraceSuffix+", absolute; \"none\" for no default); KPREWRITE_TRACE overrides it at run time")
	}
	f.traceSize = fs.String("trace-size", "", "record area of a new trace file, 4K to 64G, e.g. 64M (default 64M); KPREWRITE_TRACE_SIZE overrides it")
	fs.Var(&f.disables, "disable", "register events disabled: all, or a comma-separated list of EVENT, GROUP/EVENT, GROUP/* (repeatable)")
	f.countOnly = fs.Bool("count-only", false, "events write no trace records: every hit is counted in the trace file's counters (kprewrite profile); a jump-optimized probe whose probes are all such events costs one lock incq (~1 ns); a return event is counted at its function's exits where the analysis sees them all ([EXIT] in list)")
	f.exitsOnly = fs.Bool("exits-only", false, "with --count-only or --exits: refuse return probes that cannot be counted or recorded at their exits instead of hooking the return address (with --exits also those with a tail call, hooked there; with --skip-refused: leave them out); for programs whose stacks a hooked return address breaks, such as Go programs")
	f.exits = fs.Bool("exits", false, "record return events at their functions' rets where the analysis sees every exit (no tail call) instead of hooking the return address: no return trampoline, no instances, no maxactive misses ([EXIT] in list); events with a C handler or $argN keep hooking")
	f.callsHook = fs.Bool("calls-hook", false, "--calls' return events hook the return address of every function (a return trampoline, instances, a mispredicted return a call) instead of being recorded at the rets of each function whose exits the analysis sees all, the default; not with --exits")
	f.clock = fs.String("clock", "", "what record times are, as the kernel's trace_clock: tsc (the default: CLOCK_MONOTONIC nanoseconds from rdtsc), mono (clock_gettime(CLOCK_MONOTONIC) through the vDSO) or counter (no time: a count shared by every thread and process writing the trace file, for order, call counts and nesting); KPREWRITE_CLOCK overrides it at run time, and a trace file keeps the clock of the image that made it")
	f.debug = fs.Bool("debug", false, "the rewritten program reports its probe start-up on stderr")
	f.kernelTypes = fs.Bool("kernel-types", false, "untyped fetchargs keep the kernel's default types (x64, $retval too), as the kernel's uprobe tracer prints them; without it an untyped argument register (%di, %si, %dx, %cx, %r8, %r9, $argN) at a C function's entry and an untyped $retval take their type from the program's own DWARF (int: s32, size_t: u64, pointers x64)")
	f.debugFile = fs.String("debug-file", "", "the program's separate debug information, for source-level definitions (FUNC:RELLINE, FILE:LINE, FUNC@FILE, variables by name; default: in the program, /usr/lib/debug/.build-id, or its .gnu_debuglink file)")
	return f
}

// names are the flags addRewriteFlags defines.
func (f *rewriteFlags) names() []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	addRewriteFlags(fs, true)
	var out []string
	fs.VisitAll(func(fl *flag.Flag) { out = append(out, fl.Name) })
	return out
}

// probes reports whether the flags define probes: definitions, --calls or handlers.
func (f *rewriteFlags) probes() bool {
	return len(f.exprs)+len(f.files)+len(f.calls)+len(f.prepare)+len(f.hfiles) > 0
}

// inputs are the files the rewrite reads besides the program ("" for an option not
// given).
func (f *rewriteFlags) inputs() []string {
	in := append([]string{*f.debugFile}, f.files...)
	return append(in, f.hfiles...)
}

// options checks the input files and turns the flags into the API's options.
func (f *rewriteFlags) options() (kprewrite.RewriteOptions, error) {
	var opt kprewrite.RewriteOptions
	if err := regularInputs("--debug-file", *f.debugFile); err != nil {
		return opt, err
	}
	if err := regularInputs("-f", f.files...); err != nil {
		return opt, err
	}
	if err := regularInputs("--handlers", f.hfiles...); err != nil {
		return opt, err
	}
	opt = kprewrite.RewriteOptions{Definitions: f.exprs, DefinitionFiles: f.files, HandlerFiles: f.hfiles, Filters: f.filters,
		Triggers: f.triggers, NoOptimize: *f.noOpt, NoBoost: *f.noBoost, SingleStep: *f.singleStep, VerifyRegions: *f.verify,
		OptimizedOnly: *f.optOnly, SkipRefused: *f.skip, Exclude: f.excludes, Calls: f.calls, Prepare: f.prepare, CountOnly: *f.countOnly,
		ExitsOnly: *f.exitsOnly, Exits: *f.exits, CallsHook: *f.callsHook, TracePath: *f.trace, Debug: *f.debug, DebugFile: *f.debugFile,
		Clock: *f.clock, KernelTypes: *f.kernelTypes, LivePoints: *f.livePoints}
	switch n := *f.livePoints; {
	case n < 0 || n > rewriter.MaxFree:
		return opt, usageErr("--live-points %d: want 0 (none) to %d", n, rewriter.MaxFree)
	case n == 0:
		opt.LivePoints = -1
	}
	if *f.clock != "" && !slices.Contains(kprewrite.Clocks, *f.clock) {
		return opt, usageErr("--clock %s: want tsc, mono or counter", *f.clock)
	}
	if *f.traceSize != "" {
		n, err := parseSize(*f.traceSize)
		if err != nil {
			return opt, usageErr("--trace-size: %v", err)
		}
		if n < kprt.MinTraceSize || n > kprt.MaxTraceSize {
			return opt, usageErr("--trace-size %s: out of range: the runtime's record area is 4K to 64G", *f.traceSize)
		}
		opt.TraceSize = n
	}
	for _, disable := range f.disables {
		for _, t := range strings.Split(disable, ",") {
			if t = strings.TrimSpace(t); t != "" {
				opt.Disable = append(opt.Disable, t)
			}
		}
	}
	return opt, nil
}
