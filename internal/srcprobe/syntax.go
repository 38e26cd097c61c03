package srcprobe

import (
	"strconv"
	"strings"
)

// sourceExts are the file name endings that make SITE:N a source line.
var sourceExts = []string{".go", ".c", ".h", ".cc", ".cpp", ".cxx", ".c++", ".hh", ".hpp", ".hxx", ".C", ".H", ".S", ".s", ".i", ".ii", ".inc", ".def"}

// site is a parsed probe point.
type site struct {
	text string // as written
	// source forms
	fn   string // FUNC of FUNC:RELLINE and FUNC@FILE
	file string // FILE of FILE:LINE and FUNC@FILE
	line int    // RELLINE (with fn) or LINE
	rel  bool   // line is relative to fn's declaration
	// a kernel-form site (SYM[+OFFS], 0xADDR, LIB:...)
	raw bool
}

// parseSite classifies a probe point.
func parseSite(s string) site {
	st := site{text: s}
	base, lineText, hasLine := s, "", false
	if i := strings.LastIndexByte(s, ':'); i > 0 && isDecimal(s[i+1:]) {
		base, lineText, hasLine = s[:i], s[i+1:], true
	}
	line, _ := strconv.Atoi(lineText)
	if fn, file, ok := strings.Cut(base, "@"); ok && fn != "" && file != "" {
		st.fn, st.file = fn, file
		if hasLine {
			st.line, st.rel = line, true
		}
		return st
	}
	if !hasLine || strings.Contains(base, ".so") {
		st.raw = true
		return st
	}
	if isSourceFile(base) {
		st.file, st.line = base, line
		return st
	}
	if strings.ContainsAny(base, "/:") || !isIdent(base) && !isGoFuncName(base) {
		st.raw = true
		return st
	}
	st.fn, st.line, st.rel = base, line, true
	return st
}

func isSourceFile(s string) bool {
	for _, e := range sourceExts {
		if strings.HasSuffix(s, e) && len(s) > len(e) {
			return true
		}
	}
	return false
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isIdent(s string) bool { return s != "" && identEnd(s, 0) == len(s) }

// isGoFuncName says whether s is a Go function's name as its DWARF gives it:
// identifiers joined by dots, a pointer receiver in parentheses (main.greet,
// main.(*Server).Serve), so that FUNC:RELLINE takes it.
func isGoFuncName(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if q, ok := strings.CutPrefix(p, "(*"); ok {
			p, ok = strings.CutSuffix(q, ")")
			if !ok {
				return false
			}
		}
		if !isIdent(p) {
			return false
		}
	}
	return true
}

// access is one step of a variable chain.
type access struct {
	kind  byte // '>' (->FIELD), '.' (.FIELD), '[' ([N])
	field string
	index int64
}

// chain is a parsed source-level argument body: VAR followed by accesses.
type chain struct {
	name string
	path []access
}

// parseChain reads VAR(->F|.F|[N])*; ok is false for anything else.
func parseChain(s string) (chain, bool) {
	i := identEnd(s, 0)
	if i == 0 {
		return chain{}, false
	}
	c := chain{name: s[:i]}
	for i < len(s) {
		switch {
		case strings.HasPrefix(s[i:], "->"):
			j := identEnd(s, i+2)
			if j == i+2 {
				return chain{}, false
			}
			c.path = append(c.path, access{kind: '>', field: s[i+2 : j]})
			i = j
		case s[i] == '.':
			j := identEnd(s, i+1)
			if j == i+1 {
				return chain{}, false
			}
			c.path = append(c.path, access{kind: '.', field: s[i+1 : j]})
			i = j
		case s[i] == '[':
			k := strings.IndexByte(s[i:], ']')
			if k < 0 {
				return chain{}, false
			}
			n, err := strconv.ParseInt(s[i+1:i+k], 0, 64)
			if err != nil {
				return chain{}, false
			}
			c.path = append(c.path, access{kind: '[', index: n})
			i += k + 1
		default:
			return chain{}, false
		}
	}
	return c, true
}

func identEnd(s string, i int) int {
	j := i
	for j < len(s) {
		c := s[j]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > i && c >= '0' && c <= '9' {
			j++
			continue
		}
		break
	}
	return j
}

// argName is the name perf probe gives an unnamed chain: its last field, or the
// variable, with _N for each index.
func (c chain) argName() string {
	name := c.name
	for _, a := range c.path {
		switch a.kind {
		case '>', '.':
			name = a.field
		case '[':
			name += "_" + strconv.FormatInt(a.index, 10)
		}
	}
	return name
}

// srcArg is one argument of a definition.
type srcArg struct {
	text     string // as written
	name     string // NAME= when given
	body     string // without NAME= and :TYPE
	typ      string // :TYPE when given
	chain    chain
	isChain  bool
	keyword  string // "$params", "$vars", "$retval"
	position int    // 1-based, for the kernel's argN names of unnamed raw arguments
	// badName: NAME=BODY whose NAME is no C identifier ("var.1=@11"), a kernel-form
	// argument left for eventdef to refuse with the kernel's BAD_ARG_NAME and caret
	badName bool
}

// parseArg splits NAME=BODY:TYPE and classifies BODY.
func parseArg(s string, pos int) srcArg {
	a := srcArg{text: s, position: pos}
	body := s
	eq := strings.IndexByte(s, '=')
	if eq > 0 && isIdent(s[:eq]) {
		a.name, body = s[:eq], s[eq+1:]
	} else if eq > 0 && !strings.Contains(s[:eq], ":") { // not an enum table's '='
		a.name, body, a.badName = s[:eq], s[eq+1:], true
	}
	if c := strings.LastIndexByte(body, ':'); c > 0 {
		a.typ, body = body[c+1:], body[:c]
	}
	a.body = body
	if a.badName {
		return a
	}
	switch body {
	case "$params", "$arg*", "$vars", "$retval":
		a.keyword = body
		if body == "$arg*" {
			a.keyword = "$params"
		}
		return a
	}
	if len(body) > 0 && (body[0] == '_' || body[0] >= 'a' && body[0] <= 'z' || body[0] >= 'A' && body[0] <= 'Z') {
		a.chain, a.isChain = parseChain(body)
	}
	return a
}

// sourceLevel says whether the argument needs the debug information.
func (a srcArg) sourceLevel() bool {
	return a.isChain || a.keyword == "$params" || a.keyword == "$vars"
}
