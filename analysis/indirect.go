package analysis

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// ijClass is what the analysis knows about an indirect jmp's targets.
type ijClass uint8

const (
	// ijUnresolved: the target is computed in a way we cannot bound; it may be
	// any address of the function or of its split fragments (rule 4).
	ijUnresolved ijClass = iota
	// ijTable: a jump table whose bound and entries were read; every entry is
	// an edge of the branch-target index.
	ijTable
	// ijPointer: the target is a whole 64-bit code pointer: loaded from memory,
	// returned by a call, passed in by the caller, or a constant. Code pointers
	// can only come from places the address-taken index covers (lea/mov/push
	// of code addresses, 8-byte data words, relocations, symbols, return
	// addresses, which follow a call and so never lie inside a DCR), so such a
	// jump cannot land in a DCR interior the index does not already forbid.
	// This is how tail calls through the GOT, vtables, function pointers and
	// computed-goto tables are accepted.
	ijPointer
)

func (c ijClass) String() string {
	switch c {
	case ijTable:
		return "jump table"
	case ijPointer:
		return "pointer jump"
	}
	return "unresolved"
}

type indirectJump struct {
	addr   uint64
	class  ijClass
	detail string
}

// classifyIndirect resolves jump tables, classifies the remaining indirect
// jmps, and marks functions an unresolved jmp may land in.
func (b *Binary) classifyIndirect(links []link) {
	var todo []int
	for i := range b.info {
		if b.info[i].indirect > 0 {
			todo = append(todo, i)
		}
	}
	fcs := make([]*fcode, len(todo))
	type out struct {
		edges []edge
		links []link
	}
	outs := make([]out, b.workers)
	parallel := func(work func(k int, o *out)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < b.workers; w++ {
			wg.Add(1)
			go func(o *out) {
				defer wg.Done()
				for {
					k := int(next.Add(1) - 1)
					if k >= len(todo) {
						return
					}
					work(k, o)
				}
			}(&outs[w])
		}
		wg.Wait()
	}

	// Jump tables first: their entries are edges the pointer analysis needs.
	parallel(func(k int, o *out) {
		fc := b.loadFunc(todo[k])
		fcs[k] = fc
		fi := &b.info[fc.idx]
		for j := range fc.insts {
			if fc.insts[j].in.Kind != x86dec.KindJmpIndirect {
				continue
			}
			ij := indirectJump{addr: fc.insts[j].addr}
			if t, ok := b.matchTable(fc, j); ok {
				ij.class, ij.detail = ijTable, t.String()
				for _, dst := range t.targets {
					o.edges = append(o.edges, edge{dst: dst, src: ij.addr, kind: ekTable})
					if dst < fc.fn.Addr || dst >= fc.fn.End() {
						o.links = append(o.links, link{fn: fc.idx, src: ij.addr, dst: dst, kind: ekTable})
					}
				}
			}
			fi.jumps = append(fi.jumps, ij)
		}
	})
	var tableEdges []edge
	for w := range outs {
		tableEdges = append(tableEdges, outs[w].edges...)
		links = append(links, outs[w].links...)
	}
	sortEdges(tableEdges)
	b.edges.chunks = append(b.edges.chunks, tableEdges)

	parallel(func(k int, o *out) {
		fc := fcs[k]
		fi := &b.info[fc.idx]
		for n := range fi.jumps {
			ij := &fi.jumps[n]
			if ij.class == ijTable {
				continue
			}
			j := fc.find(ij.addr)
			if ok, detail := b.pointerJump(fc, j); ok {
				ij.class, ij.detail = ijPointer, detail
			} else {
				ij.detail = detail
			}
		}
		fcs[k] = nil
	})

	unres := map[int]*poisonSrc{}
	for _, i := range todo {
		for _, ij := range b.info[i].jumps {
			b.Stats.IndirectJumps++
			switch ij.class {
			case ijTable:
				b.Stats.JumpTables++
			case ijPointer:
				b.Stats.PointerJumps++
			default:
				b.Stats.UnresolvedJumps++
				if unres[i] == nil {
					unres[i] = &poisonSrc{fn: i, addr: ij.addr, why: ij.detail}
				}
			}
		}
	}
	for i, p := range unres {
		b.info[i].poison = p
	}
	// An unresolved jmp may land anywhere in its source function, and that
	// includes the function's split fragments (foo.cold, or code the hot part
	// shares with them): poison every function linked to it by a direct
	// jmp/jcc or a table entry into its interior, by a jcc to its entry, or by
	// a jmp to a .cold fragment.
	for _, l := range links {
		a := l.fn
		bi := b.funcAt(l.dst)
		if bi < 0 || bi == a {
			continue
		}
		if l.dst == b.Funcs.List[bi].Addr && !l.jcc && !strings.Contains(b.Funcs.List[bi].Name, ".cold") {
			continue // a tail call
		}
		if p := unres[a]; p != nil && b.info[bi].poison == nil {
			b.info[bi].poison = p
		}
		if p := unres[bi]; p != nil && b.info[a].poison == nil {
			b.info[a].poison = p
		}
	}
}

// ---- jump tables ----

// IndirectJump describes one indirect jmp and what the analysis knows about
// its targets.
type IndirectJump struct {
	Addr   uint64 `json:"addr"`
	Func   string `json:"func"`
	Class  string `json:"class"` // "jump table", "pointer jump" or "unresolved"
	Detail string `json:"detail"`
}

// IndirectJumps lists every indirect jmp of every function, in address order.
func (b *Binary) IndirectJumps() []IndirectJump {
	var out []IndirectJump
	for i := range b.info {
		for _, ij := range b.info[i].jumps {
			out = append(out, IndirectJump{Addr: ij.addr, Func: b.Funcs.List[i].Name, Class: ij.class.String(), Detail: ij.detail})
		}
	}
	return out
}
