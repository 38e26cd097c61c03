package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/analysis"
)

func runRules(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("rules", "rules [--json | --markdown]", stdout)
	asJSON := fs.Bool("json", false, "print the rules as JSON")
	asMarkdown := fs.Bool("markdown", false, "print the rules as the Markdown table of docs/rules.md")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("rules takes no arguments")
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(analysis.Rules)
	case *asMarkdown:
		writeRulesMarkdown(stdout)
	default:
		for _, r := range analysis.Rules {
			fmt.Fprintf(stdout, "%-24s %-6s %s\n", r.ID, r.Design, r.Text)
		}
		for _, r := range analysis.ExitRules {
			fmt.Fprintf(stdout, "%-24s %-6s %s\n", r.ID, "exits", r.Text)
		}
	}
	return nil
}

// writeRulesMarkdown prints docs/rules.md; a test keeps the committed file equal to it.
func writeRulesMarkdown(w io.Writer) {
	fmt.Fprint(w, `# Safety rules

Every reason `+"`kprewrite check`"+` gives names one of these rule ids. The "design" column is
the number of the rule in [design.md](design.md)'s list ("Safety rules"), "site"
for rules about where a probe may go at all, "boost" for the boosting decision, and "note"
for facts that never lower a verdict. Ids are stable: tools may match on them.

This file is generated: `+"`go run ./cmd/kprewrite rules --markdown > docs/rules.md`"+`.

| rule | design | meaning |
| --- | --- | --- |
`)
	for _, r := range analysis.Rules {
		fmt.Fprintf(w, "| `%s` | %s | %s |\n", r.ID, r.Design, r.Text)
	}
	fmt.Fprint(w, `
## Return probes at their function's exits (`+"`rewrite --count-only`, `rewrite --exits`"+`)

A return probe is counted (`+"`"+`--count-only`+"`"+`) or recorded (`+"`"+`--exits`+"`"+`) at its function's
exits, with no return address hooked, only when the analysis sees every exit
(`+"`"+`analysis.Exits`+"`"+`; `+"`"+`kprewrite check`+"`"+` prints the sites, or the reason as below, for
each return-probe definition: `+"`"+`exits`+"`"+` and `+"`"+`trace_exits`+"`"+` in `+"`"+`--json`+"`"+`). Otherwise the
return address is hooked at the entry as usual (or, with `+"`"+`--exits-only`+"`"+`, the probe is
refused with `+"`"+`not-exits`+"`"+`).

| reason | meaning |
| --- | --- |
`)
	for _, r := range analysis.ExitRules {
		fmt.Fprintf(w, "| `%s` | %s |\n", r.ID, r.Text)
	}
	fmt.Fprint(w, `
The planner may still keep a function hooking where another probe or excluded code
is on an exit site, or where an exit site lies inside the DCR of a probe staying at
the function's entry (that probe would become an int3). A return event with a C
handler or `+"`"+`$argN`+"`"+` (a value fetched at the entry) always hooks with `+"`"+`--exits`+"`"+`.
`)
}
