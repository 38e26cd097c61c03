package calls

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kprewrite/kprewrite/internal/tracefile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// desc describes an image with functions f (0x100), g (0x200) and h (0x300), each with an
// entry and a return event, k (0x400) with an entry event only, and a probe inside f
// (0x108).
func desc() *tracefile.Desc {
	d := &tracefile.Desc{ImageID: 9, Image: "prog"}
	add := func(name string, addr uint64, ret bool, sym string) {
		id := uint32(len(d.Events))
		kind := "p"
		if ret {
			kind = "r"
		}
		d.Events = append(d.Events, tracefile.DescEvent{ID: id, Group: "g", Name: name, Def: fmt.Sprintf("%s:g/%s %#x", kind, name, addr), Return: ret})
		d.Probes = append(d.Probes, tracefile.DescProbe{Index: len(d.Probes), Event: int(id), Kind: "o", Addr: addr, Site: addr, Symbol: sym})
	}
	for i, fn := range []string{"f", "g", "h"} {
		a := uint64(0x100 * (i + 1))
		add(fn, a, false, fn)
		add(fn+"_ret", a, true, fn)
	}
	add("k", 0x400, false, "k")
	add("inside", 0x108, false, "")
	return d
}

// rec makes a record of event id of desc() on thread tid at ts.
func rec(d *tracefile.Desc, name string, tid uint32, ts uint64) *tracefile.Record {
	for _, e := range d.Events {
		if e.Name == name {
			r := &tracefile.Record{}
			r.Type, r.ImageID, r.EventID, r.PID, r.TID, r.TsNs = kprt.RecKprobe, d.ImageID, e.ID, 1, tid, ts
			if e.Return {
				r.Type = kprt.RecKretprobe
			}
			r.IP = d.Probes[e.ID].Site
			copy(r.Comm[:], "prog")
			return r
		}
	}
	panic(name)
}

