package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/rewriter"
)

// CheckSchema names the version of the JSON that `check --json` prints. It changes only
// when a field changes meaning or disappears; new fields may be added.
const CheckSchema = "kprewrite-check/1"

// CheckReport is the JSON document of `kprewrite check --json`.
type CheckReport struct {
	Schema  string       `json:"schema"`
	Binary  string       `json:"binary"`
	Summary CheckSummary `json:"summary"`
	Sites   []CheckSite  `json:"sites"`
}

// CheckSummary counts sites per verdict and blocking reasons per rule.
type CheckSummary struct {
	Sites    int            `json:"sites"`
	Verdicts map[string]int `json:"verdicts"` // every verdict name, zero counts included
	Reasons  map[string]int `json:"reasons"`  // rule id -> number of sites it kept from a better verdict
}

// CheckSite is one probe site.
type CheckSite struct {
	Address    string        `json:"address"` // probe address, "0x..." (hex string: exact in every JSON reader)
	Requested  string        `json:"requested,omitempty"`
	Function   string        `json:"function"`
	Offset     uint64        `json:"offset"`
	Verdict    string        `json:"verdict"`
	Definition string        `json:"definition,omitempty"`
	Event      string        `json:"event,omitempty"`
	Return     bool          `json:"return,omitempty"`
	Insn       string        `json:"insn,omitempty"`
	Boostable  bool          `json:"boostable"`
	DCR        *CheckDCR     `json:"dcr,omitempty"`
	Reasons    []CheckReason `json:"reasons"`
	// Exits, for a return-probe definition: where `rewrite --count-only` counts its
	// function's returns instead of hooking the return address, or why it cannot.
	Exits *CheckExits `json:"exits,omitempty"`
}

