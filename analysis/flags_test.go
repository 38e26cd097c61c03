package analysis

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/arch/x86/x86asm"

	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// hx parses space-separated hex bytes ("48 83 ec 08").
func hx(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// Instruction bytes, as gas assembles them (objdump -d checked).
const (
	iAdd      = "48 01 c3"       // add %rax,%rbx
	iSub      = "48 83 ec 08"    // sub $8,%rsp
	iCmp      = "83 ff 01"       // cmp $1,%edi
	iTest     = "85 ff"          // test %edi,%edi
	iXor      = "31 c0"          // xor %eax,%eax
	iAnd      = "83 e0 01"       // and $1,%eax
	iOr       = "48 09 d0"       // or %rdx,%rax
	iNeg      = "48 f7 d8"       // neg %rax
	iAdc      = "48 83 d0 00"    // adc $0,%rax
	iSbb      = "19 c0"          // sbb %eax,%eax
	iImul     = "48 0f af fe"    // imul %rsi,%rdi
	iMul      = "48 f7 e1"       // mul %rcx
	iBsf      = "48 0f bc c8"    // bsf %rax,%rcx
	iBsr      = "48 0f bd c8"    // bsr %rax,%rcx
	iPopcnt   = "f3 48 0f b8 c8" // popcnt %rax,%rcx
	iLzcnt    = "f3 48 0f bd c8" // lzcnt %rax,%rcx
	iTzcnt    = "f3 48 0f bc c8" // tzcnt %rax,%rcx
	iComiss   = "0f 2f c1"       // comiss %xmm1,%xmm0
	iUcomisd  = "66 0f 2e c1"    // ucomisd %xmm1,%xmm0
	iVucomiss = "c5 f8 2e c1"    // vucomiss %xmm1,%xmm0
	iVcomisd  = "c5 f9 2f c1"    // vcomisd %xmm1,%xmm0
	iPtest    = "66 0f 38 17 c8" // ptest %xmm0,%xmm1
	iBt       = "0f ba e0 03"    // bt $3,%eax
	iBts      = "48 0f ab c1"    // bts %rax,%rcx
	iBtr      = "0f ba 37 01"    // btrl $1,(%rdi)
	iBtc      = "0f bb c1"       // btc %eax,%ecx
	iShl3     = "48 c1 e0 03"    // shl $3,%rax
	iShl0     = "48 c1 e0 00"    // shl $0,%rax
	iShlCL    = "48 d3 e0"       // shl %cl,%rax
	iShr1     = "d1 e8"          // shr %eax (count 1)
	iSar64q   = "48 c1 f8 40"    // sar $0x40,%rax: masked to 0
	iSar32l   = "c1 f8 20"       // sar $0x20,%eax: masked to 0
	iShl32q   = "48 c1 e0 20"    // shl $0x20,%rax: 32 with a 64-bit operand
	iSal6     = "c1 f0 02"       // sal $2,%eax via the /6 alias x86asm does not decode
	iRol1     = "d1 c0"          // rol %eax
	iRor4     = "48 c1 c8 04"    // ror $4,%rax
	iRcl1     = "d1 d0"          // rcl %eax
	iRcr3     = "c1 d8 03"       // rcr $3,%eax
	iShld3    = "0f a4 c1 03"    // shld $3,%eax,%ecx
	iShrdCL   = "0f ad c1"       // shrd %cl,%eax,%ecx
	iInc      = "ff c0"          // inc %eax
	iDec      = "48 ff cf"       // dec %rdi
	iClc      = "f8"
	iStc      = "f9"
	iCmc      = "f5"
	iAndn     = "c4 e2 78 f2 c1" // andn %ecx,%eax,%eax
	iBextr    = "c4 e2 70 f7 c0" // bextr %ecx,%eax,%eax
	iBlsi     = "c4 e2 78 f3 d8" // blsi %eax,%eax
	iBlsr     = "c4 e2 78 f3 c8" // blsr %eax,%eax
	iBlsmsk   = "c4 e2 78 f3 d0" // blsmsk %eax,%eax
	iXadd     = "f0 0f c1 07"    // lock xadd %eax,(%rdi)
	iCmpxchg  = "f0 0f b1 0f"    // lock cmpxchg %ecx,(%rdi)
	iCx16b    = "48 0f c7 0f"    // cmpxchg16b (%rdi)
	iJne      = "75 fe"
	iJe       = "74 fe"
	iSete     = "0f 94 c0" // sete %al
	iSetb     = "0f 92 c0" // setb %al
	iSeto     = "0f 90 c0" // seto %al
	iCmovb    = "48 0f 42 c8"
	iCmovne   = "48 0f 45 c8"
	iLahf     = "9f"
	iPushf    = "9c"
	iPopf     = "9d"
	iSahf     = "9e"
	iMov      = "48 89 f8"       // mov %rdi,%rax
	iMovzx    = "0f b6 07"       // movzbl (%rdi),%eax
	iMovsx    = "48 0f be c0"    // movsbq %al,%rax
	iMovsxd   = "48 63 c7"       // movslq %edi,%rax
	iLea      = "48 8d 47 08"    // lea 8(%rdi),%rax
	iPushRbp  = "55"             // push %rbp
	iPopRbx   = "5b"             // pop %rbx
	iPushR15  = "41 57"          // push %r15
	iNop      = "90"             // nop
	iNopw     = "66 0f 1f 04 00" // nopw (%rax,%rax,1)
	iEndbr    = "f3 0f 1e fa"    // endbr64
	iXchg     = "48 92"          // xchg %rax,%rdx
	iBswap    = "0f c8"          // bswap %eax
	iNot      = "48 f7 d0"       // not %rax
	iCqo      = "48 99"
	iCdq      = "99"
	iCdqe     = "48 98"
	iCwde     = "98"
	iPxor     = "66 0f ef c0"    // pxor %xmm0,%xmm0
	iXorps    = "0f 57 c9"       // xorps %xmm1,%xmm1
	iMovdqa   = "66 0f 7f 04 24" // movdqa %xmm0,(%rsp)
	iMovaps   = "0f 29 44 24 10" // movaps %xmm0,0x10(%rsp)
	iVmovdqu  = "c5 fe 7f 07"    // vmovdqu %ymm0,(%rdi)
	iVpxor    = "c5 f9 ef c0"    // vpxor %xmm0,%xmm0,%xmm0
	iVzeroup  = "c5 f8 77"       // vzeroupper
	iPrefetch = "0f 18 0f"       // prefetcht0 (%rdi)
	iMfence   = "0f ae f0"
	iLfence   = "0f ae e8"
	iSfence   = "0f ae f8"
	iRepStosq = "f3 48 ab"
	iRepMovsb = "f3 a4"
	iJmp      = "eb fe"
	iCall     = "e8 fb ff ff ff"
	iRet      = "c3"
	iLoop     = "e2 fe"
	iJrcxz    = "e3 fe"
	iSyscall  = "0f 05"
	iInt80    = "cd 80"
	iInt3     = "cc"
	iUd2      = "0f 0b"
	iAdcx     = "66 48 0f 38 f6 c8" // adcx %rax,%rcx
	iAdox     = "f3 48 0f 38 f6 c8" // adox %rax,%rcx
	iDiv      = "48 f7 f1"          // div %rcx: flags undefined, but not in the table
)

// TestFlagEffects checks the classification of one instruction of every class.
func TestFlagEffects(t *testing.T) {
	type want struct {
		reads, writes flagSet
		ok            bool
	}
	full := want{writes: fAll, ok: true}
	neutral := want{ok: true}
	stop := want{}
	cases := []struct {
		name, code string
		want
	}{
		{"add", iAdd, full}, {"sub", iSub, full}, {"cmp", iCmp, full}, {"test", iTest, full},
		{"xor", iXor, full}, {"and", iAnd, full}, {"or", iOr, full}, {"neg", iNeg, full},
		{"imul", iImul, full}, {"mul", iMul, full}, {"bsf", iBsf, full}, {"bsr", iBsr, full},
		{"popcnt", iPopcnt, full}, {"lzcnt", iLzcnt, full}, {"tzcnt", iTzcnt, full},
		{"comiss", iComiss, full}, {"ucomisd", iUcomisd, full}, {"vucomiss", iVucomiss, full},
		{"vcomisd", iVcomisd, full}, {"ptest", iPtest, full},
		{"andn", iAndn, full}, {"bextr", iBextr, full}, {"blsi", iBlsi, full},
		{"blsr", iBlsr, full}, {"blsmsk", iBlsmsk, full},
		{"xadd", iXadd, full}, {"cmpxchg", iCmpxchg, full},
		{"shl $3", iShl3, full}, {"shr $1", iShr1, full}, {"shl $32 (64-bit)", iShl32q, full},
		{"shld $3", iShld3, full},
		{"adc", iAdc, want{fCF, fAll, true}}, {"sbb", iSbb, want{fCF, fAll, true}},
		{"inc", iInc, want{0, fAll &^ fCF, true}}, {"dec", iDec, want{0, fAll &^ fCF, true}},
		{"bt", iBt, want{0, fAll &^ fZF, true}}, {"bts", iBts, want{0, fAll &^ fZF, true}},
		{"btr", iBtr, want{0, fAll &^ fZF, true}}, {"btc", iBtc, want{0, fAll &^ fZF, true}},
		{"cmpxchg16b", iCx16b, want{0, fZF, true}},
		{"rol $1", iRol1, want{0, fCF | fOF, true}}, {"ror $4", iRor4, want{0, fCF | fOF, true}},
		{"rcl $1", iRcl1, want{fCF, fCF | fOF, true}}, {"rcr $3", iRcr3, want{fCF, fCF | fOF, true}},
		{"clc", iClc, want{0, fCF, true}}, {"stc", iStc, want{0, fCF, true}},
		{"cmc", iCmc, want{fCF, fCF, true}},
		// Count 0 (after masking) changes nothing; a %cl count may or may
		// not write, and never reads.
		{"shl $0", iShl0, neutral}, {"sar $64 (64-bit)", iSar64q, neutral},
		{"sar $32 (32-bit)", iSar32l, neutral},
		{"shl %cl", iShlCL, neutral}, {"shrd %cl", iShrdCL, neutral},
		{"sete", iSete, want{fZF, 0, true}}, {"setb", iSetb, want{fCF, 0, true}},
		{"seto", iSeto, want{fOF, 0, true}},
		{"cmovb", iCmovb, want{fCF, 0, true}}, {"cmovne", iCmovne, want{fZF, 0, true}},
		{"lahf", iLahf, want{fAll &^ fOF, 0, true}}, {"pushf", iPushf, want{fAll, 0, true}},
		{"popf", iPopf, stop}, {"sahf", iSahf, stop}, {"div", iDiv, stop},
		{"adcx", iAdcx, stop}, {"adox", iAdox, stop},
		{"mov", iMov, neutral}, {"movzx", iMovzx, neutral}, {"movsx", iMovsx, neutral},
		{"movsxd", iMovsxd, neutral}, {"lea", iLea, neutral}, {"push", iPushRbp, neutral},
		{"pop", iPopRbx, neutral}, {"push r15", iPushR15, neutral}, {"nop", iNop, neutral},
		{"nopw", iNopw, neutral}, {"endbr64", iEndbr, neutral}, {"xchg", iXchg, neutral},
		{"bswap", iBswap, neutral}, {"not", iNot, neutral}, {"cqo", iCqo, neutral},
		{"cdq", iCdq, neutral}, {"cdqe", iCdqe, neutral}, {"cwde", iCwde, neutral},
		{"pxor", iPxor, neutral}, {"xorps", iXorps, neutral}, {"movdqa", iMovdqa, neutral},
		{"movaps", iMovaps, neutral}, {"vmovdqu", iVmovdqu, neutral}, {"vpxor", iVpxor, neutral},
		{"vzeroupper", iVzeroup, neutral}, {"prefetcht0", iPrefetch, neutral},
		{"mfence", iMfence, neutral}, {"lfence", iLfence, neutral}, {"sfence", iSfence, neutral},
		{"rep stosq", iRepStosq, neutral}, {"rep movsb", iRepMovsb, neutral},
	}
	for _, c := range cases {
		raw := hx(t, c.code)
		in, err := x86dec.Decode(raw, 0x1000)
		if err != nil || in.Len != len(raw) {
			t.Errorf("%s: decode: len %d of %d, %v", c.name, in.Len, len(raw), err)
			continue
		}
		if !in.Trusted {
			if c.ok {
				t.Errorf("%s: x86dec does not trust % x", c.name, raw)
			}
			continue
		}
		eff, ok := flagEffectOf(raw, &in)
		got := want{eff.reads, eff.writes, ok}
		if !ok {
			got = stop
		}
		if got != c.want {
			t.Errorf("%s (% x): reads %v writes %v ok %v, want reads %v writes %v ok %v",
				c.name, raw, got.reads, got.writes, got.ok, c.reads, c.writes, c.ok)
		}
	}
}

// TestFlagsDeadIn checks whole walks.
func TestFlagsDeadIn(t *testing.T) {
	seq := func(insts ...string) string { return strings.Join(insts, " ") }
	rep := func(s string, n int) string {
		var out []string
		for i := 0; i < n; i++ {
			out = append(out, s)
		}
		return seq(out...)
	}
	cases := []struct {
		name, code string
		want       bool
	}{
		{"empty", "", false},
		{"bad bytes", "06", false},         // push %es: invalid in 64-bit mode
		{"truncated", "48 83", false},      // sub without its ModRM/imm
		{"untrusted sal /6", iSal6, false}, // x86asm cannot name it
		{"end of code", seq(iPushRbp, iMov), false},

		// A writer first.
		{"sub", iSub, true}, {"test", iTest, true}, {"xor", iXor, true}, {"cmp", iCmp, true},
		{"neg", iNeg, true}, {"imul", iImul, true}, {"mul", iMul, true}, {"bsf", iBsf, true},
		{"popcnt", iPopcnt, true}, {"lzcnt", iLzcnt, true}, {"tzcnt", iTzcnt, true},
		{"ucomisd", iUcomisd, true}, {"vucomiss", iVucomiss, true}, {"ptest", iPtest, true},
		{"andn", iAndn, true}, {"bextr", iBextr, true}, {"blsr", iBlsr, true},
		{"xadd", iXadd, true}, {"cmpxchg", iCmpxchg, true},
		{"shl $3", iShl3, true}, {"shr $1", iShr1, true}, {"shld $3", iShld3, true},
		// A typical prologue.
		{"prologue", seq(iEndbr, iPushR15, iPushRbp, iMov, iPopRbx, iLea, iMovzx, iPxor, iMovaps, iVzeroup, iSub), true},
		{"neutral then cmp", seq(iMovsx, iMovsxd, iCqo, iCdqe, iXchg, iBswap, iNot, iRepStosq, iNopw, iPrefetch, iMfence, iCmp), true},

		// A reader first.
		{"adc", iAdc, false}, {"sbb", iSbb, false}, {"sete", seq(iSete, iAdd), false},
		{"cmovne", seq(iCmovne, iAdd), false}, {"lahf", seq(iLahf, iAdd), false},
		{"pushf", seq(iPushf, iAdd), false}, {"popf", seq(iPopf, iAdd), false},
		{"sahf", seq(iSahf, iAdd), false}, {"cmc", seq(iCmc, iAdd), false},
		{"rcl", seq(iRcl1, iAdd), false}, {"adcx", seq(iAdcx, iAdd), false},
		{"adox", seq(iAdox, iAdd), false}, {"mov then seto", seq(iMov, iSeto, iAdd), false},
		// Unclassified.
		{"div", seq(iDiv, iAdd), false},

		// Partial writers.
		{"inc then jcc", seq(iInc, iJne), false},
		{"inc then add", seq(iInc, iAdd), true},
		{"inc then adc", seq(iInc, iAdc), false}, // CF is still live
		{"inc then setb", seq(iInc, iSetb, iAdd), false},
		{"inc then sete", seq(iInc, iSete, iAdd), true}, // ZF already written: the read is of the new value
		{"inc then cmovne", seq(iInc, iCmovne, iClc), true},
		{"dec then clc", seq(iDec, iClc), true},
		{"dec then stc", seq(iDec, iStc), true},
		{"clc then rcl", seq(iClc, iRcl1, iTest), true}, // rcl reads the CF clc wrote
		{"clc then cmc", seq(iClc, iCmc, iInc), true},
		{"rol then inc", seq(iRol1, iInc), true}, // CF OF, then OF SF ZF AF PF
		{"ror then je", seq(iRor4, iJe), false},
		{"bt then je", seq(iBt, iJe), false}, // bt leaves ZF alone
		{"bt then sete", seq(iBt, iSete, iAdd), false},
		{"bt then inc", seq(iBt, iInc), true},
		{"bts then test", seq(iBts, iTest), true},
		{"btr btc then dec", seq(iBtr, iBtc, iDec), true},
		{"cmpxchg16b then sete", seq(iCx16b, iSete, iAdd), true},
		{"cmpxchg16b then setb", seq(iCx16b, iSetb, iAdd), false},

		// Shift and rotate counts.
		{"shl $0 then add", seq(iShl0, iAdd), true},
		{"shl $0 then jcc", seq(iShl0, iJe), false},
		{"sar $64 then sete", seq(iSar64q, iSete), false},
		{"sar $32 (32-bit) then add", seq(iSar32l, iAdd), true},
		{"shl %cl then jcc", seq(iShlCL, iJe), false},
		{"shl %cl then setb", seq(iShlCL, iSetb, iAdd), false},
		{"shl %cl alone", iShlCL, false},
		{"shrd %cl then and", seq(iShrdCL, iAnd), true}, // written or untouched, never read: the and decides

		// Control transfers stop the walk, whatever follows.
		{"jmp", seq(iJmp, iAdd), false}, {"call", seq(iCall, iAdd), false},
		{"ret", seq(iRet, iAdd), false}, {"loop", seq(iLoop, iAdd), false},
		{"jrcxz", seq(iJrcxz, iAdd), false}, {"syscall", seq(iSyscall, iAdd), false},
		{"int $0x80", seq(iInt80, iAdd), false}, {"int3", seq(iInt3, iAdd), false},
		{"ud2", seq(iUd2, iAdd), false}, {"jcc", seq(iJne, iAdd), false},
		{"mov then call", seq(iMov, iCall, iAdd), false},
		{"inc then ret", seq(iInc, iRet), false},

		// The 32-instruction bound.
		{"31 nops then add", seq(rep(iNop, 31), iAdd), true},
		{"32 nops then add", seq(rep(iNop, 32), iAdd), false},
	}
	for _, c := range cases {
		raw := hx(t, c.code)
		dead, why := flagsWalk(raw, 0x401000)
		if dead != c.want {
			t.Errorf("%s (% x): dead %v (%s), want %v", c.name, raw, dead, why, c.want)
		}
		if FlagsDeadIn(raw, 0x401000) != dead {
			t.Errorf("%s: FlagsDeadIn disagrees with flagsWalk", c.name)
		}
	}
}

// FuzzFlagsDeadIn: any bytes, no panic, and the independent verifier never
// contradicts a dead verdict (it may fail to follow one: x86asm alone
// mis-sizes some encodings, and its table is small).
func FuzzFlagsDeadIn(f *testing.F) {
	for _, s := range []string{iSub, iInc + iAdd, iShl0 + iJe, iEndbr + iVzeroup + iTest, iShlCL + iAnd, "06", "48 83"} {
		f.Add(hx(f, s))
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		if !FlagsDeadIn(code, 0x401000) {
			return
		}
		if _, err := sdmVerify(code, 0x401000); errors.Is(err, errContradicts) {
			t.Fatalf("dead verdict on % x contradicted: %v", code, err)
		}
	})
}

