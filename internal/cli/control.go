package cli

import (
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/tracectl"
)

// runTraceOnOff is `kprewrite traceon|traceoff FILE`: tracefs's tracing_on for every
// program writing into the trace file, running or to come.
func runTraceOnOff(on bool) func(args []string, stdout, stderr io.Writer) error {
	name := map[bool]string{true: "traceon", false: "traceoff"}[on]
	return func(args []string, stdout, _ io.Writer) error {
		fs := helpFlagSet(name, name+" FILE", stdout)
		pos, err := parseFlags(fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageErr("want exactly one trace FILE, got %d arguments (see kprewrite %s -h)", len(pos), name)
		}
		f, err := tracectl.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		was := f.SetTracing(on)
		fmt.Fprintf(stdout, "%s: tracing %s (was %s)\n", pos[0], onOff(on), onOff(was))
		return nil
	}
}

// runEnableDisable is `kprewrite enable|disable FILE EVENT...`: the events' switch, as
// an event's enable file in soft mode, for every program writing into the trace file.
func runEnableDisable(on bool) func(args []string, stdout, stderr io.Writer) error {
	name := map[bool]string{true: "enable", false: "disable"}[on]
	return func(args []string, stdout, _ io.Writer) error {
		fs := helpFlagSet(name, name+" FILE EVENT...", stdout)
		pos, err := parseFlags(fs, args)
		if err != nil {
			return err
		}
		if len(pos) < 2 {
			return usageErr("want a trace FILE and at least one EVENT (EVENT, GROUP/EVENT, GROUP/* or all), got %d arguments (see kprewrite %s -h)", len(pos), name)
		}
		f, err := tracectl.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		var evs []tracectl.Event
		for _, pat := range pos[1:] { // every name checked before anything changes
			e, err := f.Events(pat)
			if err != nil {
				return err
			}
			for _, ev := range e {
				if on && !ev.Armed {
					return fmt.Errorf("%s: %s/%s: %w", pos[0], ev.Group, ev.Name, tracectl.ErrNotArmed)
				}
			}
			evs = append(evs, e...)
		}
		for _, ev := range evs {
			if err := f.SetEnabled(ev, on); err != nil {
				return fmt.Errorf("%s: %w", pos[0], err)
			}
			fmt.Fprintf(stdout, "%s: %s/%s (%s): %sd (was %s)\n", pos[0], ev.Group, ev.Name, ev.Image, name, map[bool]string{true: "enabled", false: "disabled"}[ev.Enabled])
		}
		return nil
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
