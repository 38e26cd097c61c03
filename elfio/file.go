package elfio

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/kprewrite/kprewrite/internal/mmapfile"
)

// ErrFormat is wrapped by every error about a malformed or unsupported input.
var ErrFormat = errors.New("bad ELF file")

// Prog is one program header.
type Prog struct {
	Index  int
	Type   elf.ProgType
	Flags  elf.ProgFlag
	Off    uint64
	Vaddr  uint64
	Paddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

// Section is one section header with its name resolved.
type Section struct {
	Index     int
	Name      string
	NameOff   uint32
	Type      elf.SectionType
	Flags     elf.SectionFlag
	Addr      uint64
	Off       uint64
	Size      uint64
	Link      uint32
	Info      uint32
	Addralign uint64
	Entsize   uint64
}

// Symbol is one entry of .symtab or .dynsym.
type Symbol struct {
	Name    string
	Value   uint64
	Size    uint64
	Type    elf.SymType
	Bind    elf.SymBind
	Shndx   uint16
	Dynamic bool // from .dynsym
}

// File is a validated x86-64 ELF64 executable held in memory. Every offset and size in
// Progs and Sections has been checked against the file size, so slicing Data with them
// is safe.
type File struct {
	Path     string
	Data     []byte
	Type     elf.Type
	Entry    uint64
	Phoff    uint64
	Shoff    uint64
	Shstrndx int
	Progs    []Prog
	Sections []Section
	Symbols  []Symbol

	mapped bool // Data is a read-only mapping of the file (Open), released by Close
}

// MaxInputSize bounds the files Open accepts: no executable is near it, and a sparse
// or runaway file is refused before anything reads it.
const MaxInputSize = 4 << 30

// Open validates the executable at path, which must be a regular file. Its bytes are
// mapped read-only, not copied: the rewrite of a 100 MB program then holds no second
// copy of it (and the output refers to the mapping until written). The file is never
// written; it must not be truncated while in use, as for a linker's inputs. Close
// releases the mapping.
func Open(path string) (*File, error) {
	data, err := mmapfile.Map(path, MaxInputSize, "a program")
	if err != nil {
		return nil, err
	}
	f, err := Parse(path, data)
	if err != nil {
		mmapfile.Unmap(data)
		return nil, err
	}
	f.mapped = true
	return f, nil
}

// ReleasePages drops the resident pages of the input (mapped by Open) from this
// process's memory after a pass over it: f.Data stays valid, and what is read again
// comes back from the page cache. It does nothing for a File made by Parse.
func (f *File) ReleasePages(b []byte) {
	if f.mapped {
		mmapfile.Release(b)
	}
}

// Close releases the mapping Open made; f and every slice of f.Data must not be used
// afterwards. It does nothing for a File made by Parse.
func (f *File) Close() error {
	if !f.mapped {
		return nil
	}
	f.mapped = false
	data := f.Data
	f.Data = nil
	return mmapfile.Unmap(data)
}

// Parse validates data as an x86-64 ELF64 executable; name is used in error messages.
func Parse(name string, data []byte) (*File, error) {
	f := &File{Path: name, Data: data}
	if err := f.parse(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}

// inFile reports whether [off, off+size) lies inside the file without overflow.
func (f *File) inFile(off, size uint64) bool {
	n := uint64(len(f.Data))
	return off <= n && size <= n-off
}

func (f *File) parse() error {
	phnum, shnum, shentsize, err := f.parseHeader()
	if err != nil {
		return err
	}
	if err := f.parseProgs(phnum); err != nil {
		return err
	}
	if err := f.parseSections(shnum, shentsize); err != nil {
		return err
	}
	for _, sec := range []string{".symtab", ".dynsym"} {
		if err := f.readSymbols(sec); err != nil {
			return err
		}
	}
	return nil
}

// parseHeader reads the ELF header: an x86-64 ELF64 little-endian executable or
// shared object; it returns the program and section header counts.
func (f *File) parseHeader() (phnum, shnum, shentsize uint64, err error) {
	d := f.Data
	le := binary.LittleEndian
	if len(d) < 4 || string(d[:4]) != elf.ELFMAG {
		return 0, 0, 0, formatErr("not an ELF file (no \\x7fELF magic at offset 0)")
	}
	if len(d) < 64 {
		return 0, 0, 0, formatErr("file is %d bytes, shorter than an ELF64 header", len(d))
	}
	if elf.Class(d[elf.EI_CLASS]) != elf.ELFCLASS64 {
		return 0, 0, 0, formatErr("ELF class %v is not supported (ELF64 only)", elf.Class(d[elf.EI_CLASS]))
	}
	if elf.Data(d[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return 0, 0, 0, formatErr("byte order %v is not supported (little-endian only)", elf.Data(d[elf.EI_DATA]))
	}
	f.Type = elf.Type(le.Uint16(d[16:]))
	if m := elf.Machine(le.Uint16(d[18:])); m != elf.EM_X86_64 {
		return 0, 0, 0, formatErr("machine %v is not supported (x86-64 only)", m)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return 0, 0, 0, formatErr("ELF type %v is not an executable", f.Type)
	}
	f.Entry = le.Uint64(d[24:])
	f.Phoff = le.Uint64(d[32:])
	f.Shoff = le.Uint64(d[40:])
	phentsize := uint64(le.Uint16(d[54:]))
	phnum = uint64(le.Uint16(d[56:]))
	shentsize = uint64(le.Uint16(d[58:]))
	shnum = uint64(le.Uint16(d[60:]))
	f.Shstrndx = int(le.Uint16(d[62:]))
	if phentsize != 56 && phnum != 0 {
		return 0, 0, 0, formatErr("program header size %d, want 56", phentsize)
	}
	return phnum, shnum, shentsize, nil
}

// parseProgs reads the program headers, checking that the file ranges of the
// segments the loader maps lie inside the file.
func (f *File) parseProgs(phnum uint64) error {
	d := f.Data
	le := binary.LittleEndian
	if phnum == 0 {
		return formatErr("no program headers")
	}
	if !f.inFile(f.Phoff, phnum*56) {
		return formatErr("program headers at offset %#x (%d entries) run past end of file (%d bytes)", f.Phoff, phnum, len(d))
	}
	for i := uint64(0); i < phnum; i++ {
		p := d[f.Phoff+i*56:]
		ph := Prog{
			Index:  int(i),
			Type:   elf.ProgType(le.Uint32(p[0:])),
			Flags:  elf.ProgFlag(le.Uint32(p[4:])),
			Off:    le.Uint64(p[8:]),
			Vaddr:  le.Uint64(p[16:]),
			Paddr:  le.Uint64(p[24:]),
			Filesz: le.Uint64(p[32:]),
			Memsz:  le.Uint64(p[40:]),
			Align:  le.Uint64(p[48:]),
		}
		if ph.Type == elf.PT_LOAD || ph.Type == elf.PT_NOTE || ph.Type == elf.PT_INTERP || ph.Type == elf.PT_DYNAMIC {
			if !f.inFile(ph.Off, ph.Filesz) {
				return formatErr("program header %d (%v): file range %#x+%#x runs past end of file (%d bytes)", i, ph.Type, ph.Off, ph.Filesz, len(d))
			}
		}
		if ph.Type == elf.PT_LOAD {
			if ph.Memsz < ph.Filesz {
				return formatErr("program header %d: memsz %#x smaller than filesz %#x", i, ph.Memsz, ph.Filesz)
			}
			if ph.Vaddr+ph.Memsz < ph.Vaddr {
				return formatErr("program header %d: address range %#x+%#x overflows", i, ph.Vaddr, ph.Memsz)
			}
		}
		f.Progs = append(f.Progs, ph)
	}
	return nil
}

// parseSections reads the section headers (with extended section numbering) and
// names them.
func (f *File) parseSections(shnum, shentsize uint64) error {
	d := f.Data
	le := binary.LittleEndian
	if shnum == 0 && f.Shoff != 0 {
		// Extended section numbering keeps the real count in section 0's sh_size.
		if !f.inFile(f.Shoff, 64) {
			return formatErr("section header table at offset %#x runs past end of file", f.Shoff)
		}
		shnum = le.Uint64(d[f.Shoff+32:])
	}
	if shnum > 0 {
		if shentsize != 64 {
			return formatErr("section header size %d, want 64", shentsize)
		}
		if shnum > uint64(len(d))/64 || !f.inFile(f.Shoff, shnum*64) {
			return formatErr("section headers at offset %#x (%d entries) run past end of file (%d bytes)", f.Shoff, shnum, len(d))
		}
		if f.Shstrndx == int(elf.SHN_XINDEX) {
			f.Shstrndx = int(le.Uint32(d[f.Shoff+40:]))
		}
		for i := uint64(0); i < shnum; i++ {
			s := d[f.Shoff+i*64:]
			sh := Section{
				Index:     int(i),
				NameOff:   le.Uint32(s[0:]),
				Type:      elf.SectionType(le.Uint32(s[4:])),
				Flags:     elf.SectionFlag(le.Uint64(s[8:])),
				Addr:      le.Uint64(s[16:]),
				Off:       le.Uint64(s[24:]),
				Size:      le.Uint64(s[32:]),
				Link:      le.Uint32(s[40:]),
				Info:      le.Uint32(s[44:]),
				Addralign: le.Uint64(s[48:]),
				Entsize:   le.Uint64(s[56:]),
			}
			if sh.Type != elf.SHT_NOBITS && sh.Type != elf.SHT_NULL && !f.inFile(sh.Off, sh.Size) {
				return formatErr("section %d: file range %#x+%#x runs past end of file (%d bytes)", i, sh.Off, sh.Size, len(d))
			}
			f.Sections = append(f.Sections, sh)
		}
		if f.Shstrndx >= len(f.Sections) {
			return formatErr("section name table index %d out of range (%d sections)", f.Shstrndx, len(f.Sections))
		}
		strs := f.Sections[f.Shstrndx]
		for i := range f.Sections {
			if f.Shstrndx == 0 {
				break
			}
			name, err := f.cstring(strs, uint64(f.Sections[i].NameOff))
			if err != nil {
				return formatErr("section %d name: %v", i, err)
			}
			f.Sections[i].Name = name
		}
	}
	return nil
}

// cstring reads a NUL-terminated string at off inside string table section s.
func (f *File) cstring(s Section, off uint64) (string, error) {
	if s.Type == elf.SHT_NOBITS || off >= s.Size {
		return "", fmt.Errorf("string offset %#x outside %s (size %#x)", off, s.Name, s.Size)
	}
	if !f.inFile(s.Off, s.Size) {
		// Only SHT_NULL sections reach here unchecked by parse.
		return "", fmt.Errorf("string table %s at %#x+%#x runs past end of file", s.Name, s.Off, s.Size)
	}
	b := f.Data[s.Off+off : s.Off+s.Size]
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), nil
		}
	}
	return "", fmt.Errorf("string at offset %#x of %s is not terminated", off, s.Name)
}

