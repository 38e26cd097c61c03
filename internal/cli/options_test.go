package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestHelpOptions: every command's -h lists its options in the usage line's syntax
// (--name for a long one, -x for a letter), and its usage line names each option (or,
// for record, says it takes rewrite's options, which rewrite's usage line names).
func TestHelpOptions(t *testing.T) {
	opt := regexp.MustCompile(`^  (-+)([A-Za-z0-9-]+)`)
	for _, c := range commands() {
		var out bytes.Buffer
		Main([]string{c.name, "-h"}, &out, &out)
		text := out.String()
		synopsis, _, _ := strings.Cut(text, "\n")
		if !strings.HasPrefix(synopsis, "usage: kprewrite "+c.name) {
			continue // (a command without flags)
		}
		for _, l := range strings.Split(text, "\n") {
			m := opt.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			dash, name := m[1], m[2]
			if want := map[bool]string{true: "-", false: "--"}[len(name) == 1]; dash != want {
				t.Errorf("%s -h: option %q: want %s%s", c.name, l, want, name)
			}
			if !strings.Contains(synopsis, dash+name) && !strings.Contains(synopsis, "[rewrite options]") {
				t.Errorf("%s: the usage line %q does not name %s%s", c.name, synopsis, dash, name)
			}
		}
	}
}
