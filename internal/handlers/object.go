package handlers

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// Kind is the kind of a declared probe.
type Kind string

// Probe kinds, as the declaration lines name them.
const (
	KindKprobe    Kind = "kprobe"    // DEFINE_KPROBE: struct kprobe
	KindKretprobe Kind = "kretprobe" // DEFINE_KRETPROBE: struct kretprobe
	KindJprobe    Kind = "jprobe"    // DEFINE_JPROBE: struct jprobe, a struct kprobe and its entry
	kindExtern         = "extern"    // KPREWRITE_PROGRAM_SYMBOL
)

// EventGroup is the event group of handler probes in `kprewrite list` and `profile`.
const EventGroup = "handlers"

// Probe is one probe a handler file declares.
type Probe struct {
	Kind   Kind
	Name   string // the global symbol of its struct kprobe / struct kretprobe
	Site   string // as declared: SYMBOL, SYMBOL+OFFSET or 0xADDR
	Offset uint32 // the initializer's .offset, added to Site
	File   string // where it is declared
	Line   int
	// Handlers set in the static initializer (a kprewrite_init may set more before it
	// registers the probe, except a post_handler on a jump-optimized site).
	Pre, Post, Fault, Entry, Ret bool
	Disabled                     bool   // .flags has KPROBE_FLAG_DISABLED: registered disabled
	MaxActive                    int32  // kretprobe: .maxactive (<= 0: the runtime's default)
	DataSize                     uint64 // kretprobe: .data_size
}

// Origin says where the probe is declared, for messages: "FILE:LINE (NAME)".
func (p *Probe) Origin() string {
	return fmt.Sprintf("%s:%d (%s)", p.File, p.Line, p.Name)
}

// Event returns the probe as a kprobe-event definition "p:handlers/NAME SITE" (or
// "rN:..." for a kretprobe), with .offset folded into the site, so that its site is
// resolved and checked exactly like an -e definition's.
func (p *Probe) Event() (*eventdef.Probe, error) {
	kind := "p"
	if p.Kind == KindKretprobe {
		kind = "r"
		if p.MaxActive > 0 {
			kind += strconv.Itoa(int(p.MaxActive))
		}
	}
	def := fmt.Sprintf("%s:%s/%s %s", kind, EventGroup, p.Name, p.Site)
	ev, err := eventdef.Parse(def)
	if err != nil {
		return nil, fmt.Errorf("%s: site %q: %w", p.Origin(), p.Site, err)
	}
	if p.Offset != 0 {
		if ev.Symbol != "" {
			ev.Offset += uint64(p.Offset)
		} else {
			ev.Addr += uint64(p.Offset)
		}
		site := fmt.Sprintf("%#x", ev.Addr)
		if ev.Symbol != "" {
			site = fmt.Sprintf("%s+%d", ev.Symbol, ev.Offset)
		}
		ev.Def = fmt.Sprintf("%s:%s/%s %s", kind, EventGroup, p.Name, site)
	}
	if ev.Return && ev.Offset != 0 {
		return nil, fmt.Errorf("%s: a kretprobe must be on a function entry, not %s", p.Origin(), p.Site)
	}
	return ev, nil
}

// Extern is a program symbol a handler file names with KPREWRITE_PROGRAM_SYMBOL.
type Extern struct {
	Name string
	File string
	Line int
}

// Unit is one compiled handler file.
type Unit struct {
	File      string // the source as given
	Object    []byte // the relocatable object gcc made
	Probes    []Probe
	Externs   []Extern
	Defined   []string // global symbols it defines, sorted
	Undefined []string // symbols it uses and does not define, sorted
	Init      bool     // defines kprewrite_init
	Exit      bool     // defines kprewrite_exit
}

// ErrObject is wrapped by errors about an object that is not what the declaration
// macros and gcc make.
var ErrObject = errors.New("bad handler object")

// maxDecls bounds the declaration lines of one object.
const maxDecls = 100000

// decl is one parsed line of the declaration section.
type decl struct {
	kind, name, site, file string
	line                   int
}