// TestBuilder: calls nest per thread; a return ends the calls above its own as lost;
// a return with no call open is an orphan; entries without a return event and probes
// inside a function are instants; calls still open end, lost, at their thread's last
// record.
func TestBuilder(t *testing.T) {
	d := desc()
	b := NewBuilder(tracefile.Descs{d.ImageID: d})
	var log []string
	b.OnExit = func(th *Thread, c *Call, r *tracefile.Record) {
		log = append(log, fmt.Sprintf("%d:%s[%d-%d self %d lost %v]", th.TID, c.Func.Name, c.Start, c.End, c.Self, c.Lost))
	}
	b.OnRecord = func(th *Thread, r *tracefile.Record, role Role, c *Call) {
		if role == Instant || role == Orphan {
			log = append(log, fmt.Sprintf("%d:%s role %d", th.TID, d.Events[r.EventID].Name, role))
		}
	}
	for _, r := range []*tracefile.Record{
		rec(d, "f", 1, 10),
		rec(d, "inside", 1, 11),
		rec(d, "g", 1, 12),
		rec(d, "g", 2, 13), // another thread
		rec(d, "h", 1, 14),
		rec(d, "k", 1, 15),
		rec(d, "g_ret", 1, 20), // h's return was lost (longjmp)
		rec(d, "h_ret", 2, 21), // no h open on thread 2
		rec(d, "f_ret", 1, 30),
		rec(d, "f", 1, 31), // never returns
		rec(d, "k", 1, 40),
	} {
		b.Add(r)
	}
	b.Finish()
	want := []string{
		"1:inside role 0",
		"1:k role 0",
		"1:h[14-20 self 6 lost true]",
		"1:g[12-20 self 2 lost false]",
		"2:h_ret role 3",
		"1:f[10-30 self 12 lost false]",
		"1:k role 0",
		"1:f[31-40 self 9 lost true]",
		"2:g[13-21 self 8 lost true]",
	}
	if got := strings.Join(log, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if n := len(b.Functions()); n != 3 {
		t.Errorf("%d functions, want f, g and h", n)
	}
}

// TestBuilderEntrySP: an entry whose stack pointer is above an open call's, or equal to
// it and not a tail call, ends that call as lost; a lower one nests, and so does a tail
// call at the same stack pointer; entries that do not say (0) end nothing, and a call
// that does not say stops the search.
func TestBuilderEntrySP(t *testing.T) {
	d := desc()
	b := NewBuilder(tracefile.Descs{d.ImageID: d})
	var log []string
	b.OnExit = func(th *Thread, c *Call, r *tracefile.Record) {
		log = append(log, fmt.Sprintf("%s[%d-%d lost %v]", c.Func.Name, c.Start, c.End, c.Lost))
	}
	at := func(r *tracefile.Record, sp uint64, tail bool) *tracefile.Record {
		r.EntrySP, r.TailCall = sp, tail
		return r
	}
	for _, r := range []*tracefile.Record{
		at(rec(d, "f", 1, 10), 0x1000, false),
		at(rec(d, "g", 1, 11), 0xf00, false),
		at(rec(d, "h", 1, 12), 0xe00, false),  // longjmp from here back to f's frame
		at(rec(d, "g", 1, 13), 0xf00, false),  // ends h and g
		at(rec(d, "h", 1, 14), 0xf00, true),   // g's tail call: nests
		rec(d, "h", 1, 15),                    // says nothing: nests
		at(rec(d, "g", 1, 16), 0xe80, false),  // below the tail call's word: nests
		at(rec(d, "g", 1, 17), 0x1000, false), // f's word: ends g, stops at the h that says nothing
	} {
		b.Add(r)
	}
	b.Finish()
	want := "h[12-13 lost true] g[11-13 lost true] g[16-17 lost true] g[17-17 lost true] h[15-17 lost true] h[14-17 lost true] g[13-17 lost true] f[10-17 lost true]"
	if got := strings.Join(log, " "); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestBuilderGoStacks: in a Go program's image (Desc.Go) entry stack pointers are not
// compared: a goroutine's stack that grew was copied to other addresses, higher ones
// too, and the calls made there nest in the calls open on the old stack.
func TestBuilderGoStacks(t *testing.T) {
	d := desc()
	d.Go = true
	b := NewBuilder(tracefile.Descs{d.ImageID: d})
	var log []string
	b.OnExit = func(th *Thread, c *Call, r *tracefile.Record) {
		log = append(log, fmt.Sprintf("%s[%d-%d lost %v]", c.Func.Name, c.Start, c.End, c.Lost))
	}
	at := func(r *tracefile.Record, sp uint64) *tracefile.Record {
		r.EntrySP = sp
		return r
	}
	for _, r := range []*tracefile.Record{
		at(rec(d, "f", 1, 10), 0x1000),
		at(rec(d, "g", 1, 11), 0xf00),
		at(rec(d, "h", 1, 12), 0x8f00), // the stack was copied higher: still g's callee
		rec(d, "h_ret", 1, 13),
		rec(d, "g_ret", 1, 14),
		rec(d, "f_ret", 1, 15),
	} {
		b.Add(r)
	}
	b.Finish()
	want := "h[12-13 lost false] g[11-14 lost false] f[10-15 lost false]"
	if got := strings.Join(log, " "); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestGoroutines: records with a goroutine id nest per goroutine whatever thread wrote
// them; goroutine 0 (each thread's g0 and gsignal) and records without an id nest per
// thread; an entry that repeats the call just opened at the same stack pointer is a
// restart, not a call; a goroutine's stack pointers end no call (its stack moves).
func TestGoroutines(t *testing.T) {
	d := desc()
	b := NewBuilder(tracefile.Descs{d.ImageID: d})
	var log []string
	b.OnExit = func(th *Thread, c *Call, r *tracefile.Record) {
		log = append(log, fmt.Sprintf("%s:%s[%d-%d lost %v]", th.Name(), c.Func.Name, c.Start, c.End, c.Lost))
	}
	restarts := 0
	b.OnRecord = func(th *Thread, r *tracefile.Record, role Role, c *Call) {
		if role == Restart {
			restarts++
		}
	}
	g := func(name string, tid uint32, ts, goid, sp uint64) *tracefile.Record {
		r := rec(d, name, tid, ts)
		r.GoID, r.HasGoID, r.EntrySP = goid, true, sp
		return r
	}
	for _, r := range []*tracefile.Record{
		g("f", 1, 10, 7, 0x9000),
		g("f", 1, 11, 7, 0x9000), // morestack restarted f
		g("g", 1, 12, 8, 0x5000), // goroutine 8 on thread 1 while 7 waits
		g("g", 2, 13, 7, 0x1000), // goroutine 7 moved to thread 2; its stack moved too
		g("h", 2, 14, 0, 0x100),  // g0 of thread 2
		g("h", 1, 15, 0, 0x200),  // g0 of thread 1
		g("h_ret", 2, 16, 0, 0),
		g("h_ret", 1, 17, 0, 0),
		g("g_ret", 1, 18, 7, 0), // goroutine 7 back on thread 1
		g("g_ret", 2, 19, 8, 0),
		g("f_ret", 2, 20, 7, 0),
	} {
		b.Add(r)
	}
	b.Finish()
	want := "prog-2:h[14-16 lost false] prog-1:h[15-17 lost false] goroutine 7:g[13-18 lost false] " +
		"goroutine 8:g[12-19 lost false] goroutine 7:f[10-20 lost false]"
	if got := strings.Join(log, " "); got != want || restarts != 1 {
		t.Errorf("calls (%d restarts):\n got %s\nwant %s", restarts, got, want)
	}
}
