package evfilter

import (
	"fmt"

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

// GoIDName is the goroutine id's field: the u64 the rewrite appends to the records of
// an event at a Go function, after the event's own fields (internal/rewriter, goid.go).
const GoIDName = "common_goid"

// FieldsGo is Fields of an event whose records carry a goroutine id: the event's own
// fields, then common_goid (where the format file lists it). The id is data like a
// fetcharg, so filters and hist keys read it as one, with no help from the runtime.
func FieldsGo(p *eventdef.Probe) []Field {
	fs := Fields(p)
	off := 0
	for i := range p.Args {
		off += p.Args[i].SlotSize()
	}
	return append(fs, Field{Name: GoIDName, Type: "u64", Size: 8, Src: SrcData, Off: off})
}

// EventFields is FieldsGo when the event's records carry a goroutine id, else Fields.
func EventFields(p *eventdef.Probe, goid bool) []Field {
	if goid {
		return FieldsGo(p)
	}
	return Fields(p)
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
