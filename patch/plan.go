package patch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"

	"kprewrite/analysis"
	"kprewrite/elfio"
	"kprewrite/internal/x86dec"
	"kprewrite/runtime"
	"kprewrite/trampolines"
)

// ErrRefused is wrapped by the error of a probe the analysis refuses.
var ErrRefused = errors.New("probe refused")

// Request is one probe to place.
type Request struct {
	Name     string // how messages name it ("-e #2", "probes.txt:7")
	Addr     uint64 // the address asked for (a function entry for return probes)
	Return   bool   // a return probe: the entry probe hooks the return address
	NeedPost bool   // the probe has a post_handler: its point is single-stepped
}

// Mode is how a probepoint executes the probed instruction.
type Mode uint8

const (
	ModeK Mode = iota // single-step the copy (or emulate loop/jrcxz), post handlers after
	ModeB             // boosted: the copy runs followed by a jmp back, or the branch is emulated
)

func (m Mode) String() string {
	if m == ModeB {
		return "b"
	}
	return "k"
}

// Options tune Plan.
type Options struct {
	NoBoost     bool // every point single-steps (k, r): --no-boost
	SkipRefused bool // leave refused probes out (Plan.Refused) instead of failing
}

// Point is one probepoint: an instruction whose first byte becomes int3, and every
// probe on it.
type Point struct {
	Site  uint64 // the probed instruction
	Insn  []byte // its original bytes
	Inst  x86dec.Inst
	Func  *elfio.Func
	Mode  Mode
	Check analysis.Site // the analysis of the site (of its first request)

	// Runtime execution (kprewrite_abi.h struct kprw_point).
	XMode  uint8  // runtime.XSStep, XBoost or XEmulate
	EmuOp  uint8  // runtime.Emu* for XEmulate
	EmuCC  uint8  // jcc condition
	Target uint64 // branch target for emulation
	RetImm uint16
	PFlags uint8 // runtime.PF*

	// The out-of-line slot it needs (not for XEmulate).
	Slot    bool
	SlotOpt trampolines.SlotOptions

	Requests []int // indices of its requests, in request order
}

// Refusal is a request left out with Options.SkipRefused.
type Refusal struct {
	Request int
	Site    analysis.Site
	Err     error
}

// Plan is the set of probepoints for a list of requests.
type Plan struct {
	Requests []Request
	Sites    []analysis.Site // per request: the analysis
	PointOf  []int           // per request: index in Points, -1 when refused
	Points   []Point         // sorted by Site
	Refused  []Refusal
	Patcher  *Patcher // holds one int3 per point until committed
}

// Kind returns the kprobes list kind of request i: "k", "b" (boosted), "r" or "rb".
func (pl *Plan) Kind(i int) string {
	pi := pl.PointOf[i]
	if pi < 0 {
		return ""
	}
	k := pl.Points[pi].Mode.String()
	if pl.Requests[i].Return {
		if k == "k" {
			return "r"
		}
		return "rb"
	}
	return k
}

