package patch

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/internal/x86dec"
)

// exitPlan is which return probes are counted at their function's exits
// (Options.CountExits).
type exitPlan struct {
	checks map[uint64]analysis.Site // the analysis of each exit site
	of     map[int][]uint64         // per request counted at its exits: the exit sites
	whyNot map[int]string           // per other return request: why it hooks its return address
}

// exitCand is a return request whose function's exits the analysis found.
type exitCand struct {
	req   int
	entry uint64
	sites []analysis.Site
}

// Why a return request hooks its return address although its exits were found.
const (
	whyExitTaken   = "another probe or excluded code is on an exit site"
	whyExitNotJump = "one of its exit sites could not be jump-optimized"
)

// planExits chooses the return probes counted at their function's exits. A request
// gets exits only when every one of them has the optimize verdict with the other
// probes (and the other exits) around it, and no other probe sits on or between an
// exit site and its ret (chooseExits). The choice is then checked the way the points
// will be placed (unplaceableExits): a request with an exit site that could not become
// a jump-optimized point, or where a probe stays, is left hooking its return address,
// and the choice is made again without it, before any point is placed. Last, the
// requests whose neighbourhood holds an exit site are analysed again, so no DCR
// covers an exit site.
func (p *planner) planExits() exitPlan {
	pl := p.pl
	whyNot := map[int]string{} // return requests whose exits are not looked for
	near := func(a uint64) []uint64 { return neighbours(p.addrs, a) }
	var cands []exitCand
	for i, r := range pl.Requests {
		if !r.Return || p.refused[i] {
			continue
		}
		if why, ok := p.exitsAllowed(r); !ok {
			if why != "" {
				whyNot[i] = why
			}
			continue
		}
		if r.NeedPost {
			whyNot[i] = "a C handler's post_handler needs the entry single-stepped"
			continue
		}
		if r.NoExit != "" && !p.opt.CountExits {
			whyNot[i] = r.NoExit
			continue
		}
		entry := pl.Sites[i].Addr
		exits := p.b.Exits
		if !p.opt.CountExits {
			exits = p.b.ExitsAfter // the records come after the code before the exit
		}
		sites, why := exits(entry, near)
		if why == "" && p.traced(r) && (p.opt.ExitsOnly || r.Go) {
			why = tailCallHook(sites)
		}
		if why != "" {
			whyNot[i] = why
			continue
		}
		cands = append(cands, exitCand{req: i, entry: entry, sites: sites})
	}
	// a probe staying at an entry keeps its point there: an exit site its DCR would
	// cover would make it an int3 (a trap a hit), worse than the hook
	stayEnd := map[uint64]uint64{} // entry -> the end of the DCR of the probes staying there
	for j, r := range pl.Requests {
		if !r.Return && !p.refused[j] && pl.Sites[j].Verdict == analysis.Optimize {
			// (the site may be after the requested entry: endbr64, Go's stack check)
			stayEnd[r.Addr] = max(stayEnd[r.Addr], pl.Sites[j].Addr+uint64(pl.Sites[j].DCRLen))
		}
	}
	deny := map[int]bool{}
	var ex exitPlan
	for {
		ex = p.chooseExits(cands, deny, stayEnd)
		for i, why := range whyNot {
			ex.whyNot[i] = why
		}
		bad := p.unplaceableExits(ex)
		if len(bad) == 0 {
			break
		}
		for _, i := range bad {
			deny[i] = true
		}
	}
	if len(ex.of) == 0 {
		return ex
	}
	// the other probes, checked again where an exit site is near
	exitAddrs := slices.Sorted(maps.Keys(ex.checks))
	all := slices.Concat(p.addrs, exitAddrs)
	slices.Sort(all)
	all = slices.Compact(all)
	for i, r := range pl.Requests {
		if p.refused[i] || len(ex.of[i]) > 0 || len(neighbours(exitAddrs, r.Addr)) == 0 {
			continue
		}
		pl.Sites[i] = p.check(i, all, false)
	}
	return ex
}

// exitsAllowed says whether return request r may be placed at its function's exits
// (ok), and when it may not, why, for a Go function's request, which is then refused
// ("" for others, which hook their return address).
func (p *planner) exitsAllowed(r Request) (string, bool) {
	switch {
	case !p.opt.CountExits && !p.opt.TraceExits && !r.Go && !r.Exits:
		return "", false
	case p.opt.NoOptimize:
		return goWhy(r, "--no-optimize: exits are counted or recorded by jump-optimized points only")
	case p.traced(r) && p.opt.VerifyRegions:
		return goWhy(r, "--verify-regions: returns are recorded at exits by jump-optimized points only")
	}
	return "", true
}

// goWhy is why for a Go function's request (refused), "" for another (hooked).
func goWhy(r Request, why string) (string, bool) {
	if r.Go {
		return why, false
	}
	return "", false
}

// traced: return request r writes records at its exits (TraceExits, a Go function's
// return or a request with Exits, without CountExits).
func (p *planner) traced(r Request) bool {
	return !p.opt.CountExits && (p.opt.TraceExits || r.Go || r.Exits)
}

