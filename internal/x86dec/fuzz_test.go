package x86dec

import (
	"debug/elf"
	"errors"
	"sync"
	"testing"
)

// fuzzDecoder is shared by the fuzz iterations so that its memo sees
// different instructions of the same shape.
var (
	fuzzDecoderMu sync.Mutex
	fuzzDecoder   = NewDecoder()
)

// fuzzSeeds are the pitfall encodings plus whatever the corpus finds.
var fuzzSeeds = []string{
	"c5 f8 77", "c5 fc 77", "f3 0f 1e fa", "66 0f 38 f6 c1", "f3 0f 38 f6 c1", "64 c5 f9 6f 05 10 00 00 00",
	"c5 f9 6f 05 10 00 00 00", "62 f1 7d 48 6f 05 01 02 03 04", "62 f3 75 48 25 05 f0 ff ff ff 96",
	"8f e8 78 a2 c1 00", "8f ea 78 10 05 10 00 00 00 34 12 00 00", "0f 01 ee", "0f c7 f8", "48 8b 05 f0 ff ff ff",
	"48 b8 88 77 66 55 44 33 22 11", "67 a1 04 03 02 01", "c8 10 00 01", "f7 c0 78 56 34 12", "0f 0f c1 b4",
	"66 0f 78 c0 01 02", "c7 f8 10 00 00 00", "66 66 48 e8 00 00 00 00", "e3 05", "0f 85 f0 ff ff ff",
	"66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", "48 66 90", "f0 01 c0", "66 e8 00 00 00 00",
}

// libcSeeds returns a few instruction windows from libc's .text.
func libcSeeds(tb testing.TB, count int) [][]byte {
	f, err := elf.Open("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		return nil
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		return nil
	}
	text, err := s.Data()
	if err != nil {
		return nil
	}
	var out [][]byte
	step := len(text) / (count + 1)
	for i := 1; i <= count && step > 0; i++ {
		off := i * step
		out = append(out, text[off:min(off+MaxLen, len(text))])
	}
	return out
}

// FuzzDecode checks that decoding never panics and that every offset the
// decoder reports lies inside the instruction, and that the fast path, the
// length-only path and the full decoder agree.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(hx(f, s))
	}
	for _, s := range libcSeeds(f, 64) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		in, err := Decode(code, 0x7fff0000)
		fast, ferr := DecodeFast(code, 0x7fff0000)
		n, lerr := Length(code)
		if (err == nil) != (ferr == nil) || (err == nil) != (lerr == nil) || n != in.Len {
			t.Fatalf("paths disagree: Decode %d %v, DecodeFast %d %v, Length %d %v", in.Len, err, fast.Len, ferr, n, lerr)
		}
		fast.Op, fast.Agree, fast.Trusted = in.Op, in.Agree, in.Trusted
		if fast != in {
			t.Fatalf("DecodeFast %+v != Decode %+v", fast, in)
		}
		fuzzDecoderMu.Lock()
		memo, merr := fuzzDecoder.Decode(code, 0x7fff0000)
		fuzzDecoderMu.Unlock()
		if memo != in || (merr == nil) != (err == nil) {
			t.Fatalf("Decoder.Decode %+v, %v != Decode %+v, %v", memo, merr, in, err)
		}
		if fn, fk, ft, ferr := Flow(code, 0x7fff0000); fn != in.Len || (ferr == nil) != (err == nil) ||
			err == nil && (fk != in.Kind || ft != in.Target) {
			t.Fatalf("Flow = %d %v %#x %v; Decode = %d %v %#x %v", fn, fk, ft, ferr, in.Len, in.Kind, in.Target, err)
		}
		if in.Len < 0 || in.Len > MaxLen || in.Len > len(code) {
			t.Fatalf("Len %d out of range (input %d bytes, err %v)", in.Len, len(code), err)
		}
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrTooLong) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if in.Len < 1 {
			t.Fatalf("Len %d with no error", in.Len)
		}
		inside := func(what string, off, size int) {
			if off < 0 || size < 0 || off+size > in.Len {
				t.Fatalf("%s [%d,+%d) outside instruction of %d bytes", what, off, size, in.Len)
			}
		}
		inside("opcode", in.OpcodeOff, 1)
		if in.ModRMOff >= 0 {
			inside("modrm", in.ModRMOff, 1)
		}
		if in.ImmOff >= 0 {
			inside("imm", in.ImmOff, in.ImmSize)
		}
		if in.RIPRel {
			inside("disp32", in.DispOff, 4)
		}
		if in.Kind.IsDirectBranch() {
			inside("rel", in.RelOff, in.RelSize)
			if in.RelSize != 1 && in.RelSize != 2 && in.RelSize != 4 {
				t.Fatalf("RelSize %d", in.RelSize)
			}
		}
		if in.Agree && !in.Trusted {
			t.Fatalf("x86asm agrees on the length but not on the control flow: kind %v op %v", in.Kind, in.Op)
		}
		// The decoder reads nothing past the instruction and notices when
		// its last byte is missing.
		exact, err := Decode(code[:in.Len], 0x7fff0000)
		if err != nil || exact.Len != in.Len || exact.Kind != in.Kind || exact.RIPTarget != in.RIPTarget || exact.Target != in.Target {
			t.Fatalf("decode of the exact bytes differs: %+v %v", exact, err)
		}
		if _, err := Length(code[:in.Len-1]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("one byte short: %v, want ErrTruncated", err)
		}
	})
}
