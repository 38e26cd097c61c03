// Package analysis is kprewrite's safety analysis: for each probe site of an x86-64
// ELF program or shared library it decides which kind of probe may go there, and
// which rule decided.
//
// A site can be jump-optimized (a 5-byte jmp to a detour buffer, like the kernel's
// optprobes), boosted (int3, then the copied instruction runs out of line followed by
// a jmp back, or a relative branch is emulated), single-stepped (int3 plus the trap
// flag), or must be refused; the verdict says exactly which rule decided and which
// instruction or address made it fire.
//
// Analyze does the whole-binary work once and returns an immutable *Binary that
// answers Check and EntrySites concurrently:
//
//   - every function (symbols and .eh_frame FDEs, via elfio) is decoded with
//     internal/x86dec; a function decodes cleanly only if every instruction
//     decodes without error and x86asm agrees with our length decoder (or the
//     disagreement is one of x86dec's known, objdump-checked x86asm gaps:
//     endbr64, vzeroupper, adcx/adox, ...) -- x86dec's Trusted;
//   - a branch-target index covers all executable code, not just functions
//     (GCC's .cold fragments jump back into their parents; code outside every
//     function is swept linearly), plus resolved jump-table entries, code
//     addresses taken by lea/mov/push, 8-byte code pointers in data sections
//     and dynamic relocations, and exported symbols inside code;
//   - every indirect jmp is classified (see IndirectJumps): a resolved jump
//     table (the GCC/Clang patterns, PIE and non-PIE, -O0 to -O3, notrack,
//     shared dispatch blocks, table bases hoisted out of loops, an index that
//     is a 32-bit copy of the register the bound is checked on), a pointer
//     jump, or unresolved;
//   - exception landing pads come from the FDEs' LSDAs (.gcc_except_table).
//
// # Pointer jumps
//
// The kernel refuses to optimize any function with an indirect jump. That
// would cost about 5% of all functions (tail calls through function pointers,
// vtables, the GOT, computed-goto interpreters), so kprewrite proves more: it
// follows every path back from a `jmp *%reg` to the definitions of the
// register, across split fragments. When each one is a 64-bit load from
// non-stack memory, a call's return value, the caller's incoming value, a
// constant, or glibc's pointer demangling of one of those, the target is a
// whole code pointer. Code pointers can only be made where the address-taken
// index sees them (or are return addresses, which follow a call and so are
// never inside a DCR: a call may only end one), so such a jump cannot land
// inside a DCR the index does not already forbid. A value reloaded from a stack
// slot at %rsp plus a constant is followed to the stores that fill the slot
// (tracking %rsp through push, pop, add/sub/lea of constants and calls), and
// the stored registers are followed as any other (glibc's gconv keeps its
// demangled step function at (%rsp) across calls). Anything computed (add, lea
// arithmetic, 32-bit loads, a slot written in part, through a frame pointer,
// filled by the caller or below %rsp across a call, which may be spilled table
// arithmetic) is unresolved: the function and every fragment
// linked to it by direct branches cannot be jump-optimized. A memory operand
// based on %rsp is a stack slot; one based on %rbp is one too unless every
// path to it sets %rbp to an ordinary pointer (loaded through a non-stack
// pointer, copied from an argument or a call's result, a constant, or such a
// pointer plus a constant), as code built with -fomit-frame-pointer does.
// The caller's %rbp, a popped one or one derived from %rsp is a frame pointer.
//
// Assumptions this rests on, stated so they can be checked: label addresses
// (GNU C &&label) are only jumped to from their own function; indirect calls
// go to function entries or taken addresses; code pointers stored in data by
// a non-PIE program are 8-byte aligned (in a PIE every one has a relocation);
// code outside every function (no symbol, no FDE) computes no jumps into
// functions.
//
// # Extensions beyond the kernel's rules, each with its own rule id
//
//   - padding-tail: after a final ret/jmp, inter-function or alignment padding
//     (nop/int3) that nothing targets may complete the 5 bytes;
//   - call-relocated: a call that ends the DCR is allowed, because detours
//     relocate it as push $orig_ret; jmp target (docs/design.md: unwinding must see
//     original return addresses), so the callee returns to the original code
//     right after the DCR. Options.StrictCalls restores the kernel rule;
//   - address-taken-in-dcr and endbr64-in-dcr forbid regions an indirect jump
//     could enter even though the function has none. A data word or immediate that
//     equals an address inside one of the region's instructions (not at its start)
//     is taken for the number it is and only noted: nothing jumps into the middle of
//     an instruction through a pointer a compiler made.
//
// # Flag liveness
//
// FlagsDead (flags.go) tells a count-only detour whether it may clobber the
// arithmetic flags (its `lock incq` writes CF PF AF ZF SF OF) without saving
// them: it walks the straight-line code from the site, at most 32 trusted
// instructions and never past a control transfer, and answers true only when
// all six are written (an SDM "undefined" counts as written) before any is
// read. Every op it understands is in one table; anything else, and every
// jmp, call and ret, ends the walk with false: it reasons from the bytes
// alone, not from the calling convention, because GCC's .cold fragments can
// begin with a jcc that reads the flags their parent set. About 66% of
// python3.11's function entries and 89% of git's have dead flags; nearly all
// the rest reach a call or jmp first.
//
// # Where a function returns
//
// Exits (exits.go) lists the places a --count-only return event can count its
// function's returns instead of hooking the return address: a site for every
// ret and every tail call (a direct jmp to another function's start, an
// indirect jmp the pointer analysis classified as a code-pointer jump) of the
// function and of its fragments, the starts it jumps to that nothing calls,
// takes the address of or exports (Referenced: a stripped binary's .cold
// parts, which have FDEs of their own; jump-table targets included). It
// answers only when that set is closed: no branch from it leaves for the
// middle of other code, no conditional tail call, no unresolved indirect jmp,
// and nothing outside enters it but at the entry (no branch, jump-table entry,
// taken address or exported symbol inside it; a jmp back to the entry is the
// same call, counted once when it returns). Each
// site is the exit instruction itself when padding completes its 5 bytes, or
// the straight-line instructions just before it (no branch, call, target or
// landing pad between the site and the exit), with the optimize verdict. So
// every return of every call passes exactly one site. python3.11 42%, git 86%
// of entries (TestSystemExits); the rest are mostly functions with a
// conditional or mid-function tail call and rets too close to a branch.
//
// The rules, their stable ids and what makes each fire are in rules.go; every
// one has a test in rules_test.go. The analysis reads the original bytes only
// (rule 9). Where detours are assumed to live (for the rel32 reach of relocated
// operands and branches) is stated once, in DetourWindow; what can be boosted
// is documented in boost.go.
package analysis
