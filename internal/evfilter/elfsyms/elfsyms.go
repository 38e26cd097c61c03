// Package elfsyms finds a filter's .function names among a binary's functions: the
// adapter from elfio's function table to evfilter.Symbols, kept out of evfilter so
// that the filter itself reads no ELF.
package elfsyms

import (
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/evfilter"
)

// Of finds .function names among fns.
func Of(fns *elfio.Functions) evfilter.Symbols { return funcSymbols{fns} }

// funcSymbols gives a function of size 0 one byte, so that its address still
// matches.
type funcSymbols struct{ fns *elfio.Functions }

func (s funcSymbols) Func(name string) (uint64, uint64, bool) {
	if f, ok := s.fns.ByName(name); ok {
		return f.Addr, max(f.Size, 1), true
	}
	return 0, 0, false
}

func (s funcSymbols) FuncAt(addr uint64) (uint64, uint64, bool) {
	if f, ok := s.fns.Containing(addr); ok {
		return f.Addr, max(f.Size, 1), true
	}
	return 0, 0, false
}
