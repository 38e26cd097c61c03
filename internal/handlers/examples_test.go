package handlers

import (
	"context"
	"path/filepath"
	"testing"
)

// TestExamplesCompile compiles the handler files of examples/ (without warnings) and
// checks what they declare.
func TestExamplesCompile(t *testing.T) {
	needGCC(t)
	for _, c := range []struct {
		file, probe string
		kind        Kind
		init, exit  bool
	}{
		{"kprobe/kprobe_example.c", "kp", KindKprobe, true, true},
		{"kretprobe/kretprobe_example.c", "my_kretprobe", KindKretprobe, true, true},
		{"faultinject/fail_malloc.c", "fail_malloc", KindKretprobe, false, true},
		{"latency/funclatency.c", "work_latency", KindKretprobe, false, true},
	} {
		t.Run(filepath.Dir(c.file), func(t *testing.T) {
			set, err := Compile(context.Background(), []string{filepath.Join("..", "..", "examples", c.file)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Warnings) != 0 {
				t.Errorf("warnings: %q", set.Warnings)
			}
			found := false
			for _, p := range set.Probes {
				found = found || (p.Name == c.probe && p.Kind == c.kind)
			}
			if !found || set.Init != c.init || set.Exit != c.exit {
				t.Errorf("probes %+v init %v exit %v", set.Probes, set.Init, set.Exit)
			}
		})
	}
}
