// Package cleanup removes kprewrite's temporary files when it is interrupted: the
// output being written (elfio.WriteFileAtomic) and the C handlers' build directory
// would otherwise stay behind after a SIGINT or SIGTERM.
package cleanup

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	mu       sync.Mutex
	paths    = map[string]int{}
	signaled atomic.Bool // an interrupting signal arrived: the process ends by it
	// childInterrupted: a child process died of an interrupting signal, most likely
	// the one sent to the whole process group, which may not have reached OnSignal's
	// goroutine yet.
	childInterrupted atomic.Bool
)

// interrupting reports whether sig is one OnSignal handles.
func interrupting(sig syscall.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP
}

// NoteChild records how a child process ended (err from its Wait or Run): one killed
// by an interrupting signal makes Exit wait for that signal to arrive here too.
func NoteChild(err error) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && interrupting(ws.Signal()) {
			childInterrupted.Store(true)
		}
	}
}

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
// because its compiler was interrupted too must not end with its own status). When a
// child died of such a signal, the signal sent to the process group may still be on
// its way to OnSignal's goroutine: Exit gives it a second.
func Exit(code int) {
	if code != 0 && childInterrupted.Load() {
		for deadline := time.Now().Add(time.Second); !signaled.Load() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	if signaled.Load() {
		select {} // OnSignal's goroutine kills the process
	}
	os.Exit(code)
}
