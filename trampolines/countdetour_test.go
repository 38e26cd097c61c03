package trampolines

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	kprt "github.com/kprewrite/kprewrite/runtime"

	"golang.org/x/arch/x86/x86asm"
)

// TestCountDetour decodes count-only detours back: the increments address the given
// counters, the flags are saved and restored exactly when they are live, and the DCR
// copy and the jmp back follow.
func TestCountDetour(t *testing.T) {
	const at = 0x500000
	reloc := []byte{0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00} // mov 0(%rip),%rax (already relocated)
	counters := []uint64{0x600000, 0x600010, 0x600020}
	for _, dead := range []bool{true, false} {
		b, err := CountDetour(at, counters, nil, CountRseq{}, dead, reloc, 0x401007)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != countLen(t, len(counters), false, false, dead, len(reloc)) {
			t.Fatalf("dead=%v: %d bytes, CountDetourLayout says %d", dead, len(b), countLen(t, len(counters), false, false, dead, len(reloc)))
		}
		var ops []string
		var incs []uint64
		pc := uint64(at)
		for off := 0; off < len(b); {
			in, err := x86asm.Decode(b[off:], 64)
			if err != nil {
				t.Fatalf("dead=%v: decode at +%d: %v", dead, off, err)
			}
			if off == countLayout(t, len(counters), false, false, dead).Reloc {
				ops = append(ops, "|DCR")
			}
			ops = append(ops, in.Op.String())
			if in.Op == x86asm.INC {
				if in.Prefix[0]&0xff != x86asm.PrefixLOCK {
					t.Errorf("dead=%v: increment without lock at +%d", dead, off)
				}
				m := in.Args[0].(x86asm.Mem)
				incs = append(incs, pc+uint64(in.Len)+uint64(m.Disp))
			}
			if in.Op == x86asm.JMP {
				if tgt := pc + uint64(in.Len) + uint64(int64(in.Args[0].(x86asm.Rel))); tgt != 0x401007 {
					t.Errorf("dead=%v: jmp back to %#x", dead, tgt)
				}
			}
			off += in.Len
			pc += uint64(in.Len)
		}
		want := "INC INC INC |DCR MOV JMP"
		if !dead {
			want = "LEA PUSH LAHF SETO INC INC INC ADD SAHF POP LEA |DCR MOV JMP"
		}
		if got := strings.Join(ops, " "); got != want {
			t.Errorf("dead=%v: %s, want %s", dead, got, want)
		}
		for i, c := range counters {
			if i >= len(incs) || incs[i] != c {
				t.Errorf("dead=%v: increments of %#x, want %#x", dead, incs, counters)
				break
			}
		}
	}
	if _, err := CountDetour(at, nil, nil, CountRseq{}, true, reloc, 0x401007); err == nil {
		t.Error("a count-only detour with no counter accepted")
	}
	if _, err := CountDetour(at, []uint64{at + 1<<32}, nil, CountRseq{}, true, reloc, 0x401007); err == nil {
		t.Error("a counter out of rel32 reach accepted")
	}
}

