package srcprobe

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/debuginfo"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/ldso"
)

// Resolver translates the source-level definitions of one binary; it reads the
// debug information at the first definition that needs it.
type Resolver struct {
	Binary    string // the program the definitions probe
	DebugFile string // --debug-file, or "" to look for it
	// FindLibrary finds the file of a LIB:SITE's library; nil: as the program's
	// loader would (ldso).
	FindLibrary func(lib string) (string, error)
	// KernelTypes keeps the kernel's default types for untyped fetchargs of
	// kernel-form definitions (x64, $retval too), as the kernel's uprobe tracer prints
	// them: no types from DWARF (typedArgs, typedRetval).
	KernelTypes bool

	info    *debuginfo.Info
	loadErr error
	loaded  bool
	libs    map[string]*Resolver // by the library's path
	// eventArgs: the arguments of each named event's first kernel-form probe, for
	// typedArgs' rule that an event's probes take alike types
	eventArgs map[string]eventTypes
	elf       *elfio.File // a library's file, for its file offsets (image)
}

// image returns the binary's ELF file, opened once (kept open: the rewrite reads it
// again).
func (r *Resolver) image() (*elfio.File, error) {
	if r.elf == nil {
		f, err := elfio.Open(r.Binary)
		if err != nil {
			return nil, fmt.Errorf("read library: %w", err)
		}
		r.elf = f
	}
	return r.elf, nil
}

// offsetSite turns a library site's file offset (0xOFFSET, as uprobe_events take
// it) into the address the debug information uses.
func (r *Resolver) offsetSite(text string) (string, error) {
	off, err := strconv.ParseUint(text[2:], 16, 64)
	if err != nil {
		return "", fmt.Errorf("bad file offset %s", text)
	}
	im, err := r.image()
	if err != nil {
		return "", err
	}
	a, err := im.Addr(off)
	if err != nil {
		return "", err
	}
	return hexSite(a), nil
}

// library returns the resolver of a library a definition names.
func (r *Resolver) library(lib string) (*Resolver, error) {
	if r.FindLibrary == nil {
		search, err := ldso.New(r.Binary)
		if err != nil {
			return nil, fmt.Errorf("find the libraries of %s: %w", r.Binary, err)
		}
		r.FindLibrary = search.Find
	}
	path, err := r.FindLibrary(lib)
	if err != nil {
		return nil, fmt.Errorf("library %w", err)
	}
	if r.libs == nil {
		r.libs = map[string]*Resolver{}
	}
	lr := r.libs[path]
	if lr == nil {
		lr = &Resolver{Binary: path, KernelTypes: r.KernelTypes}
		r.libs[path] = lr
	}
	return lr, nil
}

// splitLib separates the LIB: of a LIB:SITE probe point: the text before the first
// ':' when it names a shared object (a name with ".so", or a path that is not a
// source file).
func splitLib(s string) (lib, site string) {
	l, rest, ok := strings.Cut(s, ":")
	if !ok || l == "" || rest == "" || isSourceFile(l) {
		return "", s
	}
	if strings.Contains(l, ".so") || strings.Contains(l, "/") {
		return l, rest
	}
	return "", s
}

// Info returns the binary's debug information, loading it once.
func (r *Resolver) Info() (*debuginfo.Info, error) {
	if !r.loaded {
		r.loaded = true
		r.info, r.loadErr = debuginfo.Load(r.Binary, r.DebugFile)
	}
	return r.info, r.loadErr
}

// IsSourceLevel says whether def has a source-level part (a FUNC:RELLINE,
// FILE:LINE or FUNC@FILE probe point, a variable, $params or $vars).
func IsSourceLevel(def string) bool {
	w := strings.Fields(def)
	if len(w) < 2 || strings.HasPrefix(w[0], "-") {
		return false
	}
	if _, s := splitLib(w[1]); !parseSite(s).raw {
		return true
	}
	for i, a := range w[2:] {
		pa := parseArg(a, i+1)
		if pa.sourceLevel() || pa.bad() {
			return true
		}
	}
	return false
}

