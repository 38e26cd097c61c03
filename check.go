package kprewrite

import (
	"fmt"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/internal/pipeline"
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
	// Library is the library as the definitions name it (LIB in LIB:SITE), in the
	// reports of Libraries; Binary is where the loader finds it for the program.
	Library string `json:"library,omitempty"`
	// Libraries are the reports of the libraries that LIB:SITE definitions name, in
	// order of first appearance.
	Libraries []CheckReport `json:"libraries,omitempty"`
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
	// TraceExits, for a return probe: where rewrite --exits records its returns (one
	// site per ret or tail call; at a tail call it hooks the return address there), or
	// why it hooks the return address at the entry.
	TraceExits *CheckExits `json:"trace_exits,omitempty"`
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
	// Redirects are the jumps into the region that the rewrite sends to a copy of the
	// region's rest instead (rule jump-redirected).
	Redirects []CheckRedirect `json:"redirects,omitempty"`
}

// CheckRedirect is one redirected jump: at Jump, Length bytes long, it targets
// Target inside the region, and the rewrite replaces its first Bytes bytes.
type CheckRedirect struct {
	Jump   string `json:"jump"`
	Target string `json:"target"`
	Length int    `json:"length"`
	Bytes  int    `json:"bytes"`
}

// CheckReason is one rule that decided the verdict (or a note, which did not lower it).
type CheckReason struct {
	Rule    string `json:"rule"`
	Address string `json:"address"`
	Detail  string `json:"detail"`
	Note    bool   `json:"note,omitempty"`
}

func hexAddr(a uint64) string { return fmt.Sprintf("%#x", a) }

// Addr returns the site's address.
func (s *CheckSite) Addr() uint64 {
	var a uint64
	fmt.Sscanf(s.Address, "0x%x", &a)
	return a
}

// CheckOptions say what Check analyses.
type CheckOptions struct {
	// Definitions are kprobe-event definitions ("p:grp/ev func+4 a=%di", "r:ev func
	// $retval"), DefinitionFiles files of them, one a line: their sites are checked.
	// Without any, every function entry is a site.
	Definitions     []string
	DefinitionFiles []string
	// Filters are event filters, "GROUP/EVENT:EXPR" (kernel grammar): checked against
	// their events' fields and the binary's functions.
	Filters []string
	// Triggers are event triggers, "GROUP/EVENT:TRIGGER" (kernel grammar), checked as
	// rewrite would.
	Triggers []string
	// DebugFile is the program's separate debug information for source-level
	// definitions, as RewriteOptions.DebugFile.
	DebugFile string
}

// Check analyses the ELF executable at path the way the kernel's optprobe code would
// and returns the safety report `kprewrite check --json` prints: per site, whether a
// probe there can be jump-optimized, boosted, single-stepped or must be refused, and
// the rules that decided. A definition that does not parse or resolve is an error
// naming it. Definitions of library code (LIB:SYMBOL, LIB:OFFSET, as uprobe_events
// name it) are checked in the library the loader finds for the program, each library
// in a report of its own (Libraries).
func Check(path string, opt CheckOptions) (*CheckReport, error) {
	images, err := pipeline.Check(path, pipeline.Definitions{Exprs: opt.Definitions, Files: opt.DefinitionFiles,
		Filters: opt.Filters, Triggers: opt.Triggers, DebugFile: opt.DebugFile})
	if err != nil {
		return nil, err
	}
	report := checkReport(&images[0])
	for i := range images[1:] {
		r := checkReport(&images[1+i])
		r.Schema, r.Library = "", images[1+i].Library
		report.Libraries = append(report.Libraries, *r)
	}
	return report, nil
}

// checkReport maps the check of one image to its report.
func checkReport(img *pipeline.CheckedImage) *CheckReport {
	report := &CheckReport{Schema: CheckSchema, Binary: img.Path, Sites: make([]CheckSite, 0, len(img.Sites))}
	for i := range img.Sites {
		report.Sites = append(report.Sites, checkSite(&img.Sites[i]))
	}
	report.Summary = summarize(report.Sites)
	return report
}

// checkSite maps one checked site to its report.
func checkSite(cs *pipeline.CheckedSite) CheckSite {
	s, d := &cs.Site, cs.Def
	out := CheckSite{
		Address:   hexAddr(s.Addr),
		Function:  s.FuncName,
		Offset:    s.Offset,
		Verdict:   s.Verdict.String(),
		Insn:      s.Insn,
		Boostable: s.Boostable,
		Reasons:   []CheckReason{},
	}
	if s.Requested != s.Addr {
		out.Requested = hexAddr(s.Requested)
	}
	if d != nil {
		out.Definition = d.Def.Def
		out.Event = d.Def.Group + "/" + d.Def.Event
		out.Return = d.Def.Return
	}
	if s.Verdict == analysis.Optimize {
		dcr := &CheckDCR{Length: s.DCRLen}
		for _, in := range s.DCR {
			dcr.Instructions = append(dcr.Instructions, hexAddr(in.Addr))
		}
		for _, r := range s.Redirects {
			dcr.Redirects = append(dcr.Redirects, CheckRedirect{Jump: hexAddr(r.From), Target: hexAddr(r.To), Length: r.Len, Bytes: r.Edit})
		}
		out.DCR = dcr
	}
	if d != nil && d.Def.Return && s.Verdict != analysis.Refuse {
		out.Exits = &CheckExits{Sites: hexSites(cs.Exits), Reason: cs.ExitsWhy}
		out.TraceExits = &CheckExits{Sites: hexSites(cs.TraceExits), Reason: cs.TraceWhy}
	}
	for _, r := range s.Reasons {
		out.Reasons = append(out.Reasons, CheckReason{Rule: r.Rule, Address: hexAddr(r.Addr), Detail: r.Detail, Note: r.Note})
	}
	return out
}

// hexSites are the addresses of sites, nil for none.
func hexSites(sites []analysis.Site) []string {
	var out []string
	for _, s := range sites {
		out = append(out, hexAddr(s.Addr))
	}
	return out
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
