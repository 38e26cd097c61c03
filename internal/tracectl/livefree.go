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
	plan  patch.Point     // the point the analysis made (an int3 kind)
	addr  uint64          // the address asked for
	slots []kprt.RawPoint // the free points of its kind (entry or return)
	first uint32          // the runtime index of the first free point's probe
	ret   bool            // a return event's: slots are free return points
	nfree int             // the image's free entry points (rewrite --live-points)
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
// analysis's refusal. A return event (r:) takes a free return point, whose int3 at the
// function's entry hooks the return address.
func (f *File) planFree(k int, p *eventdef.Probe) (*freeSite, error) {
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
	if err := freeAllowed(ef.Path, b, im, p, addr); err != nil {
		return nil, err
	}
	req := patch.Request{Name: p.Group + "/" + p.Event, Addr: addr, Return: p.Return}
	pl, err := patch.MakePlan(b, []patch.Request{req}, patch.Options{NoOptimize: true})
	if err != nil {
		return nil, err
	}
	if len(pl.Points) != 1 || pl.Points[0].Optimized() || pl.Points[0].Exit || pl.Points[0].PFlags&(kprt.PFInt3Step|kprt.PFInner|kprt.PFCount) != 0 {
		return nil, fmt.Errorf("%#x: the analysis made no int3 point there", addr)
	}
	fs := &freeSite{plan: pl.Points[0], addr: addr, slots: freeSlots(im, p.Return), ret: p.Return,
		nfree: len(freeSlots(im, false))}
	if len(fs.slots) == 0 {
		return nil, fmt.Errorf("%s: %w", ef.Path, errNoFreeRet)
	}
	fs.first = fs.slots[0].FirstProbe
	return fs, nil
}

// errNoFreeRet is returned for a return event in a binary without free return points.
var errNoFreeRet = errors.New("has no free return points for return events at functions it did not prepare (rewrite it with --prepare FUNC, or a newer kprewrite, which reserves them)")

// freeAllowed refuses an event at addr that no free point can take: inside a site the
// rewrite patched, or a return event of a Go function (its return address is never
// hooked, and a live event has no exits to record at).
func freeAllowed(path string, b *analysis.Binary, im *tracefile.Image, p *eventdef.Probe, addr uint64) error {
	for _, pt := range im.Points[:im.Header.NPoints] {
		if addr >= pt.Site && addr < pt.Site+uint64(pt.InsnLen) {
			return fmt.Errorf("%#x is inside the probe site at %#x that the rewrite patched (give the event at rewrite time, or prepare the function)", addr, pt.Site)
		}
	}
	if p.Return && b.IsGoCode(addr) {
		return fmt.Errorf("%s/%s: %s: %s (%#x) is a Go function: a Go function's return address is never hooked (Go's stack copying and unwinder fail on it), and a return event added live would hook it; give the event at rewrite time, where it is recorded at the function's exits",
			p.Group, p.Event, path, p.Symbol, addr)
	}
	return nil
}

// freeSlots are the free points of im that take an entry event (ret false) or a
// return event: the free entry points, then the free return points, each contiguous.
func freeSlots(im *tracefile.Image, ret bool) []kprt.RawPoint {
	free := im.Points[im.Header.NPoints:]
	lo, hi := -1, 0
	for c, pt := range free {
		isRet := int(pt.FirstProbe) < len(im.Probes) && im.Probes[pt.FirstProbe].Type == kprt.TKretprobe
		if isRet == ret {
			if lo < 0 {
				lo = c
			}
			hi = c + 1
		}
	}
	if lo < 0 {
		return nil
	}
	return free[lo:hi]
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
			if e.Return != fs.ret { // (one int3 a site: its point runs one kind of probe)
				return 0, nil, nil, fmt.Errorf("%#x carries %s added live already: an entry and a return event at a function no rewrite prepared cannot be live together (rewrite it with --prepare FUNC)",
					fs.addr, e.Def)
			}
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
		kind := "free live points"
		if fs.ret {
			kind = "free return points (r: events)"
		}
		return 0, nil, nil, fmt.Errorf("every one of the %d %s carries an event: remove one first, or rewrite the program with --live-points N for more (now %d)",
			len(fs.slots), kind, fs.nfree)
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
		Aux: fs.addr}
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
// list's kinds say: k single-stepped, b boosted or emulated; r and rb for a return
// event's.
func (e LiveEvent) Kind() string {
	k := "b"
	if len(e.ent.Point) == kprt.PointSize && kprt.XMode(e.ent.Point[30]) == kprt.XSStep {
		k = "k"
	}
	switch {
	case e.Return && k == "k":
		return "r"
	case e.Return:
		return "rb"
	}
	return k
}
