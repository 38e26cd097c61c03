package trampolines

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// DetourTemplate is the detour template of the runtime object (src/optprobe.S), the
// counterpart of the kernel's optprobe_template_*: bytes copied into each detour buffer
// with three 4-byte fields patched.
type DetourTemplate struct {
	Code  []byte // the template, fields zero; the relocated DCR follows it
	Entry int    // where the site's jmp rel32 lands
	Gate  int    // rel32 of "movl gate(%rip), %ecx": the point's gate word
	Index int    // imm32 of "movl $index, %esi": the point's runtime index
	Call  int    // rel32 of "call kprewrite_rt_optcall"
}

// Local symbols of the template's fields in Object.
const (
	symOptEntry = "kprw_optt_entry"
	symOptGate  = "kprw_optt_gate"
	symOptIndex = "kprw_optt_index"
	symOptCall  = "kprw_optt_call"
)

var optTemplate struct {
	once sync.Once
	t    *DetourTemplate
	err  error
}

// OptTemplate returns the detour template, read once from Object.
func OptTemplate() (*DetourTemplate, error) {
	optTemplate.once.Do(func() { optTemplate.t, optTemplate.err = parseTemplate(kprt.Object) })
	return optTemplate.t, optTemplate.err
}

func parseTemplate(obj []byte) (*DetourTemplate, error) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, fmt.Errorf("runtime object: %w", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("runtime object symbols: %w", err)
	}
	want := map[string]uint64{}
	var sec elf.SectionIndex
	for _, s := range syms {
		switch s.Name {
		case kprt.SymOptTemplate, kprt.SymOptTemplateEnd, symOptEntry, symOptGate, symOptIndex, symOptCall:
			if _, dup := want[s.Name]; dup {
				return nil, fmt.Errorf("runtime object: two symbols %s", s.Name)
			}
			if s.Name == kprt.SymOptTemplate {
				sec = s.Section
			}
			want[s.Name] = s.Value
		}
	}
	if len(want) != 6 {
		return nil, fmt.Errorf("runtime object: detour template symbols missing (have %v)", want)
	}
	for _, s := range syms {
		if _, ok := want[s.Name]; ok && s.Section != sec {
			return nil, fmt.Errorf("runtime object: %s is not in the template's section", s.Name)
		}
	}
	if int(sec) >= len(f.Sections) {
		return nil, errors.New("runtime object: template section out of range")
	}
	text := f.Sections[sec]
	data, err := text.Data()
	if err != nil {
		return nil, fmt.Errorf("runtime object %s: %w", text.Name, err)
	}
	start, end := want[kprt.SymOptTemplate], want[kprt.SymOptTemplateEnd]
	if start > end || end > uint64(len(data)) {
		return nil, fmt.Errorf("runtime object: template [%#x, %#x) outside %s", start, end, text.Name)
	}
	t := &DetourTemplate{Code: append([]byte(nil), data[start:end]...)}
	for _, fld := range []struct {
		name string
		dst  *int
		size uint64
	}{{symOptEntry, &t.Entry, 1}, {symOptGate, &t.Gate, 4}, {symOptIndex, &t.Index, 4}, {symOptCall, &t.Call, 4}} {
		v := want[fld.name]
		if v < start || v+fld.size > end {
			return nil, fmt.Errorf("runtime object: %s outside the template", fld.name)
		}
		*fld.dst = int(v - start)
	}
	// the fields are raw bytes in the assembly: no relocation may touch the template
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || elf.SectionIndex(s.Info) != sec {
			continue
		}
		rel, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("runtime object %s: %w", s.Name, err)
		}
		for i := 0; i+24 <= len(rel); i += 24 {
			if off := binary.LittleEndian.Uint64(rel[i:]); off >= start && off < end {
				return nil, fmt.Errorf("runtime object: relocation at template offset %#x", off-start)
			}
		}
	}
	return t, nil
}

// DetourLen is the size of a detour buffer whose relocated DCR is relocLen bytes.
func DetourLen(relocLen int) (int, error) {
	t, err := OptTemplate()
	if err != nil {
		return 0, err
	}
	return len(t.Code) + relocLen + kprt.SlotJmpBackLen, nil
}