// typedRetval says whether def, a kernel-form return probe with an untyped $retval,
// gets its function's return type, as the kernel types $retval from BTF since Linux
// 6.5 (a function returning void is then an error): when the program (or the library
// LIB:SITE names) carries its own debug information (.debug_info in the file itself:
// a separate debug file is not looked for, so that an untouched kernel-form
// definition means the same on every machine, whatever debug packages it has) and
// that describes the probed function, unless KernelTypes. Otherwise $retval stays the
// kernel's u64.
func (r *Resolver) typedRetval(def string) bool {
	w := strings.Fields(def)
	if r.KernelTypes || len(w) < 3 || strings.HasPrefix(w[0], "-") {
		return false
	}
	lib, siteText := splitLib(w[1])
	siteText, retSuffix := strings.CutSuffix(siteText, "%return")
	if !strings.HasPrefix(w[0], "r") && !retSuffix {
		return false
	}
	untyped := false
	for i, a := range w[2:] {
		pa := parseArg(a, i+1)
		untyped = untyped || (pa.keyword == "$retval" && pa.typ == "")
	}
	if !untyped {
		return false
	}
	res := r
	if lib != "" {
		var err error
		if res, err = r.library(lib); err != nil {
			return false // the rewrite says why
		}
	}
	if !res.ownDebugInfo() {
		return false
	}
	st := parseSite(siteText)
	if lib != "" && isHex(st.text) {
		var err error
		if st.text, err = res.offsetSite(st.text); err != nil {
			return false
		}
	}
	in, err := res.Info()
	if err != nil {
		return false
	}
	pts, _, err := res.rawPoint(in, st, true)
	return err == nil && len(pts) == 1 && pts[0].entry && pts[0].fn != nil
}

// ownDebugInfo says whether the binary holds DWARF itself.
func (r *Resolver) ownDebugInfo() bool {
	f, err := r.image()
	if err != nil {
		return false
	}
	for _, s := range f.Sections {
		if s.Name == ".debug_info" || s.Name == ".zdebug_info" {
			return true
		}
	}
	return false
}

func (a srcArg) bad() bool {
	b := a.body
	return !a.badName && !a.isChain && a.keyword == "" && b != "" && (b[0] == '_' || b[0] >= 'a' && b[0] <= 'z' || b[0] >= 'A' && b[0] <= 'Z')
}

// Translate returns the kernel-form definitions of def, one per probed address
// (in address order, all of one event), or nil if def is not source-level.
func (r *Resolver) Translate(def string) ([]string, error) {
	if !IsSourceLevel(def) {
		typed, err := r.typedArgs(def)
		if err != nil {
			return nil, err
		}
		if typed != "" {
			return []string{typed}, nil
		}
		if !r.typedRetval(def) {
			return nil, nil
		}
	}
	w := strings.Fields(def)
	lib, siteText := splitLib(w[1])
	// SITE%return is a return probe of any site form, as uprobe_events take it
	siteText, retSuffix := strings.CutSuffix(siteText, "%return")
	head, st := w[0], parseSite(siteText)
	var args []srcArg
	for i, a := range w[2:] {
		pa := parseArg(a, i+1)
		if pa.bad() {
			return nil, fmt.Errorf("argument %q: not a variable (VAR, VAR->FIELD, VAR.FIELD, VAR[N]) nor a kernel fetcharg", a)
		}
		args = append(args, pa)
	}
	res := r
	var err error
	if lib != "" {
		if res, err = r.library(lib); err != nil {
			return nil, err
		}
		if st.raw && isHex(st.text) {
			if st.text, err = res.offsetSite(st.text); err != nil {
				return nil, fmt.Errorf("%s: %w", w[1], err)
			}
		}
	}
	in, err := res.Info()
	if err != nil {
		return nil, err
	}
	ret := strings.HasPrefix(head, "r") || retSuffix
	points, defaultName, err := res.points(in, st, ret)
	if err != nil {
		return nil, err
	}
	if lib != "" {
		for i := range points {
			site := points[i].site
			if isHex(site) { // a file offset in the kernel form of a library's site
				im, err := res.image()
				if err != nil {
					return nil, err
				}
				off, err := im.FileOffset(points[i].addr, 1)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", w[1], err)
				}
				site = hexSite(off)
			}
			points[i].site = lib + ":" + site
		}
	}
	st.text = w[1] // a kernel-form site's default event name is the written one's
	group, event, err := eventName(head, st, defaultName)
	if err != nil {
		return nil, err
	}
	kind := head
	if i := strings.IndexByte(head, ':'); i >= 0 {
		kind = head[:i]
	}
	if retSuffix && kind == "p" {
		kind = "r"
	}
	bodies := make([][]string, len(points))
	var names [][]string
	for i, pt := range points {
		b, n, err := res.args(in, pt, args, ret)
		if err != nil {
			return nil, fmt.Errorf("at %s: %w", pt.where(), err)
		}
		bodies[i] = b
		names = append(names, n)
	}
	// a line with several addresses: $vars keeps what every address has
	if len(points) > 1 && slices.ContainsFunc(args, func(a srcArg) bool { return a.keyword == "$vars" }) {
		bodies = common(bodies, names)
	}
	out := make([]string, len(points))
	for i, pt := range points {
		out[i] = kind + ":" + group + "/" + event + " " + pt.site + strings.Join(prefixSpace(bodies[i]), "")
	}
	return out, nil
}

