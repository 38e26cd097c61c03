package x86dec

import (
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// Decoder is Decode with a memo of x86asm's verdicts, for analysing every
// function of a large binary: x86asm costs a few hundred ns and allocates,
// while real code repeats a few tens of thousands of instruction shapes.
//
// The memo key is the instruction's bytes with displacement and immediate
// bytes zeroed (x86asm's reading of the prefixes, opcode, ModRM and SIB
// does not depend on their values), so a Decoder gives exactly what Decode
// gives. Only the 3DNow! escape keeps its imm8, which is its opcode.
//
// A Decoder is not safe for concurrent use: give each worker its own.
type Decoder struct {
	memo map[shape]verdict
}

// memoLimit bounds a Decoder's memory; the memo restarts when full.
const memoLimit = 1 << 18

type shape struct {
	b [MaxLen]byte
	n uint8
}

type verdict struct {
	op      x86asm.Op
	agree   bool
	trusted bool
}

// NewDecoder returns an empty Decoder.
func NewDecoder() *Decoder {
	return &Decoder{memo: make(map[shape]verdict, 4096)}
}

// Decode is the package-level Decode, with x86asm's verdict memoised.
func (d *Decoder) Decode(code []byte, pc uint64) (Inst, error) {
	var in Inst
	var e encoding
	err := decodeFast(code, pc, &in, &e)
	if err != nil {
		if e.invalid != "" {
			return in, fmt.Errorf("x86dec: decode at %#x: %s: %w", pc, e.invalid, err)
		}
		return in, fmt.Errorf("x86dec: decode at %#x: %w", pc, err)
	}
	var k shape
	k.n = uint8(in.Len)
	copy(k.b[:], code[:in.Len])
	if e.dispOff >= 0 {
		clear(k.b[e.dispOff : e.dispOff+e.dispSize])
	}
	if e.immOff >= 0 && !(e.class == EncLegacy && e.m == map0F && e.op == 0x0f) {
		clear(k.b[e.immOff : e.immOff+e.immSize])
	}
	if v, ok := d.memo[k]; ok {
		in.Op, in.Agree, in.Trusted = v.op, v.agree, v.trusted
		return in, nil
	}
	crossCheck(&in, &e, code)
	if len(d.memo) >= memoLimit {
		clear(d.memo)
	}
	d.memo[k] = verdict{in.Op, in.Agree, in.Trusted}
	return in, nil
}
