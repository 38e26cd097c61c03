package evhist

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Symbolizer names an address for .sym and .sym-offset: the function holding it, the
// address's offset in it and the function's size.
type Symbolizer func(addr uint64) (name string, off, size uint64, ok bool)

// Entry is one histogram entry read from a table.
type Entry struct {
	Key      []uint64
	Hitcount uint64
	Vals     []uint64
	Comm     string
	// Track is the value onmax()/onchange() keeps (the maximum, or the last change);
	// Saved are the save() fields' words of the hit that set it.
	Track uint64
	Saved []uint64
}

// Table is a histogram read from the trace file.
type Table struct {
	Paused bool
	// Hits is every hit added or dropped while active (the kernel's map->hits: the
	// entries' hitcounts and the drops).
	Hits, Drops, Claimed uint64
	Entries              []Entry
	// Snapshot: an onmax()/onchange() snapshot() action took the trace file's
	// snapshot; SnapVal is the value that did, SnapKey its entry's key.
	Snapshot bool
	SnapVal  uint64
	SnapKey  []uint64
	SnapComm string
}

// ReadTable reads the histogram of spec s from its words (TableWords of them,
// little endian). A bucket still being filled is left out.
func (s *Spec) ReadTable(b []byte) (*Table, error) {
	if len(b) < s.TableWords()*8 {
		return nil, fmt.Errorf("histogram of %d bytes, want %d", len(b), s.TableWords()*8)
	}
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	t := &Table{Paused: w(0)&FlagPaused != 0, Drops: w(2), Claimed: w(3)}
	ew, kw := s.EntryWords(), s.KeyWords()
	for i := 0; i < s.Buckets(); i++ {
		base := HeaderWords + i*ew
		if w(base)&TagBit == 0 {
			continue
		}
		e := Entry{Key: make([]uint64, kw), Hitcount: w(base + 1 + kw), Vals: make([]uint64, len(s.Vals))}
		for k := range e.Key {
			e.Key[k] = w(base + 1 + k)
		}
		for k := range e.Vals {
			e.Vals[k] = w(base + 2 + kw + k)
		}
		if s.execname() {
			e.Comm = s.commAt(b, base)
		}
		if s.Tracker() != nil {
			e.Track = w(base + s.trackOff())
			e.Saved = make([]uint64, s.saveWords())
			for k := range e.Saved {
				e.Saved[k] = w(base + s.trackOff() + 2 + k)
			}
		}
		t.Entries = append(t.Entries, e)
	}
	if s.has("snapshot") {
		g := HeaderWords + s.Buckets()*ew
		if bk := w(g + 2); bk > 0 && bk <= uint64(s.Buckets()) {
			base := HeaderWords + int(bk-1)*ew
			t.Snapshot, t.SnapVal = true, w(g+1)
			t.SnapKey = make([]uint64, kw)
			for k := range t.SnapKey {
				t.SnapKey[k] = w(base + 1 + k)
			}
			if s.execname() {
				t.SnapComm = s.commAt(b, base)
			}
		}
	}
	t.Entries = merge(t.Entries)
	t.Hits = t.Drops
	for i := range t.Entries {
		t.Hits += t.Entries[i].Hitcount
	}
	return t, nil
}

// commAt is the comm kept in the entry at word base of table b (.execname).
func (s *Spec) commAt(b []byte, base int) string {
	c := b[8*(base+s.commOff()):][:CommLen]
	if n := bytes.IndexByte(c, 0); n >= 0 {
		c = c[:n]
	}
	return string(c)
}

// merge adds up entries with the same key: two writers that met a bucket being
// filled by a preempted or killed one may each have made an entry for one key.
func merge(es []Entry) []Entry {
	at := map[string]int{}
	out := es[:0]
	for _, e := range es {
		k := fmt.Sprint(e.Key)
		if i, ok := at[k]; ok {
			out[i].Hitcount += e.Hitcount
			for v := range e.Vals {
				out[i].Vals[v] += e.Vals[v]
			}
			continue
		}
		at[k] = len(out)
		out = append(out, e)
	}
	return out
}

// keyOffsets are the word offsets of each key in an entry's key.
func (s *Spec) keyOffsets() []int {
	off := make([]int, len(s.Keys))
	n := 0
	for i := range s.Keys {
		off[i] = n
		n += s.Keys[i].Words()
	}
	return off
}

// KeyString is a string key's text: its words' bytes up to the first NUL.
func KeyString(words []uint64) string {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	if n := bytes.IndexByte(b, 0); n >= 0 {
		b = b[:n]
	}
	return string(b)
}

func signExtend(v uint64, size int) int64 {
	sh := uint(64 - 8*size)
	return int64(v<<sh) >> sh
}

