package elfio

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ErrNoDynamicRoom says a library's dynamic section has no spare DT_NULL entries for
// the entries a rewritten library needs.
var ErrNoDynamicRoom = errors.New("the dynamic section has no spare entries for the DT_INIT and DT_FLAGS_1 a rewritten library needs")

// DynEdit collects the changes one rewrite makes to a dynamic section: values of
// existing entries rewritten in place, new entries written over the spare DT_NULL
// entries at its end (GNU ld and lld leave some; the last DT_NULL stays the
// terminator). Patches returns them all at once, so that several kinds of change
// (a library's start-up, a program's libraries, the early start) share the spare room.
type DynEdit struct {
	f         *File
	es        []dynEntry
	null, end uint64
	ps        []Patch
	add       []byte
}

// EditDynamic starts an edit of the file's dynamic section.
func (f *File) EditDynamic() (*DynEdit, error) {
	es, null, end, err := f.dynamicEntries()
	if err != nil {
		return nil, err
	}
	return &DynEdit{f: f, es: es, null: null, end: end}, nil
}

// value returns the value of the first entry with tag.
func (d *DynEdit) value(tag elf.DynTag) (uint64, bool) {
	for _, e := range d.es {
		if e.tag == tag {
			return e.val, true
		}
	}
	return 0, false
}

// set rewrites the value of every entry with tag, or adds one when there is none.
func (d *DynEdit) set(tag elf.DynTag, val uint64) {
	found := false
	for _, e := range d.es {
		if e.tag == tag {
			found = true
			d.ps = append(d.ps, Patch{Addr: e.addr + 8, Bytes: dynWord(val)})
		}
	}
	if !found {
		d.add = appendDyn(d.add, tag, val)
	}
}

// spare is the number of new entries that still fit.
func (d *DynEdit) spare() int {
	n := (d.end-d.null)/16 - 1 // the terminator stays
	spare, err := d.f.Bytes(d.null, d.end-d.null)
	if err != nil || !allZero(spare) || uint64(len(d.add))/16 > n {
		return 0
	}
	return int(n - uint64(len(d.add))/16)
}

// Patches returns the edit's patches, sorted by address, or ErrNoDynamicRoom when the
// new entries do not fit.
func (d *DynEdit) Patches() ([]Patch, error) {
	ps := slices.Clone(d.ps)
	if len(d.add) > 0 {
		spare, err := d.f.Bytes(d.null, d.end-d.null)
		if err != nil || uint64(len(d.add))+16 > uint64(len(spare)) || !allZero(spare[:len(d.add)+16]) {
			return nil, fmt.Errorf("%s: %w", d.f.Path, ErrNoDynamicRoom)
		}
		ps = append(ps, Patch{Addr: d.null, Bytes: d.add})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Addr < ps[j].Addr })
	return ps, nil
}

// Library makes the library start its runtime and keep it loaded: the dynamic loader
// calls newInit (a link-time address) as the library's DT_INIT, and DF_1_NODELETE is
// set in DT_FLAGS_1, so that dlclose never unmaps the code the runtime's signal
// handlers, detours and return trampolines live in. It returns the previous DT_INIT
// (0 for none), which the new one must call.
func (d *DynEdit) Library(newInit uint64) (oldInit uint64) {
	oldInit, _ = d.value(elf.DT_INIT)
	flags, _ := d.value(elf.DT_FLAGS_1)
	d.set(elf.DT_INIT, newInit)
	d.set(elf.DT_FLAGS_1, flags|uint64(elf.DF_1_NODELETE))
	return oldInit
}

// Fini makes the dynamic loader call newFini (a link-time address) as the image's
// DT_FINI at exit, and returns the previous DT_FINI (0 for none), which the new one
// must call.
func (d *DynEdit) Fini(newFini uint64) (oldFini uint64) {
	oldFini, _ = d.value(elf.DT_FINI)
	d.set(elf.DT_FINI, newFini)
	return oldFini
}

