package stackuse

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/internal/objlink"
	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// Frame is one function's stack frame as gcc -fstack-usage reports it: the bytes it
// moves the stack pointer, its return address included.
type Frame struct {
	Bytes   int
	Dynamic bool // a dynamic frame gcc could not bound (alloca, VLAs)
	File    string
	Line    int
}

// baseName is a function's name without the suffixes gcc gives its clones
// (.constprop.0, .isra.0, .part.0, .cold): clones share their function's .su line, and
// the larger frame of two clones is the one counted.
func baseName(s string) string {
	if i := strings.IndexByte(s, '.'); i > 0 {
		return s[:i]
	}
	return s
}

// ParseSU reads gcc's .su lines "FILE:LINE:COL:FUNCTION\tBYTES\tQUALIFIERS", keyed by
// the function's base name. Lines it cannot read are skipped.
func ParseSU(su []byte) map[string]Frame {
	out := map[string]Frame{}
	sc := bufio.NewScanner(bytes.NewReader(su))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 {
			continue
		}
		loc := strings.Split(f[0], ":")
		fr := Frame{Bytes: n, Dynamic: strings.Contains(f[2], "dynamic") && !strings.Contains(f[2], "bounded")}
		if len(loc) >= 4 {
			fr.File = strings.Join(loc[:len(loc)-3], ":")
			fr.Line, _ = strconv.Atoi(loc[len(loc)-3])
		}
		name := baseName(loc[len(loc)-1])
		old, seen := out[name]
		if !seen || fr.Bytes > old.Bytes || fr.Dynamic {
			if seen && old.Dynamic {
				fr.Dynamic = true
			}
			out[name] = fr
		}
	}
	return out
}

// Unit is one object and its functions' frames.
type Unit struct {
	Name   string // the source file, for messages
	Object *objlink.Object
	Frames map[string]Frame // ParseSU of its .su file
}

// Step is one function of a path, with its own frame.
type Step struct {
	Function string
	Bytes    int
	ByPtr    bool // reached by a call through a pointer
}

// Bound is the stack a function can use: Bytes over the deepest path (Path, from the
// function itself), or a Problem that makes it unbounded.
type Bound struct {
	Bytes   int
	Path    []Step
	Problem string
	// Unmeasured names the functions on some path whose frames are not known (assembly
	// without a .su line, functions no object defines and Extern did not bound).
	Unmeasured []string
}

// PathString is the path as "f 64 → g 1040 → h (by pointer) 16".
func (b *Bound) PathString() string {
	var s []string
	for _, st := range b.Path {
		p := ""
		if st.ByPtr {
			p = " (by pointer)"
		}
		s = append(s, fmt.Sprintf("%s%s %d", st.Function, p, st.Bytes))
	}
	return strings.Join(s, " → ")
}

// Extern bounds a function no unit defines; ok false when it cannot be measured.
type Extern func(name string) (b Bound, ok bool)

type edge struct {
	to    int    // node, or -1 for an extern
	name  string // the extern's name
	byPtr bool
}

type node struct {
	unit   int
	name   string
	frame  Frame
	known  bool // frame came from a .su line
	edges  []edge
	oddity string // code that does not decode
	// the walk's state: 0 new, 1 on the path, 2 done (result in res)
	state int
	res   Bound
}

// Graph is the call graph of a set of objects.
type Graph struct {
	nodes   []*node
	global  map[string]int
	local   map[localKey]int
	taken   []int // functions whose address is taken, in node order
	extern  Extern
	ptrEdge bool
}

// localKey names a local function: its unit and its name.
type localKey struct {
	unit int
	name string
}

// Options tune Build.
type Options struct {
	// FollowPointers makes a call through a pointer an edge to every address-taken
	// function; false ignores such calls (for an object whose calls by pointer are
	// bounded elsewhere, like the runtime's calls of user handlers).
	FollowPointers bool
	Extern         Extern
}

