package kprt_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	. "github.com/kprewrite/kprewrite/runtime"
)

// TestHandlerABI compiles the handlers' header kprewrite.h (alone, then together with
// kprewrite_abi.h in both orders) and checks the layouts the rewriter and the runtime
// rely on: struct kprobe and struct kretprobe against the Kprobe* constants, struct
// pt_regs and struct kretprobe_instance against the ABI's, the hooks and the new
// constants against abi.go.
func TestHandlerABI(t *testing.T) {
	needGCC(t)
	checks := map[string]int{
		"sizeof(struct kprobe)":                         KprobeSize,
		"offsetof(struct kprobe, symbol_name)":          KprobeOffSymbolName,
		"offsetof(struct kprobe, offset)":               KprobeOffOffset,
		"offsetof(struct kprobe, flags)":                KprobeOffFlags,
		"offsetof(struct kprobe, addr)":                 KprobeOffAddr,
		"offsetof(struct kprobe, pre_handler)":          KprobeOffPre,
		"offsetof(struct kprobe, post_handler)":         KprobeOffPost,
		"offsetof(struct kprobe, fault_handler)":        KprobeOffFault,
		"offsetof(struct kprobe, break_handler)":        KprobeOffBreak,
		"offsetof(struct kprobe, nmissed)":              KprobeOffNMissed,
		"sizeof(struct kretprobe)":                      KretprobeSize,
		"offsetof(struct kretprobe, handler)":           KretprobeOffHandler,
		"offsetof(struct kretprobe, entry_handler)":     KretprobeOffEntry,
		"offsetof(struct kretprobe, maxactive)":         KretprobeOffMaxActive,
		"offsetof(struct kretprobe, nmissed)":           KretprobeOffNMissed,
		"offsetof(struct kretprobe, data_size)":         KretprobeOffDataSize,
		"KPROBE_FLAG_DISABLED":                          KprobeFlagDisabled,
		"KPROBE_FLAG_OPTIMIZED":                         KprobeFlagOptimized,
		"sizeof(struct pt_regs)":                        PtRegsSize,
		"offsetof(struct pt_regs, ip)":                  16 * 8,
		"offsetof(struct pt_regs, ax)":                  10 * 8,
		"sizeof(struct kretprobe_instance)":             KretprobeInstHd,
		"offsetof(struct kretprobe_instance, rp)":       0,
		"offsetof(struct kretprobe_instance, ret_addr)": 8,
		"offsetof(struct kretprobe_instance, entry_sp)": 16,
		"offsetof(struct kretprobe_instance, tid)":      24,
		"offsetof(struct kretprobe_instance, task)":     32,
		"offsetof(struct kretprobe_instance, data)":     KretprobeInstHd,
		"sizeof(struct task_struct)":                    32, // (mm, 2026-11-29)
		"EINVAL":                                        22,
		"ENOENT":                                        2,
		"EFAULT":                                        14,
	}
	abiChecks := map[string]int{
		"sizeof(struct kprw_hooks)":                   HooksSize,
		"offsetof(struct kprw_hooks, init)":           0,
		"offsetof(struct kprw_hooks, exit)":           8,
		"offsetof(struct kprw_header, hooks)":         binaryOffset(t, RawHeader{}, "Hooks"),
		"offsetof(struct kprw_stats, handler_faults)": binaryOffset(t, RawStats{}, "HandlerFaults"),
		"sizeof(struct kprw_stats)":                   StatsSize,
		"offsetof(struct kprw_hooks, sites)":          32,
		"sizeof(struct kprw_sites)":                   SitesSize,
		"sizeof(struct kprw_site_func)":               SiteFuncSize,
		"sizeof(struct kprw_site)":                    SiteSize,
		"offsetof(struct kprw_site, sum)":             binaryOffset(t, RawSite{}, "Sum"),
	}
	for k, v := range handlerConsts {
		abiChecks[k] = v
	}
	if binary.Size(RawSites{}) != SitesSize || binary.Size(RawSiteFunc{}) != SiteFuncSize || binary.Size(RawSite{}) != SiteSize {
		t.Errorf("RawSites, RawSiteFunc, RawSite are %d, %d, %d bytes", binary.Size(RawSites{}), binary.Size(RawSiteFunc{}), binary.Size(RawSite{}))
	}
	if binary.Size(RawHooks{}) != HooksSize {
		t.Errorf("RawHooks is %d bytes, HooksSize %d", binary.Size(RawHooks{}), HooksSize)
	}
	for _, order := range [][]string{{"kprewrite.h"}, {"kprewrite.h", "kprewrite_abi.h"}, {"kprewrite_abi.h", "kprewrite.h"}} {
		want := checks
		if len(order) == 2 {
			want = map[string]int{}
			for k, v := range checks {
				want[k] = v
			}
			for k, v := range abiChecks {
				want[k] = v
			}
		}
		got := compileAndPrint(t, order, want)
		for k, v := range want {
			if g, ok := got[k]; !ok || g != uint64(v) {
				t.Errorf("%v: %s = %d (present %v), want %d", order, k, g, ok, v)
			}
		}
	}
}

// binaryOffset is the offset of field in v as encoding/binary lays it out.
func binaryOffset(t *testing.T, v any, field string) int {
	t.Helper()
	typ := reflect.TypeOf(v)
	off := 0
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Name == field {
			return off
		}
		off += binary.Size(reflect.New(f.Type).Elem().Interface())
	}
	t.Fatalf("%s has no field %s", typ, field)
	return 0
}

// compileAndPrint compiles a program that includes the headers and prints each expression
// of want, returning what it printed.
func compileAndPrint(t *testing.T, headers []string, want map[string]int) map[string]uint64 {
	t.Helper()
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n")
	for _, h := range headers {
		fmt.Fprintf(&src, "#include %q\n", h)
	}
	src.WriteString("int main(void){\n")
	for k := range want {
		fmt.Fprintf(&src, "printf(\"%%s=%%llu\\n\", %q, (unsigned long long)(%s));\n", k, k)
	}
	src.WriteString("return 0;}\n")
	dir := t.TempDir()
	c := filepath.Join(dir, "h.c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "h")
	if out, err := exec.Command("gcc", "-Wall", "-Werror", "-Iinclude", "-o", exe, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", headers, err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		got[k] = n
	}
	return got
}

// handlerConsts are the KPRW_* constants of the C handler ABI.
var handlerConsts = map[string]int{
	"KPRW_F_USER":     int(FUser),
	"KPRW_SF_UNREG":   ProbeStateUnreg,
	"KPRW_SF_FORCED":  ProbeStateForced,
	"KPRW_REC_PRINTK": RecPrintk,
	"KPRW_PRINTK_MAX": PrintkMax,
}