// CheckExits is what --count-only does with a return probe: the count sites (one per
// ret or tail call of the function and its fragments), or the reason it hooks the
// return address instead (a rule id, then details).
type CheckExits struct {
	Sites  []string `json:"sites,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// CheckDCR is the region a jump-optimized probe would overwrite.
type CheckDCR struct {
	Length       int      `json:"length"`
	Instructions []string `json:"instructions"` // addresses of the whole instructions copied out of line
}

// CheckReason is one rule that decided the verdict (or a note, which did not lower it).
type CheckReason struct {
	Rule    string `json:"rule"`
	Address string `json:"address"`
	Detail  string `json:"detail"`
	Note    bool   `json:"note,omitempty"`
}

func hexAddr(a uint64) string { return fmt.Sprintf("%#x", a) }

func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("check", "check [--json] [--summary] [--only VERDICTS] [-e DEF]... [-f DEFFILE]... BINARY", stdout)
	asJSON := fs.Bool("json", false, "print a JSON report (schema "+CheckSchema+", see docs/check-json.md)")
	summaryOnly := fs.Bool("summary", false, "print only the summary")
	only := fs.String("only", "", "list only sites with these verdicts (comma separated: optimize,boost,single-step,refuse)")
	var exprs, files multiFlag
	fs.Var(&exprs, "e", "probe event definition, e.g. 'p:grp/ev func+4 a=%di' (repeatable)")
	fs.Var(&files, "f", "file of probe event definitions, one per line (repeatable)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one BINARY, got %d arguments (see kprewrite check -h)", len(pos))
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
	defs, err := rewriter.ParseDefs(exprs, files)
	if err != nil {
		return err
	}
	f, err := elfio.Open(pos[0])
	if err != nil {
		return err
	}
	bin, err := analysis.Analyze(f, analysis.Options{})
	if err != nil {
		return fmt.Errorf("analyse %s: %w", pos[0], err)
	}
	report := CheckReport{Schema: CheckSchema, Binary: pos[0]}
	if len(defs) == 0 {
		sites := bin.EntrySites()
		report.Sites = make([]CheckSite, 0, len(sites))
		for i := range sites {
			report.Sites = append(report.Sites, checkSite(&sites[i], nil))
		}
	} else {
		if err := rewriter.Resolve(f, bin.Funcs, defs); err != nil {
			return err
		}
		for i, d := range defs {
			var others []uint64
			for j, o := range defs {
				if j != i && o.Addr != d.Addr {
					others = append(others, o.Addr)
				}
			}
			site := bin.Check(analysis.SiteRequest{Addr: d.Addr, Return: d.Def.Return, OtherProbes: others})
			cs := checkSite(&site, &defs[i])
			if d.Def.Return && site.Verdict != analysis.Refuse {
				exits, why := bin.Exits(site.Addr, func(uint64) []uint64 { return others })
				sort.Slice(exits, func(i, j int) bool { return exits[i].Addr < exits[j].Addr })
				cs.Exits = &CheckExits{Reason: why}
				for _, e := range exits {
					cs.Exits.Sites = append(cs.Exits.Sites, hexAddr(e.Addr))
				}
			}
			report.Sites = append(report.Sites, cs)
		}
	}
	report.Summary = summarize(report.Sites)
	if len(keep) > 0 {
		kept := report.Sites[:0]
		for _, s := range report.Sites {
			if keep[s.Verdict] {
				kept = append(kept, s)
			}
		}
		report.Sites = kept
	}
	if *summaryOnly {
		report.Sites = []CheckSite{}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	printCheckText(stdout, &report, !*summaryOnly)
	return nil
}

func checkSite(s *analysis.Site, d *rewriter.Probe) CheckSite {
	cs := CheckSite{
		Address:   hexAddr(s.Addr),
		Function:  s.FuncName,
		Offset:    s.Offset,
		Verdict:   s.Verdict.String(),
		Insn:      s.Insn,
		Boostable: s.Boostable,
		Reasons:   []CheckReason{},
	}
	if s.Requested != s.Addr {
		cs.Requested = hexAddr(s.Requested)
	}
	if d != nil {
		cs.Definition = d.Def.Def
		cs.Event = d.Def.Group + "/" + d.Def.Event
		cs.Return = d.Def.Return
	}
	if s.Verdict == analysis.Optimize {
		dcr := &CheckDCR{Length: s.DCRLen}
		for _, in := range s.DCR {
			dcr.Instructions = append(dcr.Instructions, hexAddr(in.Addr))
		}
		cs.DCR = dcr
	}
	for _, r := range s.Reasons {
		cs.Reasons = append(cs.Reasons, CheckReason{Rule: r.Rule, Address: hexAddr(r.Addr), Detail: r.Detail, Note: r.Note})
	}
	return cs
}

func summarize(sites []CheckSite) CheckSummary {
	sum := CheckSummary{Sites: len(sites), Verdicts: map[string]int{}, Reasons: map[string]int{}}
	for _, v := range []analysis.Verdict{analysis.Optimize, analysis.Boost, analysis.SingleStep, analysis.Refuse} {
		sum.Verdicts[v.String()] = 0
	}
	for _, s := range sites {
		sum.Verdicts[s.Verdict]++
		seen := map[string]bool{}
		for _, r := range s.Reasons {
			if !r.Note && !seen[r.Rule] {
				seen[r.Rule] = true
				sum.Reasons[r.Rule]++
			}
		}
	}
	return sum
}

func printCheckText(w io.Writer, r *CheckReport, listSites bool) {
	fmt.Fprintf(w, "%s: %d probe sites\n", r.Binary, r.Summary.Sites)
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
		switch {
		case s.Exits == nil:
		case len(s.Exits.Sites) > 0:
			what := "exit"
			if len(s.Exits.Sites) > 1 {
				what = fmt.Sprintf("%d exits", len(s.Exits.Sites))
			}
			fmt.Fprintf(w, "      --count-only: counted at its %s %s\n", what, strings.Join(s.Exits.Sites, " "))
		default:
			fmt.Fprintf(w, "      --count-only: hooks the return address: %s\n", s.Exits.Reason)
		}
	}
}
