package patch

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
)

// RuleExcluded is the reason a probe in code the user excluded (--exclude) is refused.
const RuleExcluded = "excluded"

// Range is a half-open address range [Lo, Hi) where no probe may go, and the pattern
// that named it.
type Range struct {
	Lo, Hi  uint64
	Pattern string
}

// Contains reports whether a lies in r.
func (r Range) Contains(a uint64) bool { return a >= r.Lo && a < r.Hi }

// Overlaps reports whether [lo, hi) meets r.
func (r Range) Overlaps(lo, hi uint64) bool { return lo < r.Hi && r.Lo < hi }

// ParseExcludes turns --exclude patterns into address ranges: a glob of function
// names (path.Match syntax, matched against every name and alias: "Builtins_*"), or
// an address range "0xLO-0xHI" (end excluded) or "0xLO+SIZE". Code a program copies
// and runs elsewhere must be excluded: a copied jmp rel32 or int3 would be wrong at
// the copy's address (V8's embedded builtins in node are such code). A glob that
// matches no function is an error, so a typo does not silently probe such code.
func ParseExcludes(patterns []string, fns *elfio.Functions) ([]Range, error) {
	var out []Range
	for _, p := range patterns {
		if p == "" {
			return nil, fmt.Errorf("--exclude: empty pattern")
		}
		if strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X") {
			r, err := parseRange(p)
			if err != nil {
				return nil, fmt.Errorf("--exclude %q: %w", p, err)
			}
			out = append(out, r)
			continue
		}
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("--exclude %q: bad glob: %w", p, err)
		}
		n := 0
		for i := range fns.List {
			fn := &fns.List[i]
			if globMatches(p, fn) && fn.Size > 0 {
				out = append(out, Range{Lo: fn.Addr, Hi: fn.End(), Pattern: p})
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("--exclude %q matches no function", p)
		}
	}
	return normalizeRanges(out), nil
}

// normalizeRanges sorts rs and merges overlapping and adjacent ranges, so that a
// lookup is one binary search.
func normalizeRanges(rs []Range) []Range {
	out := append([]Range(nil), rs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Lo < out[j].Lo })
	var merged []Range
	for _, r := range out {
		if n := len(merged); n > 0 && r.Lo <= merged[n-1].Hi {
			merged[n-1].Hi = max(merged[n-1].Hi, r.Hi)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

func globMatches(p string, fn *elfio.Func) bool {
	if ok, _ := path.Match(p, fn.Name); ok {
		return true
	}
	for _, a := range fn.Aliases {
		if ok, _ := path.Match(p, a); ok {
			return true
		}
	}
	return false
}

func parseRange(s string) (Range, error) {
	sep := strings.IndexAny(s, "-+")
	if sep < 0 {
		return Range{}, fmt.Errorf("want 0xLO-0xHI or 0xLO+SIZE")
	}
	lo, err := strconv.ParseUint(s[:sep], 0, 64)
	if err != nil {
		return Range{}, fmt.Errorf("start: %w", err)
	}
	v, err := strconv.ParseUint(s[sep+1:], 0, 64)
	if err != nil {
		return Range{}, fmt.Errorf("end: %w", err)
	}
	hi := v
	if s[sep] == '+' {
		hi = lo + v
		if hi < lo {
			return Range{}, fmt.Errorf("size wraps around")
		}
	}
	if hi <= lo {
		return Range{}, fmt.Errorf("empty range %#x-%#x", lo, hi)
	}
	return Range{Lo: lo, Hi: hi, Pattern: s}, nil
}

// excludedBy returns a range of rs (sorted, disjoint, as ParseExcludes makes them)
// that meets [lo, hi), if any.
func excludedBy(rs []Range, lo, hi uint64) (Range, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Lo >= hi }) - 1
	if i >= 0 && rs[i].Overlaps(lo, hi) {
		return rs[i], true
	}
	return Range{}, false
}
