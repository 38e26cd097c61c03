package export

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/calls"
	"github.com/kprewrite/kprewrite/internal/tracefile"
)

// FuncStats is one function's line of a report.
type FuncStats struct {
	Func   string // the function's name
	Image  string
	Thread string // "comm-tid" in a per-thread report
	Calls  uint64
	// Total is the time inside the function, its recursive calls counted once (the
	// outermost call's time); Self excludes the calls it made. Min, Max and Avg are
	// of single calls' times (each recursive call its own).
	Total, Self, Min, Max, Avg uint64
	// Lost counts calls whose return was lost (their time ends where the trace shows
	// it).
	Lost uint64
	sum  uint64
}

// Report is a trace's calls per function, like `uftrace report`.
type Report struct {
	Funcs []*FuncStats
	// Total is the sum of the functions' self times: the time spent in probed
	// functions.
	Total uint64
	// Clock is the trace's clock (tracefile.ClockName): under "counter" its times are
	// counts, not time, and are not printed.
	Clock string
}

// BuildReport reads the trace and sums its calls per function, or per thread and
// function with threads.
func BuildReport(in *Input, threads bool) (*Report, error) {
	type key struct {
		fn *calls.Function
		t  *calls.Thread
	}
	stats := map[key]*FuncStats{}
	var order []*FuncStats
	depth := map[*calls.Thread]map[*calls.Function]int{} // active calls, for recursion
	b := calls.NewBuilder(in.Descs)
	b.OnEnter = func(t *calls.Thread, c *calls.Call, _ *tracefile.Record) {
		d := depth[t]
		if d == nil {
			d = map[*calls.Function]int{}
			depth[t] = d
		}
		d[c.Func]++
	}
	b.OnExit = func(t *calls.Thread, c *calls.Call, _ *tracefile.Record) {
		k := key{fn: c.Func}
		if threads {
			k.t = t
		}
		st := stats[k]
		if st == nil {
			st = &FuncStats{Func: c.Func.Name, Image: c.Func.Image, Min: ^uint64(0)}
			if threads {
				st.Thread = threadName(t)
			}
			stats[k] = st
			order = append(order, st)
		}
		st.Calls++
		st.Self += c.Self
		st.sum += c.Total
		st.Min, st.Max = min(st.Min, c.Total), max(st.Max, c.Total)
		if c.Lost {
			st.Lost++
		}
		d := depth[t]
		if d[c.Func]--; d[c.Func] == 0 {
			st.Total += c.Total
		}
	}
	if err := in.Stream.Each(func(r *tracefile.Record) error { b.Add(r); return nil }); err != nil {
		return nil, err
	}
	b.Finish()
	rep := &Report{Funcs: order, Clock: tracefile.ClockName(&in.Stream.Header)}
	for _, st := range order {
		st.Avg = st.sum / st.Calls
		rep.Total += st.Self
	}
	return rep, nil
}

// SortKeys are the columns a report sorts by.
var SortKeys = []string{"total", "self", "calls", "avg", "min", "max", "func"}

// Sort orders the report by a column, largest first (func: by name), ties by name.
func (r *Report) Sort(by string) error {
	get := map[string]func(*FuncStats) uint64{
		"total": func(s *FuncStats) uint64 { return s.Total },
		"self":  func(s *FuncStats) uint64 { return s.Self },
		"calls": func(s *FuncStats) uint64 { return s.Calls },
		"avg":   func(s *FuncStats) uint64 { return s.Avg },
		"min":   func(s *FuncStats) uint64 { return s.Min },
		"max":   func(s *FuncStats) uint64 { return s.Max },
	}
	name := func(a, b *FuncStats) bool {
		if a.Func != b.Func {
			return a.Func < b.Func
		}
		if a.Image != b.Image {
			return a.Image < b.Image
		}
		return a.Thread < b.Thread
	}
	if by == "func" {
		sort.SliceStable(r.Funcs, func(i, j int) bool { return name(r.Funcs[i], r.Funcs[j]) })
		return nil
	}
	f := get[by]
	if f == nil {
		return fmt.Errorf("unknown sort key %q (one of %s)", by, strings.Join(SortKeys, ", "))
	}
	sort.SliceStable(r.Funcs, func(i, j int) bool {
		a, b := f(r.Funcs[i]), f(r.Funcs[j])
		if a != b {
			return a > b
		}
		return name(r.Funcs[i], r.Funcs[j])
	})
	return nil
}

// label names a line: the function, with its image when several images are in the
// report, and its thread in a per-thread report.
func (r *Report) labels() func(*FuncStats) string {
	images := map[string]bool{}
	for _, s := range r.Funcs {
		images[s.Image] = true
	}
	return func(s *FuncStats) string {
		l := s.Func
		if len(images) > 1 {
			l = s.Image + ":" + l
		}
		if s.Thread != "" {
			l = fmt.Sprintf("%-20s %s", s.Thread, l)
		}
		return l
	}
}

