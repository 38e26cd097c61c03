package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/internal/outfile"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// TraceSuffix is appended to the output path to make the default trace file path.
const TraceSuffix = tracefile.Suffix

func runRewrite(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("rewrite", "rewrite -o OUT [-e DEF]... [-f DEFFILE]... [--no-optimize] [--verify-regions] [--exclude PATTERN]... [--calls GLOB]... [--no-boost] [--single-step tf|int3] [--count-only | --exits [--exits-only]] [--handlers FILE.c]... [--filter GROUP/EVENT:EXPR]... [--trigger GROUP/EVENT:TRIGGER]... [--trace PATH] [--debug-file FILE] BINARY", stdout)
	out := fs.String("o", "", "output file (written atomically; required)")
	var exprs, files multiFlag
	fs.Var(&exprs, "e", "probe event definition, e.g. 'p:grp/ev func+4 a=%di' or 'r:ev func $retval' (repeatable)")
	fs.Var(&files, "f", "file of probe event definitions, one per line (repeatable)")
	var filters multiFlag
	var triggers multiFlag
	fs.Var(&triggers, "trigger", "`GROUP/EVENT:TRIGGER`: run TRIGGER, in the kernel's grammar (events.rst section 6), at each hit of the event: traceon, traceoff (every event's records), enable_event:GROUP:EVENT, disable_event:GROUP:EVENT (that event's records), each with :COUNT (fire at most COUNT times) and 'if FILTER'; hist:keys=...[:vals=...][:sort=...][:size=N][:pause] [if FILTER] (a histogram in the trace file, printed by kprewrite hist); an event rewritten with --disable that has triggers or is their target starts soft-disabled (armed, records nothing until enabled); '!CMD' removes one (repeatable; also a definitions file's 'trigger GROUP/EVENT:TRIGGER' lines)")
	fs.Var(&filters, "filter", "`GROUP/EVENT:EXPR`: record only the hits of the event for which EXPR, a filter in the kernel's grammar (events.rst section 5: fields by name, == != < <= > >= &, ~ \"glob\" on strings, && || ! and parentheses), is true; the runtime runs it before writing the record; GROUP/EVENT:0 removes it (repeatable; also a definitions file's 'filter GROUP/EVENT:EXPR' lines)")
	var hfiles multiFlag
	fs.Var(&hfiles, "handlers", "`FILE.c`: C handler file declaring probes with DEFINE_KPROBE/DEFINE_KRETPROBE (kprewrite.h, see kprewrite include), compiled with gcc and linked in (repeatable)")
	noBoost := fs.Bool("no-boost", false, "single-step every int3 probe (kinds k and r, two traps per hit); with --no-optimize, every probe")
	singleStep := fs.String("single-step", "tf", "how a single-stepped probe (k, r) runs its copied instruction: tf (the trap flag, as kprobes.rst describes; an int3 then a debug trap per hit) or int3 (the copy ends with a second int3, as x86 kprobes do since Linux 5.15; ~2.7x cheaper)")
	noOpt := fs.Bool("no-optimize", false, "no jump-optimized probes: every probe is an int3 (kinds k, b, r, rb)")
	verify := fs.Bool("verify-regions", false, "instead of a jmp, put an int3 on each would-be-optimized probe and on every other byte of its DCR; the program runs correctly and kprewrite profile reports every byte reached (violations)")
	optOnly := fs.Bool("optimized-only", false, "refuse probes that cannot be jump-optimized (with --skip-refused: leave them out); for programs that take SIGTRAP over, such as Go programs")
	var calls multiFlag
	fs.Var(&calls, "calls", "`GLOB`: an entry and a return event, calls/NAME and calls/NAME__return, on every function whose name matches GLOB ('*': all; repeatable), for report, flamegraph and trace --format chrome; functions whose probes the analysis refuses, or that nothing calls (fragments, where a return probe would break the program), are left out and counted, never an error")
	var prepare multiFlag
	fs.Var(&prepare, "prepare", "`GLOB`: prepare the entry and the return of every function whose name matches GLOB for events added while the program runs (kprewrite probe TRACE 'p:grp/ev FUNC ...'): detours, copies and tables are written, the sites keep their original bytes until an event is added (repeatable)")
	var excludes multiFlag
	fs.Var(&excludes, "exclude", "no probe in this code: a function-name glob ('Builtins_*') or an address range 0xLO-0xHI or 0xLO+SIZE (repeatable); for code the program copies and runs elsewhere")
	skip := fs.Bool("skip-refused", false, "leave out probes the analysis refuses (reported on stderr) instead of failing")
	trace := fs.String("trace", "", "default trace file of the rewritten program (default: OUT"+TraceSuffix+", absolute; \"none\" for no default); KPREWRITE_TRACE overrides it at run time")
	traceSize := fs.String("trace-size", "", "record area of a new trace file, 4K to 64G, e.g. 64M (default 64M); KPREWRITE_TRACE_SIZE overrides it")
	var disables multiFlag
	fs.Var(&disables, "disable", "register events disabled: all, or a comma-separated list of EVENT, GROUP/EVENT, GROUP/* (repeatable)")
	countOnly := fs.Bool("count-only", false, "events write no trace records: every hit is counted in the trace file's counters (kprewrite profile); a jump-optimized probe whose probes are all such events costs one lock incq (~1 ns); a return event is counted at its function's exits where the analysis sees them all ([EXIT] in list)")
	exitsOnly := fs.Bool("exits-only", false, "with --count-only or --exits: refuse return probes that cannot be counted or recorded at their exits instead of hooking the return address (with --exits also those with a tail call, hooked there; with --skip-refused: leave them out); for programs whose stacks a hooked return address breaks, such as Go programs")
	exits := fs.Bool("exits", false, "record return events at their functions' rets where the analysis sees every exit (no tail call) instead of hooking the return address: no return trampoline, no instances, no maxactive misses ([EXIT] in list); events with a C handler or $argN keep hooking")
	debug := fs.Bool("debug", false, "the rewritten program reports its probe start-up on stderr")
	debugFile := fs.String("debug-file", "", "the program's separate debug information, for source-level definitions (FUNC:RELLINE, FILE:LINE, FUNC@FILE, variables by name; default: in the program, /usr/lib/debug/.build-id, or its .gnu_debuglink file)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite rewrite -h)", len(pos))
	}
	if *out == "" {
		return usageErr("-o OUT is required")
	}
	inputs := append([]string{pos[0], *debugFile}, files...)
	if err := outfile.Check(*out, append(inputs, hfiles...)...); err != nil {
		return err
	}
	if err := regularInputs("--debug-file", *debugFile); err != nil {
		return err
	}
	if err := regularInputs("-f", files...); err != nil {
		return err
	}
	if err := regularInputs("--handlers", hfiles...); err != nil {
		return err
	}
	opt := kprewrite.RewriteOptions{Definitions: exprs, DefinitionFiles: files, HandlerFiles: hfiles, Filters: filters, Triggers: triggers,
		NoOptimize: *noOpt, NoBoost: *noBoost, SingleStep: *singleStep, VerifyRegions: *verify, OptimizedOnly: *optOnly,
		SkipRefused: *skip, Exclude: excludes, Calls: calls, Prepare: prepare, CountOnly: *countOnly, ExitsOnly: *exitsOnly, Exits: *exits, TracePath: *trace, Debug: *debug, DebugFile: *debugFile}
	if *traceSize != "" {
		n, err := parseSize(*traceSize)
		if err != nil {
			return usageErr("--trace-size: %v", err)
		}
		if n < kprt.MinTraceSize || n > kprt.MaxTraceSize {
			return usageErr("--trace-size %s: out of range: the runtime's record area is 4K to 64G", *traceSize)
		}
		opt.TraceSize = n
	}
	for _, disable := range disables {
		for _, t := range strings.Split(disable, ",") {
			if t = strings.TrimSpace(t); t != "" {
				opt.Disable = append(opt.Disable, t)
			}
		}
	}
	res, err := kprewrite.Rewrite(pos[0], *out, opt)
	if err != nil {
		return err
	}
	for _, r := range res.Skipped {
		fmt.Fprintf(stderr, "kprewrite rewrite: skipped: %s\n", r)
	}
	if len(calls) > 0 {
		c := res.Calls
		fmt.Fprintf(stderr, "kprewrite rewrite: --calls: %d functions traced as calls, %d left out", c.Traced, len(c.LeftOut))
		if len(c.LeftOut) > 0 {
			fmt.Fprintf(stderr, " (first: %s)", c.LeftOut[0])
		}
		fmt.Fprintln(stderr)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "kprewrite rewrite: warning: %s\n", w)
	}
	return nil
}

// parseSize reads a byte count with an optional K, M or G suffix.
func parseSize(text string) (uint64, error) {
	s, mult := text, uint64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("bad size %q (want a positive number with an optional K, M or G suffix, at most 1T)", text)
	}
	return n * mult, nil
}
