package analysis

import (
	"os"
	"strconv"
	"testing"

	"kprewrite/elfio"
)

func TestDbgTable(t *testing.T) {
	p, a := os.Getenv("DBGBIN"), os.Getenv("DBGADDR")
	if p == "" {
		t.Skip()
	}
	addr, _ := strconv.ParseUint(a, 0, 64)
	f, _ := elfio.Open(p)
	b, _ := Analyze(f, Options{})
	fi := b.funcAt(addr)
	fc := b.loadFunc(fi)
	j := fc.find(addr)
	for m := j - 10; m <= j; m++ {
		a := fc.insts[m].addr
		t.Logf("%#x %v edges=%v pad=%v start=%v", a, fc.x(m), b.edges.any(a, a+1), b.isPad(a), b.isStart(a))
		b.edges.in(a, a+1, func(e *edge) bool { t.Logf("   edge %v from %#x", e.kind, e.src); return true })
	}
	tm, ok := b.matchTable(fc, j)
	t.Logf("match %v %+v", ok, tm)
	ok2, d := b.pointerJump(fc, j)
	t.Logf("ptr %v %s", ok2, d)
}