func (f *File) readSymbols(name string) error {
	s := f.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	if !f.inFile(s.Off, s.Size) {
		return formatErr("%s: file range %#x+%#x runs past end of file", name, s.Off, s.Size)
	}
	if s.Entsize != 24 && s.Entsize != 0 {
		return formatErr("%s: entry size %d, want 24", name, s.Entsize)
	}
	if int(s.Link) >= len(f.Sections) {
		return formatErr("%s: string table index %d out of range", name, s.Link)
	}
	strs := f.Sections[s.Link]
	le := binary.LittleEndian
	n := s.Size / 24
	for i := uint64(1); i < n; i++ {
		e := f.Data[s.Off+i*24:]
		sym := Symbol{
			Value:   le.Uint64(e[8:]),
			Size:    le.Uint64(e[16:]),
			Type:    elf.ST_TYPE(e[4]),
			Bind:    elf.ST_BIND(e[4]),
			Shndx:   le.Uint16(e[6:]),
			Dynamic: name == ".dynsym",
		}
		nameOff := uint64(le.Uint32(e[0:]))
		if nameOff != 0 {
			str, err := f.cstring(strs, nameOff)
			if err != nil {
				return formatErr("%s symbol %d name: %v", name, i, err)
			}
			sym.Name = str
		}
		f.Symbols = append(f.Symbols, sym)
	}
	return nil
}