func prefixSpace(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = " " + x
	}
	return out
}

// common keeps the arguments (by name) present at every point, in the order of the first.
func common(bodies, names [][]string) [][]string {
	count := map[string]int{}
	for _, ns := range names {
		for _, n := range ns {
			count[n]++
		}
	}
	out := make([][]string, len(bodies))
	for i := range bodies {
		for j, b := range bodies[i] {
			if count[names[i][j]] == len(bodies) {
				out[i] = append(out[i], b)
			}
		}
	}
	return out
}

// point is one probed address.
type point struct {
	addr  uint64
	site  string // the site in kernel form
	fn    *debuginfo.Func
	entry bool // the function's entry (for return probes and $retval types)
	// frame is the function copy whose variables the arguments name (nil: the
	// innermost at addr): FUNC's for a line of FUNC.
	frame *debuginfo.Func
}

func (p point) where() string {
	if p.fn != nil {
		return fmt.Sprintf("%#x (%s+%#x)", p.addr, p.fn.Name, p.addr-p.fn.Entry)
	}
	return fmt.Sprintf("%#x", p.addr)
}

// points finds the addresses of a probe point.
func (r *Resolver) points(in *debuginfo.Info, st site, ret bool) ([]point, string, error) {
	if st.raw {
		return r.rawPoint(in, st, ret)
	}
	if st.fn != "" {
		fns := in.Funcs(st.fn, st.file)
		if len(fns) == 0 {
			where := ""
			if st.file != "" {
				where = " in " + st.file
			}
			return nil, "", fmt.Errorf("%s: no function %s%s in the debug information of %s%s", st.text, st.fn, where, in.Binary, in.SplitNote())
		}
		if !st.rel { // FUNC@FILE: every copy's entry
			var pts []point
			for _, f := range fns {
				if ret && f.Inlined {
					continue // an inlined copy never returns
				}
				pts = append(pts, point{addr: f.Entry, site: hexSite(f.Entry), fn: f, entry: true, frame: f})
			}
			if len(pts) == 0 {
				return nil, "", fmt.Errorf("%s: %s is inlined everywhere: it has no return to probe", st.text, st.fn)
			}
			return pts, st.fn, nil
		}
		if ret {
			return nil, "", fmt.Errorf("%s: a return probe goes on a function, not a line", st.text)
		}
		var pts []point
		seen := map[uint64]bool{}
		for _, f := range fns {
			if end := in.NextDeclLine(f); end > 0 && f.Line+st.line >= end {
				continue // past f's body: another function's line
			}
			addrs, _ := in.LineAddrs(f.File, f.Line+st.line)
			for _, a := range addrs {
				if f.Contains(a) && !seen[a] {
					seen[a] = true
					pts = append(pts, point{addr: a, site: hexSite(a), fn: f, frame: f})
				}
			}
		}
		if len(pts) == 0 {
			return nil, "", fmt.Errorf("%s: line %d of %s (%s:%d) has no code; kprewrite check --lines %s lists the lines that do",
				st.text, st.line, st.fn, fns[0].File, fns[0].Line+st.line, st.fn)
		}
		slices.SortFunc(pts, func(a, b point) int { return cmpU64(a.addr, b.addr) })
		return pts, st.fn + "_L" + strconv.Itoa(st.line), nil
	}
	if ret {
		return nil, "", fmt.Errorf("%s: a return probe goes on a function, not a line", st.text)
	}
	addrs, files := in.LineAddrs(st.file, st.line)
	if len(files) > 1 {
		return nil, "", fmt.Errorf("%s: the name matches %d source files (%s): give more of the path", st.text, len(files), strings.Join(files, ", "))
	}
	if len(addrs) == 0 {
		return nil, "", fmt.Errorf("%s: no code at that line in the debug information of %s", st.text, in.Binary)
	}
	pts := make([]point, 0, len(addrs))
	for _, a := range addrs {
		pt := point{addr: a, site: hexSite(a), fn: in.FuncAt(a)}
		// the innermost function of that file that starts before the line
		for _, f := range in.FramesAt(a) {
			if debuginfo.SameFile(f.File, st.file) && f.Line <= st.line {
				pt.fn, pt.frame = f, f
				break
			}
		}
		pts = append(pts, pt)
	}
	base := st.file[strings.LastIndexByte(st.file, '/')+1:]
	if i := strings.IndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	return pts, sanitize(base) + "_L" + strconv.Itoa(st.line), nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func hexSite(a uint64) string { return "0x" + strconv.FormatUint(a, 16) }

func isHex(s string) bool { return strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") }

// rawPoint resolves a kernel-form site (SYM[+OFFS] or 0xADDR) whose arguments are
// source-level. A function named alone, in C compiled without optimization,
// is probed after its prologue, as gdb and perf probe do: before it the
// parameters are not yet in the stack slots the debug information gives.
func (r *Resolver) rawPoint(in *debuginfo.Info, st site, ret bool) ([]point, string, error) {
	s := st.text
	if strings.Contains(s, ":") {
		return nil, "", fmt.Errorf("%s: not a probe point of this program (SYM[+OFFS], 0xADDR, LIB:SITE or a source form)", s)
	}
	if isHex(s) {
		a, err := strconv.ParseUint(s[2:], 16, 64)
		if err != nil {
			return nil, "", fmt.Errorf("%s: bad address", s)
		}
		f := in.FuncAt(a)
		return []point{{addr: a, site: s, fn: f, entry: f != nil && a == f.Entry}}, "", nil
	}
	sym, offText, _ := strings.Cut(s, "+")
	var off uint64
	if offText != "" {
		v, err := strconv.ParseUint(offText, 0, 64)
		if err != nil {
			return nil, "", fmt.Errorf("%s: bad offset", s)
		}
		off = v
	}
	var fn *debuginfo.Func
	for _, f := range in.Funcs(sym, "") {
		if !f.Inlined {
			if fn != nil && fn.Entry != f.Entry {
				return nil, "", fmt.Errorf("%s: %s names several functions; write FUNC@FILE", s, sym)
			}
			fn = f
		}
	}
	if fn == nil {
		return nil, "", fmt.Errorf("%s: no out-of-line function %s in the debug information of %s", s, sym, in.Binary)
	}
	a := fn.Entry + off
	// Go's location lists describe the parameters at the entry itself (in the
	// registers of its ABI), at every optimization level: no prologue to skip
	if off == 0 && !ret && !fn.Optimized() && !fn.Go() {
		if b := in.AfterPrologue(fn); b != a {
			return []point{{addr: b, site: sym + "+" + strconv.FormatUint(b-fn.Entry, 10), fn: fn, frame: fn}}, "", nil
		}
	}
	pt := point{addr: a, site: s, fn: fn, entry: off == 0}
	if fn.Contains(a) {
		pt.frame = fn
	}
	return []point{pt}, "", nil
}

// eventName is the event's group and name: as written, or the default of the
// written site (the kernel's for a kernel-form site, perf probe's FUNC_L<N> for a line).
func eventName(head string, st site, def string) (string, string, error) {
	if i := strings.IndexByte(head, ':'); i >= 0 {
		g, e, ok := strings.Cut(head[i+1:], "/")
		if !ok {
			g, e = eventdef.DefaultGroup, g
		}
		if e != "" {
			return g, e, nil
		}
	}
	if def != "" {
		return eventdef.DefaultGroup, sanitize(def), nil
	}
	kind := head
	if i := strings.IndexByte(head, ':'); i >= 0 {
		kind = head[:i]
	}
	p, err := eventdef.Parse(kind + " " + st.text)
	if err != nil {
		return "", "", err
	}
	return p.Group, p.Event, nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}

// args renders the arguments at one point; it returns the NAME=BODY:TYPE words and
// their names.
func (r *Resolver) args(in *debuginfo.Info, pt point, args []srcArg, ret bool) ([]string, []string, error) {
	golang := pt.fn != nil && pt.fn.Go()
	vars, places, err := pointVars(in, pt, args, ret, golang)
	if err != nil {
		return nil, nil, err
	}
	cx := newFetchCtx(in, golang)
	var out, names []string
	seen := map[string]bool{}
	emit := func(fs []field) error {
		for _, f := range fs {
			if seen[f.name] {
				return fmt.Errorf("two arguments are named %s: name one (NAME=%s)", f.name, f.body)
			}
			seen[f.name] = true
			w := f.name + "=" + f.body
			if f.typ != "" {
				w += ":" + f.typ
			}
			out, names = append(out, w), append(names, f.name)
		}
		return nil
	}
	for _, a := range args {
		switch {
		case a.keyword == "$params" || a.keyword == "$vars":
			for i, v := range vars {
				if v.Global || (a.keyword == "$params" && (!v.Param || v.Result)) || seen[v.Name] {
					continue
				}
				if v.Err != nil {
					continue // not available here: left out, as perf probe leaves it out
				}
				p, name, err := varPlace(v, places[i])
				if err != nil {
					continue
				}
				fs, err := fields(name, p, "", cx)
				if err != nil {
					continue
				}
				if err := emit(fs); err != nil {
					return nil, nil, err
				}
			}
		case a.keyword == "$retval":
			fs, err := retvalFields(in, pt, a, ret, cx)
			if err != nil {
				return nil, nil, fmt.Errorf("$retval: %w", err)
			}
			if err := emit(fs); err != nil {
				return nil, nil, err
			}
		case a.isChain:
			p, err := resolveChain(vars, places, a.chain)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", a.body, err)
			}
			name := a.name
			if name == "" {
				name = a.chain.argName()
			}
			fs, err := fields(name, p, a.typ, cx)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", a.body, err)
			}
			if err := emit(fs); err != nil {
				return nil, nil, err
			}
		default: // a kernel fetcharg: as written, named as the kernel would name it
			body := a.body
			if a.typ != "" {
				body += ":" + a.typ
			}
			if err := emit([]field{{argName(a), body, ""}}); err != nil {
				return nil, nil, err
			}
		}
	}
	return out, names, nil
}