// TestCountDetourRseq decodes count-only detours with per-CPU counting back, in the
// short form (a jrcxz skips the rseq block) and the long one (more probes than a rel8
// reaches over), with live and dead flags: kprewrite_rt_rseq_off is read into %rcx; 0
// leads to the locked increments of the counters, anything else to one call of
// kprewrite_rt_rseq_count per probe with its shard offset in %edx; both end at the
// same restore (pop %rcx, the flags), then the DCR and the jmp back.
func TestCountDetourRseq(t *testing.T) {
	const at, back, off, count = 0x500000, 0x401007, 0x700000, 0x480000
	reloc := []byte{0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00}
	rs := CountRseq{Off: off, Count: count}
	for _, n := range []int{1, 3, kprt.CountShortN, kprt.CountShortN + 1, kprt.MaxProbesPerPoint} {
		counters := make([]uint64, n)
		shards := make([]uint32, n)
		for i := range counters {
			counters[i] = 0x600000 + uint64(i)*16
			shards[i] = uint32(i * 8)
		}
		for _, dead := range []bool{true, false} {
			b, err := CountDetour(at, counters, shards, rs, dead, reloc, back)
			if err != nil {
				t.Fatalf("n=%d dead=%v: %v", n, dead, err)
			}
			if len(b) != countLen(t, n, true, false, dead, len(reloc)) {
				t.Fatalf("n=%d dead=%v: %d bytes, CountDetourLayout says %d", n, dead, len(b), countLen(t, n, true, false, dead, len(reloc)))
			}
			// decode every instruction, by address
			insns := map[uint64]x86asm.Inst{}
			var order []uint64
			for o := 0; o < len(b); {
				in, err := x86asm.Decode(b[o:], 64)
				if err != nil {
					t.Fatalf("n=%d dead=%v: decode at +%d: %v", n, dead, o, err)
				}
				insns[at+uint64(o)] = in
				order = append(order, at+uint64(o))
				o += in.Len
			}
			target := func(pc uint64) uint64 {
				in := insns[pc]
				return pc + uint64(in.Len) + uint64(int64(in.Args[0].(x86asm.Rel)))
			}
			// the restore: pop %rcx, where both paths meet
			relocAt := at + uint64(countLayout(t, n, true, false, dead).Reloc)
			restore := relocAt - 8 // lea 128(%rsp),%rsp
			if !dead {
				restore -= 4 // add, sahf, pop %rax
			}
			restore--
			if in, ok := insns[restore]; !ok || in.Op != x86asm.POP || in.Args[0] != x86asm.RCX {
				t.Fatalf("n=%d dead=%v: no pop %%rcx at %#x", n, dead, restore)
			}
			// walk both paths from the mov of the rseq offset
			var mov uint64
			for _, pc := range order {
				if in := insns[pc]; in.Op == x86asm.MOV && in.Args[0] == x86asm.RCX {
					mov = pc
					break
				}
			}
			in := insns[mov]
			if mem := in.Args[1].(x86asm.Mem); mem.Base != x86asm.RIP || mov+uint64(in.Len)+uint64(mem.Disp) != off {
				t.Fatalf("n=%d dead=%v: %v does not read the rseq offset", n, dead, in)
			}
			jrcxz := mov + uint64(in.Len)
			if insns[jrcxz].Op != x86asm.JRCXZ {
				t.Fatalf("n=%d dead=%v: %v after the mov", n, dead, insns[jrcxz])
			}
			walk := func(pc uint64) (incs []uint64, calls []uint32) {
				var edx uint32
				for steps := 0; pc != restore && steps < 1000; steps++ {
					in, ok := insns[pc]
					if !ok {
						t.Fatalf("n=%d dead=%v: path runs off the code at %#x", n, dead, pc)
					}
					switch in.Op {
					case x86asm.JMP:
						pc = target(pc)
						continue
					case x86asm.INC:
						if in.Prefix[0]&0xff != x86asm.PrefixLOCK {
							t.Errorf("n=%d dead=%v: increment without lock", n, dead)
						}
						incs = append(incs, pc+uint64(in.Len)+uint64(in.Args[0].(x86asm.Mem).Disp))
					case x86asm.MOV:
						edx = uint32(in.Args[1].(x86asm.Imm))
					case x86asm.CALL:
						if target(pc) != count {
							t.Errorf("n=%d dead=%v: call of %#x", n, dead, target(pc))
						}
						calls = append(calls, edx)
					}
					pc += uint64(in.Len)
				}
				return incs, calls
			}
			incs, calls := walk(target(jrcxz))
			if len(calls) != 0 || len(incs) != n {
				t.Fatalf("n=%d dead=%v: the locked path makes %d increments and %d calls", n, dead, len(incs), len(calls))
			}
			for i := range incs {
				if incs[i] != counters[i] {
					t.Fatalf("n=%d dead=%v: locked increments of %#x, want %#x", n, dead, incs, counters)
				}
			}
			incs, calls = walk(jrcxz + uint64(insns[jrcxz].Len))
			if len(incs) != 0 || len(calls) != n {
				t.Fatalf("n=%d dead=%v: the rseq path makes %d increments and %d calls", n, dead, len(incs), len(calls))
			}
			for i := range calls {
				if calls[i] != shards[i] {
					t.Fatalf("n=%d dead=%v: shard offsets %v, want %v", n, dead, calls, shards)
				}
			}
			if in := insns[order[len(order)-1]]; in.Op != x86asm.JMP || target(order[len(order)-1]) != back {
				t.Errorf("n=%d dead=%v: ends with %v", n, dead, in)
			}
			if !bytes.Equal(b[relocAt-at:relocAt-at+uint64(len(reloc))], reloc) {
				t.Errorf("n=%d dead=%v: the DCR copy is not at the layout's Reloc", n, dead)
			}
		}
	}
	if _, err := CountDetour(at, []uint64{0x600000}, nil, rs, true, reloc, back); err == nil {
		t.Error("a per-CPU detour without shard offsets accepted")
	}
}