// SortEntries orders the entries by the trigger's sort keys (the kernel sorts the same way;
// ties, which it leaves in no particular order, are broken by the key so that the
// output is the same every time).
func (s *Spec) SortEntries(es []Entry) {
	off := s.keyOffsets()
	cmpKey := func(a, b *Entry, k int) int {
		f := &s.Keys[k]
		if f.String {
			x, y := KeyString(a.Key[off[k]:off[k]+f.Words()]), KeyString(b.Key[off[k]:off[k]+f.Words()])
			return cmp.Compare(x, y)
		}
		x, y := a.Key[off[k]], b.Key[off[k]]
		if f.Signed && f.Mod == ModNone {
			return cmp.Compare(signExtend(x, f.Size), signExtend(y, f.Size))
		}
		return cmp.Compare(x, y)
	}
	cmpIdx := func(a, b *Entry, i int) int {
		switch {
		case i == 0:
			return cmp.Compare(a.Hitcount, b.Hitcount)
		case i <= len(s.Vals):
			return cmp.Compare(a.Vals[i-1], b.Vals[i-1])
		}
		return cmpKey(a, b, i-1-len(s.Vals))
	}
	sort.SliceStable(es, func(i, j int) bool {
		a, b := &es[i], &es[j]
		for _, k := range s.Sort {
			c := cmpIdx(a, b, k.Index)
			if k.Descending {
				c = -c
			}
			if c != 0 {
				return c < 0
			}
		}
		for k := range s.Keys {
			if c := cmpKey(a, b, k); c != 0 {
				return c < 0
			}
		}
		return false
	})
}

// Print writes one histogram as the kernel's hist file shows it (hist_trigger_show):
// the trigger info, one line per entry in sort order, the totals.
func (s *Spec) Print(w io.Writer, t *Table, sym Symbolizer) {
	state := "active"
	if t.Paused {
		state = "paused"
	}
	fmt.Fprintf(w, "# event histogram\n#\n# trigger info: %s [%s]\n#\n\n", s.Info(), state)
	es := append([]Entry(nil), t.Entries...)
	s.SortEntries(es)
	cols := s.columns()
	// a .percent column's total and a .graph column's largest value, over the entries
	scale := make([]uint64, len(cols))
	for c, col := range cols {
		for i := range es {
			v := es[i].col(col)
			switch {
			case col.Display == DisplayPercent:
				scale[c] += v
			case col.Display == DisplayGraph && v > scale[c]:
				scale[c] = v
			}
		}
	}
	for i := range es {
		e := &es[i]
		var b bytes.Buffer
		s.writeKey(&b, e, sym)
		if !s.NoHitcount {
			fmt.Fprintf(&b, " hitcount: %10d", e.Hitcount)
		}
		for c, col := range cols {
			name, v := "hitcount", e.col(col)
			var f *Field
			if col.Val >= 0 {
				f = &s.Vals[col.Val]
				name = f.Name
			}
			switch {
			case col.Display == DisplayPercent:
				if pc, ok := percent(v, scale[c]); ok {
					fmt.Fprintf(&b, "  %s (%%): %3d.%02d", name, pc/100, pc%100)
				} else {
					fmt.Fprintf(&b, "  %s (%%):[ERROR]", name)
				}
			case col.Display == DisplayGraph:
				fmt.Fprintf(&b, "  %s: %20s", name, bar(v, scale[c]))
			case f.Mod == ModHex:
				fmt.Fprintf(&b, "  %s: %10x", name, v)
			case f.Signed:
				fmt.Fprintf(&b, "  %s: %10d", name, int64(v))
			default:
				fmt.Fprintf(&b, "  %s: %10d", name, v)
			}
		}
		s.writeTrack(&b, e)
		b.WriteByte('\n')
		w.Write(b.Bytes())
	}
	if a := s.Tracker(); a != nil && t.Snapshot { // the kernel's track_data_snapshot_print
		var b bytes.Buffer
		fmt.Fprintf(&b, "\nSnapshot taken (see kprewrite trace --snapshot).  Details:\n")
		fmt.Fprintf(&b, "\ttriggering value { %s($%s) }: %10d", a.Handler, a.Var, t.SnapVal)
		b.WriteString("\ttriggered by event with key: ")
		s.writeKey(&b, &Entry{Key: t.SnapKey, Comm: t.SnapComm}, sym)
		b.WriteByte('\n')
		w.Write(b.Bytes())
	}
	fmt.Fprintf(w, "\nTotals:\n    Hits: %d\n    Entries: %d\n    Dropped: %d\n", t.Hits, len(t.Entries), t.Drops)
}

// col is the entry's value in column c.
func (e *Entry) col(c Col) uint64 {
	if c.Val < 0 {
		return e.Hitcount
	}
	return e.Vals[c.Val]
}

