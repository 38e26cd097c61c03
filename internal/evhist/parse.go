package evhist

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
)

// Modifier is a field's display or transform modifier (".hex", ".log2"...).
type Modifier uint8

// Modifiers, in the kernel's order of get_hist_field_flags.
const (
	ModNone Modifier = iota
	ModHex
	ModSym
	ModSymOffset
	ModExecname
	ModSyscall
	ModLog2
	ModBuckets
	ModUsecs
)

var modNames = [...]string{"", "hex", "sym", "sym-offset", "execname", "syscall", "log2", "buckets", "usecs"}

func (m Modifier) String() string { return modNames[m] }

// SrcTimestamp is common_timestamp: the hit's time in nanoseconds (the trace clock).
const SrcTimestamp = evfilter.SrcRetIP + 1

// SrcStack is the stacktrace key: the user stack of the hit.
const SrcStack = SrcTimestamp + 1

// Sizes and limits (the kernel's TRACING_MAP_* where it has one).
const (
	MaxKeys      = 3
	MaxVals      = 6 // besides hitcount
	MaxSortKeys  = 2
	MaxVars      = 8 // the kernel's TRACING_MAP_VARS_MAX is 16; the runtime keeps 8 on the probed thread's stack
	MaxRefs      = 4
	MaxOperands  = 4
	DefaultBits  = 11 // 2048 entries
	MinBits      = 7
	MaxBits      = 17
	StringKeyLen = 256 // MAX_FILTER_STR_VAL: a string key's bytes, NUL-padded
	CommLen      = 16
	// StackDepth is the frames of a stacktrace key (HIST_STACKTRACE_DEPTH): the
	// innermost ones in the image, zero after the last.
	StackDepth = 16
)

// Field is one key or value of a histogram.
type Field struct {
	Name    string // the field's name as the event's format has it ("common_timestamp" too)
	Mod     Modifier
	Buckets uint64 // .buckets=N
	Src     evfilter.Source
	Off     int // SrcData: offset in the record's data
	Size    int // bytes of the field's value
	Signed  bool
	String  bool // a string fetcharg (__data_loc) or comm
	Comm    bool // the thread's name
	Stack   bool // the stacktrace key
}

// Words is the key words the field takes.
func (f *Field) Words() int {
	switch {
	case f.Stack:
		return StackDepth
	case f.Comm:
		return CommLen / 8
	case f.String:
		return StringKeyLen / 8
	}
	return 1
}

// Text is the field as the kernel's trigger info prints it (hist_field_print).
func (f *Field) Text() string {
	s := f.Name
	if f.Mod != ModNone {
		s += "." + f.Mod.String()
		if f.Mod == ModBuckets {
			s += "=" + strconv.FormatUint(f.Buckets, 10)
		}
	}
	return s
}

// Display is how a value column prints: its sum, its share of the column's total
// (".percent"), or a bar as long as its share of the column's largest (".graph"). It is
// the reader's business only: the program sums the same either way.
type Display uint8

const (
	DisplaySum Display = iota
	DisplayPercent
	DisplayGraph
)

// Col is one value column of the histogram as vals= lists it, after the raw
// hitcount: value Vals[Val], or with Val -1 the hitcount again (hitcount.percent,
// hitcount.graph), shown as Display says.
type Col struct {
	Val     int
	Display Display
}

// SortKey is one sort field: Index 0 is hitcount, 1.. the values, then the keys
// (the kernel's field indexes).
type SortKey struct {
	Index      int
	Descending bool
}

// Spec is a parsed hist trigger.
type Spec struct {
	Keys []Field
	Vals []Field // besides the implicit hitcount, each value summed once
	// Cols are the value columns in vals= order (nil: each of Vals as a sum).
	Cols       []Col
	Sort       []SortKey
	Bits       int // log2 of the table's entries
	Name       string
	Pause      bool // ":pause": start (or put) the histogram paused
	Cont       bool // ":cont" or ":continue"
	Clear      bool
	NoHitcount bool
	Vars       []Var    // "name=expr": kept per entry, read by other histograms as $name
	Actions    []Action // onmatch(GROUP.EVENT).trace(...), onmax($v)/onchange($v).save|snapshot|trace(...)
	// Save is the fields of the save() action, resolved (Parse).
	Save   []Field
	Link   *Link  // what its references and actions resolved to (LinkAll)
	Filter string // the "if" condition, "" for none
	// SymLimit is the image's highest link-time address (.sym keys below it are
	// stored as link-time addresses).
	SymLimit uint64
}

