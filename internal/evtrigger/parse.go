package evtrigger

import (
	"fmt"
	"math"
	"strings"
	"syscall"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
)

// Command is a trigger's command.
type Command uint8

// The commands of the kernel's trigger files.
const (
	TraceOn Command = iota + 1
	TraceOff
	EnableEvent
	DisableEvent
	StackTrace
	Snapshot
	Hist
	EnableHist  // enable_hist:GROUP:EVENT: continues that event's histograms
	DisableHist // disable_hist:GROUP:EVENT: pauses them
)

var names = map[string]Command{
	"traceon": TraceOn, "traceoff": TraceOff, "enable_event": EnableEvent,
	"disable_event": DisableEvent, "stacktrace": StackTrace, "snapshot": Snapshot, "hist": Hist,
	"enable_hist": EnableHist, "disable_hist": DisableHist,
}

// Switches says whether the command switches another event (enable_event,
// disable_event) or its histograms (enable_hist, disable_hist): it names GROUP:EVENT.
func (c Command) Switches() bool {
	return c == EnableEvent || c == DisableEvent || c == EnableHist || c == DisableHist
}

func (c Command) String() string {
	for n, k := range names {
		if k == c {
			return n
		}
	}
	return fmt.Sprintf("Command(%d)", uint8(c))
}

// kind is the kernel's event_trigger_type: an event has at most one trigger of a kind
// (of a kind and target event for enable_event and disable_event), and a removal
// ("!CMD") removes the trigger of its kind, whatever its command.
func (c Command) kind() int {
	switch c {
	case TraceOn, TraceOff:
		return 1 // ETT_TRACE_ONOFF
	case Snapshot:
		return 2
	case StackTrace:
		return 3
	case Hist:
		return 5 // ETT_EVENT_HIST
	case EnableHist, DisableHist:
		return 6 // ETT_HIST_ENABLE
	}
	return 4 // ETT_EVENT_ENABLE
}

// Post says whether the kernel runs the command after the event's record is written
// (EVENT_CMD_FL_POST_TRIGGER): traceoff, so that the event that stops tracing is
// still recorded, and stacktrace, so that the stack follows its event.
func (c Command) Post() bool { return c == TraceOff || c == StackTrace }

// Unlimited is the count of a trigger without one (the kernel's -1).
const Unlimited = math.MaxUint64

// Trigger is one parsed trigger.
type Trigger struct {
	Text   string // as written
	Cmd    Command
	Remove bool   // "!CMD...": remove the event's trigger of this kind
	Count  uint64 // times it may still fire; Unlimited without ":N"
	Filter string // the "if" condition, "" for none
	// Group and Event name the event enable_event and disable_event switch.
	Group, Event string
	// Hist is a hist trigger's histogram (its Filter is Hist.Filter too).
	Hist *evhist.Spec
}

// String is the trigger as the kernel's trigger file lists it: "traceon:unlimited",
// "enable_event:grp:ev:count=3 if a > 1".
func (t Trigger) String() string {
	if t.Hist != nil {
		state := " [active]"
		if t.Hist.Pause {
			state = " [paused]"
		}
		return t.Hist.Info() + state
	}
	var b strings.Builder
	b.WriteString(t.Cmd.String())
	if t.Cmd.Switches() {
		fmt.Fprintf(&b, ":%s:%s", t.Group, t.Event)
	}
	if t.Count == Unlimited {
		b.WriteString(":unlimited")
	} else {
		fmt.Fprintf(&b, ":count=%d", t.Count)
	}
	if t.Filter != "" {
		b.WriteString(" if " + t.Filter)
	}
	return b.String()
}

// Error is a refused trigger: the errno the kernel's trigger file returns for it and
// why; Filter is set when its condition is what failed.
type Error struct {
	Text   string
	Errno  syscall.Errno
	Reason string
	Filter *evfilter.Error
}

func (e *Error) Error() string {
	if e.Filter != nil {
		return fmt.Sprintf("trigger %q: %s (%s)\n%s", e.Text, e.Reason, errnoName(e.Errno), e.Filter.FilterFile())
	}
	return fmt.Sprintf("trigger %q: %s (%s)", e.Text, e.Reason, errnoName(e.Errno))
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.ERANGE:
		return "ERANGE"
	}
	return e.Error()
}

