package elfio

import (
	"os"
	"reflect"
	"runtime"
	"testing"

	"github.com/kprewrite/kprewrite/internal/gopclntab"
)

// TestGoFuncsSelf: the functions .gopclntab gives this test binary (a Go program that
// go test links stripped, its text base from the runtime's moduledata) start where its
// own runtime says functions start (offset by the load bias should it be a PIE), and
// functions taken by value are found by name at their addresses.
func TestGoFuncsSelf(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fns, err := f.GoFuncs()
	if err != nil || len(fns) < 1000 {
		t.Fatalf("%d functions: %v", len(fns), err)
	}
	byName := map[string]gopclntab.Func{}
	for _, fn := range fns {
		byName[fn.Name] = fn
	}
	self := runtime.FuncForPC(reflect.ValueOf(TestGoFuncsSelf).Pointer())
	bias := self.Entry() - uintptr(byName[self.Name()].Entry)
	for _, v := range []any{TestGoFuncsSelf, Open, (*File).GoFuncs, os.Executable, runtime.GC, gopclntab.Parse} {
		pc := reflect.ValueOf(v).Pointer()
		name := runtime.FuncForPC(pc).Name()
		if fn, ok := byName[name]; !ok || uintptr(fn.Entry)+bias != pc {
			t.Errorf("%s: at %#x+%#x, the runtime says %#x", name, fn.Entry, bias, pc)
		}
	}
	for _, fn := range fns {
		if rt := runtime.FuncForPC(uintptr(fn.Entry) + bias); rt == nil || rt.Entry() != uintptr(fn.Entry)+bias {
			t.Fatalf("%s at %#x (bias %#x): the runtime has no function starting there", fn.Name, fn.Entry, bias)
		}
	}
}
