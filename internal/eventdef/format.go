package eventdef

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// FormatOptions tune FormatArgsWith.
type FormatOptions struct {
	// Symbolize names the symbol holding a run-time address, for the
	// symbol and symstr types, as the kernel's %pS does. Without it, or
	// when it reports !ok, the address prints as 0x%lx, as %pS prints an
	// address it cannot name.
	Symbolize func(addr uint64) (name string, off, size uint64, ok bool)
}

// FormatArgs renders a record as the kernel's tracer prints the arguments
// of an event: " name=value" for each argument, in order. A record is what
// the probe's program (see Compile) stored at one hit.
func FormatArgs(p *Probe, record []byte) (string, error) {
	return FormatArgsWith(p, record, FormatOptions{})
}

// FormatArgsWith is FormatArgs with options.
func FormatArgsWith(p *Probe, record []byte, opt FormatOptions) (string, error) {
	var sb strings.Builder
	off := 0
	for i := range p.Args {
		a := &p.Args[i]
		size := a.SlotSize()
		if a.Size <= 0 || off+size > len(record) {
			return "", fmt.Errorf("format %s/%s: record of %d bytes too short for argument %s", p.Group, p.Event, len(record), a.Name)
		}
		sb.WriteByte(' ')
		sb.WriteString(a.Name)
		sb.WriteByte('=')
		if a.Count > 0 {
			sb.WriteByte('{')
		}
		n := a.Count
		if n == 0 {
			n = 1
		}
		for j := 0; j < n; j++ {
			if err := formatValue(&sb, a, record, off+j*a.Size, opt); err != nil {
				return "", fmt.Errorf("format %s/%s argument %s: %w", p.Group, p.Event, a.Name, err)
			}
			if a.Count > 0 {
				if j == n-1 {
					sb.WriteByte('}')
				} else {
					sb.WriteByte(',')
				}
			}
		}
		off += size
	}
	return sb.String(), nil
}

// element reads the element of a at rec[off:], zero-extended.
func element(a *Arg, rec []byte, off int) uint64 {
	le := binary.LittleEndian
	b := rec[off : off+a.Size]
	switch a.Size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(le.Uint16(b))
	case 4:
		return uint64(le.Uint32(b))
	case 8:
		return le.Uint64(b)
	}
	return 0
}

// signExtend reads u as a signed number of size bytes.
func signExtend(u uint64, size int) int64 {
	shift := 64 - 8*uint(size)
	return int64(u<<shift) >> shift
}

// recordString returns the bytes of a string element (u: length << 16 | offset in
// rec), up to its NUL; ok is false for the kernel's (fault).
func recordString(u uint64, rec []byte) (s []byte, ok bool, err error) {
	l := int(u >> 16)
	o := int(u & 0xffff)
	if l == 0 {
		return nil, false, nil
	}
	if o+l > len(rec) {
		return nil, false, fmt.Errorf("string at %d+%d outside the %d-byte record", o, l, len(rec))
	}
	s = rec[o : o+l]
	if i := indexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return s, true, nil
}

func formatValue(sb *strings.Builder, a *Arg, rec []byte, off int, opt FormatOptions) error {
	u := element(a, rec, off)
	if name, ok := a.EnumName(u); ok && a.Kind != KindGoErr {
		sb.WriteString(name)
		return nil
	}
	switch a.Kind {
	case KindUnsigned:
		sb.WriteString(strconv.FormatUint(u, 10))
	case KindSigned:
		sb.WriteString(strconv.FormatInt(signExtend(u, a.Size), 10))
	case KindHex:
		sb.WriteString(hexStr(u))
	case KindChar:
		// '%c' writes the byte as it is, NUL and high bytes included.
		sb.WriteByte('\'')
		sb.WriteByte(byte(u))
		sb.WriteByte('\'')
	case KindString, KindUString:
		s, ok, err := recordString(u, rec)
		if err != nil {
			return err
		}
		if !ok {
			sb.WriteString("(fault)")
			return nil
		}
		sb.WriteByte('"')
		sb.Write(s)
		sb.WriteByte('"')
	case KindGoErr:
		text, msg, ok, err := goErrText(a, u, rec)
		switch {
		case err != nil:
			return err
		case !ok:
			sb.WriteString("(fault)")
		case msg:
			sb.WriteString(`"` + text + `"`)
		default:
			sb.WriteString(text)
		}
	case KindSymbol:
		sb.WriteString(symbolize(u, opt))
	case KindSymstr:
		sb.WriteByte('"')
		sb.WriteString(symbolize(u, opt))
		sb.WriteByte('"')
	case KindFloat:
		sb.WriteString(formatFloat(u, a.Size))
	default:
		return fmt.Errorf("unknown type kind %d", a.Kind)
	}
	return nil
}

// formatFloat prints the bits of a float of size bytes as the shortest decimal that
// reads back as the same value (inf, -inf and nan as C's printf spells them).
func formatFloat(u uint64, size int) string {
	var f float64
	bits := 64
	if size == 4 {
		f, bits = float64(math.Float32frombits(uint32(u))), 32
	} else {
		f = math.Float64frombits(u)
	}
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// floatValue is a float element as a Go value.
func floatValue(u uint64, size int) float64 {
	if size == 4 {
		return float64(math.Float32frombits(uint32(u)))
	}
	return math.Float64frombits(u)
}

// symbolize prints an address as %pS: sym+0xoff/0xsize.
func symbolize(addr uint64, opt FormatOptions) string {
	if opt.Symbolize != nil {
		if name, off, size, ok := opt.Symbolize(addr); ok {
			return name + "+" + hexStr(off) + "/" + hexStr(size)
		}
	}
	return hexStr(addr)
}

// FormatHead renders the part of a trace line after the event name, as
// the kernel's uprobe tracer does: "(0x401126)" for a probe at run-time
// address probeAddr, and "(0x40116f <- 0x401126)" for a return probe, with
// retAddr the address returned to and probeAddr the function's.
func FormatHead(p *Probe, probeAddr, retAddr uint64) string {
	if p.Return {
		return "(" + hexStr(retAddr) + " <- " + hexStr(probeAddr) + ")"
	}
	return "(" + hexStr(probeAddr) + ")"
}

// FormatEvent renders "EVENT: HEAD ARGS", the text the kernel prints after
// a trace line's task, CPU, flags and timestamp columns.
func FormatEvent(p *Probe, probeAddr, retAddr uint64, record []byte, opt FormatOptions) (string, error) {
	args, err := FormatArgsWith(p, record, opt)
	if err != nil {
		return "", err
	}
	return p.Event + ": " + FormatHead(p, probeAddr, retAddr) + args, nil
}
