// Package cleanup removes kprewrite's temporary files when it is interrupted: the
// output being written (elfio.WriteFileAtomic) and the C handlers' build directory
// would otherwise stay behind after a SIGINT or SIGTERM.
package cleanup

import (
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	mu       sync.Mutex
	paths    = map[string]int{}
	signaled atomic.Bool // an interrupting signal arrived: the process ends by it
)

// Add registers path (a file or a directory) for removal on an interrupting signal
// and returns the function that unregisters it, for when it was renamed or removed.
func Add(path string) (done func()) {
	mu.Lock()
	paths[path]++
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			if paths[path]--; paths[path] <= 0 {
				delete(paths, path)
			}
			mu.Unlock()
		})
	}
}

// removeAll removes every registered path.
func removeAll() {
	mu.Lock()
	defer mu.Unlock()
	for p := range paths {
		os.RemoveAll(p)
	}
}

// OnSignal makes SIGINT, SIGTERM and SIGHUP remove the registered paths, then end the
// process as the signal would have (its default action: the shell sees 128+signal).
// Only a command-line program calls it; a library leaves signals to its host.
func OnSignal() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-c
		signaled.Store(true)
		removeAll()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

// Exit ends the process with code, unless an interrupting signal arrived: then the
// process ends by that signal once its files are removed (a command that failed
// because its compiler was interrupted too must not end with its own status).
func Exit(code int) {
	if signaled.Load() {
		select {} // OnSignal's goroutine kills the process
	}
	os.Exit(code)
}
