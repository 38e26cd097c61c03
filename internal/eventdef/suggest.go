package eventdef

import "sort"

// What a message about a name that is not there suggests instead (functions, events,
// registers): the names within a typing error of it.

// Nearest returns the candidates nearest to name by edit distance (a swap of two
// neighbours counts one, as in "wrok"), at most 3 of them and only those close enough
// to be a typing error: at most 1 edit in a name of up to 4 characters, 2 in a longer
// one. Sorted, without duplicates.
func Nearest(name string, candidates []string) []string {
	limit := 1
	if len(name) > 4 {
		limit = 2
	}
	best := limit + 1
	var out []string
	seen := map[string]bool{}
	for _, c := range candidates {
		if c == name || seen[c] {
			continue
		}
		seen[c] = true
		switch d := editDistance(name, c); {
		case d > limit:
		case d < best:
			best, out = d, []string{c}
		case d == best:
			out = append(out, c)
		}
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

// editDistance is the optimal string alignment distance of a and b: insertions,
// deletions, substitutions and swaps of two neighbouring bytes.
func editDistance(a, b string) int {
	if d := len(a) - len(b); d > 2 || d < -2 {
		return 3 // farther than any limit: not worth the table
	}
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// OrList writes names as "a", "a or b", "a, b or c".
func OrList(names []string) string {
	s := names[0]
	for i := 1; i < len(names); i++ {
		if i == len(names)-1 {
			s += " or " + names[i]
		} else {
			s += ", " + names[i]
		}
	}
	return s
}
