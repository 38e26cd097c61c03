package analysis

// Rule ids are stable: tools match on them. Each names the docs/design.md safety
// rule it implements (1-9) or "note" for facts that never lower a verdict.
const (
	// Where the site is.
	RuleNotCode        = "not-code"                // refuse: address outside every executable section
	RuleNoFunction     = "no-function"             // refuse: code that belongs to no known function (PLT, stray bytes)
	RuleCopiedCode     = "copied-code"             // refuse: the program copies this code and runs the copy (V8's embedded builtins)
	RuleEndbrSkip      = "endbr64-skip"            // note: probe moved after the entry endbr64 (rule 1)
	RuleGoStackCheck   = "go-stack-check-skip"     // note: an entry probe of a Go function moved after its stack check
	RuleGoNoProbe      = "go-do-not-probe"         // refuse: a Go runtime function no probe may go in
	RuleGoReturn       = "go-return-at-exits"      // note: a Go function's return probe goes at its exits, never hooked
	RuleRetprobeEntry  = "retprobe-not-entry"      // refuse: a return probe must sit at a function entry
	RuleRetprobeStart  = "retprobe-process-entry"  // refuse: the ELF entry point has no return address
	RuleRetAddrUse     = "retprobe-return-address" // refuse: the function reads, pops or rewrites its own return address
	RuleNoRetprobe     = "retprobe-do-not-probe"   // refuse: the function is on the do-not-probe list for return probes
	RuleStackSwitch    = "retprobe-stack-switch"   // refuse: the function sets %rsp to another stack (setcontext, makecontext's __start_context)
	RuleSignalsBlocked = "signals-blocked"         // refuse an int3 or return probe: the code runs with every signal blocked (posix_spawn's child)
	RuleNotBoundary    = "not-boundary"            // refuse (rule 1): not an instruction boundary of the decoded function
	RuleDecodeError    = "decode-error"            // rule 1: an instruction does not decode
	RuleDecodeDisagree = "decode-disagree"         // rule 1: x86asm and our length decoder disagree (or Op == 0)
	RuleExistingInt3   = "existing-int3"           // refuse (rule 6): the site already holds an int3
	RuleUprobesRefuses = "uprobes-refuses"         // refuse (rule 7): the probed instruction cannot run out of line

	// The detoured code region (DCR).
	RuleDCRCrossesFunc = "dcr-crosses-function"  // rule 2: fewer than 5 bytes left in the function
	RuleDCRPastJmp     = "dcr-past-jmp"          // rule 2: a jmp/ret ends the code before 5 bytes
	RulePaddingTail    = "padding-tail"          // note (rule 2 extension): DCR completed with dead padding after a final ret/jmp
	RuleJumpIntoDCR    = "jump-into-dcr"         // rule 3: a direct jmp/jcc/loop/call targets the DCR interior
	RuleJumpRedirected = "jump-redirected"       // note (rule 3 extension): a jmp/jcc into the DCR interior is redirected to a copy of the DCR's rest
	RuleDCRGrown       = "dcr-grown"             // note (rule 3 extension): the DCR runs over a short loop that branches back into it; the copy keeps the loop
	RuleAddrTakenInDCR = "address-taken-in-dcr"  // rule 3 (extended): a code address taken by lea/immediate/data/relocation/symbol lies in the DCR interior
	RuleEndbrInDCR     = "endbr64-in-dcr"        // rule 3 (extended): an endbr64 inside the DCR marks an indirect-branch target
	RuleTableIntoDCR   = "jump-table-into-dcr"   // rule 4: a resolved jump-table entry targets the DCR interior
	RuleIndirectJump   = "indirect-jump"         // rule 4: the function (or a fragment of it) has an unresolved indirect jmp
	RulePointerJump    = "indirect-jump-pointer" // note: the function's indirect jmps go to whole code pointers (tail calls)
	RuleJumpTable      = "jump-table"            // note: resolved jump tables of the function
	RuleLandingPad     = "landing-pad-in-dcr"    // rule 5: an exception landing pad lies in the DCR interior
	RuleLSDAUnreadable = "lsda-unreadable"       // rule 5: the function's call-site table could not be read
	RuleOtherProbe     = "other-probe-in-dcr"    // rule 6: another requested probe lies in the DCR interior
	RuleInt3InDCR      = "int3-in-dcr"           // rule 6: an existing int3 inside the DCR
	RuleCallInDCR      = "call-in-dcr"           // rule 7: a call inside the DCR (not at its end) cannot be relocated
	RuleCallRelocated  = "call-relocated"        // note (rule 7 extension): a call ends the DCR and is relocated as push orig_ret + jmp
	RuleDCRInsnRefused = "dcr-insn-refused"      // rule 7: a DCR instruction cannot run out of line
	RuleRIPRelReach    = "riprel-out-of-reach"   // rule 7: relocated RIP-relative displacement would not fit in int32
	RuleBranchReach    = "branch-out-of-reach"   // rule 7: relocated branch target would not fit in rel32
	RuleDetourReach    = "detour-out-of-reach"   // rule 7: the site cannot reach the detour window with a rel32 jmp
	RulePostHandler    = "post-handler"          // rule 8: a post_handler needs int3 + single-step
	RuleNotBoostable   = "not-boostable"         // the probed instruction must run under the trap flag
	RuleEmulated       = "emulated"              // note: the probed branch is emulated when boosted
)

