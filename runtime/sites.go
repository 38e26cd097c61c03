package kprt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// SiteFunc is one function of the embedded analysis (RawSiteFunc) with its
// instruction boundaries.
type SiteFunc struct {
	Name  string
	Addr  uint64
	Size  uint64
	Sites []Site // in address order
	// RetRefusal is why a return probe may not hook its entry ("": it may), as check
	// says it (register_kretprobe at an unprepared function).
	RetRefusal string
}

// Site is one instruction boundary: RawSite with its refusal as text ("" = an int3
// may go there).
type Site struct {
	RawSite
	Refusal string
}

// EncodeSites lays out the embedded analysis (struct kprw_sites): the functions sorted
// by name, their sites, then the names and refusals, each once.
func EncodeSites(funcs []SiteFunc) ([]byte, error) {
	funcs = append([]SiteFunc(nil), funcs...)
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].Name < funcs[j].Name })
	nsites := 0
	for _, f := range funcs {
		nsites += len(f.Sites)
	}
	strOff := uint64(SitesSize) + uint64(len(funcs))*SiteFuncSize + uint64(nsites)*SiteSize
	var strs []byte
	at := map[string]uint32{}
	str := func(s string) uint32 {
		if a, ok := at[s]; ok {
			return a
		}
		a := uint32(strOff + uint64(len(strs)))
		strs = append(append(strs, s...), 0)
		at[s] = a
		return a
	}
	rf := make([]RawSiteFunc, len(funcs))
	var rs []RawSite
	for k, f := range funcs {
		if f.Size > math.MaxUint32 {
			return nil, fmt.Errorf("embedded analysis: function %s is %d bytes", f.Name, f.Size)
		}
		rf[k] = RawSiteFunc{Addr: f.Addr, Name: str(f.Name), First: uint32(len(rs)), NSites: uint32(len(f.Sites)), Size: uint32(f.Size)}
		if f.RetRefusal != "" {
			rf[k].RetWhy = str(f.RetRefusal)
		}
		for _, s := range f.Sites {
			r := s.RawSite
			r.Why = 0
			if s.Refusal != "" {
				r.Why = str(s.Refusal)
			}
			rs = append(rs, r)
		}
	}
	size := strOff + uint64(len(strs))
	if size > math.MaxUint32 {
		return nil, fmt.Errorf("embedded analysis: %d bytes", size)
	}
	var b bytes.Buffer
	put := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) } // bytes.Buffer never fails
	put(&RawSites{NFuncs: uint32(len(funcs)), NSites: uint32(nsites), Size: uint32(size)})
	put(rf)
	put(rs)
	b.Write(strs)
	return b.Bytes(), nil
}
