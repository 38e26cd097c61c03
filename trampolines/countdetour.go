package trampolines

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Count-only detours (PFCount; see "Count-only detours" in include/kprewrite_abi.h):
// the increments of the probes' hit counters, then the relocated DCR and the jmp back.
// With the runtime's per-CPU counting (CountRseq, src/rseq.S) a detour reads
// kprewrite_rt_rseq_off: 0 (before start-up, or no rseq area) takes lock incq on the
// trace file's counters; otherwise a call of kprewrite_rt_rseq_count per probe counts
// in this CPU's shard (~1 ns against ~4 ns for lock incq on some CPUs).
//
// The code comes from the assembled templates of runtime/src/countprobe.S (a section
// of the runtime object that no output carries), read by their labels: this file
// copies a template, repeats its per-probe regions, moves the jumps that cross them
// and writes the fields; it knows no instruction encoding of its own.

const (
	countSection = ".kprw_templates"
	countPrefix  = "kprw_cd."
	// RseqCSSize is the size and alignment of a struct rseq_cs.
	RseqCSSize = 32
	// InlineAddrLimit bounds the addresses the inline form holds in imm32 and disp32
	// fields (sign-extended).
	InlineAddrLimit = 1 << 31
)

// CountRseq is where the linked runtime's per-CPU counting is: the u64 SymRseqOff and
// the routine SymRseqCount. The zero value makes detours that only lock incq.
//
// With Shardtab (SymRseqShardtab) and CS, a single-probe detour has the inline form:
// its own restartable sequence, CS the address of its rseq_cs descriptor (CountRseqCS,
// 32-byte aligned), instead of a call of SymRseqCount (~2 ns less a hit in a real
// program: python3.11's start-up). The descriptor holds absolute addresses, so only an
// image loaded where it was linked (ET_EXEC) uses it.
//
// With PIC, the inline form reaches the descriptor and the shard table PC-relatively
// (an image loaded anywhere: a PIE, a shared library); the descriptor is then in
// writable memory, where the runtime writes its absolute addresses at start-up
// (SymRseqFix).
type CountRseq struct {
	Off, Count, Shardtab, CS uint64
	PIC                      bool
}

// InlineForm is a count-only detour's way of counting in its own restartable sequence.
type InlineForm uint8

const (
	InlineNone InlineForm = iota // lock incq, or calls of SymRseqCount
	InlineAbs                    // descriptor and shard table by absolute address
	InlinePIC                    // by PC-relative address
)

// form is the inline form a detour of nprobes probes takes.
func (r CountRseq) form(nprobes int) InlineForm {
	switch {
	case !r.Inline(nprobes):
		return InlineNone
	case r.PIC:
		return InlinePIC
	}
	return InlineAbs
}

func (r CountRseq) on() bool { return r.Off != 0 && r.Count != 0 }

// Inline says whether a detour of nprobes probes counts in its own restartable sequence.
func (r CountRseq) Inline(nprobes int) bool {
	return r.on() && r.Shardtab != 0 && r.CS != 0 && nprobes == 1
}

// CountLayout says where the parts of a count-only detour are.
type CountLayout struct {
	Entry int // where the site's jmp lands
	Reloc int // where the relocated DCR starts
}

// Len is the size of the detour whose relocated DCR is relocLen bytes.
func (l CountLayout) Len(relocLen int) int { return l.Reloc + relocLen + kprt.SlotJmpBackLen }

// CountDetourLayout is the layout of a count-only detour of nprobes probes: rseq adds
// the per-CPU counting, inline in its own restartable sequence (CountRseq.Inline);
// flagsDead drops the flags' save and restore.
func CountDetourLayout(nprobes int, rseq bool, form InlineForm, flagsDead bool) (CountLayout, error) {
	t, err := countTemplateFor(nprobes, rseq, form, flagsDead)
	if err != nil {
		return CountLayout{}, err
	}
	return CountLayout{Entry: t.pos(t.labels["entry"], nprobes), Reloc: t.expandedLen(nprobes)}, nil
}

