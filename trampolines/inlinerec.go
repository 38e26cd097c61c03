package trampolines

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Inline records ("Inline records" in include/kprewrite_abi.h): code before a
// jump-optimized point's detour that writes its event's record itself, the kernel's
// optprobe template with the probe's work fixed in it (the probe, the record's size and
// the registers written in), where the shared body would load the point's line, test
// its shape, save eight registers and copy the registers through the line's ops.
// Anything it does not decide goes on to the point's stub with everything as it came.
//
// The code comes from the assembled templates of runtime/src/inlinerec.S (the runtime
// object's countSection, which no output carries), read by their labels; only the
// stores of the registers into the record are made here.

const inlineRecPrefix = "kprw_ir."

// RedZoneStepLen is the length of "lea -128(%rsp),%rsp", the first instruction of a
// detour (the template's entry) and of an inline record.
const RedZoneStepLen = 5

// StartsWithRedZoneStep says whether code starts with that instruction.
func StartsWithRedZoneStep(code []byte) bool { return bytes.HasPrefix(code, PrefilterSave(true)) }

// InlineRecMaxRegs is the most registers an inline record stores (optprobe.S's .Lseq:
// a line's count fixes up to three).
const InlineRecMaxRegs = 3

// InlineRecSyms are the linked runtime's words the code reads.
type InlineRecSyms struct {
	RT, TctxTab, TblkTab uint64 // kprw_rt, kprw_tctx_tab, kprw_tblk_tab
}

// InlineRecSpec is what an inline record is made of.
type InlineRecSpec struct {
	Regs      []int  // the x86 numbers of the registers the record's data holds, in order
	FlagsDead bool   // the analysis proved the arithmetic flags dead at the site
	Probe     uint32 // the probe's runtime index (the record's probe)
	IROpen    uint64 // vaddr of the probe's iropen (Encoded.PFGenAddr: the same word)
	Syms      InlineRecSyms
}

// ErrNoInlineRec says a point's record is not of the shape an inline record writes.
var ErrNoInlineRec = errors.New("the record cannot be written inline")

type inlineRecTemplate struct {
	code    []byte
	entry   int
	data    int
	decline int
	fields  []inlineRecField
}

type inlineRecField struct {
	role string // rt, tctx, tblk, topen, stub; rlen, size, pi; commit
	off  int    // the field's offset in the template
	end  int    // a rel32's instruction end
}

var inlineRecTemplates struct {
	once sync.Once
	m    map[string]*inlineRecTemplate
	err  error
}

// inlineRecFrame is where the code's saves leave the registers it uses, by x86
// number: the frame's word index after the flags' (src/inlinerec.S).
var inlineRecFrame = map[int]int{11: 0, 10: 1, 9: 2, 2: 3, 0: 4, 1: 5}

// InlineRecLen is the length of the inline record of spec, its relocated DCR
// (relocLen bytes) and its jmp back included.
func InlineRecLen(spec InlineRecSpec, relocLen int) (int, error) {
	t, stores, err := inlineRecParts(spec)
	if err != nil {
		return 0, err
	}
	return len(t.code) + len(stores) + relocLen + kprt.SlotJmpBackLen, nil
}

// InlineRecEntry is the offset of the inline record's entry (where the site's jmp
// lands) from its start.
func InlineRecEntry(flagsDead bool) (int, error) {
	t, err := inlineRecTemplate1(flagsDead)
	if err != nil {
		return 0, err
	}
	return t.entry, nil
}

// InlineRecDecline is the offset from an inline record's start of its way out to the
// detour (what it does not decide), for debuggers and tests; the same in both forms.
func InlineRecDecline() (int, error) {
	f, err := inlineRecTemplate1(false)
	if err != nil {
		return 0, err
	}
	nf, err := inlineRecTemplate1(true)
	if err != nil {
		return 0, err
	}
	if f.decline != nf.decline {
		return 0, errors.New("runtime object: the inline record templates decline at different offsets")
	}
	return f.decline, nil
}

// InlineRec returns the inline record of spec placed at at: the template's code, the
// stores of spec.Regs, the rest of the template, reloc (the DCR relocated to run right
// after them) and a jmp to back. What it declines enters stub, the point's detour
// right after its first instruction (the lea over the red zone, done already).
func InlineRec(at uint64, spec InlineRecSpec, stub uint64, reloc []byte, back uint64) ([]byte, error) {
	t, stores, err := inlineRecParts(spec)
	if err != nil {
		return nil, fmt.Errorf("inline record at %#x: %w", at, err)
	}
	b := make([]byte, 0, len(t.code)+len(stores)+len(reloc)+kprt.SlotJmpBackLen)
	b = append(b, t.code[:t.data]...)
	b = append(b, stores...)
	b = append(b, t.code[t.data:]...)
	shift := func(off int) int { // an offset of the template in b
		if off >= t.data {
			return off + len(stores)
		}
		return off
	}
	le := binary.LittleEndian
	n := uint32(len(spec.Regs))
	for _, f := range t.fields {
		o := shift(f.off)
		var target uint64
		switch f.role {
		case "rt":
			target = spec.Syms.RT + uint64(le.Uint32(t.code[f.off:]))
		case "tctx":
			target = spec.Syms.TctxTab
		case "tblk":
			target = spec.Syms.TblkTab
		case "topen":
			target = spec.IROpen
		case "stub":
			target = stub
		case "rlen":
			le.PutUint32(b[o:], 8*n|kprt.CRecHit)
			continue
		case "size":
			le.PutUint32(b[o:], 16+8*n)
			continue
		case "pi":
			le.PutUint32(b[o:], spec.Probe)
			continue
		case "commit":
			le.PutUint16(b[o:], uint16(8*n|kprt.CRecCommitted))
			continue
		}
		v, err := rel32(at+uint64(shift(f.end)), target)
		if err != nil {
			return nil, fmt.Errorf("inline record at %#x: %s: %w", at, f.role, err)
		}
		le.PutUint32(b[o:], v)
	}
	b = append(b, reloc...)
	jb, err := JmpRel32(at+uint64(len(b)), back)
	if err != nil {
		return nil, fmt.Errorf("inline record at %#x: jmp back: %w", at, err)
	}
	return append(b, jb...), nil
}

