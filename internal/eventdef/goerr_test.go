package eventdef

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// TestRunGoErr builds Go errors' messages from memory laid out as Go lays out its
// error types, and prints the others by their type's name.
func TestRunGoErr(t *testing.T) {
	const base = 0x1000
	mem := make([]byte, 0x2000)
	put := func(off int, vs ...uint64) {
		for i, v := range vs {
			binary.LittleEndian.PutUint64(mem[off+8*i:], v)
		}
	}
	str := func(off int, s string) { copy(mem[off:], s) }
	put(0x000, base+0x100, 19) // *errors.errorString{s}
	str(0x100, "file does not exist")
	put(0x020, 0, 0x5300)                                            // an itab of syscall.Errno
	put(0x040, base+0x120, 4, base+0x130, 8, base+0x020, base+0x080) // *fs.PathError{Op, Path, Err}
	str(0x120, "open")
	str(0x130, "/missing")
	put(0x080, 2, 7, ^uint64(2))                    // Errnos 2, 7, -3
	put(0x200, 0, 0, base+0x1a0, 5, base+0x1b0, 25) // syscall's errors: "", "perm!", ...
	str(0x1a0, "perm!")
	str(0x1b0, "no such file or directory")
	put(0x300, 0, 0, base+0x100, 4)                      // *fmt.wrapError's msg at 16
	put(0x340, 0, base+0x120, 4, base+0x020, base+0x088) // *os.SyscallError{_, Syscall, Err} (at 8, 24)
	put(0x320, base+0x100, 1<<20)                        // a message longer than the record
	m := &Machine{Mem: memFrom(base, mem)}
	m.Regs[10], m.Regs[5] = 0x5000, base // ax, bx
	table := fmt.Sprintf("{nil=0,net/x.E=0x5600,*errors.errorString=0x5000/str/0,*fmt.wrapError=0x5100/str/16,*fs.PathError=0x5200/path/0/16,syscall.Errno=0x5300/errno/%#x/3,*main.CodeErr=0x5400,*os.SyscallError=0x5700/wrap/8/24}", base+0x200)
	for _, c := range []struct{ args, want string }{
		{`a=%ax,%bx b=\0x5100,\0x1300 c=\0x5200,\0x1040 d=\0x5300,\0x1088 e=\0x5300,\0x1090 f=\0x5300,\0x1080`,
			` a="file does not exist" b="file" c="open /missing: no such file or directory" d="errno 7" e="errno -3" f="no such file or directory"`},
		{`n=\0,\0 custom=\0x5400,%bx unknown=\0x5500,%bx bad=\0x5000,\0x9000 viaitab=+8(\0x1020),\0x1088 sys=\0x5700,\0x1340`,
			` n=nil custom=*main.CodeErr unknown=0x5500 bad=*errors.errorString viaitab="errno 7" sys="open: errno 7"`},
	} {
		var def strings.Builder
		def.WriteString("p:e f")
		for _, a := range strings.Fields(c.args) {
			def.WriteString(" " + a + ":goerr" + table)
		}
		p, rec := parseRun(t, def.String(), m)
		got, err := FormatArgs(p, rec)
		if err != nil || got != c.want {
			t.Errorf("%s:\n got %q (%v)\nwant %q", c.args, got, err, c.want)
		}
	}
	// @image: link-time addresses, moved by the load bias; the record keeps the
	// link-time type word, which the table names
	put(0x400, 0, 0x6300)                                            // an itab of syscall.Errno, moved
	put(0x440, base+0x120, 4, base+0x130, 8, base+0x400, base+0x080) // a PathError with it
	pie := *m
	pie.LoadBias = 0x1000
	ptable := "{@image,nil=0,*errors.errorString=0x5000/str/0,*fs.PathError=0x5200/path/0/16,syscall.Errno=0x5300/errno/0x200/3,*main.CodeErr=0x5400}"
	p, rec := parseRun(t, `p:e f a=\0x6000,\0x1000:goerr`+ptable+` b=\0x6200,\0x1440:goerr`+ptable+` c=\0x6400,\0:goerr`+ptable+
		` d=\0x5000,\0x1000:goerr`+ptable+` n=\0,\0:goerr`+ptable, &pie)
	want := ` a="file does not exist" b="open /missing: no such file or directory" c=*main.CodeErr d=0x4000 n=nil`
	if got, err := FormatArgs(p, rec); err != nil || got != want {
		t.Errorf("@image:\n got %q (%v)\nwant %q", got, err, want)
	}
	// a message is cut at the record's room, and a value with no room left faults
	p, rec = parseRun(t, "p:e f long=\\0x5000,\\0x1320:goerr"+table+" next=%ax,%bx:goerr"+table, m)
	got, err := FormatArgs(p, rec)
	if err != nil || !strings.HasPrefix(got, ` long="file`) || !strings.HasSuffix(got, `" next=(fault)`) || len(rec) != RecordLimit-16 {
		t.Errorf("long message: %d-byte record, %.60q...%q (%v)", len(rec), got, got[max(0, len(got)-30):], err)
	}
	vals, err := DecodeArgs(p, rec, FormatOptions{})
	if err != nil || vals[1].Value != nil {
		t.Errorf("DecodeArgs: %v, %v", vals[1], err)
	}
	for _, def := range []string{"p:e f %ax:goerr{nil=0}", "p:e f %ax,%bx:goerr", "p:e f %ax,%bx:goerr{a=1/str}",
		"p:e f %ax,%bx:goerr{a=1/nope/2}", "p:e f %ax,%bx:goerr[2]{nil=0}", "p:e f %ax,$comm:goerr{nil=0}", "p:e f $comm,%ax:goerr{nil=0}", "p:e f %ax,%bx:goerr{nil=0,@image}"} {
		if _, err := Parse(def); err == nil {
			t.Errorf("%s: accepted", def)
		}
	}
}