// Env is what a trigger is checked against: its event's fields (for the condition),
// the binary's functions (.function in a condition) and the events there are.
type Env struct {
	Fields []evfilter.Field
	Syms   evfilter.Symbols
	// Exists says whether GROUP/EVENT is defined (enable_event's target).
	Exists func(group, event string) bool
}

// kernel isspace
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func skipSpaces(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	return s
}

func strim(s string) string {
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return skipSpaces(s)
}

// strsep splits s at the first byte of delims: the token and the rest, ok false (rest
// NULL) when there is none.
func strsep(s, delims string) (tok, rest string, ok bool) {
	if i := strings.IndexAny(s, delims); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// Parse reads one trigger as a write of text into an event's trigger file would
// (trigger_process_regex, event_trigger_parse, event_enable_trigger_parse). It
// checks the condition against env.Fields; a removal ("!CMD") is not checked further
// than the kernel checks it.
func Parse(text string, env Env) (Trigger, error) {
	fail := func(errno syscall.Errno, format string, a ...any) (Trigger, error) {
		return Trigger{}, &Error{Text: text, Errno: errno, Reason: fmt.Sprintf(format, a...)}
	}
	buf := strim(text)
	glob, next, hasNext := strsep(buf, ": \t")
	if hasNext {
		next = skipSpaces(next)
		hasNext = next != ""
	}
	t := Trigger{Text: text, Count: Unlimited}
	cmd := glob
	if strings.HasPrefix(glob, "!") {
		cmd, t.Remove = glob[1:], true
	}
	c, ok := names[cmd]
	if !ok {
		return fail(syscall.EINVAL, "no trigger command %q (traceon, traceoff, enable_event, disable_event, stacktrace, snapshot, hist, enable_hist, disable_hist)", cmd)
	}
	t.Cmd = c
	if c == Hist {
		return parseHist(t, next, hasNext, env)
	}
	var param, filter string
	var hasParam, hasFilter bool
	if c.Switches() {
		// event_trigger_separate_filter with a required parameter
		if !hasNext {
			return fail(syscall.EINVAL, "%s needs GROUP:EVENT", cmd)
		}
		param, filter, hasFilter = strsep(next, " \t")
		hasParam = true
		if hasFilter {
			filter = skipSpaces(filter)
			hasFilter = filter != ""
		}
		group, rest, more := strsep(param, ":")
		if !more {
			return fail(syscall.EINVAL, "%s needs GROUP:EVENT, not %q", cmd, param)
		}
		event, count, hasCount := strsep(rest, ":")
		if env.Exists == nil || !env.Exists(group, event) {
			return fail(syscall.EINVAL, "no event %s:%s to %s", group, event, strings.TrimSuffix(cmd, "_event"))
		}
		t.Group, t.Event = group, event
		if t.Remove {
			return t, nil
		}
		param, hasParam = count, hasCount
	} else if hasNext {
		// an optional ":N", else what follows is the condition
		if next[0] >= '0' && next[0] <= '9' {
			param, filter, hasFilter = strsep(next, " \t")
			hasParam = true
			if hasFilter {
				filter = skipSpaces(filter)
				hasFilter = filter != ""
			}
		} else {
			filter, hasFilter = next, true
		}
		if t.Remove {
			return t, nil
		}
	} else if t.Remove {
		return t, nil
	}
	if hasParam {
		number, _, _ := strsep(param, ":")
		if number == "" {
			return fail(syscall.EINVAL, "an empty count")
		}
		n, errno := eventdef.Kstrtoul(number, 0)
		if errno != 0 {
			return fail(errno, "count %q is not a number the kernel reads (kstrtoul)", number)
		}
		t.Count = n
	}
	if hasFilter {
		s, cond, more := strsep(filter, " \t")
		if s != "if" || !more {
			return fail(syscall.EINVAL, "%q: a condition is written 'if FILTER'", filter)
		}
		if err := checkCond(text, cond, env); err != nil {
			return Trigger{}, err
		}
		t.Filter = cond
	}
	return t, nil
}

// parseHist reads a hist trigger's parameters and filter (event_hist_trigger_parse).
func parseHist(t Trigger, param string, has bool, env Env) (Trigger, error) {
	if !has {
		return Trigger{}, &Error{Text: t.Text, Errno: syscall.EINVAL, Reason: "hist needs keys=..."}
	}
	attrs, filter, err := evhist.SplitFilter(param)
	if err == nil {
		t.Hist, err = evhist.Parse(attrs, env.Fields)
	}
	if err == nil {
		err = t.Hist.Check()
	}
	if err != nil {
		return Trigger{}, &Error{Text: t.Text, Errno: syscall.EINVAL, Reason: err.Error()}
	}
	if filter != "" {
		_, cond, _ := strsep(filter, " \t")
		if err := checkCond(t.Text, cond, env); err != nil && !t.Remove {
			return Trigger{}, err
		}
		t.Filter = cond
		t.Hist.Filter = cond
	}
	return t, nil
}

// checkCond checks a trigger's condition against the event's fields: nil, or the
// kernel's EINVAL with the filter's message and position.
func checkCond(text, cond string, env Env) error {
	_, err := evfilter.Parse(cond, env.Fields, env.Syms)
	if err == nil {
		return nil
	}
	fe, _ := err.(*evfilter.Error)
	reason := "bad condition"
	if fe != nil {
		reason = "bad condition: " + fe.Message()
	}
	return &Error{Text: text, Errno: syscall.EINVAL, Reason: reason, Filter: fe}
}

// Set is one event's triggers in the kernel's list order: the newest first, the order
// in which they run.
type Set []Trigger

// Apply adds t to the set, or removes the trigger of its kind (and target) when t is
// a removal, as the kernel's register_trigger and unregister_trigger do: a second
// trigger of a kind is EEXIST; removing one that is not there is no error.
func (s Set) Apply(t Trigger) (Set, error) {
	if t.Cmd == Hist {
		return s.applyHist(t)
	}
	same := func(o Trigger) bool {
		if o.Cmd.kind() != t.Cmd.kind() {
			return false
		}
		return !t.Cmd.Switches() || (o.Group == t.Group && o.Event == t.Event)
	}
	for i, o := range s {
		if !same(o) {
			continue
		}
		if t.Remove {
			return append(s[:i:i], s[i+1:]...), nil
		}
		return s, &Error{Text: t.Text, Errno: syscall.EEXIST, Reason: fmt.Sprintf("the event has a %s trigger already (%s)", o.Cmd, o)}
	}
	if t.Remove {
		return s, nil
	}
	return append(Set{t}, s...), nil
}

// applyHist adds, changes or removes a hist trigger as hist_register_trigger and
// hist_unregister_trigger do: an event may have several histograms; one with the same
// keys, values, sort and filter as an existing one pauses it (":pause"), continues it
// (":cont") or clears it (":clear", nothing to clear before the program runs), else is
// EEXIST; ":cont" or ":clear" with no such histogram is ENOENT.
func (s Set) applyHist(t Trigger) (Set, error) {
	for i, o := range s {
		if o.Cmd != Hist || !o.Hist.Same(t.Hist) {
			continue
		}
		if t.Remove {
			return append(s[:i:i], s[i+1:]...), nil
		}
		h := *o.Hist
		switch {
		case t.Hist.Pause:
			h.Pause = true
		case t.Hist.Cont:
			h.Pause = false
		case t.Hist.Clear:
		default:
			return s, &Error{Text: t.Text, Errno: syscall.EEXIST, Reason: "Hist trigger already exists"}
		}
		out := append(Set(nil), s...)
		out[i].Hist = &h
		return out, nil
	}
	if t.Remove {
		return s, nil
	}
	if t.Hist.Cont || t.Hist.Clear {
		return s, &Error{Text: t.Text, Errno: syscall.ENOENT, Reason: "Can't clear or continue a nonexistent hist trigger"}
	}
	h := *t.Hist
	h.Cont, h.Clear = false, false
	t.Hist = &h
	return append(Set{t}, s...), nil
}
