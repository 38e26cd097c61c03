package evfilter

import "testing"

// fakeFunc and fakeTable have the shape of elfio's Func and Functions.
type fakeFunc struct {
	Name       string
	Addr, Size uint64
}

type fakeTable []fakeFunc

func (t fakeTable) ByName(name string) (*fakeFunc, bool) {
	for i := range t {
		if t[i].Name == name {
			return &t[i], true
		}
	}
	return nil, false
}

func (t fakeTable) Containing(addr uint64) (*fakeFunc, bool) {
	for i := range t {
		if t[i].Addr <= addr && addr < t[i].Addr+t[i].Size {
			return &t[i], true
		}
	}
	return nil, false
}

// TestFuncSymbols: the compatibility adapter reads Addr and Size, gives a function of
// size 0 one byte, and refuses at once a table whose functions have no such fields.
func TestFuncSymbols(t *testing.T) {
	s := FuncSymbols(fakeTable{{"f", 0x1000, 0x20}, {"z", 0x2000, 0}})
	if a, n, ok := s.Func("f"); !ok || a != 0x1000 || n != 0x20 {
		t.Fatalf("f: %#x %d %v", a, n, ok)
	}
	if a, n, ok := s.Func("z"); !ok || a != 0x2000 || n != 1 {
		t.Fatalf("z: %#x %d %v", a, n, ok)
	}
	if a, n, ok := s.FuncAt(0x101f); !ok || a != 0x1000 || n != 0x20 {
		t.Fatalf("at 0x101f: %#x %d %v", a, n, ok)
	}
	if _, _, ok := s.FuncAt(0x1020); ok {
		t.Fatal("found a function at 0x1020")
	}
	if _, _, ok := s.Func("g"); ok {
		t.Fatal("found g")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a table without Addr and Size was accepted")
		}
	}()
	FuncSymbols(badTable{})
}

type badTable struct{}

func (badTable) ByName(string) (*struct{ Addr int }, bool)     { return nil, false }
func (badTable) Containing(uint64) (*struct{ Addr int }, bool) { return nil, false }