// Detour returns the detour buffer, to be placed at vaddr at, of the jump-optimized
// point whose runtime index is point (Encoded.PointIndex): the template with its gate
// field aimed at gate (Encoded.GateAddr), its index field set and its call field aimed
// at optcall (the vaddr of SymOptCall after linking), then reloc, the DCR relocated to
// run at at+len(template) (as trampolines.Relocate makes it, with CallPushJmp), then a
// jmp rel32 to back (site + DCR length). The site's DCR becomes SiteJmp(site, L, at).
func Detour(at uint64, point int, gate, optcall uint64, reloc []byte, back uint64) ([]byte, error) {
	t, err := OptTemplate()
	if err != nil {
		return nil, err
	}
	if point < 0 || point >= kprt.MaxPoints {
		return nil, fmt.Errorf("detour at %#x: point index %d", at, point)
	}
	b := make([]byte, 0, len(t.Code)+len(reloc)+kprt.SlotJmpBackLen)
	b = append(b, t.Code...)
	g, err := rel32(at+uint64(t.Gate)+4, gate)
	if err != nil {
		return nil, fmt.Errorf("detour at %#x: gate: %w", at, err)
	}
	c, err := rel32(at+uint64(t.Call)+4, optcall)
	if err != nil {
		return nil, fmt.Errorf("detour at %#x: call: %w", at, err)
	}
	binary.LittleEndian.PutUint32(b[t.Gate:], g)
	binary.LittleEndian.PutUint32(b[t.Index:], uint32(point))
	binary.LittleEndian.PutUint32(b[t.Call:], c)
	b = append(b, reloc...)
	jb, err := JmpRel32(at+uint64(len(b)), back)
	if err != nil {
		return nil, fmt.Errorf("detour at %#x: %w", at, err)
	}
	return append(b, jb...), nil
}

// SiteJmp returns the dcrLen bytes that replace a DCR at site: jmp rel32 to the entry
// of the detour at detour, then int3 filler (a jump into the filler dies by SIGTRAP
// instead of running garbage; --verify-regions runs are how to show none happens).
func SiteJmp(site uint64, dcrLen int, detour uint64) ([]byte, error) {
	t, err := OptTemplate()
	if err != nil {
		return nil, err
	}
	return SiteJmpTo(site, dcrLen, detour+uint64(t.Entry))
}

// Count-only detours (PFCount; see "Count-only detours" in include/kprewrite_abi.h):
// the increments of the probes' hit counters, then the relocated DCR and the jmp back.
// With the runtime's per-CPU counting (CountRseq, src/rseq.S) a detour reads
// kprewrite_rt_rseq_off: 0 (before start-up, or no rseq area) takes lock incq on the
// trace file's counters; otherwise a call of kprewrite_rt_rseq_count per probe counts
// in this CPU's shard (~1 ns against ~4 ns for lock incq on some CPUs).
var (
	countIncOp    = []byte{0xf0, 0x48, 0xff, 0x05}                           // lock incq rel32(%rip)
	countRedZone  = []byte{0x48, 0x8d, 0x64, 0x24, 0x80}                     // lea -128(%rsp),%rsp
	countFlags    = []byte{0x50, 0x9f, 0x0f, 0x90, 0xc0}                     // push %rax; lahf; seto %al
	countUnflags  = []byte{0x04, 0x7f, 0x9e, 0x58}                           // add $0x7f,%al; sahf; pop %rax
	countUnRed    = []byte{0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00}   // lea 128(%rsp),%rsp
	countSave     = append(append([]byte{}, countRedZone...), countFlags...) // the flags, without rseq
	countRestore  = append(append([]byte{}, countUnflags...), countUnRed...) //
	countIncLen   = len(countIncOp) + 4                                      //
	countRseqLen  = 10                                                       // mov $off,%edx; call rel32
	countRseqHd   = []byte{0x51, 0x48, 0x8b, 0x0d}                           // push %rcx; mov rel32(%rip),%rcx
	countShortN   = kprt.CountShortN                                         // probes whose rseq block a jrcxz rel8 skips
	countMaxProbe = kprt.MaxProbesPerPoint
)

