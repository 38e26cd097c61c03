package x86dec

// Kind is the control-flow class of an instruction, in the terms the kprobes
// analysis uses (insn_jump_into_range, can_boost, the DCR rules).
type Kind uint8

const (
	KindOther        Kind = iota
	KindJmp               // direct jmp rel8/rel32 (eb, e9)
	KindJcc               // jcc rel8/rel32 (70-7f, 0f 80-8f)
	KindLoop              // loop, loope, loopne, jrcxz/jecxz (e0-e3), rel8
	KindCall              // direct call rel32 (e8)
	KindRet               // near ret, ret imm16 (c3, c2)
	KindJmpIndirect       // near jmp r/m (ff /4)
	KindCallIndirect      // near call r/m (ff /2)
	KindInt3              // int3 (cc)
	KindTrap              // raises an exception by design or in user space: ud0/ud1/ud2, int n, int1, hlt, sysret, sysexit
	KindSyscall           // syscall, sysenter
	KindJmpFar            // far jmp m16:64 (ff /5)
	KindCallFar           // far call m16:64 (ff /3)
	KindRetFar            // far ret (cb, ca)
	KindIret              // iret/iretq (cf)
	KindXbegin            // xbegin rel16/rel32 (c7 f8): a direct branch target on abort
)

var kindNames = [...]string{
	KindOther:        "other",
	KindJmp:          "jmp",
	KindJcc:          "jcc",
	KindLoop:         "loop",
	KindCall:         "call",
	KindRet:          "ret",
	KindJmpIndirect:  "jmp-indirect",
	KindCallIndirect: "call-indirect",
	KindInt3:         "int3",
	KindTrap:         "trap",
	KindSyscall:      "syscall",
	KindJmpFar:       "jmp-far",
	KindCallFar:      "call-far",
	KindRetFar:       "ret-far",
	KindIret:         "iret",
	KindXbegin:       "xbegin",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(?)"
}

// IsDirectBranch reports kinds whose target is encoded as a rel8/rel16/rel32
// field (Inst.Target, RelOff, RelSize are set): what the branch-target index
// must record.
func (k Kind) IsDirectBranch() bool {
	switch k {
	case KindJmp, KindJcc, KindLoop, KindCall, KindXbegin:
		return true
	}
	return false
}

func (e Encoding) String() string {
	switch e {
	case EncLegacy:
		return "legacy"
	case EncVEX:
		return "vex"
	case EncEVEX:
		return "evex"
	case EncXOP:
		return "xop"
	}
	return "encoding(?)"
}
