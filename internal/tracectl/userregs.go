package tracectl

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
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

// UserRegs are image k's probes registered by C handlers now, of processes that still
// write into the file (one killed before it unregistered, or that exec'd another
// program, leaves its words behind).
func (f *File) UserRegs(k int) []UserReg {
	n := f.userBytes(k)
	if n == 0 {
		return nil
	}
	im := f.images[k]
	at := im.ctlOff + uint64(im.ctlSize) - n
	var out []UserReg
	writes := map[int]bool{}
	for i := uint64(0); i < n/16; i++ {
		w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.data[at+16*i])))
		if w&kprt.URType == 0 {
			continue
		}
		pid := int(w >> 32)
		if _, ok := writes[pid]; !ok {
			writes[pid] = f.mappedBy(pid)
		}
		if !writes[pid] {
			continue
		}
		r := UserReg{Probe: int(i), Type: string("kkrj"[w&kprt.URType]), Disabled: w&kprt.URDisabled != 0, PID: pid}
		if w&kprt.URFree != 0 {
			r.Free, r.XMode = true, kprt.XMode(uint8(w>>8))
			r.Site = atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.data[at+16*i+8])))
		}
		out = append(out, r)
	}
	return out
}

// mappedBy says whether process pid maps the trace file (its runtime does while it
// runs; not after an exec of another program, nor a process that reused the pid).
func (f *File) mappedBy(pid int) bool {
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if pid <= 0 || err != nil {
		return false
	}
	for _, l := range strings.Split(string(maps), "\n") {
		// ADDR PERMS OFFSET DEV INODE PATH
		if fs := strings.Fields(l); len(fs) >= 5 && fs[3]+" "+fs[4] == f.mapsID {
			return true
		}
	}
	return false
}

// mapsID is the file st as /proc/PID/maps names it: "MAJOR:MINOR INODE", hex and decimal.
func mapsID(st os.FileInfo) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	d := uint64(sys.Dev)
	return fmt.Sprintf("%02x:%02x %d", (d>>8)&0xfff|(d>>32)&^0xfff, d&0xff|(d>>12)&^0xff, sys.Ino)
}
