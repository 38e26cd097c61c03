package debuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kprewrite/kprewrite/internal/ehframe"
	"github.com/kprewrite/kprewrite/internal/infile"
)

// ErrNoDebugInfo says no DWARF was found for a binary.
var ErrNoDebugInfo = errors.New("no debug information")

// DebugRoot is where separate debug files are looked for (build-id and debuglink),
// as gdb and perf look for them.
var DebugRoot = "/usr/lib/debug"

// Load reads the debug information of the ELF binary at path: from debugFile when
// it is not "", else from the binary, else from DebugRoot/.build-id/xx/yyyy.debug,
// else from the file its .gnu_debuglink names (beside it, in its .debug directory
// or under DebugRoot). The code addresses (and .eh_frame) are the binary's.
func Load(path, debugFile string) (*Info, error) {
	var files []*os.File // what openELF opened
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	bin, err := openELF(path, &files)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer bin.Close()
	if bin.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: not an x86-64 ELF file", path)
	}
	src := path
	var dbg *elf.File
	switch {
	case debugFile != "":
		if dbg, err = openELF(debugFile, &files); err != nil {
			return nil, fmt.Errorf("open debug file: %w", err)
		}
		if id, did := buildID(bin), buildID(dbg); id != nil && did != nil && !bytes.Equal(id, did) {
			dbg.Close()
			return nil, fmt.Errorf("debug file %s has build-id %x, %s has %x", debugFile, did, path, id)
		} else if id == nil || did == nil {
			// no build-id to compare: the functions both name must be at the same places
			if err := sameFunctions(bin, dbg); err != nil {
				dbg.Close()
				return nil, fmt.Errorf("debug file %s does not describe %s: %w (and they have no build-ids to compare)", debugFile, path, err)
			}
		}
		src = debugFile
	case hasDWARF(bin):
	default:
		var tried []string
		src, tried = findSeparate(path, bin)
		if src == "" {
			return nil, fmt.Errorf("%s: %w (no .debug_info section; looked for %s): build it with -g or give --debug-file",
				path, ErrNoDebugInfo, strings.Join(tried, ", "))
		}
		if dbg, err = openELF(src, &files); err != nil {
			return nil, fmt.Errorf("open debug file: %w", err)
		}
	}
	from := bin
	if dbg != nil {
		defer dbg.Close()
		from = dbg
		if !hasDWARF(dbg) {
			return nil, fmt.Errorf("%s: %w in debug file %s", path, ErrNoDebugInfo, src)
		}
	}
	d, err := from.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: read DWARF: %w", src, err)
	}
	in := &Info{Path: src, Binary: path, d: d, sec: map[string][]byte{}}
	for _, name := range []string{"info", "loc", "loclists", "addr"} {
		s := from.Section(".debug_" + name)
		if s == nil {
			s = from.Section(".zdebug_" + name)
		}
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%s: .debug_%s: %w", src, name, err)
		}
		in.sec[name] = b
	}
	if err := in.readBinary(bin, dbg); err != nil {
		return nil, err
	}
	if err := in.readUnits(); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	return in, nil
}

// openELF is elf.Open of a regular file (a FIFO or a device is refused before it is
// read); the file it reads is added to files, for the caller to close
func openELF(path string, files *[]*os.File) (*elf.File, error) {
	f, err := infile.Open(path)
	if err != nil {
		return nil, err
	}
	*files = append(*files, f)
	return elf.NewFile(f)
}

func hasDWARF(f *elf.File) bool {
	s := f.Section(".debug_info")
	if s == nil {
		s = f.Section(".zdebug_info")
	}
	return s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0
}

// buildID is the GNU build-id note's descriptor, or nil.
func buildID(f *elf.File) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			nsz, dsz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
			n := 12 + int(align4(nsz))
			if uint64(len(b)) < uint64(n)+uint64(dsz) { // (the last descriptor's padding may be cut)
				break
			}
			if typ == 3 && nsz == 4 && string(b[12:15]) == "GNU" {
				return b[n : n+int(dsz)]
			}
			b = b[min(len(b), n+int(align4(dsz))):]
		}
	}
	return nil
}

func align4(n uint32) uint32 { return (n + 3) &^ 3 }