// Size is the table's number of entries.
func (s *Spec) Size() int { return 1 << s.Bits }

// Error is a refused hist trigger with the kernel's error_log text.
type Error struct {
	Msg    string
	Detail string // the command part the kernel's error_log points at
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Msg + ": " + e.Detail
	}
	return e.Msg
}

func errf(detail, msg string) error { return &Error{Msg: msg, Detail: detail} }

// SplitFilter separates a hist trigger's parameters from its "if FILTER" as the
// kernel does (event_hist_trigger_parse: "if" preceded and followed by a blank).
func SplitFilter(param string) (trigger, filter string, err error) {
	p := 0
	for {
		k := strings.Index(param[p:], "if")
		if k < 0 {
			return strings.TrimSpace(param), "", nil
		}
		k += p
		if k == 0 {
			return "", "", errf(param, "Malformed filter")
		}
		if param[k-1] != ' ' && param[k-1] != '\t' {
			p = k + 1
			continue
		}
		if k >= len(param)-3 {
			return "", "", errf(param, "Malformed filter")
		}
		if param[k+2] != ' ' && param[k+2] != '\t' {
			p = k + 1
			continue
		}
		return strings.TrimSpace(param[:k-1]), strings.TrimSpace(param[k:]), nil
	}
}

// Parse reads a hist trigger's attributes ("keys=...:vals=...", the text after
// "hist:" without its filter) against the event's fields (evfilter.Fields).
func Parse(attrs string, fields []evfilter.Field) (*Spec, error) {
	s := &Spec{Bits: DefaultBits}
	var keys, vals, sorts string
	haveKeys := false
	for _, str := range strings.Split(attrs, ":") {
		str = strings.TrimSpace(str)
		if k := strings.IndexByte(str, '='); k >= 0 {
			name, v := str[:k], str[k+1:]
			switch name {
			case "key", "keys":
				keys, haveKeys = v, true
			case "val", "vals", "values":
				vals = v
			case "sort":
				sorts = v
			case "name":
				s.Name = v
			case "clock":
				if v != "global" && v != "local" && v != "mono" {
					return nil, errf(v, "Couldn't set trace_clock")
				}
			case "size":
				n, errno := eventdef.Kstrtoul(v, 0)
				if errno != 0 || n > 1<<32-1 {
					return nil, errf(str, "Invalid size")
				}
				b := 0
				if n > 1 {
					b = bits.Len64(n - 1)
				}
				if b < MinBits || b > MaxBits {
					return nil, errf(str, fmt.Sprintf("Size must be between %d and %d entries", 1<<MinBits, 1<<MaxBits))
				}
				s.Bits = b
			default:
				if v == "" {
					return nil, errf(str, "Empty assignment")
				}
				if len(s.Vars) == MaxVars {
					return nil, errf(str, "Too many variables defined")
				}
				if !isIdent(name) {
					return nil, errf(str, "Malformed assignment")
				}
				for _, o := range s.Vars {
					if o.Name == name {
						return nil, errf(name, "Variable already defined")
					}
				}
				e, err := parseExpr(v, fields)
				if err != nil {
					return nil, err
				}
				s.Vars = append(s.Vars, Var{Name: name, Expr: e})
			}
			continue
		}
		switch str {
		case "nohitcount", "NOHC":
			s.NoHitcount = true
		case "pause":
			s.Pause = true
		case "cont", "continue":
			s.Cont = true
		case "clear":
			s.Clear = true
		case "":
			// an empty attribute ("a::b") is skipped by the kernel's strsep loop too
		default:
			if strings.Contains(str, "(") {
				a, err := parseAction(str)
				if err != nil {
					return nil, err
				}
				s.Actions = append(s.Actions, a)
				continue
			}
			return nil, errf(str, "Invalid attribute")
		}
	}
	if !haveKeys || keys == "" {
		return nil, errf(attrs, "Missing keys")
	}
	if err := s.checkActions(fields); err != nil {
		return nil, err
	}
	var err error
	if s.Keys, err = parseKeys(keys, fields); err != nil {
		return nil, err
	}
	if vals != "" {
		if s.Vals, s.Cols, err = parseVals(vals, fields); err != nil {
			return nil, err
		}
	}
	if s.NoHitcount && len(s.Cols) == 0 {
		return nil, errf("nohitcount", "Non-hitcount value is required for 'nohitcount'")
	}
	if err := s.parseSort(sorts); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Spec) parseSort(sorts string) error {
	if sorts == "" {
		s.Sort = []SortKey{{Index: 0}}
		return nil
	}
	for _, sk := range strings.Split(sorts, ",") {
		if len(s.Sort) == MaxSortKeys {
			return errf(sorts, "Too many sort fields (Max = 2)")
		}
		if sk == "" {
			return errf(sorts, "Empty sort field")
		}
		k := SortKey{Index: -1}
		name := sk
		switch {
		case strings.HasSuffix(sk, ".descending"):
			name, k.Descending = strings.TrimSuffix(sk, ".descending"), true
		case strings.HasSuffix(sk, ".ascending"):
			name = strings.TrimSuffix(sk, ".ascending")
		}
		// the kernel takes the bare name; its trigger info prints the field with its
		// modifier ("sort=size.log2"), which is read back here
		is := func(f *Field) bool { return f.Name == name || f.Text() == name }
		if name == "hitcount" {
			k.Index = 0
		}
		for i := range s.Vals {
			if k.Index < 0 && is(&s.Vals[i]) {
				k.Index = 1 + i
			}
		}
		for i := range s.Keys {
			if k.Index < 0 && is(&s.Keys[i]) {
				k.Index = 1 + len(s.Vals) + i
			}
		}
		if k.Index < 0 && strings.Contains(name, ".") {
			return errf(sk, "Invalid sort modifier")
		}
		if k.Index < 0 {
			return errf(sk, "Sort field must be a key or a val")
		}
		s.Sort = append(s.Sort, k)
	}
	return nil
}

