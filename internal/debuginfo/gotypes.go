package debuginfo

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/internal/infile"
)

// attrGoRuntimeType is DW_AT_go_runtime_type: the offset of a type's descriptor
// (abi.Type) from the start of the binary's type data (the symbol runtime.types).
const attrGoRuntimeType dwarf.Attr = 0x2904

// Go's abi.Type on amd64: Kind_ is its byte 23, and an abi.InterfaceType's
// Methods slice (of Imethod{Name, Typ int32}) follows the 48-byte Type and the
// 8-byte PkgPath.
const (
	goKindOff      = 23
	goKindMask     = 0x1f
	goKindIface    = 20
	goIfaceMethods = 56
)

// MaxDynTypes bounds the dynamic types an interface's value is named among: an
// interface without methods (any) would list every type of the program.
const MaxDynTypes = 512

// goTypeIndex reads, once, the descriptor offset of every named Go type DWARF
// describes, by name.
func (in *Info) goTypeIndex() map[string]uint64 {
	if in.goTypes != nil {
		return in.goTypes
	}
	in.goTypes = map[string]uint64{}
	in.goDwarf = map[string]dwarf.Offset{}
	r := in.d.Reader()
	for {
		e, err := r.Next()
		if e == nil || err != nil {
			break
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		var off uint64
		switch v := e.Val(attrGoRuntimeType).(type) {
		case uint64:
			off = v
		case int64:
			off = uint64(v)
		}
		if name != "" && off != 0 {
			if _, dup := in.goTypes[name]; !dup {
				in.goTypes[name] = off
				in.goDwarf[name] = e.Offset
			}
		}
		if e.Tag == dwarf.TagSubprogram && e.Children {
			r.SkipChildren()
		}
	}
	return in.goTypes
}

// DynTypes names the types a value of the Go interface type iface may hold: the
// link-time address of each type descriptor whose type has iface's methods, to its
// name. It returns nil when that cannot be known (a position-independent program,
// whose descriptors move; no type data; an interface without methods, or more than
// MaxDynTypes types).
func (in *Info) DynTypes(iface string) (map[uint64]string, error) {
	if in.pie {
		return nil, nil
	}
	return in.LinkedDynTypes(iface)
}

// LinkedDynTypes is DynTypes in a position-independent program too, by link-time
// addresses (which the load bias moves: see PIE).
func (in *Info) LinkedDynTypes(iface string) (map[uint64]string, error) {
	if m, ok := in.dynTypes[iface]; ok {
		return m, nil
	}
	m, err := in.dynTypesOf(iface)
	if err == nil {
		if in.dynTypes == nil {
			in.dynTypes = map[string]map[uint64]string{}
		}
		in.dynTypes[iface] = m
	}
	return m, err
}

func (in *Info) dynTypesOf(iface string) (map[uint64]string, error) {
	idx := in.goTypeIndex()
	ioff, ok := idx[iface]
	if !ok {
		return nil, nil
	}
	f, err := infile.Open(in.Binary)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	bin, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", in.Binary, err)
	}
	base, ok := goTypesBase(bin)
	if !ok {
		return nil, nil
	}
	methods, err := ifaceMethods(bin, base, base+ioff)
	if err != nil || len(methods) == 0 {
		return nil, err
	}
	funcs := map[string]bool{}
	for _, fn := range in.funcs {
		funcs[fn.Name] = true
	}
	out := map[uint64]string{}
	for name, off := range idx {
		if goTypeName(name) && hasMethods(name, methods, funcs) {
			out[base+off] = name
		}
	}
	if len(out) > MaxDynTypes {
		return nil, nil
	}
	return out, nil
}

// goTypesBase is the address of the binary's type data.
func goTypesBase(bin *elf.File) (uint64, bool) {
	syms, err := bin.Symbols()
	if err != nil {
		return 0, false
	}
	for _, s := range syms {
		if s.Name == "runtime.types" || s.Name == "type:*" {
			return s.Value, true
		}
	}
	return 0, false
}

