package handlers

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/kprewrite/kprewrite/internal/objlink"
	"github.com/kprewrite/kprewrite/internal/stackuse"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// runtimeAPIStack bounds each HandlerAPI function over the runtime's own call graph
// (computed once: the runtime is the same for every rewrite). The runtime's calls by
// pointer are user handlers and hooks, which are bounded on their own.
var runtimeAPIStack = sync.OnceValues(func() (map[string]stackuse.Bound, error) {
	obj, err := objlink.ParseObject("kprewrite_rt.o", kprt.Object)
	if err != nil {
		return nil, fmt.Errorf("stack use of the runtime: %w", err)
	}
	g := stackuse.Build([]stackuse.Unit{{Name: "kprewrite_rt.o", Object: obj, Frames: stackuse.ParseSU(kprt.StackUsage)}}, stackuse.Options{})
	out := map[string]stackuse.Bound{}
	for _, n := range kprt.HandlerAPI {
		id, ok := g.Lookup(-1, n)
		if !ok {
			return nil, fmt.Errorf("stack use of the runtime: it does not define %s", n)
		}
		b := g.Bound(id)
		if b.Problem != "" {
			return nil, fmt.Errorf("stack use of the runtime's %s: %s", n, b.Problem)
		}
		out[n] = b
	}
	return out, nil
})

// boundStacks measures every handler entry's stack (sus: the support object's .su, then
// each unit's) and refuses the set when one has no bound or a bound over StackLimit.
func (s *Set) boundStacks(sus [][]byte) error {
	api, err := runtimeAPIStack()
	if err != nil {
		return err
	}
	objs, err := s.Objects()
	if err != nil {
		return err
	}
	units := make([]stackuse.Unit, len(objs))
	for i, o := range objs {
		units[i] = stackuse.Unit{Name: o.Name, Object: o, Frames: stackuse.ParseSU(sus[i])}
	}
	program := map[string]bool{}
	for _, e := range s.Externs {
		program[e] = true
	}
	g := stackuse.Build(units, stackuse.Options{FollowPointers: true, Extern: func(name string) (stackuse.Bound, bool) {
		b, ok := api[name]
		return b, ok
	}})
	roots := map[int]bool{}
	for _, id := range g.Taken() {
		if u, _, _, _ := g.Func(id); u > 0 {
			roots[id] = true
		}
	}
	for _, n := range []string{kprt.SymUserInit, kprt.SymUserExit} {
		if id, ok := g.Lookup(-1, n); ok {
			roots[id] = true
		}
	}
	var errs, warnings []string
	errFile := ""
	warned := map[string]bool{}
	for id := range roots {
		u, name, fr, known := g.Func(id)
		file, line := units[u].Name, fr.Line
		b := g.Bound(id)
		where := fmt.Sprintf("%s:%d", file, line)
		if !known {
			where = file
		}
		if (errFile == "" || file < errFile) && (b.Problem != "" || b.Bytes > StackLimit) {
			errFile = file
		}
		switch {
		case b.Problem != "":
			errs = append(errs, fmt.Sprintf("%s: handler function %s has no stack bound: %s", where, name, b.Problem))
		case b.Bytes > StackLimit:
			errs = append(errs, fmt.Sprintf("%s: handler function %s needs %d bytes of stack (%s), more than the %d a handler may use", where, name, b.Bytes, b.PathString(), StackLimit))
		}
		s.Stack = append(s.Stack, StackUse{File: file, Line: line, Function: name, Bytes: b.Bytes, Path: b.PathString()})
		for _, m := range b.Unmeasured {
			if warned[m] {
				continue
			}
			if program[m] {
				warned[m] = true
				warnings = append(warnings, fmt.Sprintf("%s: %s calls %s, a function of the program, whose stack use is not measured (handlers may use %d bytes of stack)", where, name, m, StackLimit))
			} else if id2, ok := g.Lookup(u, m); ok {
				if u2, _, _, _ := g.Func(id2); u2 > 0 {
					warned[m] = true
					warnings = append(warnings, fmt.Sprintf("%s: %s calls %s, which has no stack usage line from gcc (assembly?): its frame is counted as 0", where, name, m))
				}
			}
		}
	}
	sort.Slice(s.Stack, func(i, j int) bool {
		a, b := s.Stack[i], s.Stack[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Function < b.Function
	})
	sort.Strings(warnings) // the roots come from a map
	s.Warnings = append(s.Warnings, warnings...)
	if len(errs) > 0 {
		sort.Strings(errs)
		return &Error{File: errFile, Text: strings.Join(errs, "\n") +
			fmt.Sprintf("\n  handlers run on the probed thread's stack or its signal stack: keep large buffers in static or global variables, and do not recurse (at most %d bytes of stack)", StackLimit)}
	}
	return nil
}
