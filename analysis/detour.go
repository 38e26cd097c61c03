package analysis

import (
	"math"

	"github.com/kprewrite/kprewrite/elfio"
)

// DetourSpan bounds the size of everything the rewriter adds after the image
// (detour buffers, out-of-line slots, trampolines, tables, runtime): the
// analysis checks rel32 reach against every address of the window, so a
// patcher that keeps its new code inside it needs no second check.
const DetourSpan = 256 << 20

// DetourWindow is the single place that states where detour buffers live:
// in new PT_LOAD segments starting at the first page boundary after the
// image's last segment, and ending at most DetourSpan bytes later. Relocated
// RIP-relative operands and branches in a DCR, and the jmp from the site to its
// detour and back, must fit in a signed 32-bit displacement from anywhere in
// [lo, hi).
func DetourWindow(f *elfio.File) (lo, hi uint64) {
	lo = (f.ImageEnd() + 0xfff) &^ 0xfff
	return lo, lo + DetourSpan
}

// reachMargin keeps a few bytes of slack for the instruction length the
// displacement is relative to (at most 15) and the jmp back.
const reachMargin = 64

// fitsRel32 reports whether a rel32 at any position inside [lo, hi) can reach
// target.
func fitsRel32(lo, hi, target uint64) bool {
	return fits(int64(target-lo)) && fits(int64(target-hi))
}

func fits(d int64) bool {
	return d >= math.MinInt32+reachMargin && d <= math.MaxInt32-reachMargin
}
