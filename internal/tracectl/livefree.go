package tracectl

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/kprewrite/kprewrite/analysis"
	"github.com/kprewrite/kprewrite/elfio"
	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/probedefs"
	"github.com/kprewrite/kprewrite/internal/tracefile"
	"github.com/kprewrite/kprewrite/patch"
	kprt "github.com/kprewrite/kprewrite/runtime"
	"github.com/kprewrite/kprewrite/trampolines"
)

// Events at sites no rewrite prepared (issue 46, "at any other site the analysis
// embedded in the rewrite decides"). A live-capable image (prepared sites or live
// events) has free live points: table entries with a placeholder kprobe and a slot of
// kprt.FreeSlot bytes each, unplaced. The tool runs the rewriter's analysis and plan
// on the rewritten binary, as `check` would with --no-optimize: an int3 boosted,
// single-stepped or emulated, or the refusal with check's rule and sentence. It makes
// the point as the runtime's table holds it and the slot's bytes for a free entry's
// slot address, and hands both over in the live frame (kprt.LEPoint); the runtime's
// live-probe thread writes them and the int3 (runtime src/rt_live.c).

// freeSite is an event's place at a free live point, before a slot is chosen.
type freeSite struct {
	plan  patch.Point // the point the analysis made (an int3 kind)
	addr  uint64      // the address asked for
	slots []kprt.RawPoint
	first uint32 // the runtime index of the first free point's probe
}

// ErrNoFreePoints is returned for a binary rewritten without free live points.
var ErrNoFreePoints = errors.New("has no free live points for events at sites it did not prepare (rewrite it with --prepare or a --disable'd event, which make it live-capable)")

// AddBinary names a file that may be the rewritten binary of an image of the trace
// file (the executable of a process writing into it): the analysis of an event at a
// site no rewrite prepared reads it.
func (f *File) AddBinary(path string) { f.binaries = append(f.binaries, path) }

// AddProcessBinaries adds the executable and mapped files of process pid (AddBinary).
func (f *File) AddProcessBinaries(pid int) {
	dir := "/proc/" + strconv.Itoa(pid)
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		f.AddBinary(exe)
	}
	maps, err := os.Open(dir + "/maps")
	if err != nil {
		return
	}
	defer maps.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 6 && strings.HasPrefix(fs[5], "/") && strings.Contains(fs[1], "x") {
			f.AddBinary(strings.Join(fs[5:], " "))
		}
	}
}

// imageBinary opens the rewritten binary of image k: a file AddBinary named, the
// image's name beside the trace file or in the working directory, or the trace file's
// name without .trace; the one whose tables carry the image's id.
func (f *File) imageBinary(k int) (*elfio.File, *tracefile.Image, error) {
	d := f.images[k].desc
	cands := append(append([]string{}, f.binaries...), filepath.Join(filepath.Dir(f.Path), d.Image), d.Image,
		strings.TrimSuffix(f.Path, tracefile.Suffix))
	for _, c := range cands {
		ef, err := elfio.Open(c)
		if err != nil {
			continue
		}
		if im, err := tracefile.ReadImage(ef); err == nil && im.Header.ImageID == d.ImageID {
			return ef, im, nil
		}
		ef.Close()
	}
	return nil, nil, fmt.Errorf("the rewritten binary of %s (image %#x) is not found beside %s: name it (probe -b BINARY) or give the PID of a program running it", d.Image, d.ImageID, f.Path)
}

// planFree runs the rewriter's analysis for event p at a site of
// image k that no rewrite prepared: where its int3 goes and how it runs, or the
// analysis's refusal.
func (f *File) planFree(k int, p *eventdef.Probe) (*freeSite, error) {
	if p.Return {
		return nil, fmt.Errorf("%s: %w (a return event needs the function's entry prepared)", p.Symbol, ErrNotPrepared)
	}
	ef, im, err := f.imageBinary(k)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	h := im.Header
	if h.NFree == 0 {
		return nil, fmt.Errorf("%s: %w", ef.Path, ErrNoFreePoints)
	}
	b, err := analysis.Analyze(ef, analysis.Options{})
	if err != nil {
		return nil, fmt.Errorf("analyse %s: %w", ef.Path, err)
	}
	defs := []probedefs.Probe{{Origin: p.Group + "/" + p.Event, Def: p}}
	if err := probedefs.Resolve(ef, b.Funcs, defs); err != nil {
		return nil, err
	}
	addr := defs[0].Addr
	for _, pt := range im.Points[:h.NPoints] {
		if addr >= pt.Site && addr < pt.Site+uint64(pt.InsnLen) {
			return nil, fmt.Errorf("%#x is inside the probe site at %#x that the rewrite patched (give the event at rewrite time, or prepare the function)", addr, pt.Site)
		}
	}
	pl, err := patch.MakePlan(b, []patch.Request{{Name: p.Group + "/" + p.Event, Addr: addr}}, patch.Options{NoOptimize: true})
	if err != nil {
		return nil, err
	}
	if len(pl.Points) != 1 || pl.Points[0].Optimized() || pl.Points[0].PFlags&(kprt.PFInt3Step|kprt.PFInner|kprt.PFCount) != 0 {
		return nil, fmt.Errorf("%#x: the analysis made no int3 point there", addr)
	}
	fs := &freeSite{plan: pl.Points[0], addr: addr, slots: im.Points[h.NPoints:]}
	fs.first = fs.slots[0].FirstProbe
	return fs, nil
}

