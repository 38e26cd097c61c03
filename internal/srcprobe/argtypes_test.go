package srcprobe

import (
	"debug/dwarf"
	"strings"
	"testing"
)

func basic(size int64) dwarf.BasicType {
	return dwarf.BasicType{CommonType: dwarf.CommonType{ByteSize: size}}
}

// TestParamType: the k-th integer register's parameter by the SysV ABI's classes: a
// double takes no integer register, a pointer is left to the default, a struct by
// value ends the walk.
func TestParamType(t *testing.T) {
	i32 := &dwarf.IntType{BasicType: basic(4)}
	u64 := &dwarf.UintType{BasicType: basic(8)}
	size := &dwarf.TypedefType{CommonType: dwarf.CommonType{Name: "size_t", ByteSize: 8}, Type: u64}
	dbl := &dwarf.FloatType{BasicType: basic(8)}
	ldbl := &dwarf.FloatType{BasicType: basic(16)}
	ptr := &dwarf.PtrType{CommonType: dwarf.CommonType{ByteSize: 8}, Type: i32}
	st := &dwarf.StructType{CommonType: dwarf.CommonType{ByteSize: 8}, Kind: "struct", StructName: "s"}
	boolean := &dwarf.BoolType{BasicType: basic(1)}
	params := []dwarf.Type{size, dbl, i32, ptr, boolean}
	for k, want := range []string{"u64", "s32", "", "u8", ""} {
		if got := paramType(params, k); got != want {
			t.Errorf("register %d of (size_t, double, int, int *, bool): %q, want %q", k, got, want)
		}
	}
	if got := paramType([]dwarf.Type{st, i32}, 1); got != "" {
		t.Errorf("after a struct by value: %q, want none", got)
	}
	if got := paramType([]dwarf.Type{ldbl, i32}, 0); got != "" {
		t.Errorf("after a long double: %q, want none", got)
	}
	if got := paramType([]dwarf.Type{i32}, 1); got != "" {
		t.Errorf("past the named parameters: %q, want none", got)
	}
}

// TestSameAsEvent: a named event's later probes take types only as its first did, and
// disagreeing types are an error naming the way out.
func TestSameAsEvent(t *testing.T) {
	r := &Resolver{}
	if got, err := r.sameAsEvent(strings.Fields("p:g/e f1 x=%di:s32"), true); err != nil || got != "p:g/e f1 x=%di:s32" {
		t.Fatalf("first probe: %q, %v", got, err)
	}
	if got, err := r.sameAsEvent(strings.Fields("p:g/e f2 x=%di:s32"), true); err != nil || got != "p:g/e f2 x=%di:s32" {
		t.Errorf("agreeing probe: %q, %v", got, err)
	}
	if _, err := r.sameAsEvent(strings.Fields("p:g/e f3 x=%di:s64"), true); err == nil || !strings.Contains(err.Error(), "--kernel-types") {
		t.Errorf("disagreeing probe: %v, want an error naming --kernel-types", err)
	}
	if got, err := r.sameAsEvent(strings.Fields("p:g/u f1 x=%di"), false); err != nil || got != "" {
		t.Errorf("untyped first probe: %q, %v", got, err)
	}
	if got, err := r.sameAsEvent(strings.Fields("p:g/u f2 x=%di:s32"), true); err != nil || got != "" {
		t.Errorf("probe after an untyped first: %q, %v, want it untyped", got, err)
	}
}
