package x86dec

import (
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Format returns the instruction at code (address pc) in GNU (AT&T) syntax
// for reports. It uses x86asm when x86asm agrees with our length, with the
// RIP-relative operand of VEX/EVEX instructions put right; for the known
// x86asm gaps it prints our mnemonic followed by the raw bytes; otherwise
// "(bad)" and the raw bytes. sym may be nil.
func Format(code []byte, pc uint64, sym x86asm.SymLookup) string {
	in, err := Decode(code, pc)
	if err != nil {
		n := in.Len
		if n == 0 {
			n = min(len(code), 1)
		}
		return "(bad) " + rawBytes(code[:n])
	}
	if in.Agree && in.Op != 0 {
		xi, xerr := x86asm.Decode(code[:in.Len], 64)
		if xerr == nil {
			if in.RIPRel {
				fixRIP(&xi)
			}
			return x86asm.GNUSyntax(xi, pc, sym)
		}
	}
	var e encoding
	scan(code, &e)
	if name := knownGap(&in, &e, code); name != "" {
		return name + " " + rawBytes(code[:in.Len])
	}
	return "(bad) " + rawBytes(code[:in.Len])
}

// fixRIP turns the absolute disp32 x86asm reports for a VEX/EVEX
// RIP-relative operand back into disp(%rip), and reads Disp as int32.
func fixRIP(xi *x86asm.Inst) {
	for i, a := range xi.Args {
		m, ok := a.(x86asm.Mem)
		if !ok {
			continue
		}
		if m.Base == 0 && m.Index == 0 || m.Base == x86asm.RIP {
			m.Base = x86asm.RIP
			m.Disp = int64(int32(m.Disp))
			xi.Args[i] = m
		}
	}
}

func rawBytes(b []byte) string {
	var sb strings.Builder
	sb.WriteString("<")
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	sb.WriteString(">")
	return sb.String()
}