// RuleInfo documents one rule id.
type RuleInfo struct {
	ID     string `json:"id"`
	Design string `json:"design"` // docs/design.md rule number, or "note"/"site"
	Text   string `json:"text"`
}

// Rules lists every rule id with its meaning, for reports and documentation.
var Rules = []RuleInfo{
	{RuleNotCode, "site", "the address is not inside an executable section"},
	{RuleNoFunction, "site", "the address is code but inside no known function (symbols, .eh_frame FDEs)"},
	{RuleEndbrSkip, "1", "the function starts with endbr64: the probe goes after it"},
	{RuleGoStackCheck, "note", "a Go function starts with its stack check (cmp against g's stack guard, jbe to a call of runtime.morestack that jumps back to the first byte): its entry probe goes after the check, so a call whose stack grows is counted once; the arguments are still in their registers there"},
	{RuleGoReturn, "note", "a Go function's return events go at its exits (recorded as with --exits --exits-only, counted with --count-only) and are refused where the exits cannot take them: a hooked return address breaks Go's stack copying and unwinder (\"unexpected return pc\", then a crash)"},
	{RuleGoNoProbe, "site", "a function of Go's runtime where no probe may go: the stack-growth entry (morestack), the scheduler's assembly that switches stacks (systemstack, mcall, gogo, asmcgocall, cgocallback), goexit, the program's start, the signal entry and return, asynchronous preemption"},
	{RuleRetprobeEntry, "site", "a return probe must be placed at a function entry"},
	{RuleRetprobeStart, "site", "the process entry point (_start) is jumped to by the kernel: (%rsp) is argc, not a return address"},
	{RuleRetAddrUse, "site", "a return probe replaces the return address: the function reads, pops or rewrites that word itself (setjmp, vfork, __builtin_return_address)"},
	{RuleNoRetprobe, "site", "the function's return cannot be judged from its code (entered by a jmp, returns twice, rewrites its callers' frames): the do-not-probe list"},
	{RuleCopiedCode, "site", "the program copies this code and runs the copy, where no probe is: V8's embedded builtins (node's Builtins_* functions, the blob from v8_Default_embedded_blob_code_), which V8 remaps at start-up; a probe in the original never fires, and a return probe's entry there would leave its instance waiting for a return that comes from the copy"},
	{RuleStackSwitch, "site", "a return probe replaces the word at the entry's stack pointer: the function sets %rsp to a value that does not come from it (another stack: setcontext, longjmp, makecontext's __start_context, which is entered by a ret and reads its uc_link from that word), so that word may be data and the return may never come"},
	{RuleSignalsBlocked, "site", "the code runs with every signal blocked (posix_spawn's child before its exec, a new thread's start, what pthread_create calls while it blocks every signal; found by name, or by the inline rt_sigprocmask that blocks them all in a stripped C library): an int3 there kills the process, so only a jump-optimized probe is placed; its return is not probed (the child shares its parent's memory)"},
	{RuleNotBoundary, "1", "the address is not an instruction boundary of the decoded function"},
	{RuleDecodeError, "1", "an instruction of the function does not decode"},
	{RuleDecodeDisagree, "1", "x86asm and kprewrite's length decoder disagree on an instruction"},
	{RuleExistingInt3, "6", "the probed instruction is already an int3"},
	{RuleUprobesRefuses, "7", "the probed instruction cannot run out of line (uprobes refuses it)"},
	{RuleDCRCrossesFunc, "2", "the 5-byte region would cross the end of the function or another function's start"},
	{RuleDCRPastJmp, "2", "a jmp or ret ends the code before 5 bytes (and no dead padding follows)"},
	{RulePaddingTail, "2", "the region after a final ret/jmp was completed with dead inter-function padding"},
	{RuleJumpIntoDCR, "3", "a direct jmp/jcc/loop/call somewhere in the binary targets the region's interior"},
	{RuleJumpRedirected, "note", "a jmp or jcc into the region's interior is redirected by the rewrite to a relocated copy of the region from its target on (a jmp rel8 widened into the padding after it), so it no longer reaches the overwritten bytes"},
	{RuleDCRGrown, "note", "a short loop of the function branches back into the region: the region is grown to the end of its last branch (at most 32 bytes from the site), and the copy keeps the loop, its branches going to their copies"},
	{RuleAddrTakenInDCR, "3", "a code address taken by lea/mov/push, a data word, a relocation or a symbol lies in the region's interior (a data word or immediate inside one of its instructions is a number: only noted)"},
	{RuleEndbrInDCR, "3", "an endbr64 inside the region marks an indirect-branch target (setjmp return, address-taken label)"},
	{RuleTableIntoDCR, "4", "a resolved jump-table entry targets the region's interior"},
	{RuleIndirectJump, "4", "the function or one of its fragments has an indirect jmp whose targets are not known"},
	{RulePointerJump, "note", "the function has indirect jmps through loaded pointers (tail calls); their targets are covered by the address-taken index"},
	{RuleJumpTable, "note", "the function's jump tables were resolved and their entries indexed"},
	{RuleLandingPad, "5", "an exception landing pad lies in the region's interior"},
	{RuleLSDAUnreadable, "5", "the function's exception call-site table could not be read"},
	{RuleOtherProbe, "6", "another requested probe lies in the region's interior"},
	{RuleInt3InDCR, "6", "an existing int3 lies in the region"},
	{RuleCallInDCR, "7", "a call inside the region (not at its end, far, or through a stack slot) cannot be relocated"},
	{RuleCallRelocated, "7", "a call ends the region; the detour runs it as push of the original return address + jmp, so the callee returns to the original code"},
	{RuleDCRInsnRefused, "7", "an instruction in the region cannot run out of line"},
	{RuleRIPRelReach, "7", "a relocated RIP-relative operand would not reach its target from the detour window"},
	{RuleBranchReach, "7", "a relocated branch would not reach its target from the detour window"},
	{RuleDetourReach, "7", "the site cannot reach the detour window with a rel32 jmp"},
	{RulePostHandler, "8", "a probe with a post_handler is single-stepped"},
	{RuleNotBoostable, "boost", "the probed instruction cannot be boosted or emulated; it runs under the trap flag"},
	{RuleEmulated, "note", "the probed instruction is a relative branch or ret, emulated by the runtime"},
}