// CountDetour returns the count-only detour, to be placed at vaddr at, that adds 1 to
// the hit counter at each address of counters (Encoded.CounterAddr), or, with rs, at
// each byte offset of shards in this CPU's shard (the probe's runtime index times 8)
// once start-up has armed the per-CPU counting; it saves and restores the arithmetic
// flags unless flagsDead (the analysis proved them dead at the site), then runs reloc
// (the DCR relocated to run at the CountDetourLayout's Reloc) and jumps to back. The
// site's jmp lands on the layout's Entry (SiteJmpTo).
func CountDetour(at uint64, counters []uint64, shards []uint32, rs CountRseq, flagsDead bool, reloc []byte, back uint64) ([]byte, error) {
	n := len(counters)
	if n == 0 || n > kprt.MaxProbesPerPoint {
		return nil, fmt.Errorf("count-only detour at %#x: %d probes", at, n)
	}
	if rs.on() && len(shards) != n {
		return nil, fmt.Errorf("count-only detour at %#x: %d shard offsets for %d probes", at, len(shards), n)
	}
	form := rs.form(n)
	if form == InlineAbs && (rs.CS >= InlineAddrLimit || rs.Shardtab >= InlineAddrLimit) {
		return nil, fmt.Errorf("count-only detour at %#x: descriptor %#x or shard table %#x out of imm32 reach", at, rs.CS, rs.Shardtab)
	}
	t, err := countTemplateFor(n, rs.on(), form, flagsDead)
	if err != nil {
		return nil, err
	}
	b, err := t.expand(n, len(reloc)+kprt.SlotJmpBackLen)
	if err != nil {
		return nil, fmt.Errorf("count-only detour at %#x: %w", at, err)
	}
	le := binary.LittleEndian
	for _, f := range t.fields {
		for i := range f.copies(n) {
			o := t.fieldPos(f.off, n, i)
			var v uint32
			var err error
			switch f.role {
			case "ctr":
				v, err = rel32(at+uint64(o)+4, counters[i])
			case "call":
				v, err = rel32(at+uint64(o)+4, rs.Count)
			case "off":
				v, err = rel32(at+uint64(o)+4, rs.Off)
			case "shard":
				v = shards[i]
			case "cs":
				v = uint32(rs.CS)
			case "shardtab":
				v = uint32(rs.Shardtab)
			case "csrel":
				v, err = rel32(at+uint64(o)+4, rs.CS)
			case "shardtabrel":
				v, err = rel32(at+uint64(o)+4, rs.Shardtab)
			}
			if err != nil {
				return nil, fmt.Errorf("count-only detour at %#x: %s: %w", at, f.role, err)
			}
			le.PutUint32(b[o:], v)
		}
	}
	b = append(b, reloc...)
	jb, err := JmpRel32(at+uint64(len(b)), back)
	if err != nil {
		return nil, fmt.Errorf("count-only detour at %#x: jmp back: %w", at, err)
	}
	return append(b, jb...), nil
}

// CountRseqCS returns the rseq_cs descriptor (version 0, flags 0, start_ip,
// post_commit_offset, abort_ip) of the count-only detour of inline form form at at (the
// PIC form's as the image was linked: the runtime adds the load bias).
func CountRseqCS(at uint64, form InlineForm, flagsDead bool) ([]byte, error) {
	if form == InlineNone {
		return nil, fmt.Errorf("count-only detour at %#x: no restartable sequence of its own", at)
	}
	t, err := countTemplateFor(1, true, form, flagsDead)
	if err != nil {
		return nil, err
	}
	start, post, abort := t.labels["rseq_start"], t.labels["rseq_post"], t.labels["abort"]
	le := binary.LittleEndian
	b := make([]byte, 8, RseqCSSize)
	b = le.AppendUint64(b, at+uint64(start))
	b = le.AppendUint64(b, uint64(post-start))
	return le.AppendUint64(b, at+uint64(abort)), nil
}

// countTemplate is one template of countprobe.S.
type countTemplate struct {
	name   string
	code   []byte
	labels map[string]int // offsets of the labels that name places (entry, abort...)
	reps   [][2]int       // the regions repeated per probe, in order
	rels   []countRel     // jumps whose displacement is moved when the regions grow
	fields []countField   // what CountDetour writes, in the order of the labels' names
}

type countRel struct{ off, size int }

type countField struct {
	role string // ctr, shard, call, off, cs, shardtab, csrel, shardtabrel
	off  int
	rep  bool // inside a repeated region: one per probe
}

// copies is how many times the field is in a detour of n probes.
func (f countField) copies(n int) int {
	if f.rep {
		return n
	}
	return 1
}

