package analysis

import (
	"fmt"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
)

// Verdict is how a probe at a site can be implemented, from the safest
// fallback to the fastest. The zero value is Refuse, so a Site that was never
// checked is never taken as optimizable.
type Verdict uint8

const (
	Refuse     Verdict = iota // no probe may be placed here
	SingleStep                // int3, copied instruction single-stepped with the trap flag (kind k)
	Boost                     // int3, copied instruction run out of line + jmp back, or emulated (kind b)
	Optimize                  // 5-byte jmp to a detour buffer (kind o)
)

var verdictNames = [...]string{Refuse: "refuse", SingleStep: "single-step", Boost: "boost", Optimize: "optimize"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("verdict(%d)", v)
}

// MarshalText makes verdicts appear by name in JSON.
func (v Verdict) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// ParseVerdict is the inverse of Verdict.String.
func ParseVerdict(s string) (Verdict, error) {
	for i, n := range verdictNames {
		if n == s {
			return Verdict(i), nil
		}
	}
	return Refuse, fmt.Errorf("unknown verdict %q", s)
}

// Reason says which rule kept a site from a better verdict (or, with Note set,
// records a fact worth knowing that did not lower the verdict), and which
// address made it fire: the offending instruction, branch source, landing pad,
// data word or probe.
type Reason struct {
	Rule   string `json:"rule"` // stable id, see Rules
	Addr   uint64 `json:"addr"`
	Detail string `json:"detail"`
	Note   bool   `json:"note,omitempty"`
}

func (r Reason) String() string {
	s := fmt.Sprintf("%s at %#x: %s", r.Rule, r.Addr, r.Detail)
	if r.Note {
		s = "note: " + s
	}
	return s
}

// SiteRequest asks about one probe.
type SiteRequest struct {
	Addr            uint64
	Return          bool     // a return probe (kretprobe): Addr must be a function entry
	NeedPostHandler bool     // the probe has a post_handler (rule 8)
	OtherProbes     []uint64 // addresses of the other probes requested in the same binary (rule 6)
	// NoRedirect: a jump into the region's interior blocks the jmp (rule 3) even where
	// it could be redirected (Site.Redirects) or the region grown over it
	// (RuleDCRGrown).
	NoRedirect bool
}

// Redirect is a direct jmp or jcc elsewhere in the binary whose target is inside a
// site's region, at one of its instructions after the first. A jump-optimized probe
// rewrites it to go to a relocated copy of the region from that instruction on,
// followed by a jmp back after the region, so the region's bytes may be overwritten.
// Only jumps whose new form fits where they are qualify: a jmp rel32 or a jcc rel32
// keeps its length, and a jmp rel8 becomes a jmp rel32 over the padding after it
// (bytes nothing else reaches: no branch target, function start or landing pad, in
// code without unknown indirect jumps).
type Redirect struct {
	From uint64 `json:"from"` // the jump
	Len  int    `json:"len"`  // its length
	To   uint64 `json:"to"`   // its target, the start of a region instruction after the first
	Edit int    `json:"edit"` // bytes the redirected jump takes from From: 5 (jmp rel32) or 6 (jcc rel32)
}

// InstRef is one instruction the 5-byte jmp would overwrite.
type InstRef struct {
	Addr uint64 `json:"addr"`
	Len  int    `json:"len"`
}

// Site is the analysis of one probe site.
type Site struct {
	Requested uint64      `json:"requested"` // the address asked for
	Addr      uint64      `json:"addr"`      // the probe address (after an entry endbr64)
	Func      *elfio.Func `json:"-"`
	FuncName  string      `json:"func,omitempty"`
	Offset    uint64      `json:"offset"` // Addr - Func.Addr
	Verdict   Verdict     `json:"verdict"`
	// DCR lists the whole instructions the 5-byte jmp would replace, and DCRLen
	// their total length (>= 5 when the site is optimizable). A padding tail
	// after a final ret/jmp is included in DCRLen but not in DCR.
	DCR    []InstRef `json:"dcr,omitempty"`
	DCRLen int       `json:"dcr_len"`
	// Boostable: the probed instruction can run out of line followed by a jmp
	// back (can_boost adapted to user space, see boostable). Emulate: it is a
	// relative jmp/jcc/call/loop or a ret, which the runtime emulates instead.
	Boostable bool     `json:"boostable"`
	Emulate   bool     `json:"emulate"`
	Insn      string   `json:"insn,omitempty"` // mnemonic of the probed instruction
	Reasons   []Reason `json:"reasons,omitempty"`
	// SignalsBlocked says why the function runs with every signal blocked, if it does:
	// a probe there must be jump-optimized (RuleSignalsBlocked).
	SignalsBlocked string `json:"signals_blocked,omitempty"`
	// Redirects are the jumps into the region's interior that a jump-optimized probe
	// redirects (RuleJumpRedirected); only with the Optimize verdict.
	Redirects []Redirect `json:"redirects,omitempty"`
	// ExitInsn, in a site Exits returns, is the exit instruction the site leads to:
	// the ret, or the jmp of a tail call (TailCall). Only straight-line code lies
	// between Addr and it.
	ExitInsn uint64 `json:"-"`
	TailCall bool   `json:"-"`
}

// Blocking returns the reasons that lowered the verdict (not the notes).
func (s *Site) Blocking() []Reason {
	var out []Reason
	for _, r := range s.Reasons {
		if !r.Note {
			out = append(out, r)
		}
	}
	return out
}

// Has reports whether a reason (or note) with rule id fired.
func (s *Site) Has(rule string) bool {
	for _, r := range s.Reasons {
		if r.Rule == rule {
			return true
		}
	}
	return false
}

func (s *Site) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%#x", s.Addr)
	if s.Func != nil {
		fmt.Fprintf(&b, " <%s+%#x>", s.Func.Name, s.Offset)
	}
	fmt.Fprintf(&b, " %s", s.Verdict)
	for _, r := range s.Reasons {
		fmt.Fprintf(&b, "\n  %s", r)
	}
	return b.String()
}
