package eventdef

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"
)

// The kernel's uprobe tracer is the oracle for these tests. They write
// only events of the group oracleGroup, always by appending (truncating
// uprobe_events would remove other users' events), and remove them again.
const (
	tracefs     = "/sys/kernel/tracing"
	oracleGroup = "kpwtest"
)

// needOracle skips the test unless the kernel's uprobe tracer is usable.
func needOracle(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the uprobe tracer oracle needs root")
	}
	if _, err := os.Stat(tracefs + "/uprobe_events"); err != nil {
		t.Skip("tracefs with uprobe_events is not mounted at " + tracefs)
	}
	if _, err := os.Stat(tracefs + "/error_log"); err != nil {
		t.Skip("tracefs has no error_log")
	}
}

// writeUprobeEvents appends one line to uprobe_events.
func writeUprobeEvents(line string) error {
	f, err := os.OpenFile(tracefs+"/uprobe_events", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(line + "\n"))
	cerr := f.Close()
	return errors.Join(werr, cerr)
}

// kernelError returns the message and caret position of the newest
// error_log entry for command, or ok false if there is none.
func kernelError(command string) (msg string, pos int, ok bool) {
	data, err := os.ReadFile(tracefs + "/error_log")
	if err != nil {
		return "", 0, false
	}
	lines := strings.Split(string(data), "\n")
	const prefix = "  Command: "
	for i := len(lines) - 1; i >= 2; i-- {
		if lines[i-1] != prefix+command {
			continue
		}
		_, m, found := strings.Cut(lines[i-2], " error: ")
		if !found {
			continue
		}
		return m, strings.IndexByte(lines[i], '^') - len(prefix), true
	}
	return "", 0, false
}

// oracleGroups are the groups the tests create events in.
var oracleGroups = map[string]bool{
	oracleGroup: true, "kpw-test": true, "_kpw": true, "-kpw": true, "--9": true,
	"KPW": true, strings.Repeat("a", 63): true,
}

// removeOracleEvents deletes every event of the oracleGroups.
func removeOracleEvents(t *testing.T) {
	t.Helper()
	f, err := os.Open(tracefs + "/uprobe_events")
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) == 0 {
			continue
		}
		_, ev, _ := strings.Cut(w[0], ":")
		g, _, _ := strings.Cut(ev, "/")
		if oracleGroups[g] && !seen[ev] {
			seen[ev] = true
			events = append(events, ev)
		}
	}
	f.Close()
	for _, ev := range events {
		if err := writeUprobeEvents("-:" + ev); err != nil {
			t.Errorf("remove %s: %v", ev, err)
		}
	}
}
