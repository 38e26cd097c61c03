package evfilter

import (
	"fmt"
	"reflect"

	"github.com/kprewrite/kprewrite/internal/eventdef"
)

// Source says where the runtime finds a field's value at a hit.
type Source uint8

// Sources.
const (
	SrcData  Source = iota // the record's data at Field.Off (a fetcharg)
	SrcPID                 // common_pid: the thread id, as the kernel's task pid
	SrcCPU                 // CPU, cpu, common_cpu
	SrcComm                // COMM, comm: the thread's name
	SrcType                // common_type: the event id
	SrcZero                // common_flags, common_preempt_count: 0 in user space
	SrcIP                  // __probe_ip, __probe_func: the site's run-time address
	SrcRetIP               // __probe_ret_ip: the return address
)

// filterType is the kernel's filter_type of a field.
type filterType uint8

const (
	ftOther     filterType = iota // a number
	ftDynString                   // __data_loc char[]: a string in the record
	ftComm                        // the generic COMM and comm
	ftCPU                         // the generic CPU, cpu and common_cpu
)

// Field is one field a filter may name.
type Field struct {
	Name   string
	Type   string // the format file's type
	Size   int    // bytes
	Signed bool
	Src    Source
	Off    int // SrcData: offset in the record's data
	// Float marks an f32/f64 field (not comparable); Enum is the field's enum
	// table, whose names a filter may compare with.
	Float bool
	Enum  []eventdef.EnumValue
	ft    filterType
}

func (f *Field) isString() bool { return f.ft == ftDynString || f.ft == ftComm }

// Fields lists the fields of the probe's event in the order the kernel looks a name
// up: the generic fields, the common fields, then the event's own.
func Fields(p *eventdef.Probe) []Field {
	fs := []Field{
		{Name: "CPU", Type: "int", Size: 4, Signed: true, Src: SrcCPU, ft: ftCPU},
		{Name: "cpu", Type: "int", Size: 4, Signed: true, Src: SrcCPU, ft: ftCPU},
		{Name: "common_cpu", Type: "int", Size: 4, Signed: true, Src: SrcCPU, ft: ftCPU},
		{Name: "COMM", Type: "char *", Size: 8, Src: SrcComm, ft: ftComm},
		{Name: "comm", Type: "char *", Size: 8, Src: SrcComm, ft: ftComm},
		{Name: "common_type", Type: "unsigned short", Size: 2, Src: SrcType},
		{Name: "common_flags", Type: "unsigned char", Size: 1, Src: SrcZero},
		{Name: "common_preempt_count", Type: "unsigned char", Size: 1, Src: SrcZero},
		{Name: "common_pid", Type: "int", Size: 4, Signed: true, Src: SrcPID},
	}
	if p.Return {
		fs = append(fs, Field{Name: "__probe_func", Type: "unsigned long", Size: 8, Src: SrcIP},
			Field{Name: "__probe_ret_ip", Type: "unsigned long", Size: 8, Src: SrcRetIP})
	} else {
		fs = append(fs, Field{Name: "__probe_ip", Type: "unsigned long", Size: 8, Src: SrcIP})
	}
	off := 0
	for i := range p.Args {
		a := &p.Args[i]
		typ, _, str := eventdef.FieldType(a)
		f := Field{Name: a.Name, Type: typ, Size: a.SlotSize(), Src: SrcData, Off: off, Signed: str || a.Kind == eventdef.KindSigned,
			Float: a.Kind == eventdef.KindFloat, Enum: a.Enum}
		if str {
			f.ft = ftDynString
			if a.Count > 0 {
				f.Type += fmt.Sprintf("[%d]", a.Count)
			}
		}
		fs = append(fs, f)
		off += a.SlotSize()
	}
	return fs
}

func findField(fs []Field, name string) *Field {
	for i := range fs {
		if fs[i].Name == name {
			return &fs[i]
		}
	}
	return nil
}

// AnySymbols finds every function (at address 0): for checking a filter's grammar
// before the binary is read, or reading back one that was checked when it was.
type AnySymbols struct{}

// Func finds every name.
func (AnySymbols) Func(string) (uint64, uint64, bool) { return 0, 1, true }

// FuncAt finds a function at every address.
func (AnySymbols) FuncAt(uint64) (uint64, uint64, bool) { return 0, 1, true }

// FuncTable is a binary's function table as elfio.Functions has it: the function
// named name, or the one holding addr, as a pointer to a struct with uint64 fields
// Addr and Size. The filter reads no binary: this is all it needs of one.
type FuncTable[F any] interface {
	ByName(name string) (F, bool)
	Containing(addr uint64) (F, bool)
}

// FuncSymbols finds .function names among a binary's functions (an *elfio.Functions).
//
// Deprecated: use elfsyms.Of (package internal/evfilter/elfsyms), which reads
// elfio's types directly. FuncSymbols stays so that callers written against the
// *elfio.Functions signature compile unchanged without this package importing elfio;
// it reads each function's Addr and Size by reflection and panics at once on a
// table whose functions have no such fields.
func FuncSymbols[T FuncTable[F], F any](fns T) Symbols {
	return tableSymbols[T, F]{fns, rangeReader[F]()}
}

// tableSymbols finds functions in a FuncTable; a function of size 0 spans one byte,
// so that its address still matches.
type tableSymbols[T FuncTable[F], F any] struct {
	fns     T
	rangeOf func(F) (addr, size uint64)
}

func (s tableSymbols[T, F]) Func(name string) (uint64, uint64, bool) {
	if f, ok := s.fns.ByName(name); ok {
		addr, size := s.rangeOf(f)
		return addr, max(size, 1), true
	}
	return 0, 0, false
}

func (s tableSymbols[T, F]) FuncAt(addr uint64) (uint64, uint64, bool) {
	if f, ok := s.fns.Containing(addr); ok {
		lo, size := s.rangeOf(f)
		return lo, max(size, 1), true
	}
	return 0, 0, false
}

// rangeReader reads the Addr and Size fields of F, a pointer to a struct; it panics
// when F has no such uint64 fields, a caller's mistake found when the table is
// adapted rather than at a lookup.
func rangeReader[F any]() func(F) (addr, size uint64) {
	t := reflect.TypeFor[F]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("evfilter.FuncSymbols: %v is not a pointer to a struct", t))
	}
	field := func(name string) []int {
		f, ok := t.Elem().FieldByName(name)
		if !ok || f.Type.Kind() != reflect.Uint64 {
			panic(fmt.Sprintf("evfilter.FuncSymbols: %v has no uint64 field %s", t.Elem(), name))
		}
		return f.Index
	}
	addr, size := field("Addr"), field("Size")
	return func(f F) (uint64, uint64) {
		v := reflect.ValueOf(f).Elem()
		return v.FieldByIndex(addr).Uint(), v.FieldByIndex(size).Uint()
	}
}
