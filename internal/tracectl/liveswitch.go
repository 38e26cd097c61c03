package tracectl

import (
	"fmt"
	"sort"
	"sync/atomic"
	"syscall"

	"github.com/kprewrite/kprewrite/internal/eventdef"
	"github.com/kprewrite/kprewrite/internal/evtrigger"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// The switch of an event added at run time (the kernel's soft-disable of an event's
// enable file): a word of the counters area after its state word (kprt.LECtl), which
// `kprewrite enable|disable FILE EVENT` and enable_event/disable_event triggers naming
// it set and clear. A trigger names it as evtrigger.LiveTarget and its slot from the
// image's control area's slot 0, as triggers' counts are named: the runtime's
// rt_trigger.c flips it, rt_livedef.c reads it at each hit.

// ErrLiveBusy is returned for removing an event added at run time that a trigger
// enables or disables (the kernel refuses it: EBUSY).
var ErrLiveBusy = syscall.EBUSY

// liveSwitchTarget is the enable_event/disable_event target of live event e's switch.
func (f *File) liveSwitchTarget(e LiveEvent) (uint32, error) {
	if !e.Switch {
		return 0, fmt.Errorf("%s/%s: it was added by an older kprewrite and has no switch (remove it and add it again)", e.Group, e.Name)
	}
	base, err := f.liveSlotBase(e.img)
	if err != nil {
		return 0, err
	}
	off := e.ent.HitsOff + 16
	if off < base || (off-base)/8 >= evtrigger.MaxSlots {
		return 0, fmt.Errorf("%s/%s: its switch is past the words a trigger can name", e.Group, e.Name)
	}
	return evtrigger.LiveTarget | uint32((off-base)/8), nil
}

// liveNamed are the switch targets of image k's live events named GROUP/NAME (none: no
// such live event).
func (f *File) liveNamed(k int, group, name string) ([]uint32, error) {
	evs, err := f.Live()
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, e := range evs {
		if e.Gone || e.img != k || e.Group != group || e.Name != name {
			continue
		}
		x, err := f.liveSwitchTarget(e)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// liveExists says whether image k has a live event GROUP/NAME (a trigger may name it).
func (f *File) liveExists(k int, group, name string) bool {
	evs, _ := f.Live()
	for _, e := range evs {
		if !e.Gone && e.img == k && e.Group == group && e.Name == name {
			return true
		}
	}
	return false
}

// LiveSwitches are the events added at run time (not removed) that pattern matches,
// for `kprewrite enable|disable FILE EVENT`: an error when none does, or one has no
// switch.
func (f *File) LiveSwitches(pattern string) ([]LiveEvent, error) {
	evs, err := f.Live()
	if err != nil {
		return nil, err
	}
	var out []LiveEvent
	for _, e := range evs {
		if e.Gone || !eventdef.MatchesName(pattern, e.Group, e.Name) {
			continue
		}
		if !e.Switch {
			return nil, fmt.Errorf("%s: %s/%s: it was added by an older kprewrite and has no switch (remove it and add it again)", f.Path, e.Group, e.Name)
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no event %s", f.Path, pattern)
	}
	return out, nil
}

// SetLiveEnabled soft-enables or soft-disables live event e (its site stays armed: a
// disabled one's hits still run its triggers, as the kernel's SOFT_DISABLED).
func (f *File) SetLiveEnabled(e LiveEvent, on bool) error {
	if !e.Switch {
		return fmt.Errorf("%s/%s: it was added by an older kprewrite and has no switch (remove it and add it again)", e.Group, e.Name)
	}
	w := f.word64(uintptr(e.ent.HitsOff + 16))
	for {
		old := atomic.LoadUint64(w)
		nw := old | kprt.CtlEvSoftDisabled
		if on {
			nw = old &^ kprt.CtlEvSoftDisabled
		}
		if atomic.CompareAndSwapUint64(w, old, nw) {
			return nil
		}
	}
}

// checkUntargeted refuses to remove the live events gone (of all, the file's) while a
// trigger of an event that stays enables or disables one of them: a live event's, or a
// rewrite event's set at run time (a rewrite's own triggers cannot name them).
func (f *File) checkUntargeted(gone, all []LiveEvent) error {
	named := map[[2]uint64]LiveEvent{} // by image and target
	leaving := map[[2]uint64]bool{}    // by image and id
	imgs := map[int]bool{}
	for _, e := range gone {
		leaving[[2]uint64{uint64(e.img), uint64(e.ID)}] = true
		if x, err := f.liveSwitchTarget(e); err == nil {
			named[[2]uint64{uint64(e.img), uint64(x)}] = e
			imgs[e.img] = true
		}
	}
	busy := func(k int, prog []byte, listed []string, who string) error {
		cs, err := evtrigger.Decode(prog, f.images[k].desc.RuntimeEvents())
		if err != nil {
			return nil // (a program that does not decode names nothing the runtime runs)
		}
		for j, c := range cs {
			for _, x := range c.Targets {
				if t, ok := named[[2]uint64{uint64(k), uint64(x)}]; ok && c.Cmd.Switches() {
					text := c.Text
					if j < len(listed) {
						text = listed[j]
					}
					return fmt.Errorf("%s: %s/%s: %w: trigger %q of %s enables or disables it (remove that trigger first)", f.Path, t.Group, t.Name, ErrLiveBusy, text, who)
				}
			}
		}
		return nil
	}
	for _, e := range all {
		if e.Gone || e.ent.Trig == nil || !imgs[e.img] || leaving[[2]uint64{uint64(e.img), uint64(e.ID)}] {
			continue
		}
		if err := busy(e.img, e.ent.Trig, e.ent.Triggers, e.Group+"/"+e.Name); err != nil {
			return err
		}
	}
	for k := range imgs {
		if err := f.checkRewriteTriggers(k, busy); err != nil {
			return err
		}
	}
	return nil
}

// checkRewriteTriggers runs busy on the triggers set at run time on image k's rewrite
// events (its newest control frame), in event order.
func (f *File) checkRewriteTriggers(k int, busy func(int, []byte, []string, string) error) error {
	d := f.images[k].desc
	fr, err := f.latestFrame(d.ImageID)
	if err != nil || fr == nil {
		return err
	}
	var idx []uint32
	for i := range fr.Entries {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		en := fr.Entries[i]
		if en.Trig == nil || int(i) >= d.RuntimeEvents() {
			continue
		}
		if err := busy(k, en.Trig, en.Triggers, d.Events[i].Group+"/"+d.Events[i].Name); err != nil {
			return err
		}
	}
	return nil
}