// LibraryPatches is Library alone: the patches, or ErrNoDynamicRoom when the library
// has no room for its DT_INIT or DT_FLAGS_1, and the previous DT_INIT.
func (f *File) LibraryPatches(newInit uint64) (ps []Patch, oldInit uint64, err error) {
	d, err := f.EditDynamic()
	if err != nil {
		return nil, 0, err
	}
	oldInit = d.Library(newInit)
	if ps, err = d.Patches(); err != nil {
		return nil, 0, err
	}
	return ps, oldInit, nil
}

// dynWord is a dynamic entry's value as it is stored.
func dynWord(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// appendDyn appends the entry (tag, val) to b.
func appendDyn(b []byte, tag elf.DynTag, val uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(b, uint64(tag)), val)
}

// Soname is the library's DT_SONAME ("" without one).
func (f *File) Soname() string {
	es, _, _, err := f.dynamicEntries()
	if err != nil {
		return ""
	}
	for _, e := range es {
		if e.tag == elf.DT_SONAME {
			return f.dynString(es, e.val)
		}
	}
	return ""
}

// dynString reads the string at offset off of the dynamic string table (DT_STRTAB of
// es, which may be in a rewritten program's new segment): "" when it cannot be read.
func (f *File) dynString(es []dynEntry, off uint64) string {
	var strtab uint64
	for _, e := range es {
		if e.tag == elf.DT_STRTAB {
			strtab = e.val
		}
	}
	at, err := f.FileOffset(strtab+off, 1)
	if strtab == 0 || err != nil {
		return ""
	}
	end := at
	for end < uint64(len(f.Data)) && f.Data[end] != 0 && end-at < 4096 {
		end++
	}
	return string(f.Data[at:end])
}

// IsDynamicLoader reports whether the file is a dynamic loader (ld-linux-x86-64.so.2,
// musl's libc.so): the loader relocates itself and runs no DT_INIT of its own, so a
// runtime in it would never start. It is an ET_DYN with an entry point and neither a
// PT_INTERP nor a DT_NEEDED, or its soname is a loader's.
func (f *File) IsDynamicLoader() bool {
	if f.Type != elf.ET_DYN {
		return false
	}
	if s := f.Soname(); strings.HasPrefix(s, "ld-linux") || strings.HasPrefix(s, "ld-musl") || strings.HasPrefix(s, "ld64.so") {
		return true
	}
	if slices.ContainsFunc(f.Progs, func(p Prog) bool { return p.Type == elf.PT_INTERP }) {
		return false
	}
	dyn, _ := f.Dynamic()
	return !slices.ContainsFunc(dyn, func(e DynEntry) bool { return e.Tag == elf.DT_NEEDED }) && f.Entry != 0 && f.IsSharedLibrary()
}

// Copy returns the file unchanged as an Output: the rewrite of a library with no
// probes (a library has no entry point for a stub to take over).
func (f *File) Copy() *Output {
	n := uint64(len(f.Data))
	return &Output{size: n, pieces: []piece{{off: 0, n: n, b: f.Data, input: true}}}
}

// Needed names a shared library a program must load from another file: its DT_NEEDED
// entries whose string is one of Names (and its version needs naming that file) get
// Path, which the dynamic loader expands ($ORIGIN) and loads; a program with no such
// entry gets a new DT_NEEDED for Path.
type Needed struct {
	Names []string
	Path  string
}

// NeededPlan is a program's dynamic string table with the Needed paths appended (every
// old offset stays valid), placed by the caller in a new read-only area, and the
// patches that make the program use it.
type NeededPlan struct {
	Bytes []byte // the new dynamic string table
	f     *File
	paths []uint32 // offset of each Needed's path in Bytes
	reds  []Needed
}

// dynEntry is a dynamic entry and the address of its tag.
type dynEntry struct {
	tag  elf.DynTag
	val  uint64
	addr uint64
}

