package kprt_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	. "github.com/kprewrite/kprewrite/runtime"
)

func needGCC(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
}

// abiStructs maps C struct names to their Go mirrors.
var abiStructs = []struct {
	c   string
	val any
}{
	{"kprw_header", RawHeader{}},
	{"kprw_point", RawPoint{}},
	{"kprw_probe", RawProbe{}},
	{"kprw_event", RawEvent{}},
	{"kprw_probe_state", RawProbeState{}},
	{"pt_regs", PtRegs{}},
	{"kprw_stats", RawStats{}},
	{"kprw_trace_image", RawTraceImage{}},
	{"kprw_trace_hdr", RawTraceHeader{}},
	{"kprw_rec", RawRecord{}},
	{"kprw_got_slot", RawGotSlot{}},
	{"kprw_sigguard", RawSigGuard{}},
	{"kprw_trace_image_ext", RawTraceImageExt{}},
	{"kprw_blk", RawBlock{}},
	{"kprw_crec", RawCRec{}},
	{"kprw_crec_ext", RawCRecExt{}},
	{"kprw_chunk", RawChunk{}},
	{"kprw_ctlframe", RawCtlFrame{}},
	{"kprw_ctlent", RawCtlEnt{}},
	{"kprw_liveent", RawLiveEnt{}},
	{"kprw_ctlswitch", RawCtlSwitch{}},
	{"kprw_unwind", RawUnwind{}},
}

func cFieldName(f reflect.StructField) string {
	if tag := f.Tag.Get("c"); tag != "" {
		return tag
	}
	if f.Name == "OrigAX" {
		return "orig_ax"
	}
	return strings.Map(unicode.ToLower, f.Name)
}

// TestABILayout compiles kprewrite_abi.h and checks every field offset and size and
// every struct size against the Go mirror (as encoding/binary lays it out).
func TestABILayout(t *testing.T) {
	needGCC(t)
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"kprewrite_abi.h\"\nint main(void){\n")
	want := map[string]int{}
	for _, s := range abiStructs {
		typ := reflect.TypeOf(s.val)
		fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", sizeof(struct %s));\n", s.c, s.c)
		want[s.c] = binary.Size(s.val)
		off := 0
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			name := s.c + "." + cFieldName(f)
			fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", offsetof(struct %s, %s));\n", name, s.c, cFieldName(f))
			want[name] = off
			off += binary.Size(reflect.New(f.Type).Elem().Interface())
		}
	}
	// constants shared by both sides: every KPRW_* of the header (TestEveryConstantChecked)
	consts := abiConsts
	for name, v := range consts {
		fmt.Fprintf(&src, "printf(\"%s %%llu\\n\", (unsigned long long)(%s));\n", name, name)
		want[name] = int(asUint64(v))
	}
	src.WriteString("printf(\"KPRW_TRACE_MAGIC_LEN %zu\\n\", sizeof(KPRW_TRACE_MAGIC) - 1);\n")
	want["KPRW_TRACE_MAGIC_LEN"] = len(TraceMagic)
	for i := range TraceMagic {
		fmt.Fprintf(&src, "printf(\"KPRW_TRACE_MAGIC[%d] %%d\\n\", KPRW_TRACE_MAGIC[%d]);\n", i, i)
		want[fmt.Sprintf("KPRW_TRACE_MAGIC[%d]", i)] = int(TraceMagic[i])
	}
	for name, magic := range map[string]string{"KPRW_CHUNK_MAGIC": ChunkMagic, "KPRW_CTLFRAME_MAGIC": CtlFrameMagic, "KPRW_CTLFILE_MAGIC": CtlFileMagic, "KPRW_LIVEFRAME_MAGIC": LiveFrameMagic} {
		fmt.Fprintf(&src, "printf(\"%s_LEN %%zu\\n\", sizeof(%s) - 1);\n", name, name)
		want[name+"_LEN"] = len(magic)
		for i := range magic {
			fmt.Fprintf(&src, "printf(\"%s[%d] %%d\\n\", %s[%d]);\n", name, i, name, i)
			want[fmt.Sprintf("%s[%d]", name, i)] = int(magic[i])
		}
	}
	src.WriteString("printf(\"kretprobe_instance %zu\\n\", sizeof(struct kretprobe_instance));\n")
	src.WriteString("printf(\"kretprobe_instance.data %zu\\n\", offsetof(struct kretprobe_instance, data));\n")
	want["kretprobe_instance"] = KretprobeInstHd
	want["kretprobe_instance.data"] = KretprobeInstHd
	src.WriteString("return 0;}\n")
	for name, v := range map[string]int{"kprw_header": HeaderSize, "kprw_point": PointSize, "kprw_probe": ProbeSize,
		"kprw_event": EventSize, "kprw_probe_state": ProbeStateSize, "pt_regs": PtRegsSize, "kprw_stats": StatsSize,
		"kprw_rec": RecordSize, "kprw_trace_image": TraceImageSize, "kprw_got_slot": GotSlotSize,
		"kprw_sigguard": SigGuardSize, "kprw_trace_image_ext": TraceImageExtSz,
		"kprw_blk": BlockSize, "kprw_crec": CRecSize, "kprw_crec_ext": CRecExtSize, "kprw_chunk": ChunkSize, "kprw_unwind": UnwindSize} {
		if want[name] != v {
			t.Errorf("Go constant size of %s = %d, binary.Size = %d", name, v, want[name])
		}
	}

	if want["kprw_trace_hdr"] > TraceHeaderSize {
		t.Errorf("struct kprw_trace_hdr (%d bytes) does not fit its %d-byte page", want["kprw_trace_hdr"], TraceHeaderSize)
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "layout")
	if out, err := exec.Command("gcc", "-Iinclude", "-o", exe, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		name, val, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		seen++
		if w, ok := want[name]; !ok || uint64(w) != n {
			t.Errorf("%s: C says %d, Go says %d", name, n, w)
		}
	}
	if seen != len(want) {
		t.Errorf("C printed %d values, want %d", seen, len(want))
	}
}

