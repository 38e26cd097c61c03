package eventdef

import (
	"strings"
	"testing"
)

func TestFormatTypes(t *testing.T) {
	p, err := Parse(`p:e f a=%di:u8 b=%di:s8 c=%di:x8 d=%di:u16 e=%di:s16 f=%di:x16 g=%di:u32 h=%di:s32 i=%di:x32 j=%di:u64 k=%di:s64 l=%di %di:char m=+0(%di):s16[3] n=%di:b3@1/8 s=+0(%di):string u=+0(%di):ustring[2] y=%di:symbol z=%di:symstr`)
	if err != nil {
		t.Fatal(err)
	}
	rec := cat(
		[]byte{0xff}, []byte{0xff}, []byte{0x0}, // a b c
		u16le(0xfffe), u16le(0x8000), u16le(0xabc), // d e f
		u32le(0xffffffff), u32le(0x80000000), u32le(0), // g h i
		u64le(^uint64(0)), u64le(1<<63), u64le(0xdeadbeef), // j k l
		[]byte{0},                              // char NUL
		u16le(1), u16le(0xffff), u16le(0x7fff), // m
		[]byte{5},                 // n
		u32le(4<<16|81),           // s: "abc" right after the 81-byte fixed area
		u32le(0), u32le(1<<16|85), // u: fault, ""
		u64le(0x401136), u64le(0x401000), // y z
		[]byte("abc\x00"), []byte{0},
	)
	want := ` a=255 b=-1 c=0x0 d=65534 e=-32768 f=0xabc g=4294967295 h=-2147483648 i=0x0 j=18446744073709551615 k=-9223372036854775808 l=0xdeadbeef arg13='` + "\x00" + `' m={1,-1,32767} n=5 s="abc" u={(fault),""} y=0x401136 z="0x401000"`
	got, err := FormatArgs(p, rec)
	if err != nil || got != want {
		t.Errorf("FormatArgs:\n got %q (%v)\nwant %q", got, err, want)
	}
	sym := func(a uint64) (string, uint64, uint64, bool) {
		if a >= 0x401000 && a < 0x401200 {
			return "main", a - 0x401000, 0x200, true
		}
		return "", 0, 0, false
	}
	got, err = FormatArgsWith(p, rec, FormatOptions{Symbolize: sym})
	if want := ` y=main+0x136/0x200 z="main+0x0/0x200"`; err != nil || !strings.HasSuffix(got, want) {
		t.Errorf("FormatArgsWith: %q (%v), want suffix %q", got, err, want)
	}

	if _, err := FormatArgs(p, rec[:20]); err == nil {
		t.Error("short record accepted")
	}
	bad := cat(rec[:53], u32le(100<<16|81), rec[57:])
	if _, err := FormatArgs(p, bad); err == nil {
		t.Error("string past the record accepted")
	}
}

func TestFormatHead(t *testing.T) {
	p, _ := Parse("p:e f")
	r, _ := Parse("r:e f")
	if got := FormatHead(p, 0x401126, 0); got != "(0x401126)" {
		t.Errorf("entry head %q", got)
	}
	if got := FormatHead(r, 0x401126, 0x40116f); got != "(0x40116f <- 0x401126)" {
		t.Errorf("return head %q", got)
	}
	q, _ := Parse("r:ev f $retval")
	got, err := FormatEvent(q, 0x401126, 0x40116f, u64le(0xfffffffffffffffc), FormatOptions{})
	if want := "ev: (0x40116f <- 0x401126) arg1=0xfffffffffffffffc"; err != nil || got != want {
		t.Errorf("FormatEvent %q (%v), want %q", got, err, want)
	}
}
