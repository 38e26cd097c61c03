package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite"
	"github.com/kprewrite/kprewrite/analysis"
)

// The report types are the public API's (package kprewrite), so the JSON the command
// prints is the document Go callers get.
type (
	CheckReport  = kprewrite.CheckReport
	CheckSite    = kprewrite.CheckSite
	CheckSummary = kprewrite.CheckSummary
	CheckExits   = kprewrite.CheckExits
	CheckDCR     = kprewrite.CheckDCR
	CheckReason  = kprewrite.CheckReason
)

// CheckSchema names the version of the JSON that `check --json` prints.
const CheckSchema = kprewrite.CheckSchema

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("check", "check [--json] [--summary] [--only VERDICTS] [-e DEF]... [-f DEFFILE]... [--filter GROUP/EVENT:EXPR]... [--trigger GROUP/EVENT:TRIGGER]... [--debug-file FILE] [--lines FUNC | --vars POINT [--globals]] BINARY", stdout)
	asJSON := fs.Bool("json", false, "print a JSON report (schema "+CheckSchema+", see docs/check-json.md)")
	summaryOnly := fs.Bool("summary", false, "print only the summary")
	only := fs.String("only", "", "list only sites with these verdicts (comma separated: optimize,boost,single-step,refuse)")
	var exprs, files multiFlag
	fs.Var(&exprs, "e", "probe event definition, e.g. 'p:grp/ev func+4 a=%di' (repeatable)")
	fs.Var(&files, "f", "file of probe event definitions, one per line (repeatable)")
	var filters multiFlag
	fs.Var(&filters, "filter", "`GROUP/EVENT:EXPR`: an event filter, checked as rewrite would (repeatable)")
	var triggers multiFlag
	fs.Var(&triggers, "trigger", "`GROUP/EVENT:TRIGGER`: an event trigger, checked as rewrite would (repeatable)")
	debugFile := fs.String("debug-file", "", "the program's separate debug information, for source-level definitions, --lines and --vars (default: in the program, /usr/lib/debug/.build-id, or its .gnu_debuglink file)")
	lines := fs.String("lines", "", "`FUNC`: list the lines of FUNC (or FUNC@FILE) that a FUNC:RELLINE probe can go on, with their addresses, as perf probe -L")
	vars := fs.String("vars", "", "`POINT`: list the variables visible at each address of a probe point (FUNC, FUNC:RELLINE, FILE:LINE, FUNC@FILE, SYM+OFFS, 0xADDR), their types and the fetch each compiles to, or why it cannot be read there, as perf probe -V")
	globals := fs.Bool("globals", false, "with --vars: list global variables too")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite check -h)", len(pos))
	}
	if err := regularInputs("--debug-file", *debugFile); err != nil {
		return err
	}
	if err := regularInputs("-f", files...); err != nil {
		return err
	}
	if *lines != "" || *vars != "" {
		if *lines != "" && *vars != "" || len(exprs)+len(files)+len(filters)+len(triggers) > 0 {
			return usageErr("--lines and --vars go alone (no definitions, not both)")
		}
		return sourceListing(stdout, pos[0], *debugFile, *lines, *vars, *globals, *asJSON)
	}
	keep := map[string]bool{}
	if *only != "" {
		for _, v := range strings.Split(*only, ",") {
			v = strings.TrimSpace(v)
			if _, err := analysis.ParseVerdict(v); err != nil {
				return usageErr("--only: %v", err)
			}
			keep[v] = true
		}
	}
	report, err := kprewrite.Check(pos[0], kprewrite.CheckOptions{Definitions: exprs, DefinitionFiles: files, Filters: filters, Triggers: triggers, DebugFile: *debugFile})
	if err != nil {
		return err
	}
	for _, r := range append([]*CheckReport{report}, libraryReports(report)...) {
		if len(keep) > 0 {
			kept := r.Sites[:0]
			for _, s := range r.Sites {
				if keep[s.Verdict] {
					kept = append(kept, s)
				}
			}
			r.Sites = kept
		}
		if *summaryOnly {
			r.Sites = []CheckSite{}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	// the program's own report, unless every definition names a library
	if report.Summary.Sites > 0 || len(report.Libraries) == 0 {
		printCheckText(stdout, report, !*summaryOnly)
	}
	for i, r := range libraryReports(report) {
		if i > 0 || report.Summary.Sites > 0 {
			fmt.Fprintln(stdout)
		}
		printCheckText(stdout, r, !*summaryOnly)
	}
	return nil
}

func libraryReports(r *CheckReport) []*CheckReport {
	out := make([]*CheckReport, len(r.Libraries))
	for i := range r.Libraries {
		out[i] = &r.Libraries[i]
	}
	return out
}

func printCheckText(w io.Writer, r *CheckReport, listSites bool) {
	name := r.Binary
	if r.Library != "" && r.Library != r.Binary {
		name = r.Library + " (" + r.Binary + ")"
	}
	fmt.Fprintf(w, "%s: %d probe sites\n", name, r.Summary.Sites)
	fmt.Fprintln(w, "verdicts:")
	for _, v := range []string{"optimize", "boost", "single-step", "refuse"} {
		n := r.Summary.Verdicts[v]
		pct := 0.0
		if r.Summary.Sites > 0 {
			pct = 100 * float64(n) / float64(r.Summary.Sites)
		}
		fmt.Fprintf(w, "  %-12s %8d  %5.1f%%\n", v, n, pct)
	}
	if len(r.Summary.Reasons) > 0 {
		fmt.Fprintln(w, "reasons (sites each rule kept from a better verdict):")
		rules := make([]string, 0, len(r.Summary.Reasons))
		for k := range r.Summary.Reasons {
			rules = append(rules, k)
		}
		sort.Slice(rules, func(i, j int) bool {
			a, b := r.Summary.Reasons[rules[i]], r.Summary.Reasons[rules[j]]
			if a != b {
				return a > b
			}
			return rules[i] < rules[j]
		})
		for _, k := range rules {
			fmt.Fprintf(w, "  %-24s %8d\n", k, r.Summary.Reasons[k])
		}
	}
	if !listSites || len(r.Sites) == 0 {
		return
	}
	fmt.Fprintln(w, "sites:")
	for _, s := range r.Sites {
		where := s.Function
		if s.Offset != 0 {
			where = fmt.Sprintf("%s+%#x", s.Function, s.Offset)
		}
		if where == "" {
			where = "?"
		}
		if s.Event != "" {
			where += " [" + s.Event + "]"
		}
		line := fmt.Sprintf("  %-18s %-11s %s", s.Address, s.Verdict, where)
		if s.DCR != nil {
			line += fmt.Sprintf("  dcr=%d bytes/%d insns", s.DCR.Length, len(s.DCR.Instructions))
		}
		fmt.Fprintln(w, line)
		for _, rs := range s.Reasons {
			prefix := ""
			if rs.Note {
				prefix = "note: "
			}
			fmt.Fprintf(w, "      %s%s at %s: %s\n", prefix, rs.Rule, rs.Address, rs.Detail)
		}
		printExits(w, "--count-only: counted", s.Exits)
		printExits(w, "--exits: recorded", s.TraceExits)
	}
}

// printExits prints what a rewrite option does with a return probe: "OPTION: DONE at
// its exits ...", or why it hooks the return address.
func printExits(w io.Writer, done string, ex *CheckExits) {
	switch {
	case ex == nil:
	case len(ex.Sites) > 0:
		what := "exit"
		if len(ex.Sites) > 1 {
			what = fmt.Sprintf("%d exits", len(ex.Sites))
		}
		fmt.Fprintf(w, "      %s at its %s %s\n", done, what, strings.Join(ex.Sites, " "))
	default:
		opt, _, _ := strings.Cut(done, ":")
		if strings.HasPrefix(ex.Reason, "refused ") { // a Go function's: never hooked
			fmt.Fprintf(w, "      %s: %s\n", opt, ex.Reason)
			return
		}
		fmt.Fprintf(w, "      %s: hooks the return address: %s\n", opt, ex.Reason)
	}
}
