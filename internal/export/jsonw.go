package export

import (
	"strconv"
	"unicode/utf8"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString[S string | []byte](b []byte, s S) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&15])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && n == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += n
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigit = "0123456789abcdef"

// appendMicros appends ns as microseconds with three decimals (the Trace Event
// Format's unit, exact to the nanosecond).
func appendMicros(b []byte, ns uint64) []byte {
	b = strconv.AppendUint(b, ns/1000, 10)
	f := ns % 1000
	return append(b, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
}

// maxExact is the largest integer a JavaScript number holds exactly: larger unsigned
// values are written as hex strings where JavaScript reads them (the Trace Event
// Format).
const maxExact = 1<<53 - 1

// appendValue appends a decoded field: numbers, strings, null for a read that faulted,
// arrays. With exactOnly, integers beyond 2^53 become hex strings.
func appendValue(b []byte, v any, exactOnly bool) []byte {
	switch v := v.(type) {
	case uint64:
		if exactOnly && v > maxExact {
			b = append(b, `"0x`...)
			b = strconv.AppendUint(b, v, 16)
			return append(b, '"')
		}
		return strconv.AppendUint(b, v, 10)
	case int64:
		if exactOnly && (v > maxExact || v < -maxExact) {
			return strconv.AppendQuote(b, strconv.FormatInt(v, 10))
		}
		return strconv.AppendInt(b, v, 10)
	case byte:
		return strconv.AppendUint(b, uint64(v), 10)
	case float32:
		return strconv.AppendFloat(b, float64(v), 'g', -1, 32)
	case float64:
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	case string:
		return appendString(b, v)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, e, exactOnly)
		}
		return append(b, ']')
	case nil:
		return append(b, "null"...)
	}
	return append(b, "null"...)
}

// appendFields appends the fields as the members of a JSON object (without braces).
func appendFields(b []byte, fields []eventdef.Value, exactOnly bool) []byte {
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, f.Name)
		b = append(b, ':')
		b = appendValue(b, f.Value, exactOnly)
	}
	return b
}
