package eventdef

import (
	"reflect"
	"testing"
)

// TestDecodeArgs decodes the record of TestFormatTypes into Go values: the same
// fields the trace line prints, typed.
func TestDecodeArgs(t *testing.T) {
	p, err := Parse(`p:e f a=%di:u8 b=%di:s8 c=%di:x8 k=%di:s64 l=%di %di:char m=+0(%di):s16[3] n=%di:b3@1/8 s=+0(%di):string u=+0(%di):ustring[2] y=%di:symbol z=%di:symstr`)
	if err != nil {
		t.Fatal(err)
	}
	rec := cat(
		[]byte{0xff}, []byte{0xff}, []byte{0x7}, // a b c
		u64le(1<<63), u64le(0xdeadbeef), // k l
		[]byte{'x'},                            // char
		u16le(1), u16le(0xffff), u16le(0x7fff), // m
		[]byte{5},                 // n
		u32le(4<<16|55),           // s: "abc" right after the 55-byte fixed area
		u32le(0), u32le(1<<16|59), // u: fault, ""
		u64le(0x401136), u64le(0x401000), // y z
		[]byte("abc\x00"), []byte{0},
	)
	sym := func(a uint64) (string, uint64, uint64, bool) { return "main", a - 0x401000, 0x200, true }
	got, err := DecodeArgs(p, rec, FormatOptions{Symbolize: sym})
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{
		{"a", uint64(255)}, {"b", int64(-1)}, {"c", uint64(7)}, {"k", int64(-1 << 63)}, {"l", uint64(0xdeadbeef)},
		{"arg6", byte('x')}, {"m", []any{int64(1), int64(-1), int64(32767)}}, {"n", uint64(5)}, {"s", "abc"},
		{"u", []any{nil, ""}}, {"y", uint64(0x401136)}, {"z", "main+0x0/0x200"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeArgs:\n got %#v\nwant %#v", got, want)
	}
	if _, err := DecodeArgs(p, rec[:20], FormatOptions{}); err == nil {
		t.Error("short record accepted")
	}
	bad := cat(rec[:27], u32le(100<<16|55), rec[31:])
	if _, err := DecodeArgs(p, bad, FormatOptions{}); err == nil {
		t.Error("string past the record accepted")
	}
}