// parseKeys reads a keys= list.
func parseKeys(list string, fields []evfilter.Field) ([]Field, error) {
	var out []Field
	for _, text := range strings.Split(list, ",") {
		if len(out) == MaxKeys {
			return nil, errf(list, fmt.Sprintf("Too many keys (%d max)", MaxKeys))
		}
		f, err := parseField(text, fields, true)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// parseVals reads a vals= list into the values the program sums (one per field and
// modifier) and the columns that show them; a plain "hitcount" is implicit, and
// hitcount.percent or hitcount.graph shows it again.
func parseVals(list string, fields []evfilter.Field) ([]Field, []Col, error) {
	var vals []Field
	var cols []Col
	for _, text := range strings.Split(list, ",") {
		if text == "hitcount" {
			continue
		}
		if len(cols) == MaxVals {
			return nil, nil, errf(list, fmt.Sprintf("Too many values (%d max)", MaxVals))
		}
		name, disp := text, DisplaySum
		if base, mod, ok := cutLast(text); ok && (mod == "percent" || mod == "graph") {
			name, disp = base, DisplayPercent
			if mod == "graph" {
				disp = DisplayGraph
			}
		}
		if name == "hitcount" && disp != DisplaySum {
			cols = append(cols, Col{Val: -1, Display: disp})
			continue
		}
		if disp != DisplaySum && strings.Contains(name, ".") {
			return nil, nil, errf(text, "Invalid field modifier") // one modifier a field
		}
		f, err := parseField(name, fields, false)
		if err != nil {
			return nil, nil, err
		}
		k := slices.IndexFunc(vals, func(v Field) bool { return v.Text() == f.Text() })
		if k < 0 {
			k = len(vals)
			vals = append(vals, f)
		}
		cols = append(cols, Col{Val: k, Display: disp})
	}
	return vals, cols, nil
}

// cutLast splits "a.b" at its last dot.
func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// columns are the value columns (Cols, or each value as a sum).
func (s *Spec) columns() []Col {
	if s.Cols != nil {
		return s.Cols
	}
	cols := make([]Col, len(s.Vals))
	for i := range cols {
		cols[i] = Col{Val: i}
	}
	return cols
}

// colText is a column as the trigger info prints it.
func (s *Spec) colText(c Col) string {
	t := "hitcount"
	if c.Val >= 0 {
		t = s.Vals[c.Val].Text()
	}
	switch c.Display {
	case DisplayPercent:
		t += ".percent"
	case DisplayGraph:
		t += ".graph"
	}
	return t
}

// parseField reads "NAME[.MODIFIER]" (parse_field).
func parseField(text string, fields []evfilter.Field, key bool) (Field, error) {
	name, mod, hasMod := strings.Cut(text, ".")
	var f Field
	if hasMod {
		switch {
		case mod == "hex":
			f.Mod = ModHex
		case mod == "sym":
			f.Mod = ModSym
		case mod == "sym-offset":
			f.Mod = ModSymOffset
		case mod == "execname" && name == "common_pid":
			f.Mod = ModExecname
		case mod == "syscall":
			f.Mod = ModSyscall
		case mod == "log2":
			f.Mod = ModLog2
		case mod == "usecs":
			f.Mod = ModUsecs
		case strings.HasPrefix(mod, "buckets"):
			_, n, ok := strings.Cut(mod, "=")
			v, errno := eventdef.Kstrtoul(n, 0)
			if !ok || errno != 0 || v == 0 {
				return f, errf(text, "Invalid field modifier")
			}
			f.Mod, f.Buckets = ModBuckets, v
		default:
			return f, errf(text, "Invalid field modifier")
		}
		if !key && f.Mod != ModHex {
			// only .hex makes sense for a sum (histogram.rst); .usecs is a unit
			if f.Mod != ModUsecs {
				return f, errf(text, "Invalid field modifier")
			}
		}
	}
	switch name {
	case "common_timestamp":
		f.Name, f.Src, f.Size = name, SrcTimestamp, 8
		return f, nil
	case "common_stacktrace", "stacktrace":
		if !key {
			return f, errf(text, "Couldn't find field")
		}
		if f.Mod != ModNone {
			return f, errf(text, "Invalid field modifier")
		}
		f.Name, f.Src, f.Size, f.Stack = name, SrcStack, 8, true
		return f, nil
	}
	var ef *evfilter.Field
	for i := range fields {
		if fields[i].Name == name {
			ef = &fields[i]
			break
		}
	}
	if ef == nil {
		return f, errf(text, "Couldn't find field")
	}
	f.Name, f.Src, f.Off, f.Size, f.Signed = ef.Name, ef.Src, ef.Off, ef.Size, ef.Signed
	if name == "cpu" || name == "CPU" {
		f.Name = "common_cpu"
	}
	switch ef.Src {
	case evfilter.SrcComm:
		f.String, f.Comm, f.Signed = true, true, false
	case evfilter.SrcData:
		f.String = strings.HasPrefix(ef.Type, "__data_loc")
		if f.String {
			f.Signed = false
		}
	}
	if f.String && (f.Mod != ModNone || !key) {
		if !key {
			return f, errf(text, "String type can not be an operand in expression")
		}
		return f, errf(text, "Invalid field modifier")
	}
	if f.Mod == ModUsecs && f.Src != SrcTimestamp {
		return f, errf(text, "Invalid field modifier")
	}
	return f, nil
}

// Info is the trigger as the kernel's trigger file and the hist file's header print
// it (event_hist_trigger_print), without the " [active]" or " [paused]" state.
func (s *Spec) Info() string {
	var b strings.Builder
	if s.Name != "" {
		b.WriteString(s.Name + ":")
	}
	b.WriteString("hist:keys=")
	for i := range s.Keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.Keys[i].Text())
	}
	b.WriteString(":vals=")
	if !s.NoHitcount {
		b.WriteString("hitcount")
	}
	for i, c := range s.columns() {
		if i > 0 || !s.NoHitcount {
			b.WriteByte(',')
		}
		b.WriteString(s.colText(c))
	}
	for _, v := range s.Vars {
		b.WriteString(":" + v.Name + "=" + v.Expr.String())
	}
	b.WriteString(":sort=")
	for i, k := range s.Sort {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.fieldName(k.Index))
		if k.Descending {
			b.WriteString(".descending")
		}
	}
	fmt.Fprintf(&b, ":size=%d", s.Size())
	if s.Timestamps() {
		b.WriteString(":clock=mono")
	}
	if s.NoHitcount {
		b.WriteString(":nohitcount")
	}
	for _, a := range s.Actions {
		b.WriteString(":" + a.String())
	}
	if s.Filter != "" {
		b.WriteString(" if " + s.Filter)
	}
	return b.String()
}