// findSeparate looks for the debug file of bin (at path) as gdb does; it returns
// its path, or "" and the places it looked.
func findSeparate(path string, bin *elf.File) (string, []string) {
	var tried []string
	if id := buildID(bin); len(id) > 1 {
		h := hex.EncodeToString(id)
		p := filepath.Join(DebugRoot, ".build-id", h[:2], h[2:]+".debug")
		if regular(p) {
			return p, nil
		}
		tried = append(tried, p)
	}
	if s := bin.Section(".gnu_debuglink"); s != nil {
		if b, err := s.Data(); err == nil {
			if i := bytes.IndexByte(b, 0); i > 0 && len(b) >= 4 {
				name := string(b[:i])
				want := binary.LittleEndian.Uint32(b[len(b)-4:])
				dir := filepath.Dir(path)
				if abs, err := filepath.Abs(dir); err == nil {
					dir = abs
				}
				for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name), filepath.Join(DebugRoot, dir, name)} {
					if p == path || !regular(p) {
						tried = append(tried, p)
						continue
					}
					if data, err := infile.ReadFile(p); err == nil && crc32.ChecksumIEEE(data) == want {
						return p, nil
					}
					tried = append(tried, p+" (CRC differs)")
				}
			}
		}
	}
	if len(tried) == 0 {
		tried = append(tried, "no build-id note and no .gnu_debuglink")
	}
	return "", tried
}

func regular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// readBinary keeps what the binary itself says: its .eh_frame for frame base
// computations, its executable segments and its data symbols (those of the debug
// file dbg too, when the binary is stripped).
func (in *Info) readBinary(bin, dbg *elf.File) error {
	if s := bin.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		b, err := s.Data()
		if err != nil {
			return fmt.Errorf("%s: .eh_frame: %w", in.Binary, err)
		}
		in.eh, in.ehAddr = b, s.Addr
		if t := bin.Section(".text"); t != nil {
			in.ehText = t.Addr
		}
		if g := bin.Section(".got"); g != nil {
			in.ehData = g.Addr
		}
		// incomplete tables only lose the functions they do not describe
		in.fdes, _ = ehframe.Parse(in.eh, in.ehAddr, in.ehText, in.ehData)
	}
	for _, f := range []*elf.File{bin, dbg} {
		if f == nil || in.dframe != nil {
			continue
		}
		if s := f.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
			if b, err := s.Data(); err == nil {
				in.dframe = b
				in.dfdes, _ = ehframe.ParseDebugFrame(b)
			}
		}
	}
	for _, p := range bin.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			in.exec = append(in.exec, [2]uint64{p.Vaddr, p.Vaddr + p.Memsz})
		}
	}
	for _, f := range []*elf.File{bin, dbg} {
		if f == nil {
			continue
		}
		syms, _ := f.Symbols()
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_OBJECT && s.Name != "" && s.Section != elf.SHN_UNDEF {
				in.objects = append(in.objects, object{s.Name, s.Value, s.Size})
			}
		}
	}
	in.pie = bin.Type == elf.ET_DYN
	return nil
}

// sameFunctions checks that two ELF files give the functions they both name the same
// addresses (a binary and a debug file of it); with no function in common, that they
// name none (a stripped binary, whose functions no symbol can check, passes).
func sameFunctions(bin, dbg *elf.File) error {
	bs, ds := funcSymbols(bin), funcSymbols(dbg)
	common := 0
	names := make([]string, 0, len(ds))
	for n := range ds {
		names = append(names, n)
	}
	sort.Strings(names) // (the same file gives the same message)
	for _, n := range names {
		a, ok := bs[n]
		if !ok {
			continue
		}
		common++
		if a != ds[n] {
			return fmt.Errorf("%s is at %#x in the debug file, %#x in the binary", n, ds[n], a)
		}
	}
	if common == 0 && len(bs) > 0 && len(ds) > 0 {
		return fmt.Errorf("no function of the binary's %d is named in the debug file's %d", len(bs), len(ds))
	}
	return nil
}

// funcSymbols are f's defined function symbols, by name (the static and the dynamic
// table's; a name defined twice, a local in two files, is left out).
func funcSymbols(f *elf.File) map[string]uint64 {
	out, dup := map[string]uint64{}, map[string]bool{}
	syms, _ := f.Symbols()
	dyn, _ := f.DynamicSymbols()
	for _, s := range append(syms, dyn...) {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Section == elf.SHN_UNDEF || s.Name == "" {
			continue
		}
		if a, ok := out[s.Name]; ok && a != s.Value {
			dup[s.Name] = true
		}
		out[s.Name] = s.Value
	}
	for n := range dup {
		delete(out, n)
	}
	return out
}
