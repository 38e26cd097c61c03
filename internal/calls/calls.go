package calls

import (
	"sort"
	"strconv"

	"github.com/ianlancetaylor/demangle"
	"github.com/kprewrite/kprewrite/internal/recentid"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Function is a function of a rewritten image with an entry and a return event.
type Function struct {
	ID    int    // dense, in the order functions are first seen
	Image string // the image's name
	Addr  uint64 // link-time address
	// Name is its symbol, demangled without parameters ("ns::f", as uftrace shows C++
	// functions), or the entry event's name when no symbol names it; Symbol is the
	// symbol as the binary has it.
	Name, Symbol string
}

// Call is a call in progress or just ended.
type Call struct {
	Func  *Function
	Start uint64 // entry time, ns
	// End, Total and Self are set when the call ends: Self is Total less the calls it
	// made.
	End, Total, Self uint64
	// Lost: the return was never recorded; the call ended at the first record that
	// showed it had (the entry of a call from its caller's frame or from further out,
	// the return of a call that encloses it) or at its thread's last record.
	Lost bool
	// Tag is the caller's, set in OnEnter (an exporter's stack node).
	Tag      int
	children uint64
	sp       uint64 // the entry's stack pointer (Record.EntrySP), 0 when unknown
}

// Thread is one thread of the trace, or one goroutine of a Go program: the records
// that carry a goroutine id (Record.HasGoID) nest per goroutine, which moves between
// threads (TID is then the thread of its first record).
type Thread struct {
	PID, TID uint32
	Comm     string
	// Goroutine: the unit is the goroutine GoID, not the thread TID.
	Goroutine bool
	GoID      uint64
	// Stack is the calls in progress, outermost first.
	Stack []*Call
	// First and Last are the times of its first and last records.
	First, Last uint64
	order       int
	// entrySP is the EntrySP of the unit's last record when it opened a call, else 0
	// (restarted)
	entrySP uint64
}

// Track is the unit's id among its process's: the thread id, or the goroutine id.
func (t *Thread) Track() uint64 {
	if t.Goroutine {
		return t.GoID
	}
	return uint64(t.TID)
}

// Name names the unit as reports and flame graphs show it: comm-tid, or goroutine N.
func (t *Thread) Name() string {
	if t.Goroutine {
		return "goroutine " + strconv.FormatUint(t.GoID, 10)
	}
	return t.Comm + "-" + strconv.FormatUint(uint64(t.TID), 10)
}

// holds reports whether r nests in t.
func (t *Thread) holds(r *tracefile.Record) bool {
	if onGoroutine(r) {
		return t.Goroutine && t.GoID == r.GoID && t.PID == r.PID
	}
	return !t.Goroutine && t.TID == r.TID && t.PID == r.PID
}

// onGoroutine reports whether r nests in its goroutine: it carries a goroutine id, and
// not 0, which every thread's own g0 and gsignal have (the scheduler's and signal
// handlers' stacks: per thread).
func onGoroutine(r *tracefile.Record) bool { return r.HasGoID && r.GoID != 0 }

// Role says what a record is to the nesting.
type Role uint8

const (
	// Instant is a record that is neither a call's entry nor its return: an event at
	// a function with no return event, inside a function, a trace_printk, or a
	// record whose image has no description.
	Instant Role = iota
	// Entry opened a call (Builder.OnEnter ran).
	Entry
	// Return ended a call (Builder.OnExit ran).
	Return
	// Orphan is a return record whose call is not on its thread's stack (entered
	// before the trace began, or in the parent of a forked child).
	Orphan
	// Restart is a goroutine's entry record that restarts the call it just opened:
	// Go's stack check sent the function to morestack before its body ran (to grow
	// the stack, or to preempt the goroutine), which runs it again from its entry.
	Restart
)

// Builder rebuilds calls from records given in time order.
type Builder struct {
	// OnEnter runs when r opens c, OnExit when c ends: by r, its return record, or,
	// with c.Lost, at the time of the record r that showed the return was lost (nil
	// at the end of the trace). OnRecord runs for every record after the nesting took
	// it, with its role (c is the call it opened or ended). Any may be nil.
	OnEnter  func(t *Thread, c *Call, r *tracefile.Record)
	OnExit   func(t *Thread, c *Call, r *tracefile.Record)
	OnRecord func(t *Thread, r *tracefile.Record, role Role, c *Call)
	// OnThread runs when a thread is first seen and when its comm changes.
	OnThread func(t *Thread)

	descs   tracefile.Descs
	roles   map[[2]uint64]*eventRole  // (image id, event id)
	recent  recentid.Cache[eventRole] // the last image's roles by event id
	funcs   []*Function
	threads map[[3]uint64]*Thread // (1 for a goroutine, pid, tid or goroutine id)
	last    *Thread
	free    []*Call
}

// eventRole is what an event's records are: per probe site, the call's function it
// opens or ends (none: instant).
type eventRole struct {
	ret   bool
	movSP bool // the image's stacks move (a Go program): entry stack pointers are not compared
	sites map[uint64]*Function
	// site and fn are the one entry of sites when it has one (most events)
	site uint64
	fn   *Function
}

// function returns the call's function a record at site opens or ends, or nil.
func (er *eventRole) function(site uint64) *Function {
	if er.fn != nil && er.site == site {
		return er.fn
	}
	return er.sites[site]
}

// NewBuilder returns a builder for records of the described images.
func NewBuilder(descs tracefile.Descs) *Builder {
	return &Builder{descs: descs, roles: map[[2]uint64]*eventRole{}, threads: map[[3]uint64]*Thread{}}
}

// Functions returns the functions seen, by ID.
func (b *Builder) Functions() []*Function { return b.funcs }

// Threads returns the threads seen, in the order they were first seen.
func (b *Builder) Threads() []*Thread {
	out := make([]*Thread, 0, len(b.threads))
	for _, t := range b.threads {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].order < out[j].order })
	return out
}

