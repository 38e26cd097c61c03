package rewriter

import (
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/probedefs"
)

// checkDisables refuses a --disable token that names no event of the definitions (a
// misspelt name would otherwise leave the event enabled, silently), with the nearest
// name when one is close.
func checkDisables(tokens []string, probes []probedefs.Probe, sy *probedefs.Synthetics) error {
	type name struct{ group, event string }
	var names []name
	for _, p := range probes {
		names = append(names, name{p.Def.Group, p.Def.Event})
	}
	if sy != nil {
		for _, n := range sy.Order {
			names = append(names, name{"synthetic", n})
		}
	}
	for _, t := range tokens {
		if t == "all" {
			continue
		}
		found := false
		for _, n := range names {
			if eventdef.MatchesName(t, n.group, n.event) {
				found = true
				break
			}
		}
		if found {
			continue
		}
		best, bestD := "", 0
		for _, n := range names {
			for _, c := range []string{n.group + "/" + n.event, n.group + "/*", n.event} {
				if strings.Contains(t, "/") != strings.Contains(c, "/") {
					continue
				}
				if d := editDistance(t, c); best == "" || d < bestD {
					best, bestD = c, d
				}
			}
		}
		msg := fmt.Sprintf("--disable %s: no event of the definitions matches it", t)
		if best != "" && bestD <= max(2, len(t)/3) {
			msg += fmt.Sprintf(" (did you mean %s?)", best)
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
