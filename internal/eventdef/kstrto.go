package eventdef

import (
	"strconv"
	"syscall"
)

// Number parsing that mirrors the kernel's kstrto*() and simple_strtoul(),
// so that exactly the spellings the kernel accepts are accepted here
// ("0x" hex, leading "0" octal, optional '+', no trailing garbage).

// fixupRadix is _parse_integer_fixup_radix.
func fixupRadix(s string, base int) (string, int) {
	if base == 0 {
		if len(s) > 0 && s[0] == '0' {
			if len(s) > 2 && lower(s[1]) == 'x' && isXDigit(s[2]) {
				base = 16
			} else {
				base = 8
			}
		} else {
			base = 10
		}
	}
	if base == 16 && len(s) >= 2 && s[0] == '0' && lower(s[1]) == 'x' {
		s = s[2:]
	}
	return s, base
}

// parseDigits is _parse_integer: it returns the value (wrapping on
// overflow), the number of digits consumed and whether it overflowed.
func parseDigits(s string, base int) (v uint64, n int, overflow bool) {
	for n < len(s) {
		c := lower(s[n])
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return v, n, overflow
		}
		if d >= uint64(base) {
			return v, n, overflow
		}
		if v > (^uint64(0)-d)/uint64(base) {
			overflow = true
		}
		v = v*uint64(base) + d
		n++
	}
	return v, n, overflow
}

// kstrtoullRaw is _kstrtoull (no leading '+'), with the errno it returns.
func kstrtoullRaw(s string, base int) (uint64, syscall.Errno) {
	s, base = fixupRadix(s, base)
	v, n, ovf := parseDigits(s, base)
	switch {
	case ovf:
		return 0, syscall.ERANGE
	case n == 0:
		return 0, syscall.EINVAL
	}
	s = s[n:]
	if len(s) > 0 && s[0] == '\n' {
		s = s[1:]
	}
	if s != "" {
		return 0, syscall.EINVAL
	}
	return v, 0
}

// Kstrtoul is the kernel's kstrtoul(s, base) with its error, as a write into a control
// file returns it: ERANGE for a value past 64 bits, EINVAL for a spelling it refuses.
func Kstrtoul(s string, base int) (uint64, syscall.Errno) {
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
	}
	return kstrtoullRaw(s, base)
}

// kstrtoul is kstrtoul()/kstrtoull() on a 64-bit kernel.
func kstrtoul(s string, base int) (uint64, bool) {
	v, errno := Kstrtoul(s, base)
	return v, errno == 0
}

// kstrtouint is kstrtouint().
func kstrtouint(s string, base int) (uint32, bool) {
	v, ok := kstrtoul(s, base)
	if !ok || v > 0xffffffff {
		return 0, false
	}
	return uint32(v), true
}

// kstrtol is kstrtol()/kstrtoll() on a 64-bit kernel.
func kstrtol(s string, base int) (int64, bool) {
	if len(s) > 0 && s[0] == '-' {
		v, errno := kstrtoullRaw(s[1:], base)
		if errno != 0 || int64(-v) > 0 {
			return 0, false
		}
		return int64(-v), true
	}
	v, ok := kstrtoul(s, base)
	if !ok || int64(v) < 0 {
		return 0, false
	}
	return int64(v), true
}

// simpleStrtoul is simple_strtoul(): it never fails, it returns the value
// and the unparsed tail.
func simpleStrtoul(s string, base int) (uint64, string) {
	s, base = fixupRadix(s, base)
	v, n, _ := parseDigits(s, base)
	return v, s[n:]
}

func lower(c byte) byte { return c | 0x20 }

func isXDigit(c byte) bool {
	return (c >= '0' && c <= '9') || (lower(c) >= 'a' && lower(c) <= 'f')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isAlpha(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// isSpace is the kernel's isspace() for the bytes argv_split() splits on.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// isGoodName is the kernel's is_good_name(): a C identifier.
func isGoodName(s string) bool {
	if s == "" || (!isAlpha(s[0]) && s[0] != '_') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlpha(c) && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

// isGoodSystemName is the kernel's rule for group names: like a C
// identifier, but '-' is allowed anywhere (checked against the oracle:
// "-kpw" and "kpw-" are accepted, "1kpw" and "kpw.x" are not).
func isGoodSystemName(s string) bool {
	if s == "" || (!isAlpha(s[0]) && s[0] != '_' && s[0] != '-') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlpha(c) && !isDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func hexStr(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// Kstrtoull is the kernel's kstrtoull(s, 0): decimal, 0x hex or 0 octal, a whole
// string, no overflow. Event filters parse their unsigned values with it.
func Kstrtoull(s string) (uint64, bool) { return kstrtoul(s, 0) }

// Kstrtoll is the kernel's kstrtoll(s, 0), for the values of signed fields.
func Kstrtoll(s string) (int64, bool) { return kstrtol(s, 0) }