// TestFlagsDeadSystem measures the share of function entries with dead flags
// on real binaries and re-checks a random sample of the dead verdicts with an
// independent walk: straight from x86asm, with flag effects spelled as the
// SDM's Flags Affected lists.
func TestFlagsDeadSystem(t *testing.T) {
	for _, p := range []string{"/usr/bin/python3.11", "/usr/bin/git"} {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			if _, err := os.Stat(p); err != nil {
				t.Skipf("%s: %v", p, err)
			}
			t0 := time.Now()
			b := analyzeFile(t, p, Options{})
			var entries, dead []uint64
			stops := map[string]int{}
			for i := range b.Funcs.List {
				fn := &b.Funcs.List[i]
				code := b.codeFrom(fn.Addr)
				if code == nil {
					continue
				}
				addr := fn.Addr
				if in, err := x86dec.DecodeFast(code, addr); err == nil && in.Endbr {
					addr += uint64(in.Len) // where EntrySites puts the probe
				}
				entries = append(entries, addr)
				ok, why := flagsWalk(b.codeFrom(addr), addr)
				if ok != b.FlagsDead(addr) {
					t.Fatalf("%#x: FlagsDead disagrees with flagsWalk", addr)
				}
				if ok {
					dead = append(dead, addr)
					continue
				}
				// Group the reasons without their addresses.
				if k := strings.Index(why, " at 0x"); k >= 0 {
					why = why[:k]
				}
				stops[why]++
			}
			if len(entries) == 0 {
				t.Fatalf("%s: no function entries", p)
			}
			share := float64(len(dead)) / float64(len(entries))
			t.Logf("%s: flags dead at %d of %d entries (%.1f%%) in %v; why the others stop:\n%s",
				p, len(dead), len(entries), 100*share, time.Since(t0).Round(time.Millisecond), topCounts(stops, 12))
			if share < 0.5 {
				t.Errorf("%s: flags dead at only %.1f%% of entries", p, 100*share)
			}

			// Every dead verdict is re-walked; one the verifier contradicts
			// fails the test. An instruction missing from the verifier's own
			// table fails it only in a random sample of 200 (the brief's
			// check), so that a new system binary with some rare mnemonic
			// leaves the test meaningful rather than broken.
			rng := rand.New(rand.NewPCG(1, uint64(len(entries))))
			inSample := map[uint64]bool{}
			for _, k := range rng.Perm(len(dead))[:min(200, len(dead))] {
				inSample[dead[k]] = true
			}
			confirmed, fullFirst, unknown, sampled := 0, 0, 0, 0
			for _, addr := range dead {
				full, err := sdmVerify(b.codeFrom(addr), addr)
				if inSample[addr] && err == nil {
					sampled++
				}
				switch {
				case errors.Is(err, errNotInTable) && !inSample[addr]:
					unknown++
					continue
				case err != nil:
					t.Errorf("%#x: dead verdict not confirmed: %v\n%s", addr, err, listing(b.codeFrom(addr), addr, 12))
					continue
				}
				confirmed++
				if full {
					fullFirst++
				}
			}
			t.Logf("independent re-walk: %d of %d dead verdicts confirmed (%d of the %d sampled), %d outside the verifier's table; "+
				"in %d the first flag-touching instruction writes all six", confirmed, len(dead), sampled, len(inSample), unknown, fullFirst)
		})
	}
}

