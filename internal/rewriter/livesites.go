package rewriter

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/x86dec"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// The embedded analysis (issue 46 item 5): a C handler's register_kprobe() of a plain
// struct kprobe at a site no rewrite prepared has no tool to ask where an int3 may go,
// so the rewrite embeds what `kprewrite probe` would decide there (kprt.EncodeSites),
// and the runtime builds the point and its slot at a free live point itself (runtime
// src/rt_usersite.c). Only the functions the handler files name in their strings (or
// use, KPREWRITE_PROGRAM_SYMBOL) are described: a register_kprobe() names its function by a string (symbol_name), and
// every instruction boundary of every function would cost ~24 bytes an instruction
// (docs/runtime.md has python3.11's figure).

// registerFuncs are the runtime's functions a handler file registers probes with.
var registerFuncs = []string{"kprewrite_register_kprobe", "kprewrite_register_kretprobe"}

// makeLiveSites embeds the analysis of the functions the handler files name, when they
// register probes and the image has free live points to place them at.
func (g *gen) makeLiveSites() error {
	if len(g.tables.Free) == 0 || !g.handlersCall(registerFuncs...) {
		return nil
	}
	var funcs []kprt.SiteFunc
	for _, name := range g.namedFuncs() {
		fn, _ := g.b.Funcs.ByName(name)
		if slices.ContainsFunc(funcs, func(f kprt.SiteFunc) bool { return f.Addr == fn.Addr }) {
			continue
		}
		sf, err := g.siteFunc(name, fn)
		if err != nil {
			return err
		}
		funcs = append(funcs, sf)
	}
	if len(funcs) == 0 {
		return nil
	}
	b, err := kprt.EncodeSites(funcs)
	if err != nil {
		return fmt.Errorf("handler files: %w", err)
	}
	g.tables.Sites = b
	return nil
}

// registersOnly says whether handler files declare no probe and register theirs at
// run time: the image still gets the runtime, free live points and the embedded
// analysis for them.
func registersOnly(opt Options) bool {
	g := &gen{opt: opt}
	return opt.Handlers != nil && g.handlersCall(registerFuncs...)
}

// namedFuncs are the functions of the binary the handler files name in their strings
// or use (KPREWRITE_PROGRAM_SYMBOL: a kp->addr), when they register probes.
func (g *gen) namedFuncs() []string {
	if !g.handlersCall(registerFuncs...) {
		return nil
	}
	var out []string
	names := g.handlerStrings()
	for _, u := range g.opt.Handlers.Units { // (a kp->addr of a program function)
		for _, e := range u.Externs {
			names = append(names, e.Name)
		}
	}
	for _, name := range names {
		if fn, ok := g.b.Funcs.ByName(name); ok && fn.Size > 0 {
			out = append(out, name)
		}
	}
	return out
}

// handlerStrings are the NUL-terminated identifiers in the handler objects' data
// sections (a symbol_name = "do_work" is one), in order, each once.
func (g *gen) handlerStrings() []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range g.opt.Handlers.Units {
		f, err := elf.NewFile(bytes.NewReader(u.Object))
		if err != nil {
			continue // (handlers.ParseObject read it already)
		}
		for _, s := range f.Sections {
			if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Flags&elf.SHF_EXECINSTR != 0 {
				continue
			}
			d, err := s.Data()
			if err != nil {
				continue
			}
			for _, w := range strings.Split(string(d), "\x00") {
				if isIdent(w) && !seen[w] {
					seen[w] = true
					out = append(out, w)
				}
			}
		}
		f.Close()
	}
	return out
}

