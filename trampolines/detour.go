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
// with three 4-byte fields patched. Unlike the kernel's it is a stub: the register save
// and restore are one shared body (runtime.SymOptBody) the stub calls.
type DetourTemplate struct {
	Code  []byte // the template, fields zero; the relocated DCR follows it
	Entry int    // where the site's jmp rel32 lands
	Gate  int    // rel32 of "movl gate(%rip), %ecx": the point's gate word
	Index int    // imm32 of "movl $index, %ecx": the point's runtime index
	Call  int    // rel32 of "call kprewrite_rt_optprobe_body"
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
	if err := noRelocations(f, sec, start, end); err != nil {
		return nil, err
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
// at optcall (the vaddr of SymOptBody after linking), then reloc, the DCR relocated to
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
