package eventdef

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatFile renders the event's format file as the kernel's tracefs shows it for a
// kprobe or uprobe event (events/GROUP/EVENT/format): its name and id, the common
// fields, the probe's fields at the offsets the kernel's ring buffer gives them (no
// padding, strings as 4-byte __data_loc words), and the print fmt with its
// arguments. Tools that read format files (trace-cmd, perf script, libtraceevent)
// find the fields they expect. symbol and symstr, which the uprobe tracer refuses,
// are described as kprobes do: an unsigned long printed with %pS.
func FormatFile(p *Probe, id uint32) string {
	var b strings.Builder
	FormatFileHead(&b, p.Event, id)
	field := func(typ, name string, off, size int, signed bool) { FormatField(&b, typ, name, off, size, signed) }

	off := 8
	var pf []string // the print fmt, then its arguments
	var pargs []string
	if p.Return {
		field("unsigned long", "__probe_func", off, 8, false)
		field("unsigned long", "__probe_ret_ip", off+8, 8, false)
		off += 16
		pf = append(pf, "(%lx <- %lx)")
		pargs = append(pargs, "REC->__probe_func", "REC->__probe_ret_ip")
	} else {
		field("unsigned long", "__probe_ip", off, 8, false)
		off += 8
		pf = append(pf, "(%lx)")
		pargs = append(pargs, "REC->__probe_ip")
	}
	for i := range p.Args {
		a := &p.Args[i]
		typ, esize, str := FieldType(a)
		n := max(a.Count, 1)
		name := a.Name
		switch {
		case str && a.Count > 0:
			typ += fmt.Sprintf("[%d]", a.Count)
		case a.Count > 0:
			name += "[]"
		}
		field(typ, name, off, esize*n, str || a.Kind == KindSigned)
		off += esize * n

		f := printFmt(a)
		elems := make([]string, n)
		for j := range elems {
			ref := a.Name
			if a.Count > 0 {
				ref = fmt.Sprintf("%s[%d]", a.Name, j)
			}
			switch {
			case str:
				pargs = append(pargs, "__get_str("+ref+")")
			case len(a.Enum) > 0:
				pargs = append(pargs, printSymbolic(a, "REC->"+ref))
			default:
				pargs = append(pargs, "REC->"+ref)
			}
			elems[j] = f
		}
		v := elems[0]
		if a.Count > 0 {
			v = "{" + strings.Join(elems, ",") + "}"
		}
		pf = append(pf, a.Name+"="+v)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "print fmt: \"%s\", %s\n", strings.ReplaceAll(strings.Join(pf, " "), `"`, `\"`), strings.Join(pargs, ", "))
	return b.String()
}

// FieldType is the kernel's type name of an argument's field, the size of one
// element in the kernel's record, and whether it is a string (a __data_loc word).
func FieldType(a *Arg) (string, int, bool) {
	switch a.Kind {
	case KindString, KindUString, KindSymstr, KindGoErr:
		if a.Kind == KindSymstr {
			return "unsigned long", 8, false
		}
		return "__data_loc char[]", 4, true
	case KindChar:
		return "u8", 1, false
	case KindSymbol:
		return "u64", 8, false
	case KindHex:
		return "u" + strings.TrimPrefix(a.Type, "x"), a.Size, false
	case KindFloat:
		if a.Size == 4 {
			return "float", 4, false
		}
		return "double", 8, false
	}
	return a.Type, a.Size, false // u*, s*, and a bitfield's container
}

// printSymbolic is an enum field's print argument, as TRACE_EVENT writes one with
// __print_symbolic (which prints a value without a name in hex).
func printSymbolic(a *Arg, ref string) string {
	var b strings.Builder
	b.WriteString("__print_symbolic(" + ref)
	for _, e := range a.Enum {
		v := strconv.FormatUint(e.Value, 10)
		if a.Kind == KindSigned {
			v = strconv.FormatInt(signExtend(e.Value, a.Size), 10)
		}
		fmt.Fprintf(&b, ", { %s, \"%s\" }", v, e.Name)
	}
	return b.String() + ")"
}

// printFmt is the kernel's print format of one element of the argument.
func printFmt(a *Arg) string {
	wide := a.Size == 8
	if len(a.Enum) > 0 && a.Kind != KindGoErr {
		return "%s"
	}
	switch a.Kind {
	case KindFloat:
		return "%g"
	case KindSigned:
		if wide {
			return "%Ld"
		}
		return "%d"
	case KindUnsigned:
		if wide {
			return "%Lu"
		}
		return "%u"
	case KindHex:
		if wide {
			return "0x%Lx"
		}
		return "0x%x"
	case KindChar:
		return "'%c'"
	case KindSymbol:
		return "%pS"
	case KindSymstr:
		return `"%pS"`
	}
	return `"%s"`
}

// FormatFileHead writes a format file's name, ID and common fields (every event's, the
// kernel's trace_entry), then the blank line before the event's own fields.
func FormatFileHead(b *strings.Builder, name string, id uint32) {
	fmt.Fprintf(b, "name: %s\nID: %d\nformat:\n", name, id)
	FormatField(b, "unsigned short", "common_type", 0, 2, false)
	FormatField(b, "unsigned char", "common_flags", 2, 1, false)
	FormatField(b, "unsigned char", "common_preempt_count", 3, 1, false)
	FormatField(b, "int", "common_pid", 4, 4, true)
	b.WriteString("\n")
}

// FormatField writes one field line of a format file.
func FormatField(b *strings.Builder, typ, name string, off, size int, signed bool) {
	s := 0
	if signed {
		s = 1
	}
	fmt.Fprintf(b, "\tfield:%s %s;\toffset:%d;\tsize:%d;\tsigned:%d;\n", typ, name, off, size, s)
}