// CountRseq is where the linked runtime's per-CPU counting is: the u64 SymRseqOff and
// the routine SymRseqCount. The zero value makes detours that only lock incq.
//
// With Shardtab (SymRseqShardtab) and CS, a single-probe detour has the inline form:
// its own restartable sequence, CS the address of its rseq_cs descriptor (CountRseqCS,
// 32-byte aligned), instead of a call of SymRseqCount (~2 ns less a hit in a real
// program: python3.11's start-up). The descriptor holds absolute addresses, so only an
// image loaded where it was linked (ET_EXEC) uses it.
type CountRseq struct{ Off, Count, Shardtab, CS uint64 }

func (r CountRseq) on() bool { return r.Off != 0 && r.Count != 0 }

// Inline says whether a detour of nprobes probes counts in its own restartable sequence.
func (r CountRseq) Inline(nprobes int) bool {
	return r.on() && r.Shardtab != 0 && r.CS != 0 && nprobes == 1
}

// The inline form. Its cold part comes first, before the entry the site's jmp lands
// on, so the hot path runs straight from the entry to the jmp back with no taken jump:
//
//	 0 .long RSEQ_SIG                                          what the kernel checks
//	 4 abort: mov kprewrite_rt_rseq_off(%rip),%rcx; jmp restart
//	13 locked: lock incq hit(%rip); jmp post
//	23 entry: lea -128(%rsp),%rsp  (flags live: push %rax; lahf; seto %al)
//
// then, from the per-CPU block's start (absolute imm32 and disp32 addresses for the
// descriptor and the shard table leave one scratch register):
//
//	 0 push %rcx; mov kprewrite_rt_rseq_off(%rip),%rcx; jrcxz locked
//	10 restart: movq $cs,%fs:8(%rcx)                           rseq->rseq_cs = cs
//	19 start: movzbl %fs:4(%rcx),%ecx                          rseq->cpu_id, low byte
//	24 mov kprewrite_rt_rseq_shardtab(,%rcx,8),%rcx            this CPU's shard
//	32 incq off(%rcx)                                          the commit
//	39 post: pop %rcx  (flags live: add, sahf, pop %rax)  lea 128(%rsp),%rsp
const (
	rseqInlineCold    = 23 // the cold part before the entry
	rseqInlineAbort   = 4  // in the cold part
	rseqInlineLocked  = 13 // in the cold part
	rseqInlineLen     = 40 // the per-CPU block: push .. pop
	rseqInlineRestart = 10
	rseqInlineStart   = 19
	rseqInlinePost    = 39
	rseqSig           = 0x53053053 // glibc's RSEQ_SIG on x86
	// RseqCSSize is the size and alignment of a struct rseq_cs.
	RseqCSSize = 32
	// InlineAddrLimit bounds the addresses the inline form holds in imm32 and disp32
	// fields (sign-extended).
	InlineAddrLimit = 1 << 31
)

// inlineBlock is where the per-CPU block of the inline form at at starts.
func inlineBlock(at uint64, flagsDead bool) uint64 {
	p := at + rseqInlineCold + uint64(len(countRedZone))
	if !flagsDead {
		p += uint64(len(countFlags))
	}
	return p
}

// CountRseqCS returns the rseq_cs descriptor (version 0, flags 0, start_ip,
// post_commit_offset, abort_ip) of the inline-form count-only detour at at.
func CountRseqCS(at uint64, flagsDead bool) []byte {
	p := inlineBlock(at, flagsDead)
	le := binary.LittleEndian
	b := make([]byte, 8, RseqCSSize)
	b = le.AppendUint64(b, p+rseqInlineStart)
	b = le.AppendUint64(b, rseqInlinePost-rseqInlineStart)
	return le.AppendUint64(b, at+rseqInlineAbort)
}

// CountDetourEntryOff is where a count-only detour's site jmp lands: after the inline
// form's cold part, else its first byte.
func CountDetourEntryOff(nprobes int, rseq, inline bool) int {
	if rseq && inline && nprobes == 1 {
		return rseqInlineCold
	}
	return 0
}

