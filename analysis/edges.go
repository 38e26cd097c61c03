package analysis

import (
	"slices"
	"sort"
)

// edgeKind says how an address came to be a possible control-flow target.
type edgeKind uint8

const (
	ekBranch edgeKind = iota // direct jmp/jcc/loop/xbegin
	ekCall                   // direct call
	ekTable                  // resolved jump-table entry (src = the indirect jmp)
	ekLea                    // lea X(%rip) of a code address (src = the lea)
	ekImm                    // mov/push immediate that is a code address (src = the instruction)
	ekData                   // 8-byte word in a data section holding a code address (src = the word)
	ekReloc                  // dynamic relocation resolving to a code address (src = the slot)
	ekSymbol                 // symbol inside code that is not a function start (src = index in File.Symbols)
)

var edgeKindNames = [...]string{"branch", "call", "table", "lea", "imm", "data", "reloc", "symbol"}

func (k edgeKind) String() string {
	if int(k) < len(edgeKindNames) {
		return edgeKindNames[k]
	}
	return "edge?"
}

// edge is one possible transfer of control to dst. Edges to function starts
// are not stored: a function start can never be inside a DCR because the DCR
// stays inside one function (rule 2 checks starts separately).
type edge struct {
	dst  uint64
	src  uint64
	kind edgeKind
}

// edgeIndex is a set of chunks, each sorted by dst. Workers sort their own
// chunk in parallel; queries search every chunk (there are only a few).
type edgeIndex struct {
	chunks [][]edge
}

func sortEdges(es []edge) {
	slices.SortFunc(es, func(a, b edge) int {
		switch {
		case a.dst < b.dst:
			return -1
		case a.dst > b.dst:
			return 1
		case a.src < b.src:
			return -1
		case a.src > b.src:
			return 1
		}
		return int(a.kind) - int(b.kind)
	})
}

// in calls fn for every edge with lo <= dst < hi, chunk by chunk; fn returns
// false to stop.
func (ix *edgeIndex) in(lo, hi uint64, fn func(e *edge) bool) {
	for _, c := range ix.chunks {
		i := sort.Search(len(c), func(i int) bool { return c[i].dst >= lo })
		for ; i < len(c) && c[i].dst < hi; i++ {
			if !fn(&c[i]) {
				return
			}
		}
	}
}

// any reports whether some edge has lo <= dst < hi.
func (ix *edgeIndex) any(lo, hi uint64) bool {
	found := false
	ix.in(lo, hi, func(*edge) bool { found = true; return false })
	return found
}

// count returns the number of stored edges.
func (ix *edgeIndex) count() int {
	n := 0
	for _, c := range ix.chunks {
		n += len(c)
	}
	return n
}
