package elfio

import (
	"debug/elf"
	"fmt"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/ehframe"
)

// FuncSource says where a function's bounds came from.
type FuncSource uint8

const (
	FromSymtab FuncSource = iota
	FromDynsym
	FromEHFrame
	FromGopclntab // a Go program's own function table (a stripped Go binary)
)

func (s FuncSource) String() string {
	switch s {
	case FromSymtab:
		return "symtab"
	case FromDynsym:
		return "dynsym"
	case FromGopclntab:
		return "gopclntab"
	default:
		return "eh_frame"
	}
}

// Func is one function of the executable: [Addr, Addr+Size) inside an executable section.
type Func struct {
	Name    string
	Aliases []string // other symbol names at the same address
	Addr    uint64
	Size    uint64
	Source  FuncSource
	Section string // name of the executable section holding it
	LSDA    uint64 // language-specific data area from the FDE, 0 when none
}

// End is the first address past the function.
func (fn *Func) End() uint64 { return fn.Addr + fn.Size }

// Functions holds the discovered functions in address order and an index by name.
type Functions struct {
	List   []Func
	byName map[string]int
	// FDEs are the parsed .eh_frame entries; FDEErr is the first problem found while
	// parsing them (the good entries are still used).
	FDEs   []ehframe.FDE
	FDEErr error
	// GoErr is why the function table of a Go program without a symbol table
	// (.gopclntab) could not be read; its functions are then missing.
	GoErr error
}

// ByName returns the function called name (or with name as an alias).
func (fs *Functions) ByName(name string) (*Func, bool) {
	i, ok := fs.byName[name]
	if !ok {
		return nil, false
	}
	return &fs.List[i], true
}

// Containing returns the function whose range holds addr.
func (fs *Functions) Containing(addr uint64) (*Func, bool) {
	i := sort.Search(len(fs.List), func(i int) bool { return fs.List[i].Addr > addr }) - 1
	if i >= 0 && addr < fs.List[i].End() {
		return &fs.List[i], true
	}
	return nil, false
}

// EHFrameAddrs returns the addresses needed to decode .eh_frame pointers (text and data
// bases for textrel/datarel encodings).
func (f *File) ehBases() (text, data uint64) {
	if s := f.Section(".text"); s != nil {
		text = s.Addr
	}
	if s := f.Section(".got"); s != nil {
		data = s.Addr
	}
	return text, data
}

// FDEs parses .eh_frame. It returns the good entries even when some are malformed.
func (f *File) FDEs() ([]ehframe.FDE, error) {
	s := f.Section(".eh_frame")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	text, data := f.ehBases()
	fdes, err := ehframe.Parse(f.SectionData(s), s.Addr, text, data)
	if err != nil {
		err = fmt.Errorf("%s: .eh_frame: %w", f.Path, err)
	}
	return fdes, err
}

// UnwindRows is the unwind table of .eh_frame (ehframe.UnwindRows): what stacktrace
// triggers walk user stacks with. nil without .eh_frame; the good rows with an error
// when some FDEs are malformed.
func (f *File) UnwindRows() ([]ehframe.UnwindRow, error) {
	s := f.Section(".eh_frame")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	fdes, _ := f.FDEs() // the good ones; their errors come again below
	text, data := f.ehBases()
	rows, err := ehframe.UnwindRows(f.SectionData(s), s.Addr, text, data, fdes)
	if err != nil {
		err = fmt.Errorf("%s: .eh_frame: %w", f.Path, err)
	}
	return rows, err
}

// cand is a function found, with the rank of the symbol naming it.
type cand struct {
	Func
	rank int // lower wins among symbols at one address
}

