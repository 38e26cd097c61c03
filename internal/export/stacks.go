package export

import (
	"github.com/kprewrite/kprewrite/internal/calls"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// Stacks is a trace's calls by call stack: one node per distinct stack (a call of
// Func made under its parent node's stack), with the calls that had that stack, their
// time and their self time. Nodes[0] is the root, no function. It is what the pprof
// profile and the flame graphs are made of; its size is the number of distinct
// stacks, whatever the trace's length.
type Stacks struct {
	Funcs []*calls.Function
	Nodes []Node
	// Threads prefixes every stack with its thread ("comm-tid"): Funcs then holds a
	// pseudo-function per thread, with Image "".
	Threads bool
	// First and Last are the times of the first and last records.
	First, Last uint64
	kids        map[[2]int32]int32
}

// Node is one call stack.
type Node struct {
	Parent int32
	Func   int32 // index in Funcs; -1 for the root
	// Calls, Total and Self sum the calls with exactly this stack; Lost counts those
	// whose return was lost.
	Calls, Total, Self, Lost uint64
}

// child returns the node of fn called under parent.
func (s *Stacks) child(parent int32, fn int32) int32 {
	k := [2]int32{parent, fn}
	if n, ok := s.kids[k]; ok {
		return n
	}
	n := int32(len(s.Nodes))
	s.Nodes = append(s.Nodes, Node{Parent: parent, Func: fn})
	s.kids[k] = n
	return n
}

// Stack returns the functions of node n, outermost first.
func (s *Stacks) Stack(n int32) []*calls.Function {
	var out []*calls.Function
	for ; n > 0; n = s.Nodes[n].Parent {
		out = append(out, s.Funcs[s.Nodes[n].Func])
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// BuildStacks reads the trace and sums its calls by call stack; with threads, each
// thread's calls are under a node of their own.
func BuildStacks(in *Input, threads bool) (*Stacks, error) {
	s := &Stacks{Nodes: []Node{{Parent: -1, Func: -1}}, kids: map[[2]int32]int32{}, Threads: threads}
	b := calls.NewBuilder(in.Descs)
	var funcOf []int32 // calls.Function.ID -> index in s.Funcs
	threadNode := map[*calls.Thread]int32{}
	b.OnEnter = func(t *calls.Thread, c *calls.Call, _ *tracefile.Record) {
		parent := int32(0)
		if n := len(t.Stack); n > 1 {
			parent = int32(t.Stack[n-2].Tag)
		} else if threads {
			tn, ok := threadNode[t]
			if !ok {
				s.Funcs = append(s.Funcs, &calls.Function{ID: -1, Name: threadName(t)})
				tn = s.child(0, int32(len(s.Funcs)-1))
				threadNode[t] = tn
			}
			parent = tn
		}
		for len(funcOf) <= c.Func.ID {
			funcOf = append(funcOf, -1)
		}
		if funcOf[c.Func.ID] < 0 {
			funcOf[c.Func.ID] = int32(len(s.Funcs))
			s.Funcs = append(s.Funcs, c.Func)
		}
		c.Tag = int(s.child(parent, funcOf[c.Func.ID]))
	}
	b.OnExit = func(t *calls.Thread, c *calls.Call, _ *tracefile.Record) {
		n := &s.Nodes[c.Tag]
		n.Calls++
		n.Total += c.Total
		n.Self += c.Self
		if c.Lost {
			n.Lost++
		}
	}
	first := true
	err := in.Stream.Each(func(r *tracefile.Record) error {
		if first {
			s.First, first = r.TsNs, false
		}
		s.Last = r.TsNs
		b.Add(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	b.Finish()
	return s, nil
}

// threadName names a thread as the flame graphs and reports show it.
func threadName(t *calls.Thread) string {
	return t.Name()
}
