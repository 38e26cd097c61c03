package eventdef

import (
	"fmt"
	"math"
)

// Value is one argument of a record as a Go value.
type Value struct {
	Name string
	// Value is uint64 for the unsigned, hex, bitfield and symbol types, int64 for the
	// signed ones, float32 for f32 and float64 for f64, byte for char, string for string and
	// ustring (nil when the read faulted: the kernel prints "(fault)"), for symstr
	// (the %pS text) and for a value its enum table names, and []any of those for an
	// array. A float that JSON cannot hold (NaN, infinities) is its text.
	Value any
}

// DecodeArgs returns the arguments of a record as Go values, in definition order: the
// same fields FormatArgsWith prints, undone from their text.
func DecodeArgs(p *Probe, record []byte, opt FormatOptions) ([]Value, error) {
	out := make([]Value, 0, len(p.Args))
	off := 0
	for i := range p.Args {
		a := &p.Args[i]
		size := a.SlotSize()
		if a.Size <= 0 || off+size > len(record) {
			return nil, fmt.Errorf("decode %s/%s: record of %d bytes too short for argument %s", p.Group, p.Event, len(record), a.Name)
		}
		if a.Count == 0 {
			v, err := decodeValue(a, record, off, opt)
			if err != nil {
				return nil, fmt.Errorf("decode %s/%s argument %s: %w", p.Group, p.Event, a.Name, err)
			}
			out = append(out, Value{Name: a.Name, Value: v})
		} else {
			arr := make([]any, a.Count)
			for j := range arr {
				v, err := decodeValue(a, record, off+j*a.Size, opt)
				if err != nil {
					return nil, fmt.Errorf("decode %s/%s argument %s: %w", p.Group, p.Event, a.Name, err)
				}
				arr[j] = v
			}
			out = append(out, Value{Name: a.Name, Value: arr})
		}
		off += size
	}
	return out, nil
}

func decodeValue(a *Arg, rec []byte, off int, opt FormatOptions) (any, error) {
	u := element(a, rec, off)
	if a.Kind == KindGoErr {
		text, _, ok, err := goErrText(a, u, rec)
		if err != nil || !ok {
			return nil, err
		}
		return text, nil
	}
	if name, ok := a.EnumName(u); ok {
		return name, nil
	}
	switch a.Kind {
	case KindFloat:
		f := floatValue(u, a.Size)
		switch {
		case math.IsNaN(f) || math.IsInf(f, 0):
			return formatFloat(u, a.Size), nil
		case a.Size == 4:
			return float32(f), nil
		}
		return f, nil
	case KindUnsigned, KindHex, KindSymbol:
		return u, nil
	case KindSigned:
		return signExtend(u, a.Size), nil
	case KindChar:
		return byte(u), nil
	case KindString, KindUString:
		s, ok, err := recordString(u, rec)
		if err != nil || !ok {
			return nil, err
		}
		return string(s), nil
	case KindSymstr:
		return symbolize(u, opt), nil
	}
	return nil, fmt.Errorf("unknown type kind %d", a.Kind)
}