// fieldName names sort index i as the trigger info does (with its modifier).
func (s *Spec) fieldName(i int) string {
	switch {
	case i == 0:
		return "hitcount"
	case i <= len(s.Vals):
		return s.Vals[i-1].Text()
	}
	return s.Keys[i-1-len(s.Vals)].Text()
}

// Same says whether two hist triggers are the same histogram for the kernel's
// hist_trigger_match: same keys, values, sort and filter (pause, cont and clear
// address an existing one).
func (s *Spec) Same(o *Spec) bool {
	if s.Name != "" || o.Name != "" {
		return s.Name == o.Name
	}
	a, b := *s, *o
	a.Pause, a.Cont, a.Clear, b.Pause, b.Cont, b.Clear = false, false, false, false, false, false
	return a.Info() == b.Info()
}

// NeedsSymbols says whether printing the histogram names addresses (.sym,
// .sym-offset and stacktrace keys).
func (s *Spec) NeedsSymbols() bool {
	for i := range s.Keys {
		if s.Keys[i].Mod == ModSym || s.Keys[i].Mod == ModSymOffset || s.Keys[i].Stack {
			return true
		}
	}
	return false
}

// HasStack says whether a key is the stacktrace (the hit's stack is walked).
func (s *Spec) HasStack() bool {
	for i := range s.Keys {
		if s.Keys[i].Stack {
			return true
		}
	}
	return false
}