// parseDecls splits the declaration section into its lines.
func parseDecls(b []byte) ([]decl, error) {
	var out []decl
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return nil, errors.New("declaration section: last line is not terminated")
		}
		line := string(b[:i])
		b = b[i+1:]
		if line == "" {
			continue // alignment padding
		}
		if len(out) >= maxDecls {
			return nil, fmt.Errorf("declaration section: more than %d declarations", maxDecls)
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("declaration %q: want 5 tab-separated fields, got %d", line, len(f))
		}
		n, err := strconv.Atoi(f[4])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("declaration %q: bad line number", line)
		}
		d := decl{kind: f[0], name: f[1], site: f[2], file: f[3], line: n}
		switch {
		case d.kind != string(KindKprobe) && d.kind != string(KindKretprobe) && d.kind != string(KindJprobe) && d.kind != kindExtern:
			return nil, fmt.Errorf("%s:%d: unknown declaration kind %q", d.file, d.line, d.kind)
		case !isIdent(d.name):
			return nil, fmt.Errorf("%s:%d: %q is not a C identifier", d.file, d.line, d.name)
		case d.kind != kindExtern && d.site == "":
			return nil, fmt.Errorf("%s:%d: %s %s has no site", d.file, d.line, d.kind, d.name)
		}
		out = append(out, d)
	}
	return out, nil
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ParseObject reads what a compiled handler file declares and uses. name is the source
// file, for messages. It validates every offset and never panics.
func ParseObject(name string, obj []byte) (u *Unit, err error) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrObject, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_REL || f.ByteOrder != binary.LittleEndian {
		return nil, fmt.Errorf("%s: %w: not an x86-64 relocatable object", name, ErrObject)
	}
	for _, s := range f.Sections {
		// debug/elf would inflate a compressed section to the size its header claims
		if s.Flags&elf.SHF_COMPRESSED != 0 || (s.Type != elf.SHT_NOBITS && s.Size > uint64(len(obj))) {
			return nil, fmt.Errorf("%s: %w: section %q is compressed or larger than the file", name, ErrObject, s.Name)
		}
	}
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("%s: %w: symbols: %w", name, ErrObject, err)
	}
	u = &Unit{File: name, Object: obj}
	byName := map[string]elf.Symbol{}
	defined, undefined := map[string]bool{}, map[string]bool{}
	for _, s := range syms {
		bind := elf.ST_BIND(s.Info)
		if s.Name == "" || bind == elf.STB_LOCAL || elf.ST_TYPE(s.Info) == elf.STT_FILE {
			continue
		}
		if s.Section == elf.SHN_UNDEF {
			undefined[s.Name] = true
			continue
		}
		defined[s.Name] = true
		byName[s.Name] = s
		if s.Name == kprt.SymUserInit && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			u.Init = true
		}
		if s.Name == kprt.SymUserExit && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			u.Exit = true
		}
	}
	for n := range defined {
		u.Defined = append(u.Defined, n)
		delete(undefined, n)
	}
	for n := range undefined {
		u.Undefined = append(u.Undefined, n)
	}
	sort.Strings(u.Defined)
	sort.Strings(u.Undefined)

	var decls []decl
	if s := f.Section(kprt.DeclSection); s != nil {
		if s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC != 0 {
			return nil, fmt.Errorf("%s: %w: section %s must hold data and not be loaded", name, ErrObject, kprt.DeclSection)
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %s: %w", name, ErrObject, kprt.DeclSection, err)
		}
		if decls, err = parseDecls(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	seen := map[string]bool{}
	for _, d := range decls {
		if d.kind == kindExtern {
			u.Externs = append(u.Externs, Extern{Name: d.name, File: d.file, Line: d.line})
			continue
		}
		if seen[d.name] {
			return nil, fmt.Errorf("%s:%d: %s is declared twice", d.file, d.line, d.name)
		}
		seen[d.name] = true
		p, err := readProbe(f, byName, d)
		if err != nil {
			return nil, err
		}
		u.Probes = append(u.Probes, *p)
	}
	return u, nil
}

// readProbe finds a declared struct and reads its static initializer.
func readProbe(f *elf.File, byName map[string]elf.Symbol, d decl) (*Probe, error) {
	p := &Probe{Kind: Kind(d.kind), Name: d.name, Site: d.site, File: d.file, Line: d.line}
	size := uint64(kprt.KprobeSize)
	switch p.Kind {
	case KindKretprobe:
		size = kprt.KretprobeSize
	case KindJprobe:
		size = kprt.KprobeSize + 8 // (its entry)
	}
	s, ok := byName[d.name]
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: %s %s is not a global definition (DEFINE_%s must be at file scope, without static)",
			p.Origin(), d.kind, d.name, strings.ToUpper(d.kind))
	case elf.ST_TYPE(s.Info) != elf.STT_OBJECT || s.Size != size:
		return nil, fmt.Errorf("%s: %s is not a struct %s (%d bytes, type %v)", p.Origin(), d.name, d.kind, s.Size, elf.ST_TYPE(s.Info))
	case s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(f.Sections):
		return nil, fmt.Errorf("%s: %s is not in a section of the object", p.Origin(), d.name)
	}
	sec := f.Sections[s.Section]
	if sec.Flags&elf.SHF_WRITE == 0 || sec.Flags&elf.SHF_ALLOC == 0 {
		return nil, fmt.Errorf("%s: %s is in read-only section %s; the runtime writes to it (addr, flags, nmissed)", p.Origin(), d.name, sec.Name)
	}
	if s.Value > sec.Size || size > sec.Size-s.Value {
		return nil, fmt.Errorf("%s: %w: %s at %#x+%d runs past section %s", p.Origin(), ErrObject, d.name, s.Value, size, sec.Name)
	}
	init := make([]byte, size)
	if sec.Type != elf.SHT_NOBITS {
		data, err := sec.Data()
		if err != nil || uint64(len(data)) < s.Value+size {
			return nil, fmt.Errorf("%s: %w: section %s: %v", p.Origin(), ErrObject, sec.Name, err)
		}
		copy(init, data[s.Value:s.Value+size])
	}
	relocated, err := relocatedWords(f, int(s.Section), s.Value, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Origin(), err)
	}
	le := binary.LittleEndian
	set := func(off int) bool { return relocated[uint64(off)] || le.Uint64(init[off:]) != 0 }
	p.Offset = le.Uint32(init[kprt.KprobeOffOffset:])
	p.Disabled = le.Uint32(init[kprt.KprobeOffFlags:])&kprt.KprobeFlagDisabled != 0
	if p.Kind != KindKretprobe {
		p.Pre, p.Post, p.Fault = set(kprt.KprobeOffPre), set(kprt.KprobeOffPost), set(kprt.KprobeOffFault)
	} else {
		p.Fault = set(kprt.KprobeOffFault)
		p.Ret, p.Entry = set(kprt.KretprobeOffHandler), set(kprt.KretprobeOffEntry)
		p.MaxActive = int32(le.Uint32(init[kprt.KretprobeOffMaxActive:]))
		p.DataSize = le.Uint64(init[kprt.KretprobeOffDataSize:])
		switch {
		case p.Offset != 0:
			return nil, fmt.Errorf("%s: a kretprobe is on a function entry: .kp.offset must be 0", p.Origin())
		case p.MaxActive > kprt.MaxMaxActive:
			return nil, fmt.Errorf("%s: maxactive %d is more than %d", p.Origin(), p.MaxActive, kprt.MaxMaxActive)
		case p.DataSize > kprt.MaxDataSize:
			return nil, fmt.Errorf("%s: data_size %d is more than %d bytes", p.Origin(), p.DataSize, kprt.MaxDataSize)
		}
	}
	if _, err := p.Event(); err != nil {
		return nil, err
	}
	return p, nil
}

// relocatedWords returns the offsets (relative to off) inside [off, off+size) of section
// sec that relocations write to.
func relocatedWords(f *elf.File, sec int, off, size uint64) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	for _, rs := range f.Sections {
		if rs.Type != elf.SHT_RELA || int(rs.Info) != sec {
			continue
		}
		data, err := rs.Data()
		if err != nil {
			return nil, fmt.Errorf("%w: relocations of %s: %w", ErrObject, f.Sections[sec].Name, err)
		}
		for i := 0; i+24 <= len(data); i += 24 {
			r := binary.LittleEndian.Uint64(data[i:])
			if r >= off && r < off+size {
				out[r-off] = true
			}
		}
	}
	return out, nil
}