// place puts fs at a free live point: the one an event at the same site rides
// already, else the one the programs left placed there (the newest use of a point
// stays placed after its events are removed), else the one least recently used by
// the image's frames (used, newest first) that cur does not use. It returns the
// entry's probe, point and slot.
func (fs *freeSite) place(cur []tracefile.LiveEvent, used []freeUse) (uint32, []byte, []byte, error) {
	taken := map[uint32]bool{}
	for _, e := range cur {
		if site, _, ok := e.At(); ok && site == fs.plan.Site {
			return e.Probe, e.Point, e.Slot, nil
		}
		taken[e.Probe] = true
	}
	k := -1
	for c := range fs.slots { // never used first, then the oldest use
		pi := fs.first + uint32(c)
		if taken[pi] {
			continue
		}
		if at, site := lastUse(used, pi); at < len(used) && site == fs.plan.Site {
			k = c // placed there still
			break
		}
		if k < 0 || lastUseAt(used, pi) > lastUseAt(used, fs.first+uint32(k)) {
			k = c
		}
	}
	if k < 0 {
		return 0, nil, nil, fmt.Errorf("every one of the %d free live points carries an event (remove one first)", len(fs.slots))
	}
	point, slot, err := fs.encode(fs.slots[k])
	return fs.first + uint32(k), point, slot, err
}

// freeUse is a free live point's probe used by an event of a frame, at site.
type freeUse struct {
	probe uint32
	site  uint64
}

// lastUse is how recently probe was used by the frames (used, newest first): its
// index there, len(used) when never (the largest: the best to take), and the site.
func lastUse(used []freeUse, probe uint32) (int, uint64) {
	for i, u := range used {
		if u.probe == probe {
			return i, u.site
		}
	}
	return len(used), 0
}

func lastUseAt(used []freeUse, probe uint32) int { i, _ := lastUse(used, probe); return i }

// encode is fs's point as the runtime's table holds it at free entry free (its slot
// and probe), and the slot's bytes: the relocated copy, then the jmp back when it is
// boosted, int3s after.
func (fs *freeSite) encode(free kprt.RawPoint) ([]byte, []byte, error) {
	pt := &fs.plan
	slot := bytes.Repeat([]byte{trampolines.Int3}, kprt.FreeSlot)
	rp := kprt.RawPoint{Site: pt.Site, Slot: free.Slot, Target: pt.Target, FirstProbe: free.FirstProbe, NProbes: 1,
		XMode: pt.XMode, InsnLen: pt.InsnLen, EmuOp: pt.EmuOp, EmuCC: pt.EmuCC, PFlags: pt.PFlags, RetImm: pt.RetImm,
		Reserved1: fs.addr}
	copy(rp.Orig[:], pt.Orig)
	if pt.NeedsSlot {
		s, err := trampolines.BuildSlot(pt.Orig, pt.Site, free.Slot, pt.SlotOpt)
		if err != nil {
			return nil, nil, fmt.Errorf("probe at %#x: %w", pt.Site, err)
		}
		if s.CopyLen+5 > kprt.FreeSlot || len(s.Code) > kprt.FreeSlot {
			return nil, nil, fmt.Errorf("probe at %#x: its out-of-line copy takes %d bytes, a free slot %d", pt.Site, len(s.Code), kprt.FreeSlot)
		}
		copy(slot, s.Code)
		rp.SlotLen = uint8(s.CopyLen)
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, &rp) // bytes.Buffer never fails
	return b.Bytes(), slot, nil
}

// freeImage is the image of the file an event p at an unprepared site goes to: the
// library it names, else the one whose functions hold its symbol, else the first.
func (f *File) freeImage(p *eventdef.Probe) (int, error) {
	first := -1
	for k, im := range f.images {
		d := im.desc
		if d == nil || (p.Lib != "" && !sameLib(p.Lib, d.Input)) {
			continue
		}
		if first < 0 {
			first = k
		}
		if p.Symbol != "" && symbolAt(d, p.Symbol) != ^uint64(0) {
			return k, nil
		}
	}
	if first < 0 && p.Lib != "" {
		return 0, fmt.Errorf("%s: no image of the file is %s", f.Path, p.Lib)
	}
	if first < 0 {
		return 0, fmt.Errorf("%s: no program has described its image in the file yet", f.Path)
	}
	return first, nil
}

// freeUses lists the free live points image id's frames used, newest first.
func (f *File) freeUses(id uint64) []freeUse {
	frames, _, err := tracefile.LiveFrames(f.data, atomic.LoadUint64(f.word64(offCtlLast)))
	if err != nil {
		return nil
	}
	var used []freeUse
	for _, fr := range frames {
		for _, e := range fr.Events {
			if site, _, ok := e.At(); ok && fr.ImageID == id {
				used = append(used, freeUse{e.Probe, site})
			}
		}
	}
	return used
}

// At is where an event at a site no rewrite prepared is placed: its site and the
// address asked for (ok false: an event at a prepared site).
func (e LiveEvent) At() (site, addr uint64, ok bool) { return e.ent.At() }

// Kind is how the int3 of an event at a free live point runs its instruction, as
// list's kinds say: k single-stepped, b boosted or emulated.
func (e LiveEvent) Kind() string {
	if len(e.ent.Point) == kprt.PointSize && kprt.XMode(e.ent.Point[30]) == kprt.XSStep {
		return "k"
	}
	return "b"
}