// Var is a histogram variable: an expression kept in the entry of the hit's key.
type Var struct {
	Name string
	Expr Expr
}

// Operand is one term of an expression: a field of the event, a variable ($name,
// this histogram's or another's), or a number.
type Operand struct {
	Field *Field
	Ref   string // without the '$'
	Const uint64
	Minus bool // subtracted
}

// Expr is a sum of operands ("common_timestamp.usecs-$ts0").
type Expr []Operand

func (e Expr) String() string {
	var b strings.Builder
	for i, o := range e {
		if i > 0 {
			if o.Minus {
				b.WriteByte('-')
			} else {
				b.WriteByte('+')
			}
		}
		switch {
		case o.Field != nil:
			b.WriteString(o.Field.Text())
		case o.Ref != "":
			b.WriteString("$" + o.Ref)
		default:
			b.WriteString(strconv.FormatUint(o.Const, 10))
		}
	}
	return b.String()
}

// Action is a handler and its action. onmatch(GROUP.EVENT).trace(SYNTH,PARAMS): when
// a hit of this event finds the variables it references set by GROUP/EVENT's
// histogram, it generates the synthetic event SYNTH with PARAMS (variables as $name).
// onmax($VAR) and onchange($VAR): when the variable's value at a hit is above the
// value its entry keeps (onmax), or differs from it (onchange), the entry keeps it and
// the action runs: save(FIELDS) keeps the hit's fields in the entry, snapshot() takes
// the trace file's snapshot when the value also passes the histogram's global one,
// trace(SYNTH,PARAMS) generates the synthetic event.
type Action struct {
	Handler      string // "onmatch", "onmax", "onchange"
	Group, Event string // onmatch's event
	Var          string // onmax/onchange: the tracked variable, without its '$'
	Do           string // "trace", "save", "snapshot"
	Synth        string
	Params       []string // trace's parameters, or save's fields
}

// Tracks says whether the action is an onmax() or onchange() handler's.
func (a *Action) Tracks() bool { return a.Handler == "onmax" || a.Handler == "onchange" }

func (a Action) String() string {
	if !a.Tracks() {
		return fmt.Sprintf("onmatch(%s.%s).trace(%s,%s)", a.Group, a.Event, a.Synth, strings.Join(a.Params, ","))
	}
	args := strings.Join(a.Params, ",")
	if a.Do == "trace" {
		args = strings.Join(append([]string{a.Synth}, a.Params...), ",")
	}
	return fmt.Sprintf("%s($%s).%s(%s)", a.Handler, a.Var, a.Do, args)
}

// MaxSave bounds the fields of a save() action.
const MaxSave = 8

// Tracker is the histogram's onmax()/onchange() action that runs first (they all
// track one variable), nil for none.
func (s *Spec) Tracker() *Action {
	for i := range s.Actions {
		if s.Actions[i].Tracks() {
			return &s.Actions[i]
		}
	}
	return nil
}