// abiConsts are the Go values of the header's KPRW_* constants, each checked by
// TestABILayout; TestEveryConstantChecked fails when the header gains one that is
// neither here, in handlerConsts, nor in cOnlyDefines.
var abiConsts = map[string]any{
	"KPRW_MAGIC": Magic, "KPRW_VERSION": Version,
	"KPRW_HF_DISABLE_ALL": HFDisableAll, "KPRW_HF_DEBUG": HFDebug, "KPRW_HF_FAST_READ": HFFastRead, "KPRW_HF_LIBRARY": HFLibrary, "KPRW_HF_CLOCK_MONO": HFClockMono, "KPRW_HF_CLOCK_COUNTER": HFClockCounter, "KPRW_HF_IDLE": HFIdle,
	"KPRW_CLOCK_UNSET": ClockUnset, "KPRW_CLOCK_TSC": ClockTSC, "KPRW_CLOCK_MONO": ClockMono, "KPRW_CLOCK_COUNTER": ClockCounter,
	"KPRW_X_SSTEP": XSStep, "KPRW_X_BOOST": XBoost, "KPRW_X_EMULATE": XEmulate, "KPRW_X_OPTIMIZED": XOptimized,
	"KPRW_EMU_NOP": EmuNop, "KPRW_EMU_JMP": EmuJmp, "KPRW_EMU_JCC": EmuJcc, "KPRW_EMU_CALL": EmuCall,
	"KPRW_EMU_RET": EmuRet, "KPRW_EMU_JRCXZ": EmuJrcxz, "KPRW_EMU_LOOP": EmuLoop, "KPRW_EMU_LOOPE": EmuLoope,
	"KPRW_EMU_LOOPNE": EmuLoopne,
	"KPRW_PF_CALL":    PFCall, "KPRW_PF_BRANCH": PFBranch, "KPRW_PF_ADDR32": PFAddr32, "KPRW_PF_PUSHF": PFPushf,
	"KPRW_PF_NOBOOST": PFNoBoost, "KPRW_PF_INNER": PFInner, "KPRW_PF_INT3STEP": PFInt3Step, "KPRW_PF_COUNT": PFCount, "KPRW_DF_PREFILTER": DFPrefilter, "KPRW_DF_INLINEHIST": DFInlineHist, "KPRW_DF_EXIT": DFExit, "KPRW_DF_SPENTRY": DFSpEntry, "KPRW_DF_LIVE": DFLive, "KPRW_DF_REOPT": DFReopt, "KPRW_DF_INLINEREC": DFInlineRec, "KPRW_INLINEREC_MAX": InlineRecMax, "KPRW_TRACE_NOOPT": TraceNoOpt, "KPRW_TRACE_DISARMED": TraceDisarmed,
	"KPRW_T_KPROBE": TKprobe, "KPRW_T_KRETPROBE": TKretprobe, "KPRW_T_VERIFY": TVerify,
	"KPRW_F_DISABLED": FDisabled, "KPRW_F_TRACE": FTrace,
	"KPRW_EF_DISABLED": EFDisabled, "KPRW_EF_RETPROBE": EFRetprobe,
	"KPRW_EF_SOFT": EFSoftDisabled, "KPRW_EF_TRIGGERS": EFTriggers, "KPRW_EF_LIVE": EFLive, "KPRW_EF_SPARE": EFSpare, "KPRW_LIVE_MAX": LiveMax, "KPRW_LE_RETURN": LEReturn, "KPRW_LE_POINT": LEPoint, "KPRW_LE_STATE": LEState, "KPRW_LE_CTL": LECtl, "KPRW_TRIG_LIVE_TARGET": TrigLiveTarget, "KPRW_LS_NONE": LSNone, "KPRW_LS_INT3": LSInt3, "KPRW_LS_JUMP": LSJump, "KPRW_LS_PENDING": LSPending, "KPRW_LS_REFUSED": LSRefused, "KPRW_LS_OFF": LSOff, "KPRW_FREE_SLOT": FreeSlot, "KPRW_MAX_FREE": MaxFree, "KPRW_SITE_SLOT": SiteSlot, "KPRW_SITE_TARGET": SiteTarget, "KPRW_CTL_SOFT_DISABLED": CtlEvSoftDisabled,
	"KPRW_CTL_SPARE": CtlSpare, "KPRW_TIF_SPARE": TIFSpare, "KPRW_TIF_USER": TIFUser, "KPRW_UR_KPROBE": URKprobe, "KPRW_UR_KRETPROBE": URKretprobe, "KPRW_UR_JPROBE": URJprobe, "KPRW_UR_TYPE": URType, "KPRW_UR_DISABLED": URDisabled, "KPRW_UR_FREE": URFree, "KPRW_CTLFRAME_MAX": CtlFrameMax,
	"KPRW_CE_FILTER": CEFilter, "KPRW_CE_TRIG": CETrig, "KPRW_CE_ENABLE": CEEnable, "KPRW_CTL_SYNTH": CtlSynth, "KPRW_CTL_MAX_SYNTH": CtlMaxSynth, "KPRW_CE_DISABLE": CEDisable,

	"KPRW_NO_EVENT": NoEvent, "KPRW_NO_PROBE": NoProbe,
	"KPRW_MAX_POINTS": MaxPoints, "KPRW_MAX_PROBES_PER_POINT": MaxProbesPerPoint, "KPRW_MAX_DATA_SIZE": MaxDataSize,
	"KPRW_MAX_MAXACTIVE": MaxMaxActive, "KPRW_DEFAULT_TRACE_SIZE": DefaultTraceSize,
	"KPRW_MAX_REC_DATA": MaxRecordData, "KPRW_TRACE_VERSION": TraceVersion, "KPRW_TRACE_VERSION_DIRECT": TraceVersionDirect, "KPRW_TRACE_VERSION_SWGEN": TraceVersionSwGen, "KPRW_TRACE_SWGEN_IMAGE": TraceSwGenImage, "KPRW_TRACE_HDR_SIZE": TraceHeaderSize,
	"KPRW_TRACE_MAX_IMAGES": TraceMaxImages, "KPRW_TRACE_COUNTERS_SIZE": TraceCountersSize,
	"KPRW_REC_COMMIT": RecCommit, "KPRW_REC_DISCARD": RecDiscard, "KPRW_REC_KPROBE": RecKprobe, "KPRW_REC_KRETPROBE": RecKretprobe,
	"KPRW_REC_VIOLATION": RecViolation, "KPRW_VIOLATION_RECORDS": ViolationRecords,
	"KPRW_SF_DISABLED":  ProbeStateDisabled,
	"KPRW_SG_SIGACTION": SGSigaction, "KPRW_SG_SIGNAL": SGSignal, "KPRW_SG_SYSV_SIGNAL": SGSysvSignal,
	"KPRW_SG_SIGSET": SGSigset, "KPRW_SG_SIGHOLD": SGSighold, "KPRW_SG_SIGIGNORE": SGSigignore,
	"KPRW_SG_SIGPROCMASK": SGSigprocmask, "KPRW_SG_PTHREAD_SIGMASK": SGPthreadSigmask,
	"KPRW_SG_SIGSUSPEND": SGSigsuspend, "KPRW_SG_PPOLL": SGPpoll, "KPRW_SG_PSELECT": SGPselect,
	"KPRW_SG_EPOLL_PWAIT": SGEpollPwait, "KPRW_SG_SYSCALL": SGSyscall, "KPRW_SG_PPOLL_CHK": SGPpollChk,
	"KPRW_SG_EPOLL_PWAIT2": SGEpollPwait2, "KPRW_SG_BLOCK_ALL_SIGS": SGBlockAllSigs, "KPRW_SG_BLOCK_APP_SIGS": SGBlockAppSigs, "KPRW_SG_FORK": SGFork,
	"KPRW_SG_GO_SIGACTION": SGGoSigaction, "KPRW_SG_GO_SIGPROCMASK": SGGoSigprocmask, "KPRW_SG_MAX": SGMax, "KPRW_GS_ENTRY": GSEntry,
	"KPRW_TIF_EXT":   TIFExt,
	"KPRW_BLK_MAGIC": BlockMagic, "KPRW_BLK_ZEROED": BlockZeroed, "KPRW_CREC_LEN": CRecLen, "KPRW_CREC_RET": CRecRet, "KPRW_CREC_EXT": CRecExt,
	"KPRW_CREC_HIT": CRecHit, "KPRW_CREC_COMMITTED": CRecCommitted, "KPRW_CREC_DISCARDED": CRecDiscarded,
	"KPRW_RING_OVERWRITE": RingOverwrite, "KPRW_RING_DONE": RingDone, "KPRW_TRACE_UNRESERVED": TraceUnreserved,
	"KPRW_RSEQ_MAXCPU": RseqMaxCPU, "KPRW_COUNT_SHORT_N": CountShortN,
	"KPRW_REC_STACK": RecStack, "KPRW_STACK_MAX": StackMax, "KPRW_REC_SYNTH": RecSynth,
	"KPRW_UW_UNDEF": UWUndef, "KPRW_UW_SP": UWSP, "KPRW_UW_BP": UWBP, "KPRW_UW_BPLOST": UWBPLost, "KPRW_UW_BLOCK": UnwindBlock,
}

