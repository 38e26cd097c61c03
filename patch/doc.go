// Package patch plans every edit of the original program's bytes: probepoints, count
// sites at exits, the static signal guard's redirected entries, and the GOT words the
// signal guard wraps.
//
// The edits are probepoints and their int3s or jmps from probe requests and the
// analysis' verdicts (MakePlan), count sites at a function's exits (--count-only), the
// entries a static program's signal guard redirects (PlanStaticGuard), and the GOT
// words the signal guard of a dynamic program wraps (SigGuardSlots). The rewriter
// fills in addresses (SetSiteJmp, SetEntryJmp, SetTarget) and commits the edits;
// nothing else writes original bytes.
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
//     post handlers run after the step (two traps per hit; with Options.Int3Step a
//     copy that falls through ends with an int3 instead, the kernel's way since 5.15); loop and jrcxz, whose
//     relocated copy is three instructions, are emulated in k mode too (post handlers
//     then run after the emulation), as the kernel emulates branches since 5.15;
//   - "o" (jump-optimized), tried first, when every probe on the point got the analysis' optimize
//     verdict, none needs a post handler, optimization is allowed (no --no-optimize),
//     the DCR reaches no other point and no excluded code, and its instructions
//     relocate: the DCR becomes a jmp rel32 to a detour buffer (the rewriter replaces
//     the placeholder edit with SetSiteJmp). With Options.VerifyRegions such a point
//     is instead a boosted int3 running its whole relocated DCR, and every other byte
//     of the DCR an int3 in Plan.Inner (a hit is a violation).
//
// Return probes are entry probes of type kretprobe on the same points: "r" when the
// point is k, "rb" when it is b, "ro" when it is o; the return itself goes through the
// runtime's return trampoline, which is code, not a trap. With Options.CountExits
// (--count-only) a return probe whose function's returns the analysis sees all of
// (analysis.Exits) has no entry point: one count-only point per ret or tail call
// (Point.Exit), jump-optimized; if one of them cannot be, or another probe sits there,
// that probe hooks its return address as usual: exits.go decides it for every request
// before any point is placed, so the plan is made once.
//
// A planner (plan.go) holds what the steps share; each point is placed by the first
// placement tactic that applies (tactics: jumpOptimize, verifyRegion, emulate, boost,
// singleStep), its edits recorded afterwards and undone if they cannot all be made.
//
// Probes whose sites share a DCR are planned deliberately: the earlier one is never
// optimized (its DCR would hold the later one's site), so it stays an int3 whose slot
// jumps back to the later one's jmp; no probe is ever left in bytes a jmp overwrote
// (checkRegions asserts it). Options.Exclude (--exclude, ParseExcludes: function
// globs and address ranges) refuses probes in code the program copies and runs
// elsewhere; Options.OptimizedOnly refuses every probe that would be an int3.
//
// Edits (Patcher) are recorded with the original bytes they replace and can be undone
// until Commit, in the manner of E9Patch: an edit over bytes that are already edited,
// or over an existing int3, is refused. Points, probes and edits come out sorted by
// address, so the same requests always give the same plan.
package patch