// has says whether an onmax()/onchange() action does do.
func (s *Spec) has(do string) bool {
	for i := range s.Actions {
		if s.Actions[i].Tracks() && s.Actions[i].Do == do {
			return true
		}
	}
	return false
}

// Tracer is the histogram's action that generates a synthetic event, nil for none.
func (s *Spec) Tracer() *Action {
	for i := range s.Actions {
		if s.Actions[i].Do == "trace" {
			return &s.Actions[i]
		}
	}
	return nil
}

// checkActions checks the onmax()/onchange() actions against the variables (defined
// anywhere in the trigger) and resolves save()'s fields.
func (s *Spec) checkActions(fields []evfilter.Field) error {
	var first *Action
	traces, saves := 0, 0
	for i := range s.Actions {
		a := &s.Actions[i]
		if a.Do == "trace" {
			if traces++; traces > 1 {
				return errf(a.String(), "Can't have more than one trace action per hist (kprewrite)")
			}
		}
		if !a.Tracks() {
			continue
		}
		found := false
		for _, v := range s.Vars {
			found = found || v.Name == a.Var
		}
		if !found {
			return errf(a.Var, "Couldn't find onmax or onchange variable")
		}
		if first == nil {
			first = a
		} else if a.Handler != first.Handler || a.Var != first.Var {
			return errf(a.String(), "kprewrite tracks one variable with one handler per histogram ("+first.Handler+"($"+first.Var+"))")
		}
		if a.Do != "save" {
			continue
		}
		if saves++; saves > 1 {
			return errf(a.String(), "Can't have more than one save() action per hist")
		}
		if len(a.Params) > MaxSave {
			return errf(a.String(), "Too many action params")
		}
		for _, p := range a.Params {
			f, err := parseField(p, fields, true)
			if err != nil || f.Stack || f.Mod != ModNone {
				return errf(p, "Couldn't create field variable")
			}
			s.Save = append(s.Save, f)
		}
	}
	return nil
}