// inlineRecParts is spec's template and the stores of its registers into the record
// (%rdx: the record, its data from 16): from the register where the code leaves it as
// it was, else from the frame where the code saved it.
func inlineRecParts(spec InlineRecSpec) (*inlineRecTemplate, []byte, error) {
	if len(spec.Regs) > InlineRecMaxRegs {
		return nil, nil, fmt.Errorf("%w: %d registers", ErrNoInlineRec, len(spec.Regs))
	}
	t, err := inlineRecTemplate1(spec.FlagsDead)
	if err != nil {
		return nil, nil, err
	}
	flagsWord := 1
	if spec.FlagsDead {
		flagsWord = 0
	}
	var b []byte
	for k, r := range spec.Regs {
		disp := byte(16 + 8*k)
		switch w, saved := inlineRecFrame[r]; {
		case r < 0 || r > 15 || r == 4:
			return nil, nil, fmt.Errorf("%w: register %d", ErrNoInlineRec, r)
		case saved:
			// movq 8w(%rsp), %rax; movq %rax, disp(%rdx)
			b = append(b, 0x48, 0x8b, 0x44, 0x24, byte(8*(w+flagsWord)), 0x48, 0x89, 0x42, disp)
		default:
			// movq %r, disp(%rdx)
			rex := byte(0x48)
			if r >= 8 {
				rex |= 4
			}
			b = append(b, rex, 0x89, 0x40|byte(r&7)<<3|2, disp)
		}
	}
	return t, b, nil
}

// inlineRecTemplate1 is the template with the flags' save (f) or without (nf).
func inlineRecTemplate1(flagsDead bool) (*inlineRecTemplate, error) {
	inlineRecTemplates.once.Do(func() {
		inlineRecTemplates.m, inlineRecTemplates.err = parseInlineRecTemplates(kprt.Object)
	})
	if inlineRecTemplates.err != nil {
		return nil, inlineRecTemplates.err
	}
	name := "f"
	if flagsDead {
		name = "nf"
	}
	t, ok := inlineRecTemplates.m[name]
	if !ok {
		return nil, fmt.Errorf("runtime object: no inline record template %s", name)
	}
	return t, nil
}

// parseInlineRecTemplates reads the inline record templates of the runtime object's
// countSection by their labels (src/inlinerec.S).
func parseInlineRecTemplates(obj []byte) (map[string]*inlineRecTemplate, error) {
	data, raw, err := templateLabels(obj, inlineRecPrefix)
	if err != nil {
		return nil, err
	}
	m := map[string]*inlineRecTemplate{}
	for name, labels := range raw {
		t, err := inlineRecTemplateOf(labels, data)
		if err != nil {
			return nil, fmt.Errorf("runtime object: inline record template %s: %w", name, err)
		}
		m[name] = t
	}
	return m, nil
}

// inlineRecPlaces are the labels that name places, not fields.
var inlineRecPlaces = map[string]bool{"start": true, "end": true, "entry": true, "data": true, "decline": true,
	"decline_placed": true, "early": true}

// inlineRecTemplateOf makes a template from its labels' values in data.
func inlineRecTemplateOf(raw map[string]uint64, data []byte) (*inlineRecTemplate, error) {
	start, ok1 := raw["start"]
	end, ok2 := raw["end"]
	entry, ok3 := raw["entry"]
	dat, ok4 := raw["data"]
	decline, ok5 := raw["decline"]
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || decline < start || decline > entry || start > end || end > uint64(len(data)) || entry < start || dat < entry || dat > end {
		return nil, errors.New("no bounds, entry or data inside the section")
	}
	t := &inlineRecTemplate{code: data[start:end:end], entry: int(entry - start), data: int(dat - start),
		decline: int(decline - start)}
	for l, v := range raw {
		if inlineRecPlaces[l] || strings.HasSuffix(l, ".end") {
			continue
		}
		role := l
		if i := strings.LastIndexByte(l, '.'); i > 0 {
			if _, err := strconv.Atoi(l[i+1:]); err == nil {
				role = l[:i] // rt.2: one more of a kind
			}
		}
		size := 4
		switch role {
		case "rt", "tctx", "tblk", "topen", "stub", "rlen", "size", "pi":
		case "commit":
			size = 2
		default:
			return nil, fmt.Errorf("label %s", l)
		}
		off := int(v - start)
		if v < start || off+size > t.data && off < t.data || uint64(off+size) > end-start {
			return nil, fmt.Errorf("field %s across the data's place or outside the template", l)
		}
		fe := off + size
		if e, ok := raw[l+".end"]; ok {
			fe = int(e - start)
		}
		t.fields = append(t.fields, inlineRecField{role: role, off: off, end: fe})
	}
	if len(t.fields) != 14 {
		return nil, fmt.Errorf("%d fields, 14 expected", len(t.fields))
	}
	return t, nil
}
