package eventdef

import (
	"slices"
	"strconv"
	"strings"
)

// String renders the probe as the kernel lists it in its events file:
// "p:GRP/EVENT SYM+OFFS NAME=BODY...", "r16:..." with a maxactive, or
// "-:GRP/EVENT" for a deletion.
func (p *Probe) String() string {
	var sb strings.Builder
	switch {
	case p.Delete:
		s := "-:" + p.Event
		if p.Group != "" {
			s = "-:" + p.Group + "/" + p.Event
		}
		return strings.Join(append([]string{s}, p.Match...), " ")
	case p.Return:
		sb.WriteByte('r')
		if p.MaxActive > 0 {
			sb.WriteString(strconv.Itoa(p.MaxActive))
		}
	default:
		sb.WriteByte('p')
	}
	sb.WriteString(":" + p.Group + "/" + p.Event + " ")
	if p.Lib != "" {
		sb.WriteString(p.Lib + ":")
	}
	if p.Symbol != "" {
		sb.WriteString(p.Symbol + "+" + strconv.FormatUint(p.Offset, 10))
	} else {
		sb.WriteString(hexStr(p.Addr))
	}
	p.writeArgs(&sb)
	return sb.String()
}

func (p *Probe) writeArgs(sb *strings.Builder) {
	for i := range p.Args {
		sb.WriteString(" " + p.Args[i].Name + "=" + p.Args[i].Body)
	}
}

// UprobeDefinition renders the probe for the kernel's uprobe_events, with
// the probe point given as a file path and file offset. It lets tests use
// the kernel's uprobe tracer as an oracle for the same definition.
func (p *Probe) UprobeDefinition(path string, fileOffset uint64) string {
	var sb strings.Builder
	if p.Delete {
		return p.String()
	}
	if p.Return {
		sb.WriteByte('r')
	} else {
		sb.WriteByte('p')
	}
	sb.WriteString(":" + p.Group + "/" + p.Event + " " + path + ":" + hexStr(fileOffset))
	p.writeArgs(&sb)
	return sb.String()
}

// Set is a list of definitions read as the kernel reads writes to its events file:
// "-:" definitions delete probes defined earlier (see Add), and a definition reusing
// an event name adds a probe point to that event (a multi-probe event) when its kind
// and arguments agree, as the kernel's append_trace_kprobe() requires; otherwise the
// kernel's DIFF_PROBE_TYPE, DIFF_ARG_TYPE or SAME_PROBE, at its caret.
type Set struct {
	Probes []*Probe // the probes left, in order
	// byEvent indexes Probes by GROUP/EVENT (a set of node's 78,000 definitions was
	// quadratic without it)
	byEvent map[[2]string][]*Probe
}

// Add parses def and applies it to the set. A deletion returns the probes it removed:
// as the kernel's dyn_event_release() with trace_kprobe_match(), "-:GRP/EVENT" removes
// every probe of the event, "-:EVENT" the event in any group, "-:GRP/" every event of
// the group, and words after the event remove only the probes whose point and leading
// arguments the kernel would write back as those words ("-:GRP/EVENT SYM" removes one
// probe of a multi-probe event, the event going with its last probe; see Match). None
// matched is ErrNoSuchEvent (the kernel's ENOENT).
func (s *Set) Add(def string) (p *Probe, removed []*Probe, err error) {
	p, err = Parse(def)
	if err != nil {
		return nil, nil, err
	}
	if s.byEvent == nil {
		s.byEvent = map[[2]string][]*Probe{}
		for _, q := range s.Probes {
			k := [2]string{q.Group, q.Event}
			s.byEvent[k] = append(s.byEvent[k], q)
		}
	}
	if p.Delete {
		if removed = s.remove(p); len(removed) == 0 {
			return nil, nil, p.ErrAt(0, 0, ErrNoSuchEvent)
		}
		return p, removed, nil
	}
	key := [2]string{p.Group, p.Event}
	same := s.byEvent[key]
	if len(same) > 0 {
		// as append_trace_kprobe(): the kind and the arguments of the event's first
		// probe, and no probe of the event at the same point with the same fetches
		q := same[0]
		if q.Return != p.Return {
			return nil, nil, p.ErrAt(0, 0, ErrDiffProbeType)
		}
		if i := compareArgTypes(p, q); i > 0 {
			return nil, nil, p.ErrAt(i+1, 0, ErrDiffArgType) // arguments start at word 2
		}
		for _, q := range same {
			if sameProbe(p, q) {
				return nil, nil, p.ErrAt(0, 0, ErrSameProbe)
			}
		}
	}
	s.Probes = append(s.Probes, p)
	s.byEvent[key] = append(same, p)
	return p, nil, nil
}

