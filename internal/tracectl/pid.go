package tracectl

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// TracePathOf returns the trace file the running process pid writes into: the file
// its runtime maps shared whose first bytes are a trace file's magic (the first one
// in its address space when several images write into different files).
func TracePathOf(pid int) (string, error) {
	maps, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return "", fmt.Errorf("process %d: %w", pid, err)
	}
	defer maps.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// 7f..-7f.. rw-s 00000000 08:01 1234   /path/to/prog.trace
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "s") || f[2] != "00000000" {
			continue
		}
		p := strings.Join(f[5:], " ")
		if seen[p] || !strings.HasPrefix(p, "/") {
			continue
		}
		seen[p] = true
		if isTraceFile(p) {
			return p, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("process %d: %w", pid, err)
	}
	return "", fmt.Errorf("process %d writes no kprewrite trace file (not a rewritten program, or one without a trace file)", pid)
}

// isTraceFile says whether the regular file at p starts with a trace file's magic.
func isTraceFile(p string) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 8)
	n, _ := f.Read(b)
	return n == 8 && string(b) == kprt.TraceMagic
}