// Timestamps says whether the histogram reads common_timestamp (the kernel then
// shows its clock).
func (s *Spec) Timestamps() bool {
	for i := range s.Keys {
		if s.Keys[i].Src == SrcTimestamp {
			return true
		}
	}
	for i := range s.Vals {
		if s.Vals[i].Src == SrcTimestamp {
			return true
		}
	}
	for _, v := range s.Vars {
		for _, o := range v.Expr {
			if o.Field != nil && o.Field.Src == SrcTimestamp {
				return true
			}
		}
	}
	return false
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseExpr reads a variable's expression: operands joined by + and -.
func parseExpr(text string, fields []evfilter.Field) (Expr, error) {
	var e Expr
	rest, minus := text, false
	for {
		// ".sym-offset" is a modifier, not a subtraction
		k := -1
		for i := 0; i < len(rest); i++ {
			if (rest[i] == '+' || rest[i] == '-') && !strings.HasSuffix(rest[:i], ".sym") {
				k = i
				break
			}
		}
		term := rest
		if k >= 0 {
			term = rest[:k]
		}
		if term == "" {
			return nil, errf(text, "Malformed assignment")
		}
		if len(e) == MaxOperands {
			return nil, errf(text, "Too many subexpressions (3 max)")
		}
		o := Operand{Minus: minus}
		switch {
		case term[0] == '$':
			if !isIdent(term[1:]) {
				return nil, errf(term, "Couldn't find variable")
			}
			o.Ref = term[1:]
		case term[0] >= '0' && term[0] <= '9':
			v, errno := eventdef.Kstrtoul(term, 0)
			if errno != 0 {
				return nil, errf(term, "Expecting numeric literal")
			}
			o.Const = v
		default:
			f, err := parseField(term, fields, true)
			if err != nil {
				return nil, err
			}
			if f.String {
				return nil, errf(term, "String type can not be an operand in expression")
			}
			if f.Mod != ModNone && f.Mod != ModUsecs {
				return nil, errf(term, "Invalid field modifier")
			}
			o.Field = &f
		}
		e = append(e, o)
		if k < 0 {
			return e, nil
		}
		minus = rest[k] == '-'
		rest = rest[k+1:]
	}
}

// parseAction reads "onmatch(GROUP.EVENT).trace(SYNTH,PARAMS)" or its short form
// "onmatch(GROUP.EVENT).SYNTH(PARAMS)".
func parseAction(str string) (Action, error) {
	var a Action
	handler, rest, _ := strings.Cut(str, "(")
	a.Handler = handler
	switch handler {
	case "onmatch":
	case "onmax", "onchange":
		return parseTrack(str, a, rest)
	default:
		return a, errf(str, "No action found")
	}
	match, rest, ok := strings.Cut(rest, ")")
	if !ok {
		return a, errf(str, "No closing paren found")
	}
	g, ev, ok := strings.Cut(match, ".")
	if !ok || g == "" {
		return a, errf(match, "Missing subsystem")
	}
	if ev == "" || strings.Contains(ev, ".") {
		return a, errf(match, "Invalid subsystem or event name")
	}
	a.Group, a.Event = g, ev
	if !strings.HasPrefix(rest, ".") || !strings.HasSuffix(rest, ")") {
		return a, errf(str, "No closing paren found")
	}
	fn, params, ok := strings.Cut(rest[1:len(rest)-1], "(")
	if !ok || fn == "" {
		return a, errf(str, "No action found")
	}
	switch fn {
	case "save", "snapshot":
		return a, errf(str, "Handler doesn't support action")
	}
	return traceAction(str, a, fn, params)
}

// traceAction reads a trace action's "SYNTH(PARAMS)" or "trace(SYNTH,PARAMS)" (fn is
// the part before the parenthesis).
func traceAction(str string, a Action, fn, params string) (Action, error) {
	a.Do = "trace"
	ps := strings.Split(params, ",")
	if fn == "trace" {
		fn, ps = ps[0], ps[1:]
	}
	if !isIdent(fn) {
		return a, errf(str, "Invalid action param")
	}
	a.Synth = fn
	for _, p := range ps {
		p = strings.TrimSpace(p)
		if p == "" || !(isIdent(p) || p[0] == '$' && isIdent(p[1:])) {
			return a, errf(p, "Invalid action param")
		}
		a.Params = append(a.Params, p)
	}
	return a, nil
}

// parseTrack reads the rest of "onmax($VAR).ACTION(...)" or "onchange(...)" (rest
// follows the handler's parenthesis).
func parseTrack(str string, a Action, rest string) (Action, error) {
	v, rest, ok := strings.Cut(rest, ")")
	if !ok {
		return a, errf(str, "No closing paren found")
	}
	if !strings.HasPrefix(v, "$") {
		return a, errf(v, "For onmax(x) or onchange(x), x must be a variable")
	}
	if !isIdent(v[1:]) {
		return a, errf(v, "Couldn't find onmax or onchange variable")
	}
	a.Var = v[1:]
	if !strings.HasPrefix(rest, ".") {
		return a, errf(str, "No action found")
	}
	fn, params, ok := strings.Cut(rest[1:], "(")
	if !ok || fn == "" {
		return a, errf(str, "No action found")
	}
	if !strings.HasSuffix(params, ")") {
		return a, errf(params, "No closing paren found")
	}
	params = params[:len(params)-1]
	switch fn {
	case "save":
		a.Do = "save"
		if strings.TrimSpace(params) == "" {
			return a, errf(str, "No params found for save()")
		}
		for _, p := range strings.Split(params, ",") {
			p = strings.TrimSpace(p)
			if len(p) < 2 && !isIdent(p) {
				return a, errf(p, "Invalid action param")
			}
			a.Params = append(a.Params, p)
		}
		return a, nil
	case "snapshot":
		a.Do = "snapshot"
		if strings.TrimSpace(params) != "" {
			return a, errf(params, "Invalid action param")
		}
		return a, nil
	}
	return traceAction(str, a, fn, params)
}

// Synthetic is a synthetic event (the kernel's synthetic_events: "NAME TYPE FIELD;
// TYPE FIELD..."): an event no probe writes, generated by onmatch() actions, whose
// fields are each kept in 8 bytes.
type Synthetic struct {
	Name   string
	Types  []string
	Names  []string
	Signed []bool
	// ID is the synthetic event's id in the trace (records of it), 0 before the
	// rewrite gives it one; Disabled: rewritten disabled (--disable), its records off
	// until switched on.
	ID       uint32
	Disabled bool
	// Filter is its filter (an evfilter program on Fields, nil: none), as the kernel's
	// synthetic event's filter file: a record it refuses is not written (its
	// histograms count it all the same); FilterText is the expression.
	Filter     []byte
	FilterText string
}

var synthTypes = map[string]bool{
	"u64": false, "s64": true, "u32": false, "s32": true, "u16": false, "s16": true, "u8": false, "s8": true,
	"int": true, "unsigned int": false, "long": true, "unsigned long": false, "pid_t": true, "size_t": false,
	"unsigned long long": false, "long long": true, "bool": false,
}

// ParseSynthetic reads a synthetic event definition.
func ParseSynthetic(def string) (*Synthetic, error) {
	def = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(def), "s:"))
	name, rest, ok := strings.Cut(def, " ")
	if !ok || !isIdent(name) {
		return nil, fmt.Errorf("synthetic event %q: want 'NAME TYPE FIELD[; TYPE FIELD...]'", def)
	}
	s := &Synthetic{Name: name}
	for _, f := range strings.Split(rest, ";") {
		ws := strings.Fields(f)
		if len(ws) == 0 {
			continue
		}
		if len(ws) < 2 {
			return nil, fmt.Errorf("synthetic event %s: field %q: want TYPE NAME", name, strings.TrimSpace(f))
		}
		typ, fn := strings.Join(ws[:len(ws)-1], " "), ws[len(ws)-1]
		signed, ok := synthTypes[typ]
		if !ok {
			return nil, fmt.Errorf("synthetic event %s: field %s: type %q is not a number type kprewrite keeps (u64, s64, u32, s32, int, long, pid_t...)", name, fn, typ)
		}
		if !isIdent(fn) {
			return nil, fmt.Errorf("synthetic event %s: bad field name %q", name, fn)
		}
		s.Types, s.Names, s.Signed = append(s.Types, typ), append(s.Names, fn), append(s.Signed, signed)
	}
	if len(s.Names) == 0 || len(s.Names) > MaxVars {
		return nil, fmt.Errorf("synthetic event %s: %d fields; 1 to %d", name, len(s.Names), MaxVars)
	}
	return s, nil
}