// TestCountDetourRseqInline decodes the inline form back (one probe, CountRseq.Shardtab
// and CS set), flags live and dead: before the entry, the signature, the abort handler
// (reload %rcx, jmp restart) and the locked increment (then jmp post); from the entry,
// the rseq offset read into %rcx, 0 leading to the locked increment, else rseq_cs armed
// with CS, cpu_id read, the CPU's shard taken from the shard table and the probe's u64
// in it incremented (the commit), straight on to pop %rcx, the DCR and the jmp back
// with no taken jump. The descriptor (CountRseqCS) spans exactly the cpu_id read
// through the commit.
func TestCountDetourRseqInline(t *testing.T) {
	const at, back, off, count, tab, cs, ctr, shard = 0x500000, 0x401007, 0x700000, 0x480000, 0x710000, 0x520000, 0x600000, 0x38
	reloc := []byte{0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00}
	rs := CountRseq{Off: off, Count: count, Shardtab: tab, CS: cs}
	if !rs.Inline(1) || rs.Inline(2) || (CountRseq{Off: off, Count: count, Shardtab: tab}).Inline(1) {
		t.Fatal("Inline: only one probe with a descriptor")
	}
	far := rs
	far.CS = InlineAddrLimit
	if _, err := CountDetour(at, []uint64{ctr}, []uint32{shard}, far, true, reloc, back); err == nil {
		t.Error("a descriptor out of imm32 reach accepted")
	}
	if countLayout(t, 1, true, true, true).Entry != 23 || countLayout(t, 2, true, true, true).Entry != 0 || countLayout(t, 1, true, false, true).Entry != 0 {
		t.Error("CountDetourLayout: entry")
	}
	for _, dead := range []bool{true, false} {
		b, err := CountDetour(at, []uint64{ctr}, []uint32{shard}, rs, dead, reloc, back)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != countLen(t, 1, true, true, dead, len(reloc)) {
			t.Fatalf("dead=%v: %d bytes, CountDetourLayout says %d", dead, len(b), countLen(t, 1, true, true, dead, len(reloc)))
		}
		relocAt := at + uint64(countLayout(t, 1, true, true, dead).Reloc)
		if !bytes.Equal(b[relocAt-at:relocAt-at+uint64(len(reloc))], reloc) {
			t.Fatalf("dead=%v: the DCR copy is not at the layout's Reloc", dead)
		}
		desc, err := CountRseqCS(at, InlineAbs, dead)
		if err != nil {
			t.Fatal(err)
		}
		le := binary.LittleEndian
		start, post, abort := le.Uint64(desc[8:]), le.Uint64(desc[8:])+le.Uint64(desc[16:]), le.Uint64(desc[24:])
		if len(desc) != RseqCSSize || le.Uint64(desc) != 0 {
			t.Fatalf("dead=%v: descriptor % x", dead, desc)
		}
		if abort != at+4 || le.Uint32(b) != 0x53053053 || (abort >= start && abort < post) {
			t.Fatalf("dead=%v: abort handler at %#x", dead, abort)
		}
		insns := map[uint64]x86asm.Inst{}
		for o := 4; o < len(b); { // the signature is data
			in, err := x86asm.Decode(b[o:], 64)
			if err != nil {
				t.Fatalf("dead=%v: decode at +%d: %v", dead, o, err)
			}
			insns[at+uint64(o)] = in
			o += in.Len
		}
		rel := func(pc uint64) uint64 {
			in, ok := insns[pc]
			if !ok {
				t.Fatalf("dead=%v: no instruction at %#x", dead, pc)
			}
			if a, ok := in.Args[0].(x86asm.Rel); ok {
				return pc + uint64(in.Len) + uint64(int64(a))
			}
			for _, a := range in.Args {
				if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
					return pc + uint64(in.Len) + uint64(m.Disp)
				}
			}
			t.Fatalf("dead=%v: %v at %#x has no target", dead, in, pc)
			return 0
		}
		mem := func(pc uint64, i int) x86asm.Mem {
			m, ok := insns[pc].Args[i].(x86asm.Mem)
			if !ok {
				t.Fatalf("dead=%v: %v at %#x: no memory operand %d", dead, insns[pc], pc, i)
			}
			return m
		}
		// the hot path from the entry: only the jrcxz branches, and it falls through
		entry := at + uint64(countLayout(t, 1, true, true, true).Entry)
		var path []uint64
		for pc := entry; pc < relocAt; pc += uint64(insns[pc].Len) {
			if _, ok := insns[pc]; !ok {
				t.Fatalf("dead=%v: the hot path runs off the code at %#x", dead, pc)
			}
			path = append(path, pc)
		}
		var mov, jrcxz uint64
		for _, pc := range path {
			switch in := insns[pc]; in.Op {
			case x86asm.JMP, x86asm.CALL, x86asm.RET:
				t.Fatalf("dead=%v: %v on the hot path", dead, in)
			case x86asm.MOV:
				if in.Args[0] == x86asm.RCX && mov == 0 {
					mov = pc
				}
			case x86asm.JRCXZ:
				jrcxz = pc
			}
		}
		if mov == 0 || rel(mov) != off || jrcxz != mov+7 {
			t.Fatalf("dead=%v: no read of the rseq offset and jrcxz", dead)
		}
		restart := jrcxz + 2
		if in, m := insns[restart], mem(restart, 0); in.Op != x86asm.MOV || m.Segment != x86asm.FS || m.Base != x86asm.RCX ||
			m.Disp != 8 || in.Args[1] != x86asm.Imm(cs) {
			t.Fatalf("dead=%v: arming %v", dead, in)
		}
		if start != restart+9 {
			t.Fatalf("dead=%v: the critical section starts at %#x, want %#x", dead, start, restart+9)
		}
		if in, m := insns[start], mem(start, 1); in.Op != x86asm.MOVZX || in.Args[0] != x86asm.ECX || m.Segment != x86asm.FS || m.Base != x86asm.RCX || m.Disp != 4 {
			t.Fatalf("dead=%v: cpu_id read %v", dead, in)
		}
		if in, m := insns[start+5], mem(start+5, 1); in.Args[0] != x86asm.RCX || m.Base != 0 || m.Index != x86asm.RCX || m.Scale != 8 || m.Disp != tab {
			t.Fatalf("dead=%v: shard lookup %v", dead, in)
		}
		commit := post - 7
		if in, m := insns[commit], mem(commit, 0); in.Op != x86asm.INC || in.Prefix[0]&0xff == x86asm.PrefixLOCK ||
			m.Base != x86asm.RCX || m.Disp != shard || commit != start+5+8 {
			t.Fatalf("dead=%v: commit %v at %#x", dead, in, commit)
		}
		if in := insns[post]; in.Op != x86asm.POP || in.Args[0] != x86asm.RCX {
			t.Fatalf("dead=%v: after the commit %v", dead, in)
		}
		// the cold part
		if in := insns[abort]; in.Op != x86asm.MOV || in.Args[0] != x86asm.RCX || rel(abort) != off || rel(abort+7) != restart {
			t.Fatalf("dead=%v: abort handler %v, then to %#x", dead, in, rel(abort+7))
		}
		locked := rel(jrcxz)
		if in := insns[locked]; in.Op != x86asm.INC || in.Prefix[0]&0xff != x86asm.PrefixLOCK || rel(locked) != ctr || rel(locked+8) != post {
			t.Fatalf("dead=%v: locked path %v", dead, in)
		}
		last := relocAt + uint64(len(reloc))
		if in := insns[last]; in.Op != x86asm.JMP || rel(last) != back {
			t.Errorf("dead=%v: ends with %v", dead, in)
		}
	}
}