// countFieldRoles are the fields' roles; anything else a label names is a place.
var countFieldRoles = map[string]bool{"ctr": true, "shard": true, "call": true, "off": true, "cs": true, "shardtab": true,
	"csrel": true, "shardtabrel": true}

// countPlaces are the labels that name places; "repN" and "repN.end" too.
var countPlaces = map[string]bool{"start": true, "end": true, "entry": true, "abort": true, "rseq_start": true, "rseq_post": true}

// inRep is the index of the repeated region strictly containing off, or -1; a region's
// start is inside it, its end is not.
func (t *countTemplate) inRep(off int) int {
	for i, r := range t.reps {
		if off >= r[0] && off < r[1] {
			return i
		}
	}
	return -1
}

// pos maps an offset outside the repeated regions (or at a region's start or end) to
// its offset in a detour of n probes.
func (t *countTemplate) pos(off, n int) int {
	p := off
	for _, r := range t.reps {
		if r[1] <= off {
			p += (n - 1) * (r[1] - r[0])
		}
	}
	return p
}

// fieldPos is where the field at off is in copy i of a detour of n probes.
func (t *countTemplate) fieldPos(off, n, i int) int {
	if k := t.inRep(off); k >= 0 {
		r := t.reps[k]
		return t.pos(r[0], n) + i*(r[1]-r[0]) + off - r[0]
	}
	return t.pos(off, n)
}

func (t *countTemplate) expandedLen(n int) int { return t.pos(len(t.code), n) }

// expand returns the template's code for n probes, fields zero, with room for extra
// more bytes.
func (t *countTemplate) expand(n, extra int) ([]byte, error) {
	b := make([]byte, 0, t.expandedLen(n)+extra)
	prev := 0
	for _, r := range t.reps {
		b = append(b, t.code[prev:r[0]]...)
		for range n {
			b = append(b, t.code[r[0]:r[1]]...)
		}
		prev = r[1]
	}
	b = append(b, t.code[prev:]...)
	le := binary.LittleEndian
	for _, j := range t.rels {
		end := j.off + j.size
		var disp int
		if j.size == 1 {
			disp = int(int8(t.code[j.off]))
		} else {
			disp = int(int32(le.Uint32(t.code[j.off:])))
		}
		d := t.pos(end+disp, n) - t.pos(end, n)
		at := t.pos(j.off, n)
		if j.size == 1 {
			if d < math.MinInt8 || d > math.MaxInt8 {
				return nil, fmt.Errorf("internal error: template %s: a rel8 jump of %d bytes for %d probes", t.name, d, n)
			}
			b[at] = byte(int8(d))
		} else {
			le.PutUint32(b[at:], uint32(int32(d)))
		}
	}
	return b, nil
}

// countTemplateFor picks the template of a count-only detour.
func countTemplateFor(nprobes int, rseq bool, form InlineForm, flagsDead bool) (*countTemplate, error) {
	name := "locked"
	switch {
	case rseq && form == InlineAbs && nprobes == 1:
		name = "inline"
	case rseq && form == InlinePIC && nprobes == 1:
		name = "inlinepic"
	case rseq && nprobes <= kprt.CountShortN:
		name = "short"
	case rseq:
		name = "long"
	}
	if flagsDead {
		name += "_nf"
	}
	countTemplates.once.Do(func() { countTemplates.m, countTemplates.err = parseCountTemplates(kprt.Object) })
	if countTemplates.err != nil {
		return nil, countTemplates.err
	}
	t, ok := countTemplates.m[name]
	if !ok {
		return nil, fmt.Errorf("runtime object: no count-only detour template %s", name)
	}
	return t, nil
}

var countTemplates struct {
	once sync.Once
	m    map[string]*countTemplate
	err  error
}

// parseCountTemplates reads every template of the runtime object's countSection.
func parseCountTemplates(obj []byte) (map[string]*countTemplate, error) {
	data, raw, err := templateLabels(obj, countPrefix)
	if err != nil {
		return nil, err
	}
	m := map[string]*countTemplate{}
	for name, labels := range raw {
		t, err := countTemplateOf(name, labels, data)
		if err != nil {
			return nil, fmt.Errorf("runtime object: template %s: %w", name, err)
		}
		m[name] = t
	}
	return m, nil
}

