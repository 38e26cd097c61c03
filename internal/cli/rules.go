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
}