// percent is v's share of total in hundredths of a percent, as the kernel computes it
// (__get_percentage: in 64-bit arithmetic; a zero total is 0% of nothing, and an error
// for anything else).
func percent(v, total uint64) (uint64, bool) {
	if total == 0 {
		return 0, v == 0
	}
	if v < math.MaxUint64/10000 {
		return v * 10000 / total, true
	}
	if total /= 10000; total == 0 {
		return 0, false
	}
	return v / total, true
}

// bar is a .graph column's 20 characters: v's share of the column's largest value in
// '#', padded with spaces (the kernel's __fill_bar_str).
func bar(v, max uint64) string {
	pc, ok := percent(v, max)
	if !ok {
		return "[ERROR]"
	}
	n := min(int(pc*20/10000), 20)
	return strings.Repeat("#", n) + strings.Repeat(" ", 20-n)
}

// writeKey writes an entry's key as the kernel's hist_trigger_print_key: "{ k: v, ... }".
func (s *Spec) writeKey(b *bytes.Buffer, e *Entry, sym Symbolizer) {
	off := s.keyOffsets()
	b.WriteString("{ ")
	for k := range s.Keys {
		if k > 0 {
			b.WriteString(", ")
		}
		s.printKey(b, &s.Keys[k], e, e.Key[off[k]:off[k]+s.Keys[k].Words()], sym)
	}
	if !s.Keys[len(s.Keys)-1].Stack { // a stack's last line ends it
		b.WriteByte(' ')
	}
	b.WriteString("}")
}

// writeTrack writes what the onmax()/onchange() actions keep in an entry, once per
// action that is not snapshot() (the kernel's print_actions and track_data_print).
func (s *Spec) writeTrack(b *bytes.Buffer, e *Entry) {
	for _, a := range s.Actions {
		if !a.Tracks() || a.Do == "snapshot" {
			continue
		}
		label := "max"
		if a.Handler == "onchange" {
			label = "changed"
		}
		fmt.Fprintf(b, "\n\t%s: %10d", label, e.Track)
		k := 0
		for i := range s.Save {
			f := &s.Save[i]
			words := e.Saved[k : k+f.Words()]
			k += f.Words()
			if f.String {
				fmt.Fprintf(b, "  %s: %-32s", f.Name, KeyString(words))
			} else if f.Signed { // signed as keys are (docs/triggers.md: different on purpose)
				fmt.Fprintf(b, "  %s: %10d", f.Name, int64(words[0]))
			} else {
				fmt.Fprintf(b, "  %s: %10d", f.Name, words[0])
			}
		}
	}
}

func (s *Spec) printKey(b *bytes.Buffer, f *Field, e *Entry, words []uint64, sym Symbolizer) {
	name := f.Name
	if f.Stack { // the kernel's hist_trigger_stacktrace_print: one %pS a line
		b.WriteString(name + ":\n")
		for _, pc := range words {
			if pc == 0 {
				break
			}
			str := fmt.Sprintf("0x%x", pc)
			if sym != nil {
				if n, o, sz, ok := sym(pc); ok {
					str = fmt.Sprintf("%s+0x%x/0x%x", n, o, sz)
				}
			}
			fmt.Fprintf(b, "%9c%s\n", ' ', str)
		}
		return
	}
	if f.String {
		fmt.Fprintf(b, "%s: %-50s", name, KeyString(words))
		return
	}
	v := words[0]
	switch f.Mod {
	case ModHex:
		fmt.Fprintf(b, "%s: %x", name, v)
	case ModSym, ModSymOffset:
		str := fmt.Sprintf("0x%x", v)
		if sym != nil {
			if n, o, sz, ok := sym(v); ok {
				str = n
				if f.Mod == ModSymOffset {
					str = fmt.Sprintf("%s+0x%x/0x%x", n, o, sz)
				}
			}
		}
		if f.Mod == ModSym {
			fmt.Fprintf(b, "%s: [%x] %-45s", name, v, str)
		} else {
			fmt.Fprintf(b, "%s: [%x] %-55s", name, v, str)
		}
	case ModExecname:
		fmt.Fprintf(b, "%s: %-16s[%10d]", name, e.Comm, v)
	case ModSyscall:
		n, ok := syscallNames[v]
		if !ok {
			n = "unknown_syscall"
		}
		fmt.Fprintf(b, "%s: %-30s[%3d]", name, n, v)
	case ModLog2:
		fmt.Fprintf(b, "%s: ~ 2^%-2d", name, v)
	case ModBuckets:
		fmt.Fprintf(b, "%s: ~ %d-%d", name, v, v+f.Buckets-1)
	default:
		if f.Signed {
			fmt.Fprintf(b, "%s: %10d", name, signExtend(v, f.Size))
		} else {
			fmt.Fprintf(b, "%s: %10d", name, v)
		}
	}
}

// SyscallName is the name .syscall prints for system call n.
func SyscallName(n uint64) (string, bool) {
	s, ok := syscallNames[n]
	return s, ok
}