func countLayout(t *testing.T, n int, rseq, inline, dead bool) CountLayout {
	t.Helper()
	form := InlineNone
	if inline {
		form = InlineAbs
	}
	l, err := CountDetourLayout(n, rseq, form, dead)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func countLen(t *testing.T, n int, rseq, inline, dead bool, relocLen int) int {
	return countLayout(t, n, rseq, inline, dead).Len(relocLen)
}

// TestCountTemplateRefuses: a template whose labels the rewriter cannot follow is
// refused when read, not turned into a detour that jumps into a copied region.
func TestCountTemplateRefuses(t *testing.T) {
	// 0: jrcxz +1 (rel8.1 at 1); 2: nop; 3..11: the repeated lock incq; 11: ret
	code := []byte{0xe3, 0x01, 0x90, 0xf0, 0x48, 0xff, 0x05, 0, 0, 0, 0, 0xc3}
	good := map[string]uint64{"start": 0, "end": 12, "entry": 0, "rel8.1": 1, "rep1": 3, "rep1.end": 11, "ctr": 7}
	tm, err := countTemplateOf("t", good, code)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tm.expand(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 28 || b[1] != 1 || b[27] != 0xc3 || tm.fieldPos(7, 3, 2) != 23 {
		t.Fatalf("expanded to % x", b)
	}
	for name, change := range map[string]map[string]uint64{
		"no end":            {"end": 99},
		"no entry":          {"entry": 99},
		"unknown label":     {"mystery": 2},
		"field past end":    {"off": 10},
		"region not closed": {"rep1.end": 99},
		"field outside":     {"ctr": 2},
		"jump from inside":  {"rel8.1": 4},
		"place inside":      {"abort": 5},
		"rep numbered 2":    {"rep1": 99, "rep1.end": 99, "rep2": 3, "rep2.end": 11},
	} {
		labels := map[string]uint64{}
		for k, v := range good {
			labels[k] = v
		}
		for k, v := range change {
			if v == 99 {
				delete(labels, k)
			} else {
				labels[k] = v
			}
		}
		_, err := countTemplateOf("t", labels, code)
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
		t.Logf("%s: %v", name, err)
	}
	// a jump into the middle of the repeated region
	bad := append([]byte(nil), code...)
	bad[1] = 3
	if _, err := countTemplateOf("t", good, bad); err == nil {
		t.Error("a jump into a repeated region accepted")
	}
}

// TestCountDetourRseqInlinePIC: the inline form of an image loaded anywhere reaches its
// descriptor and the shard table PC-relatively through %rdx, pushed after the head and
// popped after the commit (the locked path, taken before the push, pops %rcx only);
// the descriptor (as linked: the runtime adds the bias) spans the cpu_id read through
// the commit, and its abort handler follows the signature.
func TestCountDetourRseqInlinePIC(t *testing.T) {
	const at, back, off, count, tab, cs, ctr, shard = 0x5500000000, 0x5500001007, 0x5500200000, 0x5500100000, 0x5500210000, 0x5500300000, 0x5500400000, 0x38
	reloc := []byte{0x48, 0x8b, 0x05, 0x00, 0x00, 0x00, 0x00}
	rs := CountRseq{Off: off, Count: count, Shardtab: tab, CS: cs, PIC: true}
	for _, dead := range []bool{true, false} {
		b, err := CountDetour(at, []uint64{ctr}, []uint32{shard}, rs, dead, reloc, back)
		if err != nil {
			t.Fatal(err)
		}
		l, err := CountDetourLayout(1, true, InlinePIC, dead)
		if err != nil || len(b) != l.Len(len(reloc)) || l.Entry != 23 {
			t.Fatalf("dead=%v: %d bytes, layout %+v (%v)", dead, len(b), l, err)
		}
		desc, err := CountRseqCS(at, InlinePIC, dead)
		if err != nil {
			t.Fatal(err)
		}
		le := binary.LittleEndian
		start, post, abort := le.Uint64(desc[8:]), le.Uint64(desc[8:])+le.Uint64(desc[16:]), le.Uint64(desc[24:])
		if abort != at+4 || le.Uint32(b) != 0x53053053 {
			t.Fatalf("dead=%v: abort handler at %#x", dead, abort)
		}
		insns := map[uint64]x86asm.Inst{}
		for o := 4; o < len(b); {
			in, err := x86asm.Decode(b[o:], 64)
			if err != nil {
				t.Fatalf("dead=%v: decode at +%d: %v", dead, o, err)
			}
			insns[at+uint64(o)] = in
			o += in.Len
		}
		ripTo := func(pc uint64, arg int) uint64 {
			in := insns[pc]
			m, ok := in.Args[arg].(x86asm.Mem)
			if !ok || m.Base != x86asm.RIP {
				t.Fatalf("dead=%v: %v at %#x is not PC-relative", dead, in, pc)
			}
			return pc + uint64(in.Len) + uint64(m.Disp)
		}
		entry := uint64(at) + 23
		p := entry + 5 // lea -128(%rsp),%rsp
		if !dead {
			p += 5
		}
		if insns[p].Op != x86asm.PUSH || insns[p+1].Op != x86asm.MOV || ripTo(p+1, 1) != off || insns[p+8].Op != x86asm.JRCXZ {
			t.Fatalf("dead=%v: head %v %v %v", dead, insns[p], insns[p+1], insns[p+8])
		}
		push := p + 10
		if in := insns[push]; in.Op != x86asm.PUSH || in.Args[0] != x86asm.RDX {
			t.Fatalf("dead=%v: %v after the head", dead, in)
		}
		lea := push + 1
		if in := insns[lea]; in.Op != x86asm.LEA || in.Args[0] != x86asm.RDX || ripTo(lea, 1) != cs {
			t.Fatalf("dead=%v: descriptor %v", dead, in)
		}
		arm := lea + 7
		if in := insns[arm]; in.Op != x86asm.MOV || in.Args[1] != x86asm.RDX || in.Args[0].(x86asm.Mem).Segment != x86asm.FS {
			t.Fatalf("dead=%v: arming %v", dead, in)
		}
		if start != arm+5 || insns[start].Op != x86asm.MOVZX {
			t.Fatalf("dead=%v: the critical section starts at %#x with %v", dead, start, insns[start])
		}
		if in := insns[start+5]; in.Op != x86asm.LEA || ripTo(start+5, 1) != tab {
			t.Fatalf("dead=%v: shard table %v", dead, in)
		}
		if m, ok := insns[start+12].Args[1].(x86asm.Mem); !ok || m.Base != x86asm.RDX || m.Index != x86asm.RCX || m.Scale != 8 {
			t.Fatalf("dead=%v: shard lookup %v", dead, insns[start+12])
		}
		commit := post - 7
		if in := insns[commit]; in.Op != x86asm.INC || commit != start+16 || in.Args[0].(x86asm.Mem).Disp != shard {
			t.Fatalf("dead=%v: commit %v at %#x", dead, in, commit)
		}
		if insns[post].Op != x86asm.POP || insns[post].Args[0] != x86asm.RDX || insns[post+1].Args[0] != x86asm.RCX {
			t.Fatalf("dead=%v: after the commit %v %v", dead, insns[post], insns[post+1])
		}
		// the cold part: abort reloads %rcx and restarts at the lea (pushed %rdx kept);
		// the locked increment goes to the pop of %rcx alone
		jmp := abort + 7
		if in := insns[abort]; in.Op != x86asm.MOV || ripTo(abort, 1) != off || jmp+uint64(insns[jmp].Len)+uint64(int64(insns[jmp].Args[0].(x86asm.Rel))) != lea {
			t.Fatalf("dead=%v: abort handler %v", dead, in)
		}
		locked := uint64(at) + 13
		lj := locked + 8
		if in := insns[locked]; in.Op != x86asm.INC || ripTo(locked, 0) != ctr || lj+uint64(insns[lj].Len)+uint64(int64(insns[lj].Args[0].(x86asm.Rel))) != post+1 {
			t.Fatalf("dead=%v: locked path %v", dead, in)
		}
	}
}