// MakePlan checks every request with the analysis and groups them into probepoints.
func MakePlan(b *analysis.Binary, reqs []Request, opt Options) (*Plan, error) {
	pl := &Plan{
		Requests: append([]Request(nil), reqs...),
		Sites:    make([]analysis.Site, len(reqs)),
		PointOf:  make([]int, len(reqs)),
		Patcher:  NewPatcher(b.File.Bytes),
	}
	addrs := make([]uint64, len(reqs))
	for i, r := range reqs {
		addrs[i] = r.Addr
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	bySite := map[uint64][]int{}
	for i, r := range reqs {
		s := b.Check(analysis.SiteRequest{Addr: r.Addr, Return: r.Return, NeedPostHandler: r.NeedPost, OtherProbes: neighbours(addrs, r.Addr)})
		pl.Sites[i] = s
		pl.PointOf[i] = -1
		if s.Verdict == analysis.Refuse {
			err := refusal(r, &s)
			if !opt.SkipRefused {
				return nil, err
			}
			pl.Refused = append(pl.Refused, Refusal{Request: i, Site: s, Err: err})
			continue
		}
		bySite[s.Addr] = append(bySite[s.Addr], i)
	}
	sites := make([]uint64, 0, len(bySite))
	for a := range bySite {
		sites = append(sites, a)
	}
	sort.Slice(sites, func(i, j int) bool { return sites[i] < sites[j] })
	for _, site := range sites {
		idx := bySite[site]
		pt, err := makePoint(b, pl, site, idx, opt)
		if err == nil {
			err = pl.Patcher.Int3(site)
		}
		if err != nil {
			if !opt.SkipRefused {
				return nil, err
			}
			for _, i := range idx {
				pl.Refused = append(pl.Refused, Refusal{Request: i, Site: pl.Sites[i], Err: err})
			}
			continue
		}
		for _, i := range idx {
			pl.PointOf[i] = len(pl.Points)
		}
		pl.Points = append(pl.Points, pt)
	}
	sort.Slice(pl.Refused, func(i, j int) bool { return pl.Refused[i].Request < pl.Refused[j].Request })
	return pl, nil
}

// neighbourSpan bounds where another probe can matter to a site's verdict (rule 6:
// inside the region a jmp would overwrite, at most 15 bytes past an endbr64).
const neighbourSpan = 64

// neighbours returns the addresses of sorted near addr (other than addr), so that
// checking n probes stays O(n log n).
func neighbours(sorted []uint64, addr uint64) []uint64 {
	lo := addr - min(addr, neighbourSpan)
	i, _ := slices.BinarySearch(sorted, lo)
	var out []uint64
	for ; i < len(sorted) && sorted[i] < addr+neighbourSpan; i++ {
		if sorted[i] != addr {
			out = append(out, sorted[i])
		}
	}
	return out
}

func refusal(r Request, s *analysis.Site) error {
	where := fmt.Sprintf("%#x", s.Addr)
	if s.Func != nil {
		where = fmt.Sprintf("%#x (%s+%#x)", s.Addr, s.Func.Name, s.Offset)
	}
	for _, reason := range s.Blocking() {
		return fmt.Errorf("%s: %w at %s: %s at %#x: %s", r.Name, ErrRefused, where, reason.Rule, reason.Addr, reason.Detail)
	}
	return fmt.Errorf("%s: %w at %s", r.Name, ErrRefused, where)
}

// makePoint decides how the point at site executes its instruction.
func makePoint(b *analysis.Binary, pl *Plan, site uint64, idx []int, opt Options) (Point, error) {
	first := pl.Requests[idx[0]]
	s := pl.Sites[idx[0]]
	pt := Point{Site: site, Func: s.Func, Check: s, Requests: idx}
	code, err := insnBytes(b.File, site, s.Func)
	if err != nil {
		return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
	}
	in, err := x86dec.Decode(code, site)
	if err != nil {
		return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
	}
	pt.Inst, pt.Insn = in, bytes.Clone(code[:in.Len])

	needPost := false
	for _, i := range idx {
		needPost = needPost || pl.Requests[i].NeedPost
	}
	canBoost := !opt.NoBoost && !needPost && (s.Boostable || s.Emulate)
	if canBoost {
		pt.Mode = ModeB
	}
	emulate := in.Kind == x86dec.KindLoop || (canBoost && s.Emulate)
	if emulate {
		pt.XMode = runtime.XEmulate
		if err := setEmulation(&pt, code); err != nil {
			return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
		}
		return pt, nil
	}
	pt.Slot = true
	if pt.Mode == ModeB {
		pt.XMode = runtime.XBoost
		pt.SlotOpt = trampolines.SlotOptions{JmpBack: true}
	} else {
		pt.XMode = runtime.XSStep
		pt.SlotOpt = trampolines.SlotOptions{JmpBack: true, Step: true}
	}
	switch in.Kind {
	case x86dec.KindCall, x86dec.KindCallIndirect:
		pt.PFlags |= runtime.PFCall | runtime.PFBranch
	case x86dec.KindJmp, x86dec.KindJcc, x86dec.KindRet, x86dec.KindJmpIndirect:
		pt.PFlags |= runtime.PFBranch
	}
	if isPushf(code, &in) {
		pt.PFlags |= runtime.PFPushf
	}
	// A copy that is neither boostable nor a plain branch must never run without the
	// trap flag: the slot then has no usable jmp back.
	if !s.Boostable && in.Kind != x86dec.KindJmp && in.Kind != x86dec.KindJcc && in.Kind != x86dec.KindRet {
		pt.PFlags |= runtime.PFNoBoost
	}
	if _, err := trampolines.SlotLen(code, site, pt.SlotOpt); err != nil {
		return pt, fmt.Errorf("%s: probe at %#x: %w", first.Name, site, err)
	}
	return pt, nil
}

// setEmulation fills the emulation fields of a relative branch, call or ret.
func setEmulation(pt *Point, code []byte) error {
	in := &pt.Inst
	op := code[in.OpcodeOff]
	pt.Target = in.Target
	switch in.Kind {
	case x86dec.KindJmp:
		pt.EmuOp = runtime.EmuJmp
	case x86dec.KindJcc:
		pt.EmuOp, pt.EmuCC = runtime.EmuJcc, op&0x0f
	case x86dec.KindCall:
		pt.EmuOp = runtime.EmuCall
	case x86dec.KindRet:
		pt.EmuOp, pt.Target = runtime.EmuRet, 0
		if op == 0xc2 {
			if in.ImmOff < 0 || in.ImmOff+2 > len(code) {
				return fmt.Errorf("ret imm16 without its immediate")
			}
			pt.RetImm = uint16(code[in.ImmOff]) | uint16(code[in.ImmOff+1])<<8
		}
	case x86dec.KindLoop:
		switch op {
		case 0xe0:
			pt.EmuOp = runtime.EmuLoopne
		case 0xe1:
			pt.EmuOp = runtime.EmuLoope
		case 0xe2:
			pt.EmuOp = runtime.EmuLoop
		case 0xe3:
			pt.EmuOp = runtime.EmuJrcxz
		default:
			return fmt.Errorf("loop opcode %#x", op)
		}
		for _, p := range code[:in.OpcodeOff] {
			if p == 0x67 {
				pt.PFlags |= runtime.PFAddr32
			}
		}
	default:
		return fmt.Errorf("%v cannot be emulated", in.Kind)
	}
	return nil
}

// isPushf reports a pushf (9c), whose pushed flags would show the trap flag after a
// single-step.
func isPushf(code []byte, in *x86dec.Inst) bool {
	return in.Enc == x86dec.EncLegacy && in.OpcodeOff == in.Len-1 && code[in.OpcodeOff] == 0x9c
}

// insnBytes returns up to 16 original bytes at addr, not past the function's end
// (or the segment's file image).
func insnBytes(f *elfio.File, addr uint64, fn *elfio.Func) ([]byte, error) {
	n := uint64(16)
	if fn != nil && fn.End() > addr && fn.End()-addr < n {
		n = fn.End() - addr
	}
	for ; n > 0; n-- {
		if b, err := f.Bytes(addr, n); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no file bytes at %#x", addr)
}