// remove takes the probes deletion d matches out of the set and returns them.
func (s *Set) remove(d *Probe) (removed []*Probe) {
	var probes []*Probe
	if d.Group != "" && d.Event != "" {
		probes = s.byEvent[[2]string{d.Group, d.Event}] // the common case, without a scan
	} else {
		probes = s.Probes
	}
	gone := map[*Probe]bool{}
	for _, q := range probes {
		if (d.Group == "" || q.Group == d.Group) && (d.Event == "" || q.Event == d.Event) && q.matchHead(d.Match) {
			removed = append(removed, q)
			gone[q] = true
		}
	}
	if len(removed) == 0 {
		return nil
	}
	s.Probes = slices.DeleteFunc(s.Probes, func(q *Probe) bool { return gone[q] })
	for _, q := range removed {
		k := [2]string{q.Group, q.Event}
		if left := slices.DeleteFunc(s.byEvent[k], func(q *Probe) bool { return gone[q] }); len(left) > 0 {
			s.byEvent[k] = left
		} else {
			delete(s.byEvent, k)
		}
	}
	return removed
}

// matchHead is the kernel's trace_kprobe_match_command_head() and
// trace_probe_match_command_args(): words, if any, start with p's probe point as the
// kernel writes it (SYM with offset 0, SYM+OFFS in decimal; an address as 0x and hex,
// which the kernel's hashed %p never matches; LIB: before either), then the first
// arguments as NAME=BODY, each compared whole, in at most MaxArgStrLen bytes as the
// kernel's buffer holds.
func (p *Probe) matchHead(words []string) bool {
	if len(words) == 0 {
		return true
	}
	if len(words)-1 > len(p.Args) {
		return false
	}
	var site string
	switch {
	case p.Symbol == "":
		site = hexStr(p.Addr)
	case p.Offset != 0:
		site = p.Symbol + "+" + strconv.FormatUint(p.Offset, 10)
	default:
		site = p.Symbol
	}
	if p.Lib != "" {
		site = p.Lib + ":" + site
	}
	if words[0] != clip(site) {
		return false
	}
	for i, w := range words[1:] {
		if w != clip(p.Args[i].Name+"="+p.Args[i].Body) {
			return false
		}
	}
	return true
}

// clip cuts s to what snprintf() leaves of it in the kernel's MAX_ARGSTR_LEN+1 buffer.
func clip(s string) string {
	if len(s) > MaxArgStrLen {
		return s[:MaxArgStrLen]
	}
	return s
}

// ParseList parses a list of definitions, one a line, into a Set: text after '#' is a
// comment, blank lines are skipped. The result holds the probes left, in order; on
// error the ParseError's Line is set.
func ParseList(text string) ([]*Probe, error) {
	var set Set
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if len(splitArgs(line)) == 0 {
			continue
		}
		if _, _, err := set.Add(line); err != nil {
			err.(*ParseError).Line = n + 1
			return nil, err
		}
	}
	return set.Probes, nil
}

// compareArgTypes is trace_probe_compare_arg_type(): 0 if a and b have the
// same argument names, types and counts, else the 1-based index of the
// first difference.
func compareArgTypes(a, b *Probe) int {
	if len(a.Args) != len(b.Args) {
		return min(len(a.Args), len(b.Args)) + 1
	}
	for i := range a.Args {
		x, y := &a.Args[i], &b.Args[i]
		if x.Type != y.Type || x.Count != y.Count || x.Name != y.Name || !slices.Equal(x.Enum, y.Enum) {
			return i + 1
		}
	}
	return 0
}

// sameProbe reports the same probe point with the same fetch expressions.
func sameProbe(a, b *Probe) bool {
	if a.Lib != b.Lib || a.Symbol != b.Symbol || a.Offset != b.Offset || a.Addr != b.Addr {
		return false
	}
	for i := range a.Args {
		if a.Args[i].Body != b.Args[i].Body {
			return false
		}
	}
	return true
}

// MatchesName says whether token names the event GROUP/EVENT the way
// KPREWRITE_DISABLE, `rewrite --disable` and `kprewrite enable|disable` name events:
// "all", EVENT, GROUP/EVENT or GROUP/*.
func MatchesName(token, group, event string) bool {
	g, e, ok := strings.Cut(token, "/")
	switch {
	case !ok:
		return token == "all" || token == event
	default:
		return g == group && (e == "*" || e == event)
	}
}
