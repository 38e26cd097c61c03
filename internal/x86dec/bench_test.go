package x86dec

import (
	"debug/elf"
	"testing"
	"time"
)

// libcText returns the bytes and address of libc's .text and the offsets
// of the instructions a linear sweep finds.
func libcText(b *testing.B) ([]byte, uint64, []int) {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		b.Skipf("libc not available: %v", err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		b.Skip("libc has no .text")
	}
	text, err := s.Data()
	if err != nil {
		b.Fatal(err)
	}
	var offs []int
	for off := 0; off < len(text); {
		offs = append(offs, off)
		n, err := Length(text[off:])
		if err != nil || n == 0 {
			n = 1
		}
		off += n
	}
	return text, s.Addr, offs
}

func reportPerInsn(b *testing.B, start time.Time, insns int) {
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*insns), "ns/insn")
	b.ReportMetric(float64(insns), "insns/op")
}

// BenchmarkDecode is the full decoder (our tables plus x86asm) over every
// instruction of libc's .text.
func BenchmarkDecode(b *testing.B) {
	text, addr, offs := libcText(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, off := range offs {
			in, _ := Decode(text[off:], addr+uint64(off))
			sinkLen += in.Len
		}
	}
	reportPerInsn(b, start, len(offs))
}

// BenchmarkDecoder is the full decoder with x86asm's verdicts memoised by
// instruction shape (one Decoder per analysis worker).
func BenchmarkDecoder(b *testing.B) {
	text, addr, offs := libcText(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		d := NewDecoder() // a cold memo per pass: what analysing one binary costs
		for _, off := range offs {
			in, _ := d.Decode(text[off:], addr+uint64(off))
			sinkLen += in.Len
		}
	}
	reportPerInsn(b, start, len(offs))
}

// BenchmarkDecodeFast is the table-only path (kind, targets, RIP-relative,
// NoOutOfLine) used for whole-binary sweeps.
func BenchmarkDecodeFast(b *testing.B) {
	text, addr, offs := libcText(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, off := range offs {
			in, _ := DecodeFast(text[off:], addr+uint64(off))
			sinkLen += in.Len
		}
	}
	reportPerInsn(b, start, len(offs))
}

// BenchmarkSweepFast is what a branch-target index does: a linear sweep
// with DecodeFast, no precomputed boundaries.
func BenchmarkSweepFast(b *testing.B) {
	text, addr, offs := libcText(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for off := 0; off < len(text); {
			in, err := DecodeFast(text[off:], addr+uint64(off))
			if err != nil || in.Len == 0 {
				off++
				continue
			}
			if in.Kind.IsDirectBranch() {
				sinkLen += int(in.Target)
			}
			off += in.Len
		}
	}
	reportPerInsn(b, start, len(offs))
}

// BenchmarkLength is the length-only path.
func BenchmarkLength(b *testing.B) {
	text, _, offs := libcText(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, off := range offs {
			n, _ := Length(text[off:])
			sinkLen += n
		}
	}
	reportPerInsn(b, start, len(offs))
}

var sinkLen int

// BenchmarkFlow is the register-only fast path: length, kind, direct target.
func BenchmarkFlow(b *testing.B) {
	text, addr, offs := libcText(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, off := range offs {
			n, k, tgt, _ := Flow(text[off:], addr+uint64(off))
			sinkLen += n + int(k) + int(tgt)
		}
	}
	reportPerInsn(b, start, len(offs))
}