// Write prints the report as uftrace prints its own, with min/avg/max and lost-return
// counts; limit > 0 prints only that many lines.
func (r *Report) Write(w io.Writer, limit int) error {
	label := r.labels()
	r.writeClock(w)
	ns := r.formatTime
	thread := ""
	if len(r.Funcs) > 0 && r.Funcs[0].Thread != "" {
		thread = fmt.Sprintf("%-20s ", "Thread")
	}
	fmt.Fprintf(w, "  %10s  %10s  %10s  %10s  %10s  %10s  %s%s\n", "Total time", "Self time", "Calls", "Avg", "Min", "Max", thread, "Function")
	fmt.Fprintf(w, "  %10s  %10s  %10s  %10s  %10s  %10s  %s\n", eq(10), eq(10), eq(10), eq(10), eq(10), eq(10), eq(20))
	for i, s := range r.Funcs {
		if limit > 0 && i == limit {
			break
		}
		lost := ""
		if s.Lost > 0 {
			lost = fmt.Sprintf("  (%d lost returns)", s.Lost)
		}
		if _, err := fmt.Fprintf(w, "  %10s  %10s  %10d  %10s  %10s  %10s  %s%s\n", ns(s.Total), ns(s.Self), s.Calls,
			ns(s.Avg), ns(s.Min), ns(s.Max), label(s), lost); err != nil {
			return err
		}
	}
	return nil
}

func eq(n int) string { return strings.Repeat("=", n) }

// writeClock names the trace's clock when it is not the default (tsc): under counter,
// whose times are an order and not a duration, it says why no time is printed.
func (r *Report) writeClock(w io.Writer) {
	switch r.Clock {
	case "", "tsc":
	case "counter":
		fmt.Fprintf(w, "# clock: counter: the trace has an order, not times (rewrite --clock counter): calls are counted, times are not shown\n")
	default:
		fmt.Fprintf(w, "# clock: %s\n", r.Clock)
	}
}

// formatTime is formatNs, or "-" for a trace whose clock is a counter.
func (r *Report) formatTime(ns uint64) string {
	if r.Clock == "counter" {
		return "-"
	}
	return formatNs(ns)
}

// diffClock is what a diff of two reports says of their clocks: a counter in either
// leaves no times to compare; else the clock that is not the default tsc, if any.
func diffClock(base, r *Report) *Report {
	for _, c := range []string{"counter", "mono"} {
		if base.Clock == c || r.Clock == c {
			return &Report{Clock: c}
		}
	}
	return &Report{Clock: r.Clock}
}

// WriteDiff prints how each function changed from base to r (r is the new trace):
// total and self time and calls of both, and the change in per cent, in r's order
// (functions only in base last).
func (r *Report) WriteDiff(w io.Writer, base *Report, limit int) error {
	label := r.labels()
	key := func(s *FuncStats) string { return s.Image + "\x00" + s.Func + "\x00" + s.Thread }
	old, cur := map[string]*FuncStats{}, map[string]*FuncStats{}
	for _, s := range base.Funcs {
		old[key(s)] = s
	}
	for _, s := range r.Funcs {
		cur[key(s)] = s
	}
	clock := diffClock(base, r)
	clock.writeClock(w)
	ns, chg := clock.formatTime, change
	if clock.Clock == "counter" {
		chg = func(a, b uint64) string { return "-" }
	}
	fmt.Fprintf(w, "  %10s  %10s  %8s   %10s  %10s  %8s   %10s  %10s  %s\n", "Total base", "Total new", "change", "Self base", "Self new", "change", "Calls base", "Calls new", "Function")
	fmt.Fprintf(w, "  %s  %s  %s   %s  %s  %s   %s  %s  %s\n", eq(10), eq(10), eq(8), eq(10), eq(10), eq(8), eq(10), eq(10), eq(20))
	seen := map[string]bool{}
	lines := append([]*FuncStats(nil), r.Funcs...)
	for _, s := range base.Funcs {
		if cur[key(s)] == nil {
			lines = append(lines, s)
		}
	}
	for i, s := range lines {
		if limit > 0 && i == limit {
			break
		}
		k := key(s)
		if seen[k] {
			continue
		}
		seen[k] = true
		var nw, ol FuncStats
		if n := cur[k]; n != nil {
			nw = *n
		}
		if o := old[k]; o != nil {
			ol = *o
		}
		if _, err := fmt.Fprintf(w, "  %10s  %10s  %8s   %10s  %10s  %8s   %10d  %10d  %s\n",
			ns(ol.Total), ns(nw.Total), chg(ol.Total, nw.Total),
			ns(ol.Self), ns(nw.Self), chg(ol.Self, nw.Self),
			ol.Calls, nw.Calls, label(s)); err != nil {
			return err
		}
	}
	return nil
}

// change is the relative change from a to b, "+12.34%".
func change(a, b uint64) string {
	switch {
	case a == b:
		return "0.00%"
	case a == 0:
		return "new"
	case b == 0:
		return "gone"
	}
	return fmt.Sprintf("%+.2f%%", 100*(float64(b)-float64(a))/float64(a))
}
