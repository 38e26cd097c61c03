package patch

import (
	"slices"

	"github.com/kprewrite/kprewrite/analysis"
)

// planExits chooses the return probes counted at their function's exits
// (Options.CountExits) and returns the analysis of each exit site and, per request,
// its exit sites. A request gets exits only when every one of them has the optimize
// verdict with the other probes (and the other exits) around it, and no other probe
// sits on or between an exit site and its ret; the requests whose neighbourhood now
// holds an exit site are checked again, so no DCR covers an exit site. The third map
// says why each other return request hooks its return address.
func (pl *Plan) planExits(b *analysis.Binary, reqs []Request, opt Options, excl []Range, deny map[int]bool, refused []bool,
	addrs []uint64, check func(int, []uint64) analysis.Site) (map[uint64]analysis.Site, map[int][]uint64, map[int]string) {
	if !opt.CountExits || opt.NoOptimize {
		return nil, nil, nil
	}
	whyNot := map[int]string{} // return requests left hooking their return address
	near := func(a uint64) []uint64 { return neighbours(addrs, a) }
	checks := map[uint64]analysis.Site{}
	exitsOf := map[int][]uint64{}
	taken := map[uint64]uint64{} // exit site -> the function entry whose it is
	for i, r := range reqs {
		if !r.Return || refused[i] {
			continue
		}
		switch {
		case r.NeedPost:
			whyNot[i] = "a C handler's post_handler needs the entry single-stepped"
			continue
		case deny[i]:
			whyNot[i] = "one of its exit sites could not be jump-optimized"
			continue
		}
		entry := pl.Sites[i].Addr
		sites, why := b.Exits(entry, near)
		if why != "" {
			whyNot[i] = why
			continue
		}
		ok := true
		for _, s := range sites {
			last := s.DCR[len(s.DCR)-1]
			end := max(s.Addr+uint64(s.DCRLen), last.Addr+uint64(last.Len))
			// no other probe on the site or up to the exit instruction (the request's
			// own entry is no probe any more)
			for j, _ := slices.BinarySearch(addrs, s.Addr); j < len(addrs) && addrs[j] < end; j++ {
				if addrs[j] != entry {
					ok = false
				}
			}
			if e, dup := taken[s.Addr]; dup && e != entry {
				ok = false
			}
			if _, x := excludedBy(excl, s.Addr, end); x {
				ok = false
			}
		}
		if !ok {
			whyNot[i] = "another probe or excluded code is on an exit site"
			continue
		}
		for _, s := range sites {
			checks[s.Addr] = s
			taken[s.Addr] = entry
			exitsOf[i] = append(exitsOf[i], s.Addr)
		}
	}
	if len(exitsOf) == 0 {
		return nil, nil, whyNot
	}
	// the other probes, checked again where an exit site is near
	all := slices.Clone(addrs)
	for a := range checks {
		all = append(all, a)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	exitAddrs := make([]uint64, 0, len(checks))
	for a := range checks {
		exitAddrs = append(exitAddrs, a)
	}
	slices.Sort(exitAddrs)
	for i, r := range reqs {
		if refused[i] || len(exitsOf[i]) > 0 || len(neighbours(exitAddrs, r.Addr)) == 0 {
			continue
		}
		pl.Sites[i] = check(i, all)
	}
	return checks, exitsOf, whyNot
}