// countTemplateOf makes the template name from its labels' values in data.
func countTemplateOf(name string, raw map[string]uint64, data []byte) (*countTemplate, error) {
	start, ok1 := raw["start"]
	end, ok2 := raw["end"]
	if !ok1 || !ok2 || start > end || end > uint64(len(data)) {
		return nil, fmt.Errorf("no bounds inside the section")
	}
	t := &countTemplate{name: name, code: data[start:end:end], labels: map[string]int{}}
	names := make([]string, 0, len(raw))
	for l := range raw {
		names = append(names, l)
	}
	sort.Strings(names)
	reps := map[int][2]int{}
	for _, l := range names {
		v := raw[l]
		if v < start || v > end {
			return nil, fmt.Errorf("label %s outside the template", l)
		}
		off := int(v - start)
		role := l
		if i := strings.LastIndexByte(l, '.'); i > 0 {
			if _, err := strconv.Atoi(l[i+1:]); err == nil {
				role = l[:i] // off.2, rel8.1: one more of a kind
			}
		}
		size := 4
		switch {
		case countPlaces[l]:
			t.labels[l] = off
			continue
		case strings.HasPrefix(l, "rep"):
			k, isEnd := strings.CutSuffix(l[3:], ".end")
			n, err := strconv.Atoi(k)
			if err != nil || n < 1 || n > 8 {
				return nil, fmt.Errorf("label %s", l)
			}
			r := reps[n]
			if isEnd {
				r[1] = off + 1 // +1: tells an end at 0 from a missing one
			} else {
				r[0] = off + 1
			}
			reps[n] = r
			continue
		case role == "rel8" || role == "rel32":
			if role == "rel8" {
				size = 1
			}
			t.rels = append(t.rels, countRel{off: off, size: size})
		case countFieldRoles[role]:
			t.fields = append(t.fields, countField{role: role, off: off})
		default:
			return nil, fmt.Errorf("label %s means nothing to the rewriter", l)
		}
		if off+size > len(t.code) {
			return nil, fmt.Errorf("field %s outside the template", l)
		}
	}
	if _, ok := t.labels["entry"]; !ok {
		return nil, errors.New("no entry")
	}
	for n := 1; n <= len(reps); n++ {
		r, ok := reps[n]
		if !ok || r[0] == 0 || r[1] == 0 || r[0] >= r[1] {
			return nil, fmt.Errorf("repeated region %d has no start or end, or is empty", n)
		}
		r[0], r[1] = r[0]-1, r[1]-1
		if k := len(t.reps); k > 0 && t.reps[k-1][1] > r[0] {
			return nil, fmt.Errorf("repeated region %d overlaps or precedes the one before", n)
		}
		t.reps = append(t.reps, r)
	}
	if len(reps) != len(t.reps) {
		return nil, fmt.Errorf("repeated regions not numbered from 1")
	}
	// where the regions grow, only a field may be inside one, and only the labelled
	// jumps cross them
	for l, off := range t.labels {
		if t.inRep(off) >= 0 && off != t.reps[t.inRep(off)][0] {
			return nil, fmt.Errorf("label %s inside a repeated region", l)
		}
	}
	le := binary.LittleEndian
	for _, j := range t.rels {
		end := j.off + j.size
		disp := int(int8(t.code[j.off]))
		if j.size == 4 {
			disp = int(int32(le.Uint32(t.code[j.off:])))
		}
		if tgt := end + disp; tgt < 0 || tgt > len(t.code) || t.inRep(j.off) >= 0 ||
			(t.inRep(tgt) >= 0 && tgt != t.reps[t.inRep(tgt)][0]) {
			return nil, fmt.Errorf("jump at %#x to %#x: outside the template, or into or out of a repeated region", j.off, tgt)
		}
	}
	for i := range t.fields {
		f := &t.fields[i]
		if k := t.inRep(f.off); k >= 0 {
			if f.off+4 > t.reps[k][1] {
				return nil, fmt.Errorf("field %s at %#x crosses the end of its repeated region", f.role, f.off)
			}
			f.rep = true
		} else if f.role == "call" || (len(t.reps) > 0 && (f.role == "ctr" || f.role == "shard")) {
			return nil, fmt.Errorf("a per-probe field %s at %#x outside the repeated regions", f.role, f.off)
		}
	}
	return t, nil
}