func isIdent(s string) bool {
	if s == "" || len(s) > 512 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range []byte(s) {
		if c != '_' && c != '.' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// siteFunc decodes fn's instructions from its start and decides each boundary.
func (g *gen) siteFunc(name string, fn *elfio.Func) (kprt.SiteFunc, error) {
	sf := kprt.SiteFunc{Name: name, Addr: fn.Addr, Size: fn.Size}
	code, err := g.f.Bytes(fn.Addr, fn.Size)
	if err != nil {
		return sf, fmt.Errorf("embedded analysis of %s: %w", name, err)
	}
	for off := uint64(0); off < fn.Size; {
		in, err := x86dec.Decode(code[off:], fn.Addr+off)
		if err != nil || in.Len == 0 {
			break // (data or padding the analysis does not decode either: no boundary after it)
		}
		sf.Sites = append(sf.Sites, g.decideSite(name, fn.Addr+off, uint32(off), code[off:off+uint64(in.Len)], &in))
		off += uint64(in.Len)
	}
	sf.RetRefusal = g.decideReturn(name, fn.Addr, sf.Sites)
	return sf, nil
}

// decideReturn is why a C handler's kretprobe may not hook fn's entry ("": it may): its
// entry refuses an int3, or the return-probe rules (a function that reads or pops its
// return address, one of the do-not-probe list) refuse a return probe, as `kprewrite
// probe 'r:...'` and check say.
func (g *gen) decideReturn(name string, addr uint64, sites []kprt.Site) string {
	if len(sites) == 0 || sites[0].Off != 0 {
		return "its entry is not an instruction the analysis decodes"
	}
	if sites[0].Refusal != "" {
		return sites[0].Refusal
	}
	req := patch.Request{Name: name, Addr: addr, Return: true, NoExit: "a C handler's kretprobe hooks the return address"}
	if _, err := patch.MakePlan(g.b, []patch.Request{req}, patch.Options{NoOptimize: true}); err != nil {
		return refusalText(err, name)
	}
	return ""
}

// decideSite is what `kprewrite probe` decides for an event at addr (tracectl's
// planFree: the rewriter's plan with --no-optimize), as the runtime needs it: the
// point's fields, where a RIP-relative displacement is, or the refusal.
func (g *gen) decideSite(name string, addr uint64, off uint32, raw []byte, in *x86dec.Inst) kprt.Site {
	s := kprt.Site{RawSite: kprt.RawSite{Off: off, InsnLen: uint8(in.Len), Sum: kprt.SiteSum(raw)}}
	where := fmt.Sprintf("%s+%d", name, off)
	pl, err := patch.MakePlan(g.b, []patch.Request{{Name: where, Addr: addr}}, patch.Options{NoOptimize: true})
	if err != nil {
		s.Refusal = refusalText(err, where)
		return s
	}
	pt := &pl.Points[0]
	if why := runtimeCannot(pt, in); why != "" {
		s.Refusal = why
		return s
	}
	s.XMode, s.EmuOp, s.EmuCC, s.PFlags, s.RetImm = pt.XMode, pt.EmuOp, pt.EmuCC, pt.PFlags, pt.RetImm
	if pt.Target != 0 {
		s.Target, s.Flags = int32(int64(pt.Target-addr)), s.Flags|kprt.SiteTarget
	}
	if pt.NeedsSlot {
		s.Flags |= kprt.SiteSlot
		if in.RIPRel {
			s.Disp = uint8(in.DispOff)
		}
	}
	return s
}

// runtimeCannot says why the runtime cannot build point pt itself ("" = it can): it
// copies an instruction as it is or with a new RIP-relative displacement, then a jmp
// back, in a free point's slot, for the int3 kinds a free point takes (rt_live.c free_ok).
func runtimeCannot(pt *patch.Point, in *x86dec.Inst) string {
	const ok = kprt.PFCall | kprt.PFBranch | kprt.PFAddr32 | kprt.PFPushf | kprt.PFNoBoost
	if len(pt.Requests) != 1 || pt.Optimized() || pt.PFlags&^ok != 0 || pt.XMode < kprt.XSStep || pt.XMode > kprt.XEmulate {
		return "the analysis made no int3 point there"
	}
	if pt.Target != 0 && int64(pt.Target-pt.Site) != int64(int32(int64(pt.Target-pt.Site))) {
		return "its branch target is more than 2 GiB away"
	}
	if !pt.NeedsSlot {
		return ""
	}
	r, err := trampolines.Relocate(pt.Orig, pt.Site, pt.Site, trampolines.Options{})
	if err != nil {
		return err.Error()
	}
	if r.Form != trampolines.FormCopy && r.Form != trampolines.FormRIPRel || in.Len+5 > kprt.FreeSlot {
		return fmt.Sprintf("its out-of-line copy (%s) is made by kprewrite probe, not by the runtime: give the event with kprewrite probe or prepare the function", r.Form)
	}
	return ""
}

// refusalText is the plan's refusal without the request's name in front (where: the
// runtime names the site itself).
func refusalText(err error, where string) string {
	t := strings.TrimPrefix(err.Error(), where+": ")
	if errors.Is(err, patch.ErrRefused) {
		t = strings.TrimPrefix(t, patch.ErrRefused.Error()+" ")
		if _, rule, ok := strings.Cut(t, "): "); ok && strings.HasPrefix(t, "at ") {
			t = rule // ("at ADDR (FUNC+OFF): RULE at ADDR: SENTENCE": the runtime names the site)
		}
	}
	return t
}
