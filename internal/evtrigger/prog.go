package evtrigger

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kprewrite/kprewrite/internal/evfilter"
	"github.com/kprewrite/kprewrite/internal/evhist"
)

// Compiled is a trigger ready for the runtime: its condition's filter program, the
// runtime indexes of the events enable_event and disable_event switch (every probe of
// a multi-probe event), and its count's slot in the image's shared control area
// (every copy of the trigger on a multi-probe event shares it, as the kernel's one
// trigger of the one event does).
type Compiled struct {
	Trigger
	Filter  []byte // evfilter program, nil for none
	Targets []uint32
	Slot    uint32
	Hist    []byte // a hist trigger's evhist program (its table starts at Slot)
	// Alloc: a hist trigger added at run time whose table is still to be placed (a
	// KPREWRITE_CONTROL file's: the runtime that installs it places the table in the
	// trace file's counters area and sets Slot); the runtime runs no program with it.
	Alloc bool
}

// The blob's layout (runtime/src/rt_trigger.c reads it; little-endian, 4-byte units):
//
//	u32 size; u16 ntrig; u8 cond; u8 reserved
//	per trigger, in run order:
//	  u8 cmd; u8 flags (FlagPost, FlagAlloc); u16 ntargets; u32 slot; u64 count; u32 filter_len
//	  u32 targets[ntargets]; filter program, padded to 4
//
// A hist trigger's "targets" are its evhist program (ntargets 4-byte units), and its
// slot is the first word of its table in the control area (evhist's doc.go).
// enable_event's and disable_event's targets are runtime event indexes, or LiveTarget
// and the slot of a live event's switch word; enable_hist's
// and disable_hist's the slots of the target event's histogram tables.
//
// cond is the kernel's TRIGGER_COND: some trigger has a condition or runs after the
// record; then every trigger runs once the record's data is fetched, else all of
// them before anything is fetched.
const (
	headerSize  = 8
	triggerSize = 20
	FlagPost    = 1
	FlagAlloc   = 2 // Compiled.Alloc
	// MaxTriggers bounds an event's triggers (the kernel has one per kind, and one
	// enable/disable per target event).
	MaxTriggers = 1024
	// MaxSlots bounds a control area's count and histogram words (src/rt_trigger.c).
	MaxSlots = 1 << 24
	// LiveTarget marks an enable_event/disable_event target that is not a runtime event
	// index but the slot of an event added at run time's switch word (the runtime's
	// KPRW_TRIG_LIVE_TARGET)
	LiveTarget = 1 << 31
)

// Keep is a hist trigger that a run-time control frame keeps as the rewrite made it:
// the runtime finds the event's hist trigger of the same slot (no program of its own).
func Keep(slot uint32) Compiled {
	return Compiled{Trigger: Trigger{Cmd: Hist, Count: Unlimited}, Slot: slot}
}

// Cond says whether the triggers run after the record's data is fetched (the kernel's
// EVENT_FILE_FL_TRIGGER_COND).
func Cond(ts []Compiled) bool {
	for _, t := range ts {
		if t.Filter != nil || t.Cmd.Post() || t.Cmd == Hist {
			return true
		}
	}
	return false
}