// Build reads the units' code into a call graph.
func Build(units []Unit, opt Options) *Graph {
	g := &Graph{global: map[string]int{}, local: map[localKey]int{}, extern: opt.Extern, ptrEdge: opt.FollowPointers}
	type place struct {
		unit, sec int
		off       uint64
	}
	type fnAt struct {
		off, end uint64
		id       int
	}
	bySec := map[[2]int][]fnAt{}
	funcs := make([][]objlink.Func, len(units))
	ids := make([][]int, len(units))
	for ui, u := range units {
		funcs[ui] = u.Object.Funcs()
		for _, f := range funcs[ui] {
			id := len(g.nodes)
			n := &node{unit: ui, name: f.Name}
			n.frame, n.known = u.Frames[baseName(f.Name)]
			g.nodes = append(g.nodes, n)
			ids[ui] = append(ids[ui], id)
			if f.Local {
				g.local[localKey{ui, f.Name}] = id
			} else if _, dup := g.global[f.Name]; !dup {
				g.global[f.Name] = id
			}
			k := [2]int{ui, f.Section}
			bySec[k] = append(bySec[k], fnAt{f.Offset, f.Offset + uint64(len(f.Code)), id})
		}
	}
	for k := range bySec {
		s := bySec[k]
		sort.Slice(s, func(i, j int) bool { return s[i].off < s[j].off })
	}
	funcAt := func(ui, sec int, off uint64) int {
		s := bySec[[2]int{ui, sec}]
		i := sort.Search(len(s), func(i int) bool { return s[i].end > off })
		if i < len(s) && s[i].off <= off {
			return s[i].id
		}
		return -1
	}
	funcStart := func(ui, sec int, off uint64) int { // the function that starts at off, -1: none
		s := bySec[[2]int{ui, sec}]
		i := sort.Search(len(s), func(i int) bool { return s[i].end > off })
		if i < len(s) && s[i].off == off {
			return s[i].id
		}
		return -1
	}
	takenSet := map[int]bool{}
	for ui, u := range units {
		refs := u.Object.Refs()
		at := map[place]objlink.Ref{}
		for _, r := range refs {
			at[place{ui, r.Section, r.Offset}] = r
		}
		// target resolves a relocation to a node (-1 and the name for an extern, -1 and ""
		// for something that is not a function)
		target := func(r objlink.Ref) (int, string) {
			if r.Name == "" {
				if r.TargetSection < 0 {
					return -1, ""
				}
				off := int64(r.TargetOffset) + r.Addend
				if r.Type == elf.R_X86_64_PC32 || r.Type == elf.R_X86_64_PLT32 || isGOT(r.Type) {
					off += 4 // the field ends the instruction, so A = target - 4
				}
				if off < 0 {
					return -1, ""
				}
				return funcAt(ui, r.TargetSection, uint64(off)), ""
			}
			if r.Local {
				if id, ok := g.local[localKey{ui, r.Name}]; ok {
					return id, ""
				}
				return -1, ""
			}
			if id, ok := g.global[r.Name]; ok {
				return id, ""
			}
			if r.Defined && !r.Func {
				return -1, "" // data
			}
			return -1, r.Name
		}
		branchRefs := map[place]bool{}
		for fi, f := range funcs[ui] {
			n := g.nodes[ids[ui][fi]]
			seen := map[int]bool{}
			addEdge := func(to int, ext string) {
				switch {
				case to >= 0 && !seen[to]:
					seen[to] = true
					n.edges = append(n.edges, edge{to: to})
				case to < 0 && ext != "":
					n.edges = append(n.edges, edge{to: -1, name: ext})
				}
			}
			for pos := 0; pos < len(f.Code); {
				in, err := x86dec.DecodeFast(f.Code[pos:], f.Offset+uint64(pos))
				if err != nil || in.Len <= 0 {
					n.oddity = fmt.Sprintf("code at %s+%#x does not decode", f.Name, pos)
					break
				}
				switch in.Kind {
				case x86dec.KindCall, x86dec.KindJmp, x86dec.KindJcc:
					p := place{ui, f.Section, f.Offset + uint64(pos+in.RelOff)}
					to, ext := -1, ""
					if r, ok := at[p]; ok {
						branchRefs[p] = true
						to, ext = target(r)
					} else if in.Kind == x86dec.KindCall || in.Target < f.Offset || in.Target >= f.Offset+uint64(len(f.Code)) {
						to = funcAt(ui, f.Section, in.Target)
					}
					if in.Kind != x86dec.KindCall && to == ids[ui][fi] {
						to = -1 // a jump inside the function or back to its entry: a loop, not a frame
					}
					addEdge(to, ext)
				case x86dec.KindCallIndirect, x86dec.KindJmpIndirect:
					// call *f@GOTPCREL(%rip) (-fno-plt) is a direct call of f: its GOT slot holds f
					p := place{ui, f.Section, f.Offset + uint64(pos+in.DispOff)}
					if r, ok := at[p]; ok && in.RIPRel && isGOT(r.Type) {
						branchRefs[p] = true
						addEdge(target(r))
						break
					}
					fallthrough
				case x86dec.KindCallFar, x86dec.KindJmpFar:
					if g.ptrEdge {
						n.edges = append(n.edges, edge{to: -2, byPtr: true}) // every address-taken function
					}
				default:
					// lea fn(%rip) of a function of the same section: the assembler left no
					// relocation, yet its address is taken (kp.pre_handler = fn in an init)
					if _, ok := at[place{ui, f.Section, f.Offset + uint64(pos+in.DispOff)}]; in.RIPRel && !ok {
						if id := funcStart(ui, f.Section, in.RIPTarget); id >= 0 {
							takenSet[id] = true
						}
					}
				}
				pos += in.Len
			}
		}
		for _, r := range refs {
			if branchRefs[place{ui, r.Section, r.Offset}] {
				continue
			}
			if id, _ := target(r); id >= 0 {
				takenSet[id] = true
			}
		}
	}
	for id := range g.nodes {
		if takenSet[id] {
			g.taken = append(g.taken, id)
		}
	}
	return g
}

