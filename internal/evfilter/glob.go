package evfilter

// globMatch is the kernel's glob_match (lib/glob.c), like !fnmatch(pat, str, 0):
// ? * [class] [!class] and \ escapes; an unclosed [ is literal. Both are C strings:
// bytes past the end read as NUL. One level of backtracking, at most quadratic.
func globMatch(pat, str []byte) bool {
	at := func(b []byte, i int) byte {
		if i < len(b) {
			return b[i]
		}
		return 0
	}
	p, s := 0, 0
	backPat, backStr := -1, 0
	for {
		c := at(str, s)
		s++
		d := at(pat, p)
		p++
		switch d {
		case '?':
			if c == 0 {
				return false
			}
			continue
		case '*':
			if at(pat, p) == 0 {
				return true
			}
			backPat = p
			s--
			backStr = s
			continue
		case '[':
			if c == 0 {
				return false
			}
			match, inverted := false, at(pat, p) == '!'
			class := p
			if inverted {
				class++
			}
			a := at(pat, class)
			class++
			malformed := false
			for {
				b := a
				if a == 0 {
					malformed = true
					break
				}
				if at(pat, class) == '-' && at(pat, class+1) != ']' {
					b = at(pat, class+1)
					if b == 0 {
						malformed = true
						break
					}
					class += 2
				}
				if a <= c && c <= b {
					match = true
				}
				a = at(pat, class)
				class++
				if a == ']' {
					break
				}
			}
			if !malformed {
				if match == inverted {
					break // backtrack
				}
				p = class
				continue
			}
			// an unclosed class: the '[' is a literal
			if c == d {
				continue
			}
		case '\\':
			d = at(pat, p)
			p++
			fallthrough
		default:
			if c == d {
				if d == 0 {
					return true
				}
				continue
			}
		}
		// backtrack
		if c == 0 || backPat < 0 {
			return false
		}
		p = backPat
		backStr++
		s = backStr
	}
}
