package srcprobe

import (
	"debug/dwarf"
	"fmt"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/internal/debuginfo"
)

// An error (Go's interface error) is traced by its message where its dynamic type
// keeps the message in memory, as a string or pieces of strings, so that no Go code
// has to run: the goerr type (internal/eventdef, goerr.go), whose table names every
// dynamic type DynTypes knows and gives these types a recipe, each checked against
// the type's layout in DWARF (a type whose fields differ gets none, and prints by
// its name).
var goErrRecipes = map[string]func(in *debuginfo.Info) string{
	"*errors.errorString": func(in *debuginfo.Info) string { return strFieldRecipe(in, "errors.errorString", "s") },
	"*fmt.wrapError":      func(in *debuginfo.Info) string { return strFieldRecipe(in, "fmt.wrapError", "msg") },
	"*fmt.wrapErrors":     func(in *debuginfo.Info) string { return strFieldRecipe(in, "fmt.wrapErrors", "msg") },
	"runtime.plainError": func(in *debuginfo.Info) string { // type plainError string: a string's layout
		if st, ok := strip(in.GoType("runtime.plainError")).(*dwarf.StructType); ok && fieldNames(st) == "str,len" {
			return "/str/0"
		}
		return ""
	},
	"*io/fs.PathError":           pathRecipe,
	"*os.SyscallError":           syscallRecipe,
	"*encoding/json.SyntaxError": func(in *debuginfo.Info) string { return strFieldRecipe(in, "encoding/json.SyntaxError", "msg") },
	"syscall.Errno":              errnoRecipe,
}

// strFieldRecipe reads the string field of the struct typ (the error is a pointer
// to it).
func strFieldRecipe(in *debuginfo.Info, typ, field string) string {
	if f := goField(in, typ, field); f != nil && kindOf(f.Type) == goString {
		return fmt.Sprintf("/str/%d", f.ByteOffset)
	}
	return ""
}

// pathRecipe is *fs.PathError's: Op + " " + Path + ": " + Err.Error(), Err right
// after Path.
func pathRecipe(in *debuginfo.Info) string {
	op, path, err := goField(in, "io/fs.PathError", "Op"), goField(in, "io/fs.PathError", "Path"), goField(in, "io/fs.PathError", "Err")
	if op == nil || path == nil || err == nil || kindOf(op.Type) != goString || kindOf(path.Type) != goString ||
		kindOf(err.Type) != goIface || err.ByteOffset != path.ByteOffset+16 {
		return ""
	}
	return fmt.Sprintf("/path/%d/%d", op.ByteOffset, path.ByteOffset)
}

// syscallRecipe is *os.SyscallError's: Syscall + ": " + Err.Error().
func syscallRecipe(in *debuginfo.Info) string {
	sc, err := goField(in, "os.SyscallError", "Syscall"), goField(in, "os.SyscallError", "Err")
	if sc == nil || err == nil || kindOf(sc.Type) != goString || kindOf(err.Type) != goIface {
		return ""
	}
	return fmt.Sprintf("/wrap/%d/%d", sc.ByteOffset, err.ByteOffset)
}

// errnoRecipe is syscall.Errno's: its text in syscall's table of strings (the
// variable syscall.errors), else errno N.
func errnoRecipe(in *debuginfo.Info) string {
	t := in.GoType("syscall.Errno")
	addr, size, ok := in.DataObject("syscall.errors")
	if t == nil || t.Size() != 8 || !ok || size == 0 || size%16 != 0 {
		return ""
	}
	return fmt.Sprintf("/errno/%#x/%d", addr, size/16)
}

// goField is the field of the Go struct type typ, nil without one.
func goField(in *debuginfo.Info, typ, field string) *dwarf.StructField {
	st, ok := strip(in.GoType(typ)).(*dwarf.StructType)
	if !ok {
		return nil
	}
	for _, f := range st.Field {
		if f.Name == field {
			return f
		}
	}
	return nil
}

// errTable is goerr's table for the interface type t: its dynamic types by name,
// with their recipes if t is error. Only errors, and in a position-independent
// program every interface with methods, are read as goerr (by link-time addresses,
// @image: an enum table cannot name a word the load bias moves); false for the
// others, which print as dynTable says.
func (cx *fetchCtx) errTable(t dwarf.Type) (string, bool) {
	td, ok := t.(*dwarf.TypedefType)
	if !ok || cx.in == nil || td.Name != "error" && !(cx.in.PIE() && kindOf(t) == goIface) {
		return "", false
	}
	key := "goerr:" + td.Name
	if tb, ok := cx.tables[key]; ok {
		return tb, tb != ""
	}
	names, err := cx.in.LinkedDynTypes(td.Name)
	if err != nil || len(names) == 0 {
		cx.tables[key] = ""
		return "", false
	}
	addrs := make([]uint64, 0, len(names))
	for a := range names {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	var b strings.Builder
	b.WriteString("{")
	if cx.in.PIE() {
		b.WriteString("@image,")
	}
	b.WriteString("nil=0")
	for _, a := range addrs {
		fmt.Fprintf(&b, ",%s=%#x", names[a], a)
		if r := goErrRecipes[names[a]]; r != nil && td.Name == "error" {
			b.WriteString(r(cx.in))
		}
	}
	tb := b.String() + "}"
	cx.tables[key] = tb
	return tb, true
}

// goErrBody is goerr's body: the type word's fetch, then the data word's.
func goErrBody(p place, sym symbolizer) (string, error) {
	typ, err := dynTypeBody(p, sym)
	if err != nil {
		return "", err
	}
	data, err := p.wordBody(8, sym)
	if err != nil {
		return "", err
	}
	return typ + "," + data, nil
}