// sdmFlags spells, by Intel-syntax mnemonic, what the SDM's Flags Affected
// sections say: "r:" flags read, "w:" flags written or left undefined
// (o s z a p c), "-" none. It is written apart from flagTable on purpose
// and covers only what the sampled entries need.
var sdmFlags = map[string]string{
	"add": "w:oszapc", "sub": "w:oszapc", "cmp": "w:oszapc", "test": "w:oszapc",
	"and": "w:oszapc", "or": "w:oszapc", "xor": "w:oszapc", "neg": "w:oszapc",
	"imul": "w:oszapc", "mul": "w:oszapc", "bsf": "w:oszapc", "bsr": "w:oszapc",
	"popcnt": "w:oszapc", "lzcnt": "w:oszapc", "tzcnt": "w:oszapc",
	"comiss": "w:oszapc", "comisd": "w:oszapc", "ucomiss": "w:oszapc", "ucomisd": "w:oszapc",
	"vcomiss": "w:oszapc", "vcomisd": "w:oszapc", "vucomiss": "w:oszapc", "vucomisd": "w:oszapc",
	"xadd": "w:oszapc", "cmpxchg": "w:oszapc", "ptest": "w:oszapc",
	"andn": "w:oszapc", "bextr": "w:oszapc", "blsi": "w:oszapc", "blsr": "w:oszapc", "blsmsk": "w:oszapc", "bzhi": "w:oszapc",
	"inc": "w:oszap", "dec": "w:oszap",
	"bt": "w:c", "bts": "w:c", "btr": "w:c", "btc": "w:c", // only what is defined: stricter than flagTable
	"clc": "w:c", "stc": "w:c", "cmc": "r:c w:c",
	"adc": "r:c w:oszapc", "sbb": "r:c w:oszapc",
	"mov": "-", "movzx": "-", "movsx": "-", "movsxd": "-", "lea": "-", "push": "-", "pop": "-",
	"nop": "-", "xchg": "-", "bswap": "-", "not": "-", "cqo": "-", "cdq": "-", "cdqe": "-", "cwde": "-",
	"movaps": "-", "movups": "-", "movapd": "-", "movupd": "-", "movdqa": "-", "movdqu": "-",
	"movq": "-", "movd": "-", "movss": "-", "movsd": "-", "movhps": "-", "movlps": "-",
	"pxor": "-", "xorps": "-", "xorpd": "-", "punpcklqdq": "-", "punpckldq": "-", "pshufd": "-",
	"pcmpeqd": "-", "pcmpeqb": "-",
	"vmovdqu": "-", "vmovdqa": "-", "vmovups": "-", "vmovaps": "-", "vpxor": "-", "vxorps": "-",
	"cvtsi2sd": "-", "cvtsi2ss": "-", "cvttsd2si": "-", "mulsd": "-", "addsd": "-", "subsd": "-",
	"divsd": "-", "mulss": "-", "addss": "-", "movmskpd": "-", "andpd": "-", "andps": "-",
}