// Program encodes an event's triggers; nil when it has none.
func Program(ts []Compiled) ([]byte, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	if len(ts) > MaxTriggers {
		return nil, fmt.Errorf("%d triggers on one event; at most %d", len(ts), MaxTriggers)
	}
	b := make([]byte, headerSize, 64)
	binary.LittleEndian.PutUint16(b[4:], uint16(len(ts)))
	if Cond(ts) {
		b[6] = 1
	}
	for _, t := range ts {
		if len(t.Targets) > 0xffff {
			return nil, fmt.Errorf("trigger %q switches %d events; at most 65535", t.Text, len(t.Targets))
		}
		var h [triggerSize]byte
		h[0] = byte(t.Cmd)
		if t.Cmd.Post() {
			h[1] = FlagPost
		}
		if t.Alloc && t.Cmd == Hist {
			h[1] |= FlagAlloc
		}
		nt := len(t.Targets)
		if t.Cmd == Hist {
			nt = len(t.Hist) / 4
		}
		binary.LittleEndian.PutUint16(h[2:], uint16(nt))
		binary.LittleEndian.PutUint32(h[4:], t.Slot)
		binary.LittleEndian.PutUint64(h[8:], t.Count)
		binary.LittleEndian.PutUint32(h[16:], uint32(len(t.Filter)))
		b = append(b, h[:]...)
		for _, x := range t.Targets {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		b = append(b, t.Hist...)
		b = append(b, t.Filter...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	return b, nil
}

// Size is the length of the trigger blob at the start of b (its first word), or an
// error when b cannot hold one.
func Size(b []byte) (int, error) {
	if len(b) < headerSize {
		return 0, errors.New("trigger program: truncated header")
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < headerSize || n > len(b) || n%4 != 0 {
		return 0, fmt.Errorf("trigger program: size %d of %d bytes", n, len(b))
	}
	return n, nil
}

// Decode reads a blob Program made, checking it as the runtime does; the Trigger
// fields other than Cmd and Count are left empty.
func Decode(b []byte, nevents int) ([]Compiled, error) {
	n, err := Size(b)
	if err != nil {
		return nil, err
	}
	b = b[:n]
	cnt := int(binary.LittleEndian.Uint16(b[4:]))
	if cnt == 0 || cnt > MaxTriggers {
		return nil, fmt.Errorf("trigger program: %d triggers", cnt)
	}
	var out []Compiled
	off := headerSize
	for i := 0; i < cnt; i++ {
		if len(b)-off < triggerSize {
			return nil, fmt.Errorf("trigger program: trigger %d truncated", i)
		}
		h := b[off : off+triggerSize]
		c := Compiled{Trigger: Trigger{Cmd: Command(h[0]), Count: binary.LittleEndian.Uint64(h[8:])}}
		if c.Cmd < TraceOn || c.Cmd > DisableHist {
			return nil, fmt.Errorf("trigger program: trigger %d: command %d", i, h[0])
		}
		if h[1]&FlagAlloc != 0 {
			if c.Cmd != Hist {
				return nil, fmt.Errorf("trigger program: trigger %d: a table to place on a %s trigger", i, c.Cmd)
			}
			c.Alloc = true
		}
		nt := int(binary.LittleEndian.Uint16(h[2:]))
		c.Slot = binary.LittleEndian.Uint32(h[4:])
		fl := int(binary.LittleEndian.Uint32(h[16:]))
		off += triggerSize
		if nt > (len(b)-off)/4 {
			return nil, fmt.Errorf("trigger program: trigger %d: %d targets", i, nt)
		}
		if c.Cmd == Hist && nt == 0 { // kept: the rewrite's hist trigger of that slot (Keep)
			if fl != 0 || c.Alloc {
				return nil, fmt.Errorf("trigger program: trigger %d: a kept hist trigger with a filter", i)
			}
			out = append(out, c)
			continue
		}
		if c.Cmd == Hist {
			c.Hist = b[off : off+4*nt]
			if _, err := evhist.CheckProgram(c.Hist); err != nil {
				return nil, fmt.Errorf("trigger program: trigger %d: %w", i, err)
			}
			nt, off = 0, off+4*nt
		}
		for k := 0; k < nt; k++ {
			x := binary.LittleEndian.Uint32(b[off:])
			if c.Cmd == EnableHist || c.Cmd == DisableHist { // histograms' table slots
				if x >= MaxSlots {
					return nil, fmt.Errorf("trigger program: trigger %d: target slot %d", i, x)
				}
			} else if x&LiveTarget != 0 { // a live event's switch word
				if x&^LiveTarget >= MaxSlots {
					return nil, fmt.Errorf("trigger program: trigger %d: target slot %d", i, x&^LiveTarget)
				}
			} else if int(x) >= nevents {
				return nil, fmt.Errorf("trigger program: trigger %d: target event %d of %d", i, x, nevents)
			}
			c.Targets = append(c.Targets, x)
			off += 4
		}
		if fl > len(b)-off {
			return nil, fmt.Errorf("trigger program: trigger %d: filter of %d bytes", i, fl)
		}
		if fl > 0 {
			c.Filter = b[off : off+fl]
			if err := evfilter.Check(c.Filter); err != nil {
				return nil, fmt.Errorf("trigger program: trigger %d: %w", i, err)
			}
		}
		off += (fl + 3) &^ 3
		out = append(out, c)
	}
	if off != len(b) {
		return nil, fmt.Errorf("trigger program: %d bytes after the last trigger", len(b)-off)
	}
	return out, nil
}