// cOnlyDefines are KPRW_* macros with no Go value, and why.
var cOnlyDefines = map[string]string{
	"KPRW_U":               "a literal-suffix helper for the assembler and C",
	"KPRW_STR":             "stringification helper",
	"KPRW_STR_":            "stringification helper",
	"KPRW_PT_REGS_DEFINED": "include guard shared by kprewrite.h and kprewrite_abi.h",
	"KPRW_KPROBE_JPROBE":   "a struct kprobe flag between kprewrite.h's register_jprobe and the runtime, which publishes it as KPRW_UR_JPROBE",
	"KPRW_RI_DEFINED":      "include guard shared by kprewrite.h and kprewrite_abi.h",
	"KPRW_TRACE_MAGIC":     "a string: checked byte by byte by TestABILayout",
	"KPRW_CHUNK_MAGIC":     "a string: checked byte by byte by TestABILayout",
	"KPRW_CTLFRAME_MAGIC":  "a string: checked byte by byte by TestABILayout",
	"KPRW_LIVEFRAME_MAGIC": "a string: checked byte by byte by TestABILayout",
	"KPRW_CTLFILE_MAGIC":   "a string: checked byte by byte by TestABILayout",
}

// TestEveryConstantChecked: every KPRW_* macro the headers define is checked against
// Go, or says why it has no Go value; the list used to be kept by hand and missed 16.
func TestEveryConstantChecked(t *testing.T) {
	re := regexp.MustCompile(`(?m)^\s*#\s*define\s+(KPRW_[A-Za-z0-9_]+)`)
	seen := 0
	for _, h := range []string{"include/kprewrite_abi.h", "include/kprewrite.h"} {
		b, err := os.ReadFile(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			name := m[1]
			seen++
			_, inABI := abiConsts[name]
			_, inHandlers := handlerConsts[name]
			_, cOnly := cOnlyDefines[name]
			if !inABI && !inHandlers && !cOnly {
				t.Errorf("%s: %s has no Go value checked against it (add it to abiConsts, or to cOnlyDefines with the reason)", h, name)
			}
		}
	}
	if seen < len(abiConsts) {
		t.Errorf("found %d KPRW_ defines, fewer than the %d checked: the pattern is broken", seen, len(abiConsts))
	}
}

// asUint64 converts an integer constant of any of the ABI's types.
func asUint64(v any) uint64 {
	rv := reflect.ValueOf(v)
	if rv.CanInt() {
		return uint64(rv.Int())
	}
	return rv.Uint()
}