// argName is an unnamed argument's name, as the kernel names it.
func argName(a srcArg) string {
	if a.name != "" {
		return a.name
	}
	return "arg" + strconv.Itoa(a.position)
}

// pointVars are the variables the arguments may name at pt, and where each is: at
// a Go function's return, its results in the registers Go returns them in.
func pointVars(in *debuginfo.Info, pt point, args []srcArg, ret, golang bool) ([]debuginfo.Var, []place, error) {
	if !slices.ContainsFunc(args, srcArg.sourceLevel) {
		return nil, nil, nil
	}
	if ret && golang && pt.fn != nil {
		return goResults(in, pt.fn)
	}
	if ret {
		return nil, nil, errors.New("a return probe fetches at the return, where the function's variables are gone: use $retval (and an entry probe for the rest)")
	}
	_, vars, err := in.VarsIn(pt.addr, pt.frame)
	if err != nil {
		return nil, nil, err
	}
	places := make([]place, len(vars))
	for i, v := range vars {
		places[i] = placeOf(v)
	}
	return vars, places, nil
}

// retvalFields types $retval from the function's return type at a return probe;
// a Go function's every result, from Go's result registers.
func retvalFields(in *debuginfo.Info, pt point, a srcArg, ret bool, cx *fetchCtx) ([]field, error) {
	name := argName(a)
	if a.typ != "" || !ret || pt.fn == nil {
		return []field{{name, "$retval", a.typ}}, nil
	}
	if cx.golang {
		return goRetval(in, pt.fn, a, cx)
	}
	t := in.ReturnType(pt.fn)
	switch {
	case t == nil:
		return nil, fmt.Errorf("%s %w", pt.fn.Name, errNoResults)
	case isCharPtr(t):
		return []field{{name, "+0($retval)", "string"}}, nil
	}
	typ, err := scalarType(t)
	if err != nil {
		return nil, err
	}
	return []field{{name, "$retval", typ}}, nil
}