// countRseqParts returns the lengths of the per-CPU part of a detour (after the red
// zone and flags, before pop %rcx): head, the mov and jrcxz (and, in the long form, the
// jmp to the rseq block) with, in the short form, the rseq block; tail, the rest.
func countRseqParts(nprobes int) (head, tail int, short bool) {
	short = nprobes <= countShortN
	rseqBlock := 1 + nprobes*countRseqLen + 1 // push %rdx; calls; pop %rdx
	locked := nprobes * countIncLen
	if short {
		// mov; jrcxz locked; rseq block; jmp done | locked
		return len(countRseqHd) + 4 + 2 + rseqBlock + 5, locked, true
	}
	// mov; jrcxz +5; jmp rseq | locked; jmp done; rseq block
	return len(countRseqHd) + 4 + 2 + 5, locked + 5 + rseqBlock, false
}

// CountDetourLen is the size of a count-only detour of nprobes probes whose relocated
// DCR is relocLen bytes; flagsDead drops the flags' save and restore; rseq adds the
// per-CPU counting, inline in its own restartable sequence (CountRseq.Inline).
func CountDetourLen(nprobes int, rseq, inline, flagsDead bool, relocLen int) int {
	return CountDetourRelocOff(nprobes, rseq, inline, flagsDead) + relocLen + kprt.SlotJmpBackLen
}

// CountDetourRelocOff is where the relocated DCR starts in a count-only detour.
func CountDetourRelocOff(nprobes int, rseq, inline, flagsDead bool) int {
	if rseq && inline && nprobes == 1 {
		n := rseqInlineCold + len(countRedZone) + rseqInlineLen + len(countUnRed)
		if !flagsDead {
			n += len(countFlags) + len(countUnflags)
		}
		return n
	}
	if !rseq {
		n := nprobes * countIncLen
		if !flagsDead {
			n += len(countSave) + len(countRestore)
		}
		return n
	}
	head, tail, _ := countRseqParts(nprobes)
	n := len(countRedZone) + head + tail + 1 + len(countUnRed) // 1: pop %rcx
	if !flagsDead {
		n += len(countFlags) + len(countUnflags)
	}
	return n
}

