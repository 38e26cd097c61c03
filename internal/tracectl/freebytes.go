package tracectl

import (
	"fmt"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// FreePointBytes is what `kprewrite probe` hands the runtime for an event at addr of
// the rewritten binary ef placed at free live point free (as the image's table holds
// it): the point's and the slot's bytes (planFree's analysis and plan, encode). The
// runtime builds the same for a C handler's register_kprobe() at an unprepared site
// (runtime src/rt_usersite.c); tests compare the two.
func FreePointBytes(ef *elfio.File, addr uint64, free kprt.RawPoint) (point, slot []byte, err error) {
	b, err := analysis.Analyze(ef, analysis.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("analyse %s: %w", ef.Path, err)
	}
	pl, err := patch.MakePlan(b, []patch.Request{{Name: fmt.Sprintf("%#x", addr), Addr: addr}}, patch.Options{NoOptimize: true})
	if err != nil {
		return nil, nil, err
	}
	fs := &freeSite{plan: pl.Points[0], addr: addr}
	return fs.encode(free)
}