var (
	errNotInTable  = errors.New("not in the verifier's table")
	errContradicts = errors.New("contradicts the dead verdict")
)

// sdmVerify re-walks from pc with x86asm alone and the sdmFlags table. It
// confirms that all six flags are written before any is read, and says
// whether the first instruction touching any flag writes all six.
func sdmVerify(code []byte, pc uint64) (fullFirst bool, err error) {
	live := "oszapc"
	first := true
	off := 0
	for n := 0; n < 40 && off < len(code); n++ {
		rest := code[off:]
		var mn, spec string
		var x x86asm.Inst
		switch {
		case len(rest) >= 4 && string(rest[:4]) == "\xf3\x0f\x1e\xfa": // endbr64: x86asm has no name for it
			x.Len, mn, spec = 4, "endbr64", "-"
		case len(rest) >= 3 && string(rest[:3]) == "\xc5\xf8\x77": // vzeroupper: x86asm gets its length wrong
			x.Len, mn, spec = 3, "vzeroupper", "-"
		default:
			x, err = x86asm.Decode(rest, 64)
			if err != nil || x.Op == 0 {
				return false, fmt.Errorf("x86asm at %#x: %v", pc+uint64(off), err)
			}
			f := strings.Fields(x86asm.IntelSyntax(x, pc+uint64(off), nil))
			for len(f) > 0 && (f[0] == "lock" || f[0] == "rep" || f[0] == "data16" || strings.HasSuffix(f[0], ":")) {
				f = f[1:]
			}
			if len(f) == 0 {
				return false, fmt.Errorf("no mnemonic at %#x", pc+uint64(off))
			}
			mn = f[0]
			var ok bool
			spec, ok = sdmFlags[mn]
			if !ok {
				spec = shiftSpec(mn, x)
			}
			if spec == "" {
				return false, fmt.Errorf("%s at %#x: %w", mn, pc+uint64(off), errNotInTable)
			}
		}
		var reads, writes string
		for _, part := range strings.Fields(spec) {
			switch {
			case strings.HasPrefix(part, "r:"):
				reads = part[2:]
			case strings.HasPrefix(part, "w:"):
				writes = part[2:]
			}
		}
		if strings.ContainsAny(reads, live) {
			return false, fmt.Errorf("%s at %#x reads a live flag (%s live): %w", mn, pc+uint64(off), live, errContradicts)
		}
		if reads != "" || writes != "" {
			if first {
				fullFirst = len(writes) == 6
			}
			first = false
		}
		for _, c := range writes {
			live = strings.ReplaceAll(live, string(c), "")
		}
		if live == "" {
			return fullFirst, nil
		}
		off += x.Len
	}
	return false, fmt.Errorf("flags %q still live after the walk: %w", live, errContradicts)
}

