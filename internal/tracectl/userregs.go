package tracectl

import (
	"os"
	"strconv"
	"sync/atomic"
	"unsafe"

	kprt "github.com/kprewrite/kprewrite/runtime"
)

// UserReg is a probe a C handler has registered now (register_kprobe and friends at
// run time), as the process that registered it last says in its image's control area
// (kprt.TIFUser): what `kprewrite list TARGET` shows beside the events.
type UserReg struct {
	Probe    int    // its runtime probe index (a prepared site's placeholder, a declared probe's, a free point's)
	Type     string // k, r or j (a jprobe)
	Disabled bool   // registered disabled, or disable_kprobe() since
	PID      int    // the process that registered it
	Free     bool   // at a free live point: Site is where, XMode its kind
	Site     uint64
	XMode    kprt.XMode
}

// imageFlags is the header's RawTraceImage.Flags of image k.
func (f *File) imageFlags(k int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&f.data[offImages+uintptr(k)*unsafe.Sizeof(kprt.RawTraceImage{})+offImageFlags])))
}

// userBytes is the bytes of image k's C handler registrations at its control area's
// end: 0 for an image without C handlers (or of an older runtime).
func (f *File) userBytes(k int) uint64 {
	im := f.images[k]
	if f.imageFlags(k)&kprt.TIFUser == 0 || im.desc == nil {
		return 0
	}
	n := uint64(im.nprobes) * 16
	if n > uint64(im.ctlSize) {
		return 0
	}
	return n
}

// HasUserRegs says whether image k says which of its probes C handlers registered (an
// image with C handlers, of a runtime that does).
func (f *File) HasUserRegs(k int) bool { return f.userBytes(k) != 0 }

// UserRegs are image k's probes registered by C handlers now, of processes still
// alive (a process killed before it unregistered leaves its words behind).
func (f *File) UserRegs(k int) []UserReg {
	n := f.userBytes(k)
	if n == 0 {
		return nil
	}
	im := f.images[k]
	at := im.ctlOff + uint64(im.ctlSize) - n
	var out []UserReg
	for i := uint64(0); i < n/16; i++ {
		w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.data[at+16*i])))
		if w&kprt.URType == 0 || !alive(int(w>>32)) {
			continue
		}
		r := UserReg{Probe: int(i), Type: string("kkrj"[w&kprt.URType]), Disabled: w&kprt.URDisabled != 0, PID: int(w >> 32)}
		if w&kprt.URFree != 0 {
			r.Free, r.XMode = true, kprt.XMode(uint8(w>>8))
			r.Site = atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.data[at+16*i+8])))
		}
		out = append(out, r)
	}
	return out
}

// alive says whether process pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}