// chooseExits gives each candidate, in request order, its exits unless it is denied,
// a request's address (other than its own entry) is on or before the ret of one of
// them, one lies inside the DCR of the probes staying at its entry (stayEnd: entry ->
// the end of that DCR), an earlier candidate took one, or one reaches excluded code.
func (p *planner) chooseExits(cands []exitCand, deny map[int]bool, stayEnd map[uint64]uint64) exitPlan {
	ex := exitPlan{checks: map[uint64]analysis.Site{}, of: map[int][]uint64{}, whyNot: map[int]string{}}
	taken := map[uint64]uint64{} // exit site -> the function entry whose it is
	for _, c := range cands {
		if deny[c.req] {
			ex.whyNot[c.req] = whyExitNotJump
			continue
		}
		ok := true
		entryEnd := max(c.entry, stayEnd[c.entry])
		for _, s := range c.sites {
			if s.Addr >= c.entry && s.Addr < entryEnd {
				ok = false
			}
			end := exitEnd(&s)
			if p.traced(p.pl.Requests[c.req]) {
				// the detour runs a copy of everything up to the ret, the ret too
				end = max(end, s.ExitInsn+1)
			}
			// no other probe on the site or up to the exit instruction (the request's
			// own entry is no probe any more)
			for j, _ := slices.BinarySearch(p.addrs, s.Addr); j < len(p.addrs) && p.addrs[j] < end; j++ {
				if p.addrs[j] != c.entry {
					ok = false
				}
			}
			if e, dup := taken[s.Addr]; dup && e != c.entry {
				ok = false
			}
			if _, x := excludedBy(p.excl, s.Addr, end); x {
				ok = false
			}
		}
		if !ok {
			ex.whyNot[c.req] = whyExitTaken
			continue
		}
		for _, s := range c.sites {
			ex.checks[s.Addr] = s
			taken[s.Addr] = c.entry
			ex.of[c.req] = append(ex.of[c.req], s.Addr)
		}
	}
	return ex
}

// unplaceableExits returns requests of ex counted at an exit site that would not
// become a jump-optimized point (none: every exit site can be). The sites are looked
// at by address, as the points are placed. An exit site fails when a request that
// stays at its own site is there too (the return request's entry can hold other
// probes): every such site's first request with exits is returned, since no denial
// elsewhere lets a staying probe go. It also fails when the next point's site is
// inside its DCR, its DCR cannot be replaced or its instruction decoded, or, with
// --verify-regions, in code that runs with signals blocked: the first of these ends
// the list (with its site's first request), since denying it changes which sites
// come next.
func (p *planner) unplaceableExits(ex exitPlan) []int {
	if len(ex.of) == 0 {
		return nil
	}
	bySite := p.bySite(ex) // every point's site, as MakePlan will place them
	sites := slices.Sorted(maps.Keys(bySite))
	var bad []int
	for k, site := range sites {
		s, ok := ex.checks[site]
		if !ok {
			continue
		}
		idx := bySite[site]
		if i := stayingWithExit(idx, ex); i >= 0 {
			if !slices.Contains(bad, i) {
				bad = append(bad, i)
			}
			continue
		}
		fails := s.Verdict != analysis.Optimize || (p.opt.VerifyRegions && s.SignalsBlocked != "")
		if k+1 < len(sites) && sites[k+1] < site+uint64(s.DCRLen) {
			fails = true
		}
		if _, ok := p.dcrCode(&s); !ok {
			fails = true
		}
		if code, err := insnBytes(p.b.File, site, s.Func); err != nil {
			fails = true
		} else if _, err := x86dec.Decode(code, site); err != nil {
			fails = true
		}
		if fails {
			if !slices.Contains(bad, idx[0]) {
				bad = append(bad, idx[0])
			}
			break
		}
	}
	return bad
}

// stayingWithExit returns, when one of the requests idx of an exit site stays at its
// own site (it is no exit-counted return probe), the first of them counted at its
// exits; -1 otherwise.
func stayingWithExit(idx []int, ex exitPlan) int {
	for _, i := range idx {
		if len(ex.of[i]) == 0 {
			for _, j := range idx {
				if len(ex.of[j]) > 0 {
					return j
				}
			}
		}
	}
	return -1
}

// exitEnd is where an exit site's span ends: its DCR, or its last instruction when
// that is longer.
// tailCallHook says why a traced return probe at these exits would still hook a
// return address (--exits-only hooks none): at a tail call it does ("" when none is).
func tailCallHook(sites []analysis.Site) string {
	for _, s := range sites {
		if s.TailCall {
			return fmt.Sprintf("tail-call: the jmp at %#x is a tail call, where the return address is hooked", s.ExitInsn)
		}
	}
	return ""
}

func exitEnd(s *analysis.Site) uint64 {
	last := s.DCR[len(s.DCR)-1]
	return max(s.Addr+uint64(s.DCRLen), last.Addr+uint64(last.Len))
}