// Functions discovers functions from .symtab, .dynsym and .eh_frame FDEs, and from
// .gopclntab for a Go program whose symbol table names none of its code. Symbol bounds
// win; FDEs supply bounds for stripped code and for symbols without a size. PLT stubs are
// not functions.
func (f *File) Functions() *Functions {
	execs := f.ExecSections()
	secOf := func(addr uint64) *Section {
		i := sort.Search(len(execs), func(i int) bool { return execs[i].Addr > addr }) - 1
		if i >= 0 && addr-execs[i].Addr < execs[i].Size {
			return execs[i]
		}
		return nil
	}
	fs := &Functions{byName: map[string]int{}}
	fs.FDEs, fs.FDEErr = f.FDEs()

	byAddr := map[uint64]*cand{}
	var aliases = map[uint64][]string{}
	for _, sym := range f.Symbols {
		if sym.Type != elf.STT_FUNC && sym.Type != elf.STT_GNU_IFUNC {
			continue
		}
		if sym.Shndx == uint16(elf.SHN_UNDEF) || sym.Value == 0 || sym.Name == "" {
			continue
		}
		sec := secOf(sym.Value)
		if sec == nil || strings.HasPrefix(sec.Name, ".plt") {
			continue
		}
		size := sym.Size
		if size > sec.Addr+sec.Size-sym.Value {
			size = sec.Addr + sec.Size - sym.Value
		}
		rank := 2
		if sym.Bind == elf.STB_GLOBAL {
			rank = 0
		} else if sym.Bind == elf.STB_WEAK {
			rank = 1
		}
		if sym.Dynamic {
			rank += 3
		}
		src := FromSymtab
		if sym.Dynamic {
			src = FromDynsym
		}
		c := byAddr[sym.Value]
		if c == nil {
			byAddr[sym.Value] = &cand{Func: Func{Name: sym.Name, Addr: sym.Value, Size: size, Source: src, Section: sec.Name}, rank: rank}
			continue
		}
		if c.Size == 0 && size != 0 {
			c.Size = size
		}
		if rank < c.rank || (rank == c.rank && sym.Name < c.Name) {
			aliases[sym.Value] = append(aliases[sym.Value], c.Name)
			c.Name, c.rank, c.Source = sym.Name, rank, src
		} else if sym.Name != c.Name {
			aliases[sym.Value] = append(aliases[sym.Value], sym.Name)
		}
	}
	if f.goFuncsWanted() {
		fs.GoErr = f.addGoFuncs(byAddr, aliases, secOf)
	}
	fdeAt := map[uint64]*ehframe.FDE{}
	for i := range fs.FDEs {
		fd := &fs.FDEs[i]
		fdeAt[fd.Start] = fd
		if byAddr[fd.Start] != nil || fd.End <= fd.Start {
			continue
		}
		sec := secOf(fd.Start)
		if sec == nil || strings.HasPrefix(sec.Name, ".plt") {
			continue
		}
		byAddr[fd.Start] = &cand{Func: Func{Name: fmt.Sprintf("fn_%x", fd.Start), Addr: fd.Start, Size: fd.End - fd.Start, Source: FromEHFrame, Section: sec.Name}}
	}
	for addr, c := range byAddr {
		if fd := fdeAt[addr]; fd != nil {
			c.LSDA = fd.LSDA
			if c.Size == 0 {
				c.Size = fd.End - fd.Start
			}
		}
		if al := aliases[addr]; len(al) > 0 {
			sort.Strings(al)
			c.Aliases = dedupe(al, c.Name)
		}
		fs.List = append(fs.List, c.Func)
	}
	sort.Slice(fs.List, func(i, j int) bool { return fs.List[i].Addr < fs.List[j].Addr })
	// A symbol without a size (hand-written assembly) runs to the next function or the
	// section end.
	for i := range fs.List {
		fn := &fs.List[i]
		if fn.Size != 0 {
			continue
		}
		end := uint64(0)
		if sec := secOf(fn.Addr); sec != nil {
			end = sec.Addr + sec.Size
		}
		if i+1 < len(fs.List) && fs.List[i+1].Addr < end {
			end = fs.List[i+1].Addr
		}
		if end > fn.Addr {
			fn.Size = end - fn.Addr
		}
	}
	for i := range fs.List {
		fn := &fs.List[i]
		if _, dup := fs.byName[fn.Name]; !dup {
			fs.byName[fn.Name] = i
		}
		for _, a := range fn.Aliases {
			if _, dup := fs.byName[a]; !dup {
				fs.byName[a] = i
			}
		}
	}
	return fs
}

// addGoFuncs adds the functions of .gopclntab; where a symbol names the address (a
// stripped PIE's or library's .dynsym), its Go name becomes an alias.
func (f *File) addGoFuncs(byAddr map[uint64]*cand, aliases map[uint64][]string, secOf func(uint64) *Section) error {
	gofns, err := f.GoFuncs()
	for _, g := range gofns {
		if c := byAddr[g.Entry]; c != nil {
			if c.Name != g.Name {
				aliases[g.Entry] = append(aliases[g.Entry], g.Name)
			}
			continue
		}
		sec := secOf(g.Entry)
		if sec == nil || g.End <= g.Entry {
			continue
		}
		size := min(g.End, sec.Addr+sec.Size) - g.Entry
		byAddr[g.Entry] = &cand{Func: Func{Name: g.Name, Addr: g.Entry, Size: size, Source: FromGopclntab, Section: sec.Name}}
	}
	return err
}

func dedupe(names []string, primary string) []string {
	var out []string
	for i, n := range names {
		if n == primary || (i > 0 && names[i-1] == n) {
			continue
		}
		out = append(out, n)
	}
	return out
}
