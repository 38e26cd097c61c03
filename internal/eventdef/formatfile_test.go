package eventdef

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// formatDefs cover every type the uprobe tracer takes, arrays of them, bitfields,
// immediates, $comm, and entry and return events.
var formatDefs = []string{
	`p:kpwtest/f0 ` + siteKernelE,
	`r:kpwtest/f1 ` + siteKernelE,
	`p:kpwtest/f2 ` + siteKernelE + ` a=%di:s8 b=%si:s16 c=%dx:s32 d=%cx:s64 e=%di:u8 f=%si:u16 g=%dx:u32 h=%cx:u64`,
	`p:kpwtest/f3 ` + siteKernelE + ` a=%di:x8 b=%si:x16 c=%dx:x32 d=%cx:x64 e=%di g=%si:char`,
	`p:kpwtest/f4 ` + siteKernelE + ` s=+0(%di):string u=+0(%si):ustring c=$comm i=\"abc" n=\1234`,
	`p:kpwtest/f5 ` + siteKernelE + ` a=+0(%di):u8[3] b=+0(%si):x64[2] c=+0(%di):char[4] d=+0(%si):string[2] e=+0(%di):s16[2]`,
	`p:kpwtest/f6 ` + siteKernelE + ` a=+0(%di):b3@1/32 b=+0(%si):b4@60/64 c=+0(%di):b1@0/8`,
	`r:kpwtest/f7 ` + siteKernelE + ` r=$retval s=$retval:s32 t=+0($retval):string x=$stack0 y=+8($stack):u32`,
}

// TestFormatFileMatchesKernel: the format file of each definition is, byte for byte,
// the one the kernel's uprobe tracer shows for it (the kernel's id given).
func TestFormatFileMatchesKernel(t *testing.T) {
	needOracle(t)
	defer removeOracleEvents(t)
	for _, def := range formatDefs {
		p, err := Parse(def)
		if err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		if err := writeUprobeEvents(def); err != nil {
			t.Fatalf("%s: the kernel refuses it: %v", def, err)
		}
		dir := tracefs + "/events/" + p.Group + "/" + p.Event
		want, err := os.ReadFile(dir + "/format")
		if err != nil {
			t.Fatal(err)
		}
		idText, err := os.ReadFile(dir + "/id")
		if err != nil {
			t.Fatal(err)
		}
		id, _ := strconv.Atoi(strings.TrimSpace(string(idText)))
		if got := FormatFile(p, uint32(id)); got != string(want) {
			t.Errorf("%s:\ngot:\n%s\nthe kernel's:\n%s", def, got, want)
		}
	}
}

// TestFormatFileKprobeTypes: symbol and symstr, which only kprobes take, are
// unsigned longs printed with %pS.
func TestFormatFileKprobeTypes(t *testing.T) {
	p, err := Parse(`p:g/e f a=%di:symbol b=%si:symstr`)
	if err != nil {
		t.Fatal(err)
	}
	got := FormatFile(p, 7)
	for _, s := range []string{"ID: 7\n", "\tfield:u64 a;\toffset:16;\tsize:8;\tsigned:0;\n", "\tfield:unsigned long b;\toffset:24;\tsize:8;\tsigned:0;\n",
		`print fmt: "(%lx) a=%pS b=\"%pS\"", REC->__probe_ip, REC->a, REC->b` + "\n"} {
		if !strings.Contains(got, s) {
			t.Errorf("no %q in\n%s", s, got)
		}
	}
}
