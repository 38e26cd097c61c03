// Package patch turns probe requests and the analysis' verdicts into probepoints and
// byte edits of the original program.
//
// Planning (Plan) asks the analysis about every requested probe, refuses the probe
// with the rule and address that decided when the verdict is Refuse, and groups the
// probes by the instruction they land on: several probes at one address (or a probe
// at a function entry and one right after its endbr64) share one probepoint, as the
// kernel aggregates kprobes at one address. Each point gets one execution mode:
//
//   - "b" (boosted) when every probe on it lacks a post_handler, boosting is allowed
//     (no --no-boost) and the instruction is boostable: the relocated copy runs in an
//     out-of-line slot followed by a jmp back, one trap per hit; relative jmp, jcc,
//     call, loop/jrcxz and ret are emulated by the runtime instead, with no slot;
//   - "k" otherwise: the copy in the slot is single-stepped with the trap flag, and
//     post handlers run after the step (two traps per hit); loop and jrcxz, whose
//     relocated copy is three instructions, are emulated in k mode too (post handlers
//     then run after the emulation), as the kernel emulates branches since 5.15.
//
// Return probes are entry probes of type kretprobe on the same points: "r" when the
// point is k, "rb" when it is b; the return itself goes through the runtime's return
// trampoline, which is code, not a trap.
//
// Edits (Patcher) are recorded with the original bytes they replace and can be undone
// until Commit, in the manner of E9Patch: an edit over bytes that are already edited,
// or over an existing int3, is refused. Points, probes and edits come out sorted by
// address, so the same requests always give the same plan.
package patch
