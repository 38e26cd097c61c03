package srcprobe

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/debuginfo"
)

// FuncLines is the answer of check --lines for one copy of a function.
type FuncLines struct {
	Func    string
	File    string
	Line    int    // the declaration line: relative line 0
	Entry   uint64 // the copy's entry
	Inlined bool   // an inlined copy (CallFile:CallLine say where)
	Call    string
	Lines   []ProbeLine
}

// ProbeLine is a line with code: FUNC:Rel (File:Line) starts at Addrs.
type ProbeLine struct {
	Rel   int
	Line  int
	File  string
	Addrs []uint64
}

// Lines lists the lines of the functions spec names (FUNC or FUNC@FILE) that
// have code, as perf probe -L does: for each copy, each line in the function's
// file with the addresses where its code starts.
func (r *Resolver) Lines(spec string) ([]FuncLines, error) {
	if lib, rest := splitLib(spec); lib != "" {
		lr, err := r.library(lib)
		if err != nil {
			return nil, err
		}
		return lr.Lines(rest)
	}
	in, err := r.Info()
	if err != nil {
		return nil, err
	}
	st := parseSite(spec)
	name, file := st.fn, st.file
	if st.raw {
		name = spec
	}
	if name == "" {
		return nil, fmt.Errorf("%s: want FUNC or FUNC@FILE", spec)
	}
	fns := in.Funcs(name, file)
	if len(fns) == 0 {
		return nil, fmt.Errorf("%s: no function %s in the debug information of %s%s", spec, name, in.Binary, in.SplitNote())
	}
	var out []FuncLines
	for _, f := range fns {
		end := in.NextDeclLine(f)
		fl := FuncLines{Func: f.Name, File: f.File, Line: f.Line, Entry: f.Entry, Inlined: f.Inlined}
		if f.Inlined {
			fl.Call = fmt.Sprintf("%s:%d", f.CallFile, f.CallLine)
		}
		byLine := map[int]*ProbeLine{}
		for _, row := range in.Lines(f) {
			if !debuginfo.SameFile(row.File, f.File) || row.Line < f.Line || end > 0 && row.Line >= end {
				continue
			}
			pl := byLine[row.Line]
			if pl == nil {
				// the addresses LineAddrs gives a probe on this line, inside this copy
				addrs, _ := in.LineAddrs(row.File, row.Line)
				pl = &ProbeLine{Rel: row.Line - f.Line, Line: row.Line, File: row.File}
				for _, a := range addrs {
					if f.Contains(a) {
						pl.Addrs = append(pl.Addrs, a)
					}
				}
				byLine[row.Line] = pl
			}
		}
		for _, pl := range byLine {
			if len(pl.Addrs) > 0 {
				fl.Lines = append(fl.Lines, *pl)
			}
		}
		sort.Slice(fl.Lines, func(i, j int) bool { return fl.Lines[i].Line < fl.Lines[j].Line })
		out = append(out, fl)
	}
	return out, nil
}

// PointVars is the answer of check --vars at one address of a probe point.
type PointVars struct {
	Addr  uint64
	Where string // FUNC+OFF (FILE:LINE)
	Vars  []VarInfo
}

// VarInfo is one variable at an address: how a probe fetches it, or why it cannot.
type VarInfo struct {
	Name   string
	Type   string
	Param  bool
	Global bool
	Fetch  string // NAME=BODY:TYPE, when available
	Reason string // why not, when not
}

// Vars lists the variables visible at each address of a probe point (any site
// form), as perf probe -V does, with the fetch each compiles to.
// A library's point (LIB:SITE) gives the library's addresses.
func (r *Resolver) Vars(spec string, globals bool) ([]PointVars, error) {
	if lib, rest := splitLib(spec); lib != "" {
		lr, err := r.library(lib)
		if err != nil {
			return nil, err
		}
		if isHex(rest) {
			if rest, err = lr.offsetSite(rest); err != nil {
				return nil, fmt.Errorf("%s: %w", spec, err)
			}
		}
		return lr.Vars(rest, globals)
	}
	in, err := r.Info()
	if err != nil {
		return nil, err
	}
	pts, _, err := r.points(in, parseSite(spec), false)
	if err != nil {
		return nil, err
	}
	var out []PointVars
	for _, pt := range pts {
		fn, vars, err := in.VarsIn(pt.addr, pt.frame)
		if err != nil {
			return nil, fmt.Errorf("at %s: %w", pt.where(), err)
		}
		cx := newFetchCtx(in, fn.Go())
		pv := PointVars{Addr: pt.addr, Where: fmt.Sprintf("%s+%d", fn.Name, pt.addr-fn.Entry)}
		if row, ok := in.LineAt(pt.addr); ok {
			pv.Where += fmt.Sprintf(" (%s:%d)", row.File, row.Line)
		}
		for _, v := range vars {
			if v.Global && !globals {
				continue
			}
			vi := VarInfo{Name: v.Name, Type: typeName(v.Type), Param: v.Param, Global: v.Global}
			if v.Err != nil {
				vi.Reason = v.Err.Error()
			} else if fs, err := fields(v.Name, placeOf(v), "", cx); err != nil {
				vi.Reason = err.Error()
			} else {
				var w []string
				for _, f := range fs {
					w = append(w, f.name+"="+f.body+":"+f.typ)
				}
				vi.Fetch = strings.Join(w, " ")
			}
			pv.Vars = append(pv.Vars, vi)
		}
		out = append(out, pv)
	}
	return out, nil
}