// dynamicEntries returns the entries up to the first DT_NULL, and the addresses of
// that DT_NULL and of the end of the dynamic segment.
func (f *File) dynamicEntries() (es []dynEntry, null, end uint64, err error) {
	for _, ph := range f.Progs {
		if ph.Type != elf.PT_DYNAMIC {
			continue
		}
		d, err := f.Bytes(ph.Vaddr, ph.Filesz)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("%s: dynamic segment: %w", f.Path, err)
		}
		for i := 0; i+16 <= len(d); i += 16 {
			e := dynEntry{elf.DynTag(binary.LittleEndian.Uint64(d[i:])), binary.LittleEndian.Uint64(d[i+8:]), ph.Vaddr + uint64(i)}
			if e.tag == elf.DT_NULL {
				return es, e.addr, ph.Vaddr + uint64(len(d)), nil
			}
			es = append(es, e)
		}
		return nil, 0, 0, fmt.Errorf("%s: the dynamic segment has no DT_NULL", f.Path)
	}
	return nil, 0, 0, fmt.Errorf("%s: no dynamic segment (a static program loads no library)", f.Path)
}

// PlanNeeded makes the new dynamic string table for reds.
func (f *File) PlanNeeded(reds []Needed) (*NeededPlan, error) {
	es, _, _, err := f.dynamicEntries()
	if err != nil {
		return nil, err
	}
	var strtab, strsz uint64
	for _, e := range es {
		switch e.tag {
		case elf.DT_STRTAB:
			strtab = e.val
		case elf.DT_STRSZ:
			strsz = e.val
		}
	}
	old, err := f.Bytes(strtab, strsz)
	if strtab == 0 || err != nil {
		return nil, fmt.Errorf("%s: no readable dynamic string table", f.Path)
	}
	p := &NeededPlan{f: f, reds: reds, Bytes: append([]byte(nil), old...)}
	if len(p.Bytes) == 0 || p.Bytes[len(p.Bytes)-1] != 0 {
		p.Bytes = append(p.Bytes, 0)
	}
	for _, r := range reds {
		p.paths = append(p.paths, uint32(len(p.Bytes)))
		p.Bytes = append(append(p.Bytes, r.Path...), 0)
	}
	return p, nil
}

// Edit makes the program use the new string table at addr (DT_STRTAB, DT_STRSZ) and
// load each Needed's Path: its DT_NEEDED entries get the path (or, with none, a new
// entry in a spare DT_NULL one does).
func (p *NeededPlan) Edit(d *DynEdit, addr uint64) {
	es := d.es
	str := func(off uint64) string {
		if off >= uint64(len(p.Bytes)) {
			return ""
		}
		s := p.Bytes[off:]
		if i := bytes.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
		return string(s)
	}
	match := func(name string) int {
		for i, r := range p.reds {
			if slices.Contains(r.Names, name) {
				return i
			}
		}
		return -1
	}
	found := make([]bool, len(p.reds))
	var names []uint64 // the old names of the entries given a path, in order
	for _, e := range es {
		switch e.tag {
		case elf.DT_NEEDED:
			if i := match(str(e.val)); i >= 0 {
				found[i] = true
				names = append(names, e.val)
				d.ps = append(d.ps, Patch{Addr: e.addr + 8, Bytes: dynWord(uint64(p.paths[i]))})
			}
		}
	}
	d.set(elf.DT_STRTAB, addr)
	d.set(elf.DT_STRSZ, uint64(len(p.Bytes)))
	for i := range p.reds {
		if !found[i] {
			d.add = appendDyn(d.add, elf.DT_NEEDED, uint64(p.paths[i]))
		}
	}
	// Each entry given a path is followed, after every other, by one with its old name:
	// the loader maps that name to the object already loaded (by its soname) and adds
	// the name to it, and the program's version needs (.gnu.version_r), which name the
	// object they need by that name, find it (glibc asserts otherwise).
	for _, n := range names {
		d.add = appendDyn(d.add, elf.DT_NEEDED, n)
	}
}

// NeededNames returns the strings of the file's DT_NEEDED entries, in order, read
// through DT_STRTAB (a rewritten program's may be in its new segment).
func (f *File) NeededNames() []string {
	es, _, _, err := f.dynamicEntries()
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range es {
		if e.tag == elf.DT_NEEDED {
			out = append(out, f.dynString(es, e.val))
		}
	}
	return out
}