// Section returns the first section called name, or nil.
func (f *File) Section(name string) *Section {
	for i := range f.Sections {
		if f.Sections[i].Name == name {
			return &f.Sections[i]
		}
	}
	return nil
}

// SectionData returns the bytes of s (nil for SHT_NOBITS). Bounds were checked by Parse.
func (f *File) SectionData(s *Section) []byte {
	if s == nil || s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL || !f.inFile(s.Off, s.Size) {
		return nil
	}
	return f.Data[s.Off : s.Off+s.Size : s.Off+s.Size]
}

// ExecSections returns the allocated, executable PROGBITS sections in address order.
func (f *File) ExecSections() []*Section {
	var out []*Section
	for i := range f.Sections {
		s := &f.Sections[i]
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// IsPIE reports whether the executable is position independent (ET_DYN).
func (f *File) IsPIE() bool { return f.Type == elf.ET_DYN }

// IsSharedLibrary reports whether the file is a shared object loaded by another
// program (libc.so.6, libz.so.1, the dynamic loader) rather than a program: ET_DYN
// without DF_1_PIE, and a DT_SONAME (libc.so.6 also has PT_INTERP: it can run, but
// it is a library) or neither PT_INTERP nor an entry point (gcc -shared without
// -soname; a static PIE has an entry point). A rewritten library's runtime would
// never start from the program's entry point, which the loader does not run for it.
func (f *File) IsSharedLibrary() bool {
	if f.Type != elf.ET_DYN {
		return false
	}
	interp := false
	for _, p := range f.Progs {
		interp = interp || p.Type == elf.PT_INTERP
	}
	soname, pie := false, false
	dyn, _ := f.Dynamic() // unreadable: no soname, no flags
	for _, e := range dyn {
		soname = soname || e.Tag == elf.DT_SONAME
		pie = pie || (e.Tag == elf.DT_FLAGS_1 && e.Val&uint64(elf.DF_1_PIE) != 0)
	}
	return !pie && (soname || (!interp && f.Entry == 0))
}

// DynEntry is one entry of the dynamic section.
type DynEntry struct {
	Tag elf.DynTag
	Val uint64
}

// Dynamic returns the entries of the PT_DYNAMIC segment up to DT_NULL (none without
// one).
func (f *File) Dynamic() ([]DynEntry, error) {
	var out []DynEntry
	for _, p := range f.Progs {
		if p.Type != elf.PT_DYNAMIC {
			continue
		}
		d, err := f.Bytes(p.Vaddr, p.Filesz)
		if err != nil {
			return nil, fmt.Errorf("%s: dynamic segment: %w", f.Path, err)
		}
		for ; len(d) >= 16; d = d[16:] {
			e := DynEntry{elf.DynTag(binary.LittleEndian.Uint64(d)), binary.LittleEndian.Uint64(d[8:])}
			if e.Tag == elf.DT_NULL {
				break
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Addr returns the virtual address of file offset off in a PT_LOAD segment's file
// image (what uprobe_events' PATH:OFFSET names).
func (f *File) Addr(off uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off-p.Off < p.Filesz {
			return p.Vaddr + off - p.Off, nil
		}
	}
	return 0, fmt.Errorf("file offset %#x is not in any loaded segment of %s", off, f.Path)
}

// Loads returns the PT_LOAD program headers in table order.
func (f *File) Loads() []Prog {
	var out []Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			out = append(out, p)
		}
	}
	return out
}

// Bytes returns n file-backed bytes at virtual address addr, or an error if they are not
// all inside one PT_LOAD segment's file image.
func (f *File) Bytes(addr, n uint64) ([]byte, error) {
	off, err := f.FileOffset(addr, n)
	if err != nil {
		return nil, err
	}
	return f.Data[off : off+n], nil
}

// FileOffset returns the file offset of the n file-backed bytes at virtual address
// addr, or an error if they are not all inside one PT_LOAD segment's file image.
func (f *File) FileOffset(addr, n uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || addr < p.Vaddr || addr-p.Vaddr >= p.Filesz {
			continue
		}
		off := addr - p.Vaddr
		if n > p.Filesz-off {
			return 0, fmt.Errorf("address %#x+%d runs past the file image of segment %d", addr, n, p.Index)
		}
		return p.Off + off, nil
	}
	return 0, fmt.Errorf("address %#x is not in any loaded segment's file image", addr)
}

// ExecAddr reports whether addr lies in an executable PT_LOAD segment.
func (f *File) ExecAddr(addr uint64) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && addr >= p.Vaddr && addr-p.Vaddr < p.Memsz {
			return true
		}
	}
	return false
}

// ImageEnd returns the first address past every PT_LOAD segment's memory image.
func (f *File) ImageEnd() uint64 {
	var end uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr+p.Memsz > end {
			end = p.Vaddr + p.Memsz
		}
	}
	return end
}