// shiftSpec spells shifts and rotates by their count (SDM: a masked count
// of 0 affects no flag; otherwise shl/shr/sar write CF SF ZF PF and leave OF
// (multi-bit) and AF undefined, rol/ror affect CF and OF only). A count in
// %cl is spelled as touching nothing: it never reads, and may not write.
func shiftSpec(mn string, x x86asm.Inst) string {
	spec := ""
	switch mn {
	case "shl", "shr", "sar":
		spec = "w:oszapc"
	case "rol", "ror":
		spec = "w:oc"
	default:
		return ""
	}
	if r, ok := x.Args[1].(x86asm.Reg); ok && r == x86asm.CL {
		return "-"
	}
	imm, ok := x.Args[1].(x86asm.Imm)
	if !ok {
		return ""
	}
	if x.DataSize == 64 {
		imm &= 63
	} else {
		imm &= 31
	}
	if imm == 0 {
		return "-"
	}
	return spec
}

// listing disassembles n instructions from pc, for failure messages.
func listing(code []byte, pc uint64, n int) string {
	var b strings.Builder
	off := 0
	for i := 0; i < n && off < len(code); i++ {
		in, err := x86dec.Decode(code[off:], pc+uint64(off))
		if err != nil || in.Len <= 0 {
			fmt.Fprintf(&b, "  %#x: %v\n", pc+uint64(off), err)
			break
		}
		fmt.Fprintf(&b, "  %#x: %s\n", pc+uint64(off), x86dec.Format(code[off:off+in.Len], pc+uint64(off), nil))
		off += in.Len
	}
	return b.String()
}

func topCounts(m map[string]int, n int) string {
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range m {
		kvs = append(kvs, kv{k, v})
	}
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k })
	var b strings.Builder
	for i, e := range kvs {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "  %6d %s\n", e.v, e.k)
	}
	return b.String()
}