// role finds the role of an event's records: an image's functions with both an entry
// probe at their address (the first entry event that has one opens, or the return
// event's own, NAME for NAME__return in its group: --calls, --prepare) and a return
// probe (the first return event ends) are calls.
func (b *Builder) role(image uint64, id uint32) *eventRole {
	key := [2]uint64{image, uint64(id)}
	if r, ok := b.roles[key]; ok {
		return r
	}
	d := b.descs[image]
	if d == nil {
		b.roles[key] = nil
		return nil
	}
	// every event of the image at once: which opens and which ends each function
	type pair struct {
		entry, ret int
		entries    []int
	}
	pairs := map[uint64]*pair{}
	for _, p := range d.Probes {
		if p.Event < 0 || p.Event >= len(d.Events) || p.Kind == tracefile.KindVerify {
			continue
		}
		pr := pairs[p.Addr]
		if pr == nil {
			pr = &pair{entry: -1, ret: -1}
			pairs[p.Addr] = pr
		}
		if d.Events[p.Event].Return {
			if pr.ret < 0 || p.Event < pr.ret {
				pr.ret = p.Event
			}
		} else if pr.entry < 0 || p.Event < pr.entry {
			pr.entry = p.Event
		}
		if !d.Events[p.Event].Return {
			pr.entries = append(pr.entries, p.Event)
		}
	}
	for _, pr := range pairs { // the return event's own entry event opens, when there is one
		for _, e := range pr.entries {
			if pr.ret >= 0 && d.Events[e].Group == d.Events[pr.ret].Group && d.Events[e].Name+"__return" == d.Events[pr.ret].Name {
				pr.entry = e
			}
		}
	}
	roles := make([]*eventRole, len(d.Events))
	for i, e := range d.Events {
		roles[i] = &eventRole{ret: e.Return, movSP: d.Go, sites: map[uint64]*Function{}}
	}
	addrs := make([]uint64, 0, len(pairs))
	for a := range pairs {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	fns := map[uint64]*Function{}
	for _, a := range addrs {
		if pr := pairs[a]; pr.entry >= 0 && pr.ret >= 0 {
			fns[a] = &Function{ID: -1, Image: d.Image, Addr: a}
		}
	}
	for _, p := range d.Probes {
		fn := fns[p.Addr]
		if fn == nil || p.Event < 0 || p.Event >= len(d.Events) {
			continue
		}
		pr := pairs[p.Addr]
		if p.Event != pr.entry && p.Event != pr.ret {
			continue
		}
		if fn.Name == "" && p.Symbol != "" && p.Site-p.Offset == p.Addr {
			fn.Name = p.Symbol
		}
		roles[p.Event].sites[p.Site] = fn
	}
	for _, a := range addrs {
		fn := fns[a]
		if fn == nil {
			continue
		}
		if fn.Name == "" {
			if name, off, _, ok := d.Symbolize(a); ok && off == 0 {
				fn.Name = name
			}
		}
		fn.Symbol = fn.Name
		if fn.Name == "" {
			fn.Name = d.Events[pairs[a].entry].Name
		} else {
			fn.Name = demangle.Filter(fn.Name, demangle.NoParams)
		}
	}
	for i, e := range d.Events {
		if er := roles[i]; len(er.sites) == 1 {
			for site, fn := range er.sites {
				er.site, er.fn = site, fn
			}
		}
		b.roles[[2]uint64{image, uint64(e.ID)}] = roles[i]
	}
	return b.roles[key]
}

// thread returns r's thread (or goroutine), noting its comm.
func (b *Builder) thread(r *tracefile.Record) *Thread {
	t := b.last
	if t == nil || !t.holds(r) {
		key, g := [3]uint64{0, uint64(r.PID), uint64(r.TID)}, onGoroutine(r)
		if g {
			key = [3]uint64{1, uint64(r.PID), r.GoID}
		}
		t = b.threads[key]
		if t == nil {
			t = &Thread{PID: r.PID, TID: r.TID, Comm: r.CommString(), First: r.TsNs, order: len(b.threads), Goroutine: g}
			if g {
				t.GoID = r.GoID
			}
			b.threads[key] = t
			if b.OnThread != nil {
				b.OnThread(t)
			}
		}
		b.last = t
	}
	if !commIs(r, t.Comm) {
		t.Comm = r.CommString()
		if b.OnThread != nil {
			b.OnThread(t)
		}
	}
	t.Last = r.TsNs
	return t
}

// commIs reports whether r's comm is c, without making a string.
func commIs(r *tracefile.Record, c string) bool {
	n := len(c)
	if n > len(r.Comm) || (n < len(r.Comm) && r.Comm[n] != 0) {
		return false
	}
	return string(r.Comm[:n]) == c
}

// Add takes the next record in time order.
func (b *Builder) Add(r *tracefile.Record) {
	t := b.thread(r)
	role, c := Instant, (*Call)(nil)
	if r.Type == kprt.RecKprobe || r.Type == kprt.RecKretprobe {
		if er := b.recent.Get(r.ImageID, r.EventID, b.role); er != nil {
			if fn := er.function(r.IP); fn != nil {
				if fn.ID < 0 {
					fn.ID = len(b.funcs)
					b.funcs = append(b.funcs, fn)
				}
				switch {
				case er.ret:
					role, c = b.ret(t, fn, r)
				case b.restarted(t, fn, r):
					role, c = Restart, t.Stack[len(t.Stack)-1]
				default:
					sp := r.EntrySP
					if er.movSP || t.Goroutine {
						sp = 0 // a Go program's stacks move when they grow: their addresses order nothing
					}
					role, c = Entry, b.enter(t, fn, r, sp)
				}
			}
		}
	}
	t.entrySP = 0
	if role == Entry || role == Restart {
		t.entrySP = r.EntrySP
	}
	if b.OnRecord != nil {
		b.OnRecord(t, r, role, c)
	}
}

// restarted reports whether r, an entry of fn on goroutine t, restarts the call t
// just opened: fn's, with the same stack pointer, and no record of t since (a call
// of fn from fn has a lower one; a grown stack's restart is at another address, and
// goes as a call whose return is lost). (An entry probe after Go's stack check sees
// no restart: this keeps older rewrites' traces right.)
func (b *Builder) restarted(t *Thread, fn *Function, r *tracefile.Record) bool {
	n := len(t.Stack)
	return t.Goroutine && r.EntrySP != 0 && t.entrySP == r.EntrySP && n > 0 && t.Stack[n-1].Func == fn
}

// enter opens fn's call on t; sp is the entry's stack pointer (0: unknown, or a Go
// program's, whose stacks move).
func (b *Builder) enter(t *Thread, fn *Function, r *tracefile.Record, sp uint64) *Call {
	if sp != 0 {
		// A call whose return-address word is below this entry's, or is this entry's
		// (a call made from the same frame, unless it is a tail call from that one),
		// has ended: a longjmp or an exception left it, or its return was not hooked
		// (the return probe's instances were all in use). The record ends it, lost.
		for n := len(t.Stack); n > 0; n-- {
			c := t.Stack[n-1]
			if c.sp == 0 || c.sp > sp || (c.sp == sp && r.TailCall) {
				break
			}
			b.end(t, r.TsNs, r, true)
		}
	}
	var c *Call
	if n := len(b.free); n > 0 {
		c, b.free = b.free[n-1], b.free[:n-1]
		*c = Call{}
	} else {
		c = new(Call)
	}
	c.Func, c.Start, c.sp = fn, r.TsNs, sp
	t.Stack = append(t.Stack, c)
	if b.OnEnter != nil {
		b.OnEnter(t, c, r)
	}
	return c
}

// ret ends fn's innermost call on t, and the calls above it as lost.
func (b *Builder) ret(t *Thread, fn *Function, r *tracefile.Record) (Role, *Call) {
	i := len(t.Stack) - 1
	for i >= 0 && t.Stack[i].Func != fn {
		i--
	}
	if i < 0 {
		return Orphan, nil
	}
	for len(t.Stack)-1 > i {
		b.end(t, r.TsNs, r, true)
	}
	c := b.end(t, r.TsNs, r, false)
	return Return, c
}

// end pops t's innermost call, ended at ts.
func (b *Builder) end(t *Thread, ts uint64, r *tracefile.Record, lost bool) *Call {
	n := len(t.Stack) - 1
	c := t.Stack[n]
	t.Stack = t.Stack[:n]
	c.End, c.Lost = max(ts, c.Start), lost
	c.Total = c.End - c.Start
	c.Self = c.Total - min(c.children, c.Total)
	if n > 0 {
		t.Stack[n-1].children += c.Total
	}
	if b.OnExit != nil {
		b.OnExit(t, c, r)
	}
	b.free = append(b.free, c) // the callbacks keep no pointer to it
	return c
}

// Finish ends the calls still open, each at its thread's last record, marked Lost.
func (b *Builder) Finish() {
	for _, t := range b.Threads() {
		for len(t.Stack) > 0 {
			b.end(t, t.Last, nil, true)
		}
	}
}