// String is the definition as the kernel's synthetic_events file lists it.
func (s *Synthetic) String() string {
	parts := make([]string, len(s.Names))
	for i := range s.Names {
		parts[i] = s.Types[i] + " " + s.Names[i]
	}
	return s.Name + " " + strings.Join(parts, "; ")
}

// Fields are the synthetic event's fields as a filter or a hist trigger sees them:
// the common fields, then its own, each in 8 bytes.
func (s *Synthetic) Fields() []evfilter.Field {
	fs := evfilter.Fields(&eventdef.Probe{})
	for i, n := range s.Names {
		fs = append(fs, evfilter.Field{Name: n, Type: s.Types[i], Size: 8, Signed: s.Signed[i], Src: evfilter.SrcData, Off: 8 * i})
	}
	return fs
}

// synthFormats are a synthetic field type's size in bytes and print format, as the
// kernel's synth_field_size and synth_field_fmt give them.
var synthFormats = map[string]struct {
	size int
	fmt  string
}{
	"u64": {8, "%llu"}, "s64": {8, "%lld"}, "u32": {4, "%u"}, "s32": {4, "%d"}, "u16": {2, "%u"}, "s16": {2, "%d"},
	"u8": {1, "%u"}, "s8": {1, "%d"}, "int": {4, "%d"}, "unsigned int": {4, "%u"}, "long": {8, "%ld"},
	"unsigned long": {8, "%lu"}, "pid_t": {4, "%d"}, "size_t": {8, "%zu"}, "unsigned long long": {8, "%llu"},
	"long long": {8, "%lld"}, "bool": {1, "%d"},
}

// FormatFile renders the synthetic event's format file as the kernel's tracefs shows
// it (events/synthetic/NAME/format): the common fields, each field in a u64 slot of its
// own (offset 8 apart, size its type's), the print fmt.
func (s *Synthetic) FormatFile() string {
	var b strings.Builder
	eventdef.FormatFileHead(&b, s.Name, s.ID)
	var pf, args []string
	for i, n := range s.Names {
		f := synthFormats[s.Types[i]]
		eventdef.FormatField(&b, s.Types[i], n, 8+8*i, f.size, s.Signed[i])
		pf = append(pf, n+"="+f.fmt)
		args = append(args, "REC->"+n)
	}
	fmt.Fprintf(&b, "\nprint fmt: \"%s\", %s\n", strings.Join(pf, ", "), strings.Join(args, ", "))
	return b.String()
}