// Lookup finds a function: a unit's local function, or a global one (unit < 0 looks
// only for global functions).
func (g *Graph) Lookup(unit int, name string) (id int, ok bool) {
	if unit >= 0 {
		if id, ok := g.local[localKey{unit, name}]; ok {
			return id, true
		}
	}
	id, ok = g.global[name]
	return id, ok
}

// Func returns a node's unit, name and frame.
func (g *Graph) Func(id int) (unit int, name string, fr Frame, known bool) {
	n := g.nodes[id]
	return n.unit, n.name, n.frame, n.known
}

// Taken lists the node ids of the address-taken functions.
func (g *Graph) Taken() []int { return g.taken }

// Bound is the stack function id can use.
func (g *Graph) Bound(id int) Bound {
	var path []int
	return g.walk(id, &path)
}

func (g *Graph) walk(id int, path *[]int) Bound {
	n := g.nodes[id]
	switch n.state {
	case 2:
		return n.res
	case 1:
		// recursion: the cycle is the path from id's place to here, back to id
		var names []string
		start := 0
		for i, p := range *path {
			if p == id {
				start = i
			}
		}
		for _, p := range (*path)[start:] {
			names = append(names, g.nodes[p].name)
		}
		names = append(names, n.name)
		return Bound{Problem: "it can recurse without bound: " + strings.Join(names, " → ")}
	}
	n.state = 1
	*path = append(*path, id)
	res := g.visit(n, path)
	*path = (*path)[:len(*path)-1]
	n.state, n.res = 2, res
	return res
}

func (g *Graph) visit(n *node, path *[]int) Bound {
	self := Step{Function: n.name, Bytes: n.frame.Bytes}
	switch {
	case n.oddity != "":
		return Bound{Problem: n.oddity}
	case n.frame.Dynamic:
		return Bound{Problem: fmt.Sprintf("%s has a dynamic stack frame (alloca or a variable-length array) gcc cannot bound", n.name)}
	}
	var best Bound
	unmeasured := map[string]bool{}
	if !n.known {
		unmeasured[n.name] = true
	}
	consider := func(b Bound, byPtr bool) bool {
		for _, u := range b.Unmeasured {
			unmeasured[u] = true
		}
		if b.Problem != "" {
			best = b
			return false
		}
		if b.Bytes > best.Bytes || best.Path == nil {
			best = b
			if byPtr && len(best.Path) > 0 {
				best.Path = append([]Step{}, best.Path...)
				best.Path[0].ByPtr = true
			}
		}
		return true
	}
	for _, e := range n.edges {
		switch {
		case e.to >= 0:
			if !consider(g.walk(e.to, path), false) {
				return g.finish(best, self, unmeasured)
			}
		case e.to == -2:
			for _, t := range g.taken {
				if !consider(g.walk(t, path), true) {
					if !strings.Contains(best.Problem, "by pointer") {
						best.Problem += " (through a call by pointer in " + n.name + ")"
					}
					return g.finish(best, self, unmeasured)
				}
			}
		default:
			var b Bound
			ok := false
			if g.extern != nil {
				b, ok = g.extern(e.name)
			}
			if !ok {
				unmeasured[e.name] = true
				continue
			}
			if !consider(b, false) {
				return g.finish(best, self, unmeasured)
			}
		}
	}
	return g.finish(best, self, unmeasured)
}

// finish puts n's own frame in front of its deepest callee's path.
func (g *Graph) finish(callee Bound, self Step, unmeasured map[string]bool) Bound {
	out := Bound{Problem: callee.Problem}
	if out.Problem == "" {
		out.Bytes = self.Bytes + callee.Bytes
		out.Path = append([]Step{self}, callee.Path...)
	}
	for u := range unmeasured {
		out.Unmeasured = append(out.Unmeasured, u)
	}
	sort.Strings(out.Unmeasured)
	return out
}

func isGOT(t elf.R_X86_64) bool {
	return t == elf.R_X86_64_GOTPCREL || t == elf.R_X86_64_GOTPCRELX || t == elf.R_X86_64_REX_GOTPCRELX
}
