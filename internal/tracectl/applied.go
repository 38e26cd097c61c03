package tracectl

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

var (
	offLiveDone    = unsafe.Offsetof(kprt.RawTraceHeader{}.LiveDone)
	offRunPID      = unsafe.Offsetof(kprt.RawTraceHeader{}.RunPID)
	offRecorderPID = unsafe.Offsetof(kprt.RawTraceHeader{}.RecorderPID)
)

// WaitApplied waits, at most timeout, until a running program's live-probe thread has
// applied every change written into the file so far (the header's live_done, which
// each program's thread advances after it has armed and disarmed its sites), as
// writing kprobe_events returns with the probe armed. It returns true when one has,
// or when there is nothing to wait for: no program of the file ever ran a live-probe
// thread, or none that could (the run's process and its recorder) is alive.
func (f *File) WaitApplied(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		done := atomic.LoadUint32(f.word(offLiveDone))
		gen := atomic.LoadUint32(f.word(offCtlGen))
		if done == 0 || int32(done-1-gen) >= 0 || !f.runAlive() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// runAlive says whether the process that started the file's run, or its recorder, is
// alive (its children, which write into the file too, usually end with it)
func (f *File) runAlive() bool {
	for _, off := range []uintptr{offRunPID, offRecorderPID} {
		pid := int(atomic.LoadUint32(f.word(off)))
		if pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || err == syscall.EPERM {
			return true
		}
	}
	return false
}