// ifaceMethods reads the method names of the interface descriptor at addr.
func ifaceMethods(bin *elf.File, base, addr uint64) ([]string, error) {
	hdr, err := readAt(bin, addr, goIfaceMethods+16)
	if err != nil {
		return nil, err
	}
	if hdr[goKindOff]&goKindMask != goKindIface {
		return nil, fmt.Errorf("the descriptor at %#x is not an interface's", addr)
	}
	ptr := binary.LittleEndian.Uint64(hdr[goIfaceMethods:])
	n := binary.LittleEndian.Uint64(hdr[goIfaceMethods+8:])
	if n == 0 || n > 1024 {
		return nil, nil
	}
	ms, err := readAt(bin, ptr, int(8*n))
	if err != nil {
		return nil, err
	}
	var names []string
	for i := uint64(0); i < n; i++ {
		off := uint64(binary.LittleEndian.Uint32(ms[8*i:]))
		name, err := goName(bin, base+off)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// goName reads an abi.Name: a flags byte, a varint length, the bytes.
func goName(bin *elf.File, addr uint64) (string, error) {
	b, err := readAt(bin, addr, 3)
	if err != nil {
		return "", err
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > 4096 {
		return "", fmt.Errorf("a bad type name at %#x", addr)
	}
	s, err := readAt(bin, addr+1+uint64(k), int(n))
	return string(s), err
}

// readAt reads n bytes of the program's file image at link-time address addr.
func readAt(bin *elf.File, addr uint64, n int) ([]byte, error) {
	for _, s := range bin.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_ALLOC == 0 || addr < s.Addr || addr+uint64(n) > s.Addr+s.Size {
			continue
		}
		buf := make([]byte, n)
		if _, err := s.ReadAt(buf, int64(addr-s.Addr)); err != nil {
			return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
		}
		return buf, nil
	}
	return nil, fmt.Errorf("no section holds %d bytes at %#x", n, addr)
}

// goTypeName says whether a type's name can name a dynamic type: a named type or a
// pointer to one (PKG.T, *PKG.T), nothing generic or composite.
func goTypeName(name string) bool {
	n := strings.TrimPrefix(name, "*")
	if n == "" || !strings.Contains(n, ".") {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c == '_' || c == '.' || c == '/' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// hasMethods says whether the type name has every method, by the names Go gives
// methods' functions: PKG.T.M for a value receiver, PKG.(*T).M for a pointer's.
func hasMethods(name string, methods []string, funcs map[string]bool) bool {
	ptr := strings.HasPrefix(name, "*")
	n := strings.TrimPrefix(name, "*")
	dot := strings.LastIndexByte(n, '.')
	pkg, typ := n[:dot], n[dot+1:]
	for _, m := range methods {
		if funcs[pkg+"."+typ+"."+m] {
			continue
		}
		if ptr && funcs[pkg+".(*"+typ+")."+m] {
			continue
		}
		return false
	}
	return true
}

// GoType is the DWARF type of the Go type named name (errors.errorString), nil
// when DWARF describes none.
func (in *Info) GoType(name string) dwarf.Type {
	off, ok := in.goTypeIndex()[name]
	if !ok || off == 0 {
		return nil
	}
	t, err := in.d.Type(in.goDwarf[name])
	if err != nil {
		return nil
	}
	return t
}

// PIE says whether the program is position-independent: its link-time addresses
// move by its load bias.
func (in *Info) PIE() bool { return in.pie }

// DataObject is the link-time address and size of the data symbol name (Go's
// syscall.errors); ok is false without one.
func (in *Info) DataObject(name string) (addr, size uint64, ok bool) {
	for _, o := range in.objects {
		if o.name == name {
			return o.addr, o.size, true
		}
	}
	return 0, 0, false
}
