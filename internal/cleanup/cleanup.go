// Package cleanup removes kprewrite's temporary files when it is interrupted: the
// output being written (atomicfile.WriteFile) and the C handlers' build directory
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

// Catchable returns the signals of sigs that were not ignored when the process started
// (or since): a command started with SIGINT or SIGHUP ignored (`cmd &` in a script,
// nohup) must go on ignoring them, not catch them and then find it cannot end by them.
// Call it before the process's own signal.Notify of the signals.
func Catchable(sigs ...os.Signal) []os.Signal {
	var c []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			c = append(c, s)
		}
	}
	return c
}

// Notify is signal.Notify(c, sigs...) for the signals of sigs that are Catchable; with
// none it does nothing (signal.Notify with no signal would relay them all).
func Notify(c chan<- os.Signal, sigs ...os.Signal) {
	if sigs = Catchable(sigs...); len(sigs) > 0 {
		signal.Notify(c, sigs...)
	}
}

// OnSignal makes SIGINT, SIGTERM and SIGHUP remove the registered paths, then end the
// process as the signal would have (its default action: the shell sees 128+signal).
// A signal ignored when the process started stays ignored. If raising the signal again
// does not end the process, it exits with status 128+signal. Only a command-line
// program calls it; a library leaves signals to its host.
func OnSignal() {
	sigs := Catchable(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	if len(sigs) == 0 {
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	go func() {
		sig := <-c
		signaled.Store(true)
		removeAll()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		// still here: the signal did not end the process (its disposition is not the
		// default one after all); end it as a shell reports a death by it
		time.Sleep(time.Second)
		os.Exit(128 + int(sig.(syscall.Signal)))
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
		select {} // OnSignal's goroutine ends the process, by the signal or by os.Exit
	}
	os.Exit(code)
}
