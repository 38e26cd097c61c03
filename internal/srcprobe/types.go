package srcprobe

import (
	"debug/dwarf"
	"fmt"
	"strings"
)

// maxArrayLen is the kernel's MAX_ARRAY_LEN: the most elements a TYPE[N] fetches.
const maxArrayLen = 64

// strip removes typedefs and qualifiers.
func strip(t dwarf.Type) dwarf.Type {
	for i := 0; i < 64 && t != nil; i++ {
		switch x := t.(type) {
		case *dwarf.TypedefType:
			t = x.Type
		case *dwarf.QualType:
			t = x.Type
		default:
			return t
		}
	}
	return t
}

// scalarType is the kernel type of a value of type t (no arrays, no strings).
func scalarType(t dwarf.Type) (string, error) {
	switch x := strip(t).(type) {
	case nil:
		return "", fmt.Errorf("its type is unknown (give one: VAR:TYPE)")
	case *dwarf.BoolType:
		return sized("u", x.ByteSize)
	case *dwarf.CharType:
		return sized("s", x.ByteSize)
	case *dwarf.UcharType:
		return sized("u", x.ByteSize)
	case *dwarf.IntType:
		return sized("s", x.ByteSize)
	case *dwarf.UintType:
		return sized("u", x.ByteSize)
	case *dwarf.EnumType:
		kt, err := sized(enumPrefix(x), x.ByteSize)
		if err != nil {
			return "", err
		}
		return kt + enumTable(x), nil
	case *dwarf.PtrType:
		return "x64", nil
	case *dwarf.FloatType:
		switch x.ByteSize {
		case 4, 8:
			return fmt.Sprintf("f%d", 8*x.ByteSize), nil
		}
		return "", fmt.Errorf("it is a %d-byte %s, which no fetch type holds (give one: VAR:x64 reads its first 8 bytes)", x.ByteSize, x)
	case *dwarf.StructType:
		return "", fmt.Errorf("it is a %s %s: name a member (VAR.FIELD or VAR->FIELD)", x.Kind, x.StructName)
	case *dwarf.ArrayType:
		return "", fmt.Errorf("it is an array of arrays or of aggregates: index it (VAR[N])")
	case *dwarf.FuncType:
		return "", fmt.Errorf("it is a function")
	default:
		return "", fmt.Errorf("its type %s has no kernel fetch type (give one: VAR:TYPE)", t)
	}
}

// enumPrefix is the integer type prefix of an enum: signed if a value is negative.
func enumPrefix(x *dwarf.EnumType) string {
	for _, v := range x.Val {
		if v.Val < 0 {
			return "s"
		}
	}
	return "u"
}

// enumTable is the {NAME=VALUE,...} suffix that prints an enum's values by name
// ("" for an enum without values).
func enumTable(x *dwarf.EnumType) string {
	if len(x.Val) == 0 {
		return ""
	}
	var b strings.Builder
	seen := map[string]bool{}
	unsigned := enumPrefix(x) == "u"
	for _, v := range x.Val {
		if seen[v.Name] {
			continue
		}
		seen[v.Name] = true
		if b.Len() == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		val := v.Val
		if unsigned && x.ByteSize < 8 {
			val &= 1<<(8*x.ByteSize) - 1
		}
		fmt.Fprintf(&b, "%s=%d", v.Name, val)
	}
	return b.String() + "}"
}

// withCount makes an element type an array type: TYPE[N], before any enum table.
func withCount(et string, n int64) string {
	if i := strings.IndexByte(et, '{'); i >= 0 {
		return fmt.Sprintf("%s[%d]%s", et[:i], n, et[i:])
	}
	return fmt.Sprintf("%s[%d]", et, n)
}

func sized(prefix string, n int64) (string, error) {
	switch n {
	case 1, 2, 4, 8:
		return fmt.Sprintf("%s%d", prefix, 8*n), nil
	}
	return "", fmt.Errorf("a %d-byte integer, which the kernel's fetch types do not hold", n)
}

// isCharPtr says whether t points to a char type: a string.
func isCharPtr(t dwarf.Type) bool {
	p, ok := strip(t).(*dwarf.PtrType)
	return ok && isChar(p.Type)
}

func isChar(t dwarf.Type) bool {
	switch x := strip(t).(type) {
	case *dwarf.CharType:
		return x.ByteSize == 1
	case *dwarf.UcharType:
		return x.ByteSize == 1
	}
	return false
}

// typeName is how check --vars shows a type: as C declares it.
func typeName(t dwarf.Type) string {
	switch x := t.(type) {
	case nil:
		return "(unknown type)"
	case *dwarf.PtrType:
		if inner := typeName(x.Type); strings.HasSuffix(inner, "*") {
			return inner + "*"
		} else {
			return inner + " *"
		}
	case *dwarf.QualType:
		return x.Qual + " " + typeName(x.Type)
	case *dwarf.EnumType:
		return "enum " + x.EnumName
	case *dwarf.StructType:
		return x.Kind + " " + x.StructName
	case *dwarf.ArrayType:
		return fmt.Sprintf("%s[%d]", typeName(x.Type), x.Count)
	case *dwarf.TypedefType:
		return x.Name
	case *dwarf.FuncType:
		return "function"
	case *dwarf.VoidType:
		return "void"
	}
	return t.String()
}
