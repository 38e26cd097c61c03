package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kprewrite/kprewrite/tests/internal/testprog"
)

// readmeBlock is a shell block of README.md marked to be run:
//
//	<!-- run -->                      run in the examples' directory (one temporary
//	                                  directory for all of them, in README order)
//	<!-- run: dir=repo -->            run in the repository's root
//	<!-- run: needs=TOOL,... -->      skipped unless each tool is on PATH (or a path exists)
//	```sh
//	...
//	```
//
// optionally followed by the output it shows:
//
//	<!-- output -->                   each line must appear in the output, in this order,
//	<!-- output: numbers vary -->     with numbers and addresses matching any
//	```
//	...                               (a line "..." stands for anything)
//	```
type readmeBlock struct {
	line    int // of the ```sh fence, 1-based
	script  string
	inRepo  bool
	needs   []string
	expect  []string // nil: no output shown
	numbers bool     // numbers and hex addresses in expect match any
}

var readmeMarker = regexp.MustCompile(`^<!-- (run|output)(?::\s*(.*?))?\s*-->$`)

// readmeBlocks parses README.md's marked blocks; a marker not followed by its fenced
// block is an error, so that a block is never skipped by mistake.
func readmeBlocks(text string) ([]readmeBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []readmeBlock
	fenced := func(i int, opening string) (body []string, next int, err error) {
		if i >= len(lines) || strings.TrimSpace(lines[i]) != opening {
			return nil, 0, fmt.Errorf("line %d: a marker must be followed by a %s fence", i, opening)
		}
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				return lines[i+1 : j], j + 1, nil
			}
		}
		return nil, 0, fmt.Errorf("line %d: fence not closed", i+1)
	}
	for i := 0; i < len(lines); i++ {
		m := readmeMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if m[1] == "output" {
			return nil, fmt.Errorf("line %d: an output block that follows no run block", i+1)
		}
		b := readmeBlock{line: i + 2}
		for _, opt := range strings.Fields(m[2]) {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "dir":
				if v != "repo" {
					return nil, fmt.Errorf("line %d: dir=%s (only dir=repo)", i+1, v)
				}
				b.inRepo = true
			case "needs":
				b.needs = strings.Split(v, ",")
			default:
				return nil, fmt.Errorf("line %d: unknown option %q", i+1, opt)
			}
		}
		body, next, err := fenced(i+1, "```sh")
		if err != nil {
			return nil, err
		}
		b.script = strings.Join(body, "\n") + "\n"
		i = next - 1
		// the output it shows, after blank lines
		j := next
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j < len(lines) {
			if om := readmeMarker.FindStringSubmatch(strings.TrimSpace(lines[j])); om != nil && om[1] == "output" {
				switch om[2] {
				case "":
				case "numbers vary":
					b.numbers = true
				default:
					return nil, fmt.Errorf("line %d: unknown output option %q", j+1, om[2])
				}
				out, onext, err := fenced(j+1, "```")
				if err != nil {
					return nil, err
				}
				b.expect = append([]string{}, out...)
				i = onext - 1
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

var (
	readmeHex    = regexp.MustCompile(`0x[0-9a-fA-F]+`)
	readmeNumber = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	readmeUnit   = regexp.MustCompile(`# (ns|us|ms|s)\b`) // durations: 752 ns, 1.797 us
)

// readmeNorm collapses blanks and, with numbers, makes every number and hex address #
// (and every duration #t).
func readmeNorm(s string, numbers bool) string {
	s = strings.Join(strings.Fields(s), " ")
	if numbers {
		s = readmeHex.ReplaceAllString(s, "0x#")
		s = readmeNumber.ReplaceAllString(s, "#")
		s = readmeUnit.ReplaceAllString(s, "#t")
	}
	return s
}

// readmeMissing returns the first expected line that does not appear in out (each
// in a line of its own, in order), or "".
func readmeMissing(out string, expect []string, numbers bool) string {
	got := strings.Split(out, "\n")
	at := 0
	for _, e := range expect {
		want := readmeNorm(e, numbers)
		if want == "" || want == "..." {
			continue
		}
		found := false
		for ; at < len(got); at++ {
			if strings.Contains(readmeNorm(got[at], numbers), want) {
				found = true
				at++
				break
			}
		}
		if !found {
			return e
		}
	}
	return ""
}

// runReadmeBlock runs one block with bash -e (no pipefail: a pipeline ends as in
// the reader's shell, e.g. `| head` cutting a long output short), stdout and stderr in one
// stream; a block still running after the timeout is killed with its children.
func runReadmeBlock(t *testing.T, b readmeBlock, dir, path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", b.script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("timed out"))
	}
	return out.String(), err
}

// TestReadme runs the shell blocks README.md marks with <!-- run -->, in README order,
// with the kprewrite built from this checkout on PATH: each must exit with status 0
// and print the output the README shows after it.
func TestReadme(t *testing.T) {
	testprog.Need(t, "bash", "gcc", "go")
	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeBlocks(string(text))
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	if len(blocks) < 10 {
		t.Fatalf("README.md has %d blocks marked <!-- run -->, want an example per task", len(blocks))
	}
	if !strings.Contains(string(text), "```sh\ngo test ") {
		t.Errorf("README.md does not show the test command (go test) in a shell block")
	}
	bin := t.TempDir()
	buildKprewrite(t, bin)
	path := bin + string(os.PathListSeparator) + os.Getenv("PATH")
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	failed := false
	for _, b := range blocks {
		name := fmt.Sprintf("line%d", b.line)
		t.Run(name, func(t *testing.T) {
			if failed && !b.inRepo {
				t.Skip("an earlier example failed: this one may need its files")
			}
			for _, tool := range b.needs {
				testprog.Need(t, tool)
			}
			dir := work
			if b.inRepo {
				dir = repo
			}
			out, err := runReadmeBlock(t, b, dir, path)
			if err != nil {
				if !b.inRepo {
					failed = true
				}
				t.Fatalf("README.md:%d: %v\n--- script:\n%s--- output:\n%s", b.line, err, b.script, testprog.Clip(out, 6000))
			}
			if miss := readmeMissing(out, b.expect, b.numbers); miss != "" {
				t.Errorf("README.md:%d: the output lacks the line the README shows\n  %s\n--- output:\n%s", b.line, miss, testprog.Clip(out, 6000))
			}
		})
	}
}