// CountDetour returns the count-only detour, to be placed at vaddr at, that adds 1 to
// the hit counter at each address of counters (Encoded.CounterAddr), or, with rs, at
// each byte offset of shards in this CPU's shard (the probe's runtime index times 8)
// once start-up has armed the per-CPU counting; it saves and restores the arithmetic
// flags unless flagsDead (the analysis proved them dead at the site), then runs reloc
// (the DCR relocated to run after the increments) and jumps to back. The site's jmp
// lands on its first byte (SiteJmpTo).
func CountDetour(at uint64, counters []uint64, shards []uint32, rs CountRseq, flagsDead bool, reloc []byte, back uint64) ([]byte, error) {
	if len(counters) == 0 || len(counters) > countMaxProbe {
		return nil, fmt.Errorf("count-only detour at %#x: %d probes", at, len(counters))
	}
	if rs.on() && len(shards) != len(counters) {
		return nil, fmt.Errorf("count-only detour at %#x: %d shard offsets for %d probes", at, len(shards), len(counters))
	}
	inline := rs.Inline(len(counters))
	b := make([]byte, 0, CountDetourLen(len(counters), rs.on(), inline, flagsDead, len(reloc)))
	fail := func(what string, err error) ([]byte, error) {
		return nil, fmt.Errorf("count-only detour at %#x: %s: %w", at, what, err)
	}
	// rel32 appends the rel32 of a 4-byte field that ends an instruction aimed at target
	rel := func(target uint64) error {
		d, err := rel32(at+uint64(len(b))+4, target)
		b = binary.LittleEndian.AppendUint32(b, d)
		return err
	}
	locked := func() error {
		for _, c := range counters {
			b = append(b, countIncOp...)
			if err := rel(c); err != nil {
				return err
			}
		}
		return nil
	}
	if !rs.on() {
		if !flagsDead {
			b = append(b, countSave...)
		}
		if err := locked(); err != nil {
			return fail("counter", err)
		}
		if !flagsDead {
			b = append(b, countRestore...)
		}
	} else if inline {
		if rs.CS >= InlineAddrLimit || rs.Shardtab >= InlineAddrLimit {
			return nil, fmt.Errorf("count-only detour at %#x: descriptor %#x or shard table %#x out of imm32 reach", at, rs.CS, rs.Shardtab)
		}
		le := binary.LittleEndian
		p := int(inlineBlock(at, flagsDead) - at)
		// the cold part: the signature, the abort handler, the locked increment
		b = le.AppendUint32(b, rseqSig)
		b = append(b, 0x48, 0x8b, 0x0d) // abort: mov rel32(%rip),%rcx
		err := rel(rs.Off)
		b = append(b, 0xeb, byte(p+rseqInlineRestart-(rseqInlineAbort+9))) // jmp restart
		err = errors.Join(err, locked())
		b = append(b, 0xeb, byte(p+rseqInlinePost-rseqInlineCold)) // jmp post
		if len(b) != rseqInlineCold {
			return nil, fmt.Errorf("count-only detour at %#x: internal error: a %d-byte cold part", at, len(b))
		}
		b = append(b, countRedZone...) // the entry
		if !flagsDead {
			b = append(b, countFlags...)
		}
		b = append(b, countRseqHd...) // push %rcx; mov rel32(%rip),%rcx
		err = errors.Join(err, rel(rs.Off))
		back8 := int8(rseqInlineLocked - (p + rseqInlineRestart))
		b = append(b, 0xe3, byte(back8))            // jrcxz locked
		b = append(b, 0x64, 0x48, 0xc7, 0x41, 0x08) // restart: movq $cs,%fs:8(%rcx)
		b = le.AppendUint32(b, uint32(rs.CS))
		b = append(b, 0x64, 0x0f, 0xb6, 0x49, 0x04) // start: movzbl %fs:4(%rcx),%ecx
		b = append(b, 0x48, 0x8b, 0x0c, 0xcd)       // mov shardtab(,%rcx,8),%rcx
		b = le.AppendUint32(b, uint32(rs.Shardtab))
		b = append(b, 0x48, 0xff, 0x81) // incq off(%rcx): the commit
		b = le.AppendUint32(b, shards[0])
		b = append(b, 0x59) // post: pop %rcx
		if err != nil {
			return fail("per-CPU counting", err)
		}
		if len(b)-p != rseqInlineLen {
			return nil, fmt.Errorf("count-only detour at %#x: internal error: a %d-byte inline block", at, len(b)-p)
		}
		if !flagsDead {
			b = append(b, countUnflags...)
		}
		b = append(b, countUnRed...)
	} else {
		b = append(b, countRedZone...)
		if !flagsDead {
			b = append(b, countFlags...)
		}
		head, tail, short := countRseqParts(len(counters))
		done := uint64(len(b) + head + tail) // at + done: pop %rcx
		rseqBlock := func() error {
			b = append(b, 0x52) // push %rdx
			for _, o := range shards {
				b = append(b, 0xba) // mov $o,%edx
				b = binary.LittleEndian.AppendUint32(b, o)
				b = append(b, 0xe8) // call kprewrite_rt_rseq_count
				if err := rel(rs.Count); err != nil {
					return err
				}
			}
			b = append(b, 0x5a) // pop %rdx
			return nil
		}
		b = append(b, countRseqHd...)
		if err := rel(rs.Off); err != nil {
			return fail("rseq offset", err)
		}
		jmp := func(target uint64) func() error {
			return func() error {
				b = append(b, 0xe9)
				return rel(target)
			}
		}
		var steps []func() error
		if short {
			b = append(b, 0xe3, byte(1+len(counters)*countRseqLen+1+5)) // jrcxz locked
			steps = []func() error{rseqBlock, jmp(at + done), locked}
		} else {
			b = append(b, 0xe3, 5) // jrcxz locked (over the jmp rseq)
			rseqAt := at + uint64(len(b)) + 5 + uint64(len(counters)*countIncLen) + 5
			steps = []func() error{jmp(rseqAt), locked, jmp(at + done), rseqBlock}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return fail("per-CPU counting", err)
			}
		}
		if uint64(len(b)) != done {
			return nil, fmt.Errorf("count-only detour at %#x: internal error: %d bytes before the restore, want %d", at, len(b), done)
		}
		b = append(b, 0x59) // pop %rcx
		if !flagsDead {
			b = append(b, countUnflags...)
		}
		b = append(b, countUnRed...)
	}
	b = append(b, reloc...)
	jb, err := JmpRel32(at+uint64(len(b)), back)
	if err != nil {
		return fail("jmp back", err)
	}
	return append(b, jb...), nil
}