// goRetval is every result of a Go function: one result named as $retval is
// (NAME= or argN), several by their names (rN for ~rN), after NAME_ when given.
func goRetval(in *debuginfo.Info, f *debuginfo.Func, a srcArg, cx *fetchCtx) ([]field, error) {
	rs, places, err := goResults(in, f)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s %w", f.Name, errNoResults)
	}
	var out []field
	for i, v := range rs {
		name := argName(a)
		if len(rs) > 1 {
			name = resultName(v.Name)
			if a.name != "" {
				name = a.name + "_" + name
			}
		}
		if v.Err != nil {
			return nil, fmt.Errorf("%s: %w", v.Name, v.Err)
		}
		fs, err := fields(name, places[i], "", cx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.Name, err)
		}
		out = append(out, fs...)
	}
	return out, nil
}

// resolveChain finds a chain's variable among vars and follows its accesses.
func resolveChain(vars []debuginfo.Var, places []place, c chain) (place, error) {
	for i, v := range vars {
		if v.Name != c.name && v.Name != "&"+c.name {
			continue
		}
		if v.Err != nil {
			return place{}, v.Err
		}
		p := places[i]
		if v.Name != c.name { // Go's &x: x moved to the heap, DWARF gives its address
			var err error
			if p, err = p.deref(); err != nil {
				return place{}, err
			}
		}
		for _, a := range c.path {
			var err error
			if p, err = p.step(a); err != nil {
				return place{}, err
			}
		}
		return p, nil
	}
	return place{}, fmt.Errorf("no variable %s is visible here", c.name)
}
