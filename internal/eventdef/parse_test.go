package eventdef

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Probe points in the table: @@E is a function entry, @@O a site inside a
// function. Both are 16 bytes long, as is the kernel site they are replaced
// with for the oracle, so caret positions compare directly.
const (
	siteEntry   = "kpw_site_sixteen"
	siteInside  = "kpw_site_sixt+16"
	siteKernelE = "/bin/true:0x1010"
	siteKernelO = "/bin/true:0x1000"
)

func ourDef(d string) string {
	return strings.NewReplacer("@@E", siteEntry, "@@O", siteInside).Replace(d)
}

func kernelDef(d string) string {
	return strings.NewReplacer("@@E", siteKernelE, "@@O", siteKernelO).Replace(d)
}

// parseCase is one definition and the result expected from Parse. When
// kernel is true the kernel's uprobe tracer (6.18) gives the same result
// (message and caret position, or acceptance); this was checked by hand
// and TestParseMatchesKernel re-checks it whenever it runs as root. When
// kernel is false, kprewrite differs on purpose and note says how.
type parseCase struct {
	def    string
	code   ErrorCode // 0: accepted
	pos    int
	kernel bool
	note   string
}

func pa(arg string) string { return "p:kpwtest/x @@O " + arg }
func ra(arg string) string { return "r:kpwtest/x @@E " + arg }

var parseCases = []parseCase{
	// Group and event names.
	{"p:kpwtest/x @@O", 0, 0, true, ""},
	{"p:kpwtest/ @@O", 0, 0, true, "event name generated"},
	{"p:/x @@O", ErrNoGroupName, 2, true, ""},
	{"p:kpwtest/1x @@O", ErrBadEventName, 10, true, ""},
	{"p:kpw-test/x @@O", 0, 0, true, ""},
	{"p:kpwtest/x-y @@O", ErrBadEventName, 10, true, ""},
	{"p:kpw.test/x @@O", ErrBadGroupName, 2, true, ""},
	{"p:kpwtest.x @@O", 0, 0, true, "'.' separates group and event"},
	{"p:kpwtest/x.y @@O", ErrBadEventName, 10, true, ""},
	{"p: @@O", ErrNoEventName, 2, true, ""},
	{"p:x/y/z @@O", ErrBadEventName, 4, true, ""},
	{"p:kpwtest/" + strings.Repeat("a", 63) + " @@O", 0, 0, true, ""},
	{"p:kpwtest/" + strings.Repeat("a", 64) + " @@O", ErrEventTooLong, 10, true, ""},
	{"p:" + strings.Repeat("a", 64) + "/x @@O", ErrGroupTooLong, 2, true, ""},
	{"p:_kpw/_x @@O", 0, 0, true, ""},
	{"p:1kpw/x @@O", ErrBadGroupName, 2, true, ""},
	{"p:-kpw/x @@O", 0, 0, true, "groups may hold '-'"},
	{"p:--9/x @@O", 0, 0, true, ""},
	{"p:kpw+/x @@O", ErrBadGroupName, 2, true, ""},
	{"p:kpwtest/x.y/z @@O", ErrBadEventName, 10, true, ""},
	{"p:kpwtest. @@O", 0, 0, true, ""},
	{"p:kpwtest.x/y @@O", ErrBadGroupName, 2, true, ""},
	{"p:kpwtest/x:y @@O", ErrBadEventName, 10, true, ""},
	{"p:k:x @@O", ErrBadEventName, 2, true, ""},
	{"p:KPW/X @@O", 0, 0, true, ""},
	{"p:kpwtest/9 @@O", ErrBadEventName, 10, true, ""},
	{"p:kpwtest/-a @@O", ErrBadEventName, 10, true, ""},

	// Probe points.
	{"p:kpwtest/x @@E%ret", ErrBadAddrSuffix, 28, true, ""},
	{"p:kpwtest/x @@E%return", 0, 0, true, ""},
	{"r:kpwtest/x @@E", 0, 0, true, ""},
	{"p:kpwtest/x 0x401136", 0, 0, false, "an address"},
	{"p:kpwtest/x func+0x10", 0, 0, false, "symbol+offset"},
	{"p:kpwtest/x func+x", ErrBadProbeAddr, 12, false, "kprobe message"},
	{"p:kpwtest/x func-4", ErrBadProbeAddr, 12, false, "kprobe message"},
	{"r:kpwtest/x func+4", ErrBadRetprobe, 12, false, "kprobe message"},
	{"p:kpwtest/x func+4%return", ErrBadRetprobe, 12, false, "kprobe message"},
	{"p:kpwtest/x 1func", ErrBadProbeAddr, 12, false, "symbols do not start with a digit"},
	{"p:kpwtest/x /bin/true:0x10", 0, 0, false, "PATH:OFFSET, as uprobe_events"},
	{"p:kpwtest/x /bin/true:0x10%return", 0, 0, false, "PATH:OFFSET%return"},
	{"p:kpwtest/x libc.so.6:malloc+4", 0, 0, false, "LIB:SYM+OFFS"},
	{"r:kpwtest/x libc.so.6:malloc", 0, 0, false, "LIB:SYM"},
	{"r:kpwtest/x libc.so.6:malloc+4", ErrBadRetprobe, 22, false, ""},
	{"p:kpwtest/x libc.so.6:1x", ErrBadProbeAddr, 22, false, ""},
	{"p:kpwtest/x libc.so.6:", ErrFileSite, 12, false, ""},
	{"p:kpwtest/x :malloc", ErrFileSite, 12, false, ""},
	{"r16:kpwtest/x @@E", 0, 0, false, "maxactive, as kprobes"},
	{"p16:kpwtest/x @@E", ErrBadMaxactType, 1, false, "kprobe message"},
	{"r0:kpwtest/x @@E", ErrBadMaxact, 1, false, "kprobe message"},
	{"r4097:kpwtest/x @@E", ErrMaxactTooBig, 1, false, "kprobe message"},
	{"rx:kpwtest/x @@E", ErrBadCommand, 1, false, "kprobes ignore the junk"},
	{"q:kpwtest/x @@E", ErrBadCommand, 0, false, ""},
	{"p:kpwtest/x", ErrNoProbePoint, 12, false, "kernel: EINVAL, no log"},

	// Registers.
	{pa("%ax"), 0, 0, true, ""},
	{pa("%bx"), 0, 0, true, ""},
	{pa("%cx"), 0, 0, true, ""},
	{pa("%dx"), 0, 0, true, ""},
	{pa("%si"), 0, 0, true, ""},
	{pa("%di"), 0, 0, true, ""},
	{pa("%bp"), 0, 0, true, ""},
	{pa("%sp"), 0, 0, true, ""},
	{pa("%ip"), 0, 0, true, ""},
	{pa("%flags"), 0, 0, true, ""},
	{pa("%r8"), 0, 0, true, ""},
	{pa("%r9"), 0, 0, true, ""},
	{pa("%r10"), 0, 0, true, ""},
	{pa("%r11"), 0, 0, true, ""},
	{pa("%r12"), 0, 0, true, ""},
	{pa("%r13"), 0, 0, true, ""},
	{pa("%r14"), 0, 0, true, ""},
	{pa("%r15"), 0, 0, true, ""},
	{pa("%orig_ax"), 0, 0, true, ""},
	{pa("%cs"), 0, 0, true, ""},
	{pa("%ss"), 0, 0, true, ""},
	{pa("%ds"), ErrBadRegName, 29, true, "32-bit only"},
	{pa("%es"), ErrBadRegName, 29, true, ""},
	{pa("%fs"), ErrBadRegName, 29, true, ""},
	{pa("%gs"), ErrBadRegName, 29, true, ""},
	{pa("%rax"), ErrBadRegName, 29, true, ""},
	{pa("%eax"), ErrBadRegName, 29, true, ""},
	{pa("%AX"), ErrBadRegName, 29, true, ""},
	{pa("%fs_base"), ErrBadRegName, 29, true, ""},
	{pa("%al"), ErrBadRegName, 29, true, ""},
	{pa("%r16"), ErrBadRegName, 29, true, ""},
	{pa("%r8d"), ErrBadRegName, 29, true, ""},
	{pa("%"), ErrBadRegName, 29, true, ""},
	{pa("%di%si"), ErrBadRegName, 29, true, ""},
	{pa("%foo"), ErrBadRegName, 29, true, ""},

	// $-variables.
	{pa("$stack"), 0, 0, true, ""},
	{pa("$stack0"), 0, 0, true, ""},
	{pa("$stack2048"), 0, 0, true, ""},
	{pa("$stack2049"), ErrBadStackNum, 29, false, "kprobes' PARAM_MAX_STACK; the uprobe tracer takes any"},
	{pa("$stack99999"), ErrBadStackNum, 29, false, "kprobes' PARAM_MAX_STACK; the uprobe tracer takes any"},
	{pa("$stack99999999999999999999999"), ErrBadVar, 29, true, ""},
	{pa("$stack4294967296"), ErrBadStackNum, 29, false, "the uprobe tracer truncates to 32 bits"},
	{pa("$stackx"), ErrBadVar, 29, true, ""},
	{pa("$stack0x1"), ErrBadVar, 29, true, ""},
	{pa("$retval"), ErrRetvalOnProbe, 29, true, ""},
	{pa("$retval:string"), ErrRetvalOnProbe, 29, true, ""},
	{ra("$retval"), 0, 0, true, ""},
	{ra("$retvalfoo"), 0, 0, true, "any $retval... prefix"},
	{ra("$RETVAL"), ErrBadVar, 29, true, ""},
	{ra("$retval:string"), ErrBadString, 37, false, "not checked"},
	{pa("$comm"), 0, 0, true, ""},
	{pa("$COMM"), 0, 0, true, ""},
	{pa("$Comm"), ErrBadVar, 29, true, ""},
	{pa("$comm:string"), 0, 0, true, ""},
	{pa("$comm:u32"), ErrNeedStringType, 35, true, ""},
	{pa("$comm:string[2]"), ErrNeedStringType, 35, true, ""},
	{pa("$comm:string[1]"), ErrNeedStringType, 35, true, ""},
	{pa("$comm:ustring"), ErrNeedStringType, 35, true, ""},
	{pa("$arg1"), ErrNofentryArgs, 29, true, ""},
	{pa("$arg2048"), ErrNofentryArgs, 29, true, ""},
	{pa("$arg2049"), ErrBadArgNum, 29, true, ""},
	{pa("$arg4097"), ErrBadArgNum, 29, true, ""},
	{pa("$arg0"), ErrBadArgNum, 29, true, ""},
	{pa("$arg"), ErrBadVar, 29, true, ""},
	{pa("$arg*"), ErrBadVar, 29, true, ""},
	{ra("$arg*"), ErrBadVar, 29, true, ""},
	{pa("$arg1x"), ErrBadVar, 29, true, ""},
	{pa("$argx"), ErrBadVar, 29, true, ""},
	{"p:kpwtest/x @@E $arg1 $arg7", 0, 0, false, "uprobes refuse $argN; kprobes take it at entries"},
	{"p:kpwtest/x 0x401136 $arg1", ErrNofentryArgs, 21, false, "an address is not known as an entry"},
	{ra("$arg1"), 0, 0, false, "uprobes refuse $argN; kprobes keep it from the entry"},
	{pa("$foo"), ErrBadVar, 29, true, ""},
	{pa("$"), ErrBadVar, 29, true, ""},
	{pa("foo"), ErrNosupBTFArg, 29, true, ""},
	{pa("foo=bar"), ErrNosupBTFArg, 33, true, ""},
	{pa("_x"), ErrNosupBTFArg, 29, true, ""},
	{pa("5"), ErrBadFetchArg, 29, true, ""},

	// Memory.
	{pa("@0x1000"), 0, 0, true, ""},
	{pa("@123"), 0, 0, true, ""},
	{pa("@0x10zz"), ErrBadMemAddr, 29, true, ""},
	{pa("@0x1111111111111111"), 0, 0, true, ""},
	{pa("@0x11111111111111111"), ErrBadMemAddr, 29, true, ""},
	{pa("@foo"), 0, 0, false, "uprobes: Symbol is not available with uprobe"},
	{pa("@foo+8"), 0, 0, false, ""},
	{pa("@foo-8:u32"), 0, 0, false, ""},
	{pa("@foo+x"), ErrBadMemAddr, 29, false, ""},
	{pa("@-5"), ErrBadMemAddr, 29, false, "uprobes: Symbol is not available with uprobe"},
	{pa("@"), ErrBadMemAddr, 29, false, "uprobes: Symbol is not available with uprobe"},
	{pa("@+0x10"), ErrFileOnKprobe, 29, false, "uprobes take file offsets"},

	// Dereferences.
	{pa("+0(%di)"), 0, 0, true, ""},
	{pa("-8(%sp)"), 0, 0, true, ""},
	{pa("+u4(%di)"), 0, 0, true, ""},
	{pa("-u4(%di)"), 0, 0, true, ""},
	{pa("u4(%di)"), ErrNosupBTFArg, 29, true, ""},
	{pa("+4%di"), ErrDerefNeedBrace, 29, true, ""},
	{pa("+x(%di)"), ErrBadDerefOffs, 29, true, ""},
	{pa("+(%di)"), ErrBadDerefOffs, 29, true, ""},
	{pa("+0(%di"), ErrDerefOpenBrace, 35, true, ""},
	{pa("+0(%di))"), ErrBadRegName, 32, true, ""},
	{pa("+0(+8(%di))"), 0, 0, true, ""},
	{pa("+0($comm)"), ErrCommCantDeref, 32, true, ""},
	{pa(`+0(\"ab")`), ErrCommCantDeref, 32, true, ""},
	{pa("+0($stack)"), 0, 0, true, ""},
	{pa("+0()"), ErrBadFetchArg, 32, true, ""},
	{pa("+0x10(%di)"), 0, 0, true, ""},
	{pa("+010(%di)"), 0, 0, true, ""},
	{pa("++4(%di)"), 0, 0, true, ""},
	{pa("+-4(%di)"), 0, 0, true, ""},
	{pa("+0(%xx)"), ErrBadRegName, 32, true, ""},
	{pa("+0(+0(%xx))"), ErrBadRegName, 35, true, ""},
	{pa("+u4(%xx)"), ErrBadRegName, 32, true, "the kernel's caret is one early after +u"},
	{pa("-u8(%xx)"), ErrBadRegName, 32, true, ""},
	{pa("+u0(+u0(%xx))"), ErrBadRegName, 35, true, ""},
	{pa("+0(%di)xyz"), 0, 0, true, "text after the last ')' is ignored"},
	{pa(nest(14)), 0, 0, true, ""},
	{pa(nest(15)), ErrTooManyOps, 32, true, ""},
	{pa(nest(14) + ":string"), ErrArgTooLong, 29, true, ""},
	{pa("@1" + strings.Repeat(")", 0)), 0, 0, true, ""},

	// Immediates.
	{pa(`\123`), 0, 0, true, ""},
	{pa(`\-1`), 0, 0, true, ""},
	{pa(`\+5`), 0, 0, true, ""},
	{pa(`\0x10`), 0, 0, true, ""},
	{pa(`\abc`), ErrBadImm, 30, true, ""},
	{pa(`\`), ErrBadImm, 30, true, ""},
	{pa(`\12z`), ErrBadImm, 30, true, ""},
	{pa(`\"abc"`), 0, 0, true, ""},
	{pa(`\"abc`), ErrImmstrNoClose, 34, true, ""},
	{pa(`\"abc":string`), 0, 0, true, ""},
	{pa(`\"abc":u8`), ErrNeedStringType, 36, true, ""},
	{pa(`\""`), 0, 0, true, ""},
	{pa(`\"`), ErrImmstrNoClose, 31, true, ""},
	{pa(`\"ab":string[2]`), ErrNeedStringType, 35, true, ""},

	// Types.
	{pa(`\123:string`), 0, 0, true, ""},
	{pa(`\123:ustring`), 0, 0, true, ""},
	{pa(`\123:string[2]`), 0, 0, true, "Compile refuses it"},
	{pa(`\123:u8[2]`), ErrBadString, 34, true, ""},
	{pa("@0x1000:string"), 0, 0, true, ""},
	{pa("@0x1000:u8[4]"), 0, 0, true, ""},
	{pa("@5:string[2]"), 0, 0, true, ""},
	{pa("@5:ustring[2]"), 0, 0, true, ""},
	{pa("$stack:string"), ErrBadString, 36, true, ""},
	{pa("$stack0:string"), ErrBadString, 37, true, ""},
	{pa("$stack:u8[2]"), ErrBadString, 36, true, ""},
	{pa("%di:string"), ErrBadString, 33, true, ""},
	{pa("%di:ustring"), ErrBadString, 33, true, ""},
	{pa("%di:u8[2]"), ErrBadString, 33, true, ""},
	{pa("+0(%di):string[3]"), 0, 0, true, ""},
	{pa("+0(%di):ustring[3]"), 0, 0, true, ""},
	{pa("+0(%di):string[1]"), 0, 0, true, ""},
	{pa("+u0(%di):u8[3]"), ErrBadString, 41, true, "the kernel refuses arrays after +u"},
	{pa("+u0(%di):string"), 0, 0, true, ""},
	{pa("+u0(%di):string[2]"), 0, 0, true, ""},
	{pa("+0($stack):string"), 0, 0, true, ""},
	{pa("+0(@5):string"), 0, 0, true, ""},
	{pa("%di:symbol"), 0, 0, false, "uprobes: Unknown type is specified"},
	{pa("%di:symstr"), 0, 0, false, "uprobes: Unknown type is specified"},
	{pa("+0(%di):symbol[2]"), 0, 0, false, ""},
	{pa("%di:symbol[2]"), ErrBadString, 33, false, "kprobe rule"},
	{pa("+u0(%di):symstr"), ErrBadSymstring, 41, false, "kprobe rule"},
	{pa(`\1:symstr`), ErrBadSymstring, 32, false, "kprobe rule"},
	{pa("%di:foo"), ErrBadType, 33, true, ""},
	{pa("%di:"), ErrBadType, 33, true, ""},
	{pa("%di:u64"), 0, 0, true, ""},
	{pa("%di:U64"), ErrBadType, 33, true, ""},
	{pa("%di:x8:x8"), ErrBadType, 33, true, ""},
	{pa("%di:char"), 0, 0, true, ""},
	{pa("%di:%pd"), ErrBadType, 33, true, ""},
	{pa("%di:%pD"), ErrBadType, 33, true, ""},
	{pa("%di:s128"), ErrBadType, 33, true, ""},
	{pa("%di:x"), ErrBadType, 33, true, ""},
	{pa("%di:u"), ErrBadType, 33, true, ""},
	{pa("%di:u8 %si:s8"), 0, 0, true, ""},
	{pa("+0(%di):string:x"), ErrBadType, 37, true, ""},

	// Bitfields.
	{pa("%di:b4@3/32"), 0, 0, true, ""},
	{pa("%di:b4@3/31"), ErrBadType, 33, true, ""},
	{pa("%di:b0@3/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@29/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@28/32"), 0, 0, true, ""},
	{pa("%di:b4/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@3"), ErrBadType, 33, true, ""},
	{pa("%di:bx@3/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@3/0x20"), 0, 0, true, ""},
	{pa("%di:b4@3/32x"), ErrBadType, 33, true, ""},
	{pa("%di:b0x4@0x3/32"), 0, 0, true, ""},
	{pa("%di:b4@3/64"), 0, 0, true, ""},
	{pa("%di:b64@0/64"), 0, 0, true, ""},
	{pa("%di:b65@0/64"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@3/8"), 0, 0, true, ""},
	{pa("%di:b4@3/16"), 0, 0, true, ""},
	{pa("%di:b4x@3/16"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@3x/16"), ErrBadBitfield, 33, true, ""},
	{pa("%di:bar/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b-1@0/32"), ErrBadBitfield, 33, true, ""},
	{pa("%di:b4@3/32:x"), ErrBadType, 33, true, ""},
	{pa("+0(%di):b4@3/32[2]"), 0, 0, true, ""},
	{pa("%di:b4@3/32[2]"), ErrBadString, 33, true, ""},

	// Arrays.
	{pa("+0(%di):u8[64]"), 0, 0, true, ""},
	{pa("+0(%di):u8[65]"), ErrArrayTooBig, 40, true, ""},
	{pa("+0(%di):u8[0]"), ErrBadArrayNum, 40, true, ""},
	{pa("+0(%di):u8[x]"), ErrBadArrayNum, 40, true, ""},
	{pa("+0(%di):u8[]"), ErrBadArrayNum, 40, true, ""},
	{pa("+0(%di):u8[-1]"), ErrBadArrayNum, 40, true, ""},
	{pa("+0(%di):u8[+2]"), 0, 0, true, ""},
	{pa("+0(%di):u8[0x10]"), 0, 0, true, ""},
	{pa("+0(%di):u8[2"), ErrArrayNoClose, 41, true, ""},
	{pa("+0(%di):u8[2]x"), ErrBadArraySuffix, 42, true, ""},
	{pa("+0(%di):u8[2][3]"), ErrBadArraySuffix, 42, true, ""},
	{pa("+0(%di):u8[2]:u8"), ErrBadArraySuffix, 42, true, ""},
	{pa("+0(%di):u8[2]]"), ErrBadArraySuffix, 42, true, ""},
	{pa("+0(%di):[2]"), ErrBadType, 37, true, ""},
	{pa("+0(%di)[2]"), 0, 0, true, "text after the last ')' is ignored"},
	{pa("+0(%di):char[4]"), 0, 0, true, ""},
	{pa("+0(%di):b0@3/32"), ErrBadBitfield, 40, true, "measured from inside the '('"},
	{pa("x=+0(%di):b0@3/32"), ErrBadBitfield, 42, true, ""},
	{pa("-8(%di):u8[65]"), ErrArrayTooBig, 40, true, ""},
	{pa("+u0(+u0(%di)):u8[3]"), ErrBadString, 46, true, ""},
	{pa("+0(%di):b4@3/32[2]x"), ErrBadArraySuffix, 47, true, ""},
	{pa("+0(+0(%di)):string:x"), ErrBadType, 41, true, ""},

	// Argument names and lengths.
	{pa("a=%di"), 0, 0, true, ""},
	{pa("=%di"), ErrNoArgName, 29, true, ""},
	{pa("1a=%di"), ErrBadArgName, 29, true, ""},
	{pa("a-b=%di"), ErrBadArgName, 29, true, ""},
	{pa(strings.Repeat("a", 32) + "=%di"), 0, 0, true, ""},
	{pa(strings.Repeat("a", 33) + "=%di"), ErrArgNameTooLong, 29, true, ""},
	{pa("a=%di a=%si"), ErrUsedArgName, 35, true, ""},
	{pa("arg2=%di %si"), ErrUsedArgName, 38, true, ""},
	{pa("%si arg1=%di"), ErrUsedArgName, 33, true, ""},
	{pa("arg2=%di b"), ErrUsedArgName, 38, true, "unnamed arguments are argN"},
	{pa("a=%di a"), ErrNosupBTFArg, 35, true, ""},
	{pa("a=%di a:u32"), ErrNosupBTFArg, 35, true, ""},
	{pa("common_pid=%di"), ErrUsedArgName, 29, true, ""},
	{pa("common_tgid=%di"), ErrUsedArgName, 29, true, ""},
	{pa("common_type=%di"), ErrUsedArgName, 29, true, ""},
	{pa("__probe_ip=%di"), ErrUsedArgName, 29, true, ""},
	{pa("__probe_ret_ip=%di"), ErrUsedArgName, 29, true, ""},
	{pa("__probe_func=%di"), ErrUsedArgName, 29, true, ""},
	{pa("a="), ErrNoArgBody, 31, true, ""},
	{pa("a==%di"), ErrBadFetchArg, 31, true, ""},
	{pa("a=b=%di"), ErrNosupBTFArg, 31, true, ""},
	{pa("x=@0x" + strings.Repeat("1", 61)), ErrArgTooLong, 31, true, ""},
	{pa("x=@0x" + strings.Repeat("1", 60)), ErrBadMemAddr, 31, true, ""},
	{pa(strings.TrimSpace(strings.Repeat(" %di", 128))), 0, 0, true, ""},
	{pa(strings.TrimSpace(strings.Repeat(" %di", 129))), ErrTooManyArgs, 29, true, ""},

	// Deletion.
	{"-:kpwtest/x", 0, 0, false, "parsed only"},
	{"-:", ErrNoEventName, 2, false, "kernel: EINVAL, no log"},
}

// nest returns %di dereferenced n times: +0(+0(...(%di)...)).
func nest(n int) string {
	return strings.Repeat("+0(", n) + "%di" + strings.Repeat(")", n)
}

func TestParseErrors(t *testing.T) {
	for _, c := range parseCases {
		def := ourDef(c.def)
		p, err := Parse(def)
		if c.code == 0 {
			if err != nil {
				t.Errorf("Parse(%q): %v", def, err)
			} else if p.String() == "" {
				t.Errorf("Parse(%q): empty String()", def)
			}
			continue
		}
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want %q at %d", def, err, c.code.Error(), c.pos)
			continue
		}
		if pe.Code != c.code || pe.Pos != c.pos || !errors.Is(err, c.code) {
			t.Errorf("Parse(%q): got %q at %d, want %q at %d", def, pe.Code.Error(), pe.Pos, c.code.Error(), c.pos)
		}
	}
}

// TestParseMatchesKernel replays every case marked kernel on the kernel's
// uprobe tracer and checks that it accepts or refuses it the same way.
func TestParseMatchesKernel(t *testing.T) {
	needOracle(t)
	defer removeOracleEvents(t)
	n := 0
	for _, c := range parseCases {
		if !c.kernel {
			continue
		}
		def := kernelDef(c.def)
		cmd := strings.Join(strings.Fields(def), " ")
		err := writeUprobeEvents(def)
		removeOracleEvents(t)
		n++
		if c.code == 0 {
			if err != nil {
				t.Errorf("kernel refused %q (%v); the table says it accepts it", def, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("kernel accepted %q; the table says %q", def, c.code.Error())
			continue
		}
		msg, pos, ok := kernelError(cmd)
		if !ok {
			t.Errorf("kernel refused %q without an error_log entry", def)
			continue
		}
		if msg != c.code.Error() || pos != c.pos {
			t.Errorf("kernel: %q gives %q at %d; the table says %q at %d", def, msg, pos, c.code.Error(), c.pos)
		}
	}
	t.Logf("%d definitions replayed on the kernel", n)
}

func TestParseFields(t *testing.T) {
	p, err := Parse("p:grp/ev func+4 a=%di s=+0(%si):string  +8(%dx):u32[4] b=+4(%cx):b4@3/32")
	if err != nil {
		t.Fatal(err)
	}
	if p.Group != "grp" || p.Event != "ev" || p.Symbol != "func" || p.Offset != 4 || p.Return || p.FuncEntry() {
		t.Errorf("probe fields: %+v", p)
	}
	want := []struct {
		name, typ string
		kind      TypeKind
		size, cnt int
	}{
		{"a", "x64", KindHex, 8, 0},
		{"s", "string", KindString, 4, 0},
		{"arg3", "u32", KindUnsigned, 4, 4},
		{"b", "u32", KindUnsigned, 4, 0},
	}
	for i, w := range want {
		a := p.Args[i]
		if a.Name != w.name || a.Type != w.typ || a.Kind != w.kind || a.Size != w.size || a.Count != w.cnt {
			t.Errorf("arg %d: %+v, want %+v", i, a, w)
		}
	}
	if bf := p.Args[3].Bitfield; bf == nil || *bf != (Bitfield{Width: 4, Offset: 3, Container: 32}) {
		t.Errorf("bitfield: %+v", bf)
	}
	if got, want := p.String(), "p:grp/ev func+4 a=%di s=+0(%si):string arg3=+8(%dx):u32[4] b=+4(%cx):b4@3/32"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	for _, c := range []struct{ def, group, event string }{
		{"p main", "uprobes", "p_main_0"},
		{"r main", "uprobes", "r_main_0"},
		{"p main%return", "uprobes", "r_main_0"},
		{"p:g/ foo.cold+0x10", "g", "p_foo_cold_16"},
		{"p 0x401136", "uprobes", "p_0x401136"},
		{"r8 0x401136", "uprobes", "r_0x401136"},
		{"p " + strings.Repeat("s", 80), "uprobes", "p_" + strings.Repeat("s", 61)},
		{"p:ev _ZN3foo3barEv", "uprobes", "ev"},
	} {
		p, err := Parse(c.def)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.def, err)
			continue
		}
		if p.Group != c.group || p.Event != c.event {
			t.Errorf("Parse(%q): %s/%s, want %s/%s", c.def, p.Group, p.Event, c.group, c.event)
		}
	}
	p, err = Parse("r12:ev main $retval")
	if err != nil || p.MaxActive != 12 || !p.Return || p.String() != "r12:uprobes/ev main+0 arg1=$retval" {
		t.Errorf("maxactive: %v %+v", err, p)
	}
	p, err = Parse("p:ev main  %di\t%si")
	if err != nil || p.UprobeDefinition("/bin/x", 0x1139) != "p:uprobes/ev /bin/x:0x1139 arg1=%di arg2=%si" {
		t.Errorf("UprobeDefinition: %v %q", err, p.UprobeDefinition("/bin/x", 0x1139))
	}
	p, err = Parse("-:g/ev")
	if err != nil || !p.Delete || p.Group != "g" || p.Event != "ev" || p.String() != "-:g/ev" {
		t.Errorf("delete: %v %+v", err, p)
	}
}

func TestCaret(t *testing.T) {
	_, err := Parse("p:kpwtest/x main %foo")
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatal(err)
	}
	want := "error: Invalid register name\n  Command: p:kpwtest/x main %foo\n" + strings.Repeat(" ", 11+17) + "^\n"
	if pe.Caret() != want {
		t.Errorf("Caret:\n%s\nwant\n%s", pe.Caret(), want)
	}
}

// listCases were checked against the kernel: each definition is written
// after the previous ones of the same test.
var listCases = []struct {
	defs []string
	code ErrorCode
	pos  int
}{
	{[]string{"p:kpwtest/x @@O a=%di", "p:kpwtest/x @@E a=%si"}, 0, 0},
	{[]string{"p:kpwtest/x @@O a=%di", "p:kpwtest/x @@E b=%di"}, ErrDiffArgType, 29},
	{[]string{"p:kpwtest/x @@O a=%di", "p:kpwtest/x @@E a=%di:u32"}, ErrDiffArgType, 29},
	{[]string{"p:kpwtest/x @@O a=%di", "p:kpwtest/x @@E a=%di b=%si"}, ErrDiffArgType, 35},
	{[]string{"p:kpwtest/x @@O a=%di b=%si", "p:kpwtest/x @@E a=%di"}, ErrDiffArgType, 35},
	{[]string{"p:kpwtest/x @@O a=+0(%di):u64[2]", "p:kpwtest/x @@E a=+0(%di):b3@1/64[2]"}, 0, 0},
	{[]string{"p:kpwtest/x @@O a=+0(%di):u64[2]", "p:kpwtest/x @@E a=+0(%di):u64[3]"}, ErrDiffArgType, 29},
	{[]string{"p:kpwtest/x @@O a=%di", "r:kpwtest/x @@E a=%di"}, ErrDiffProbeType, 0},
	{[]string{"p:kpwtest/x @@O a=%di", "p:kpwtest/x  @@O   a=%di"}, ErrSameProbe, 0},
	// the same point as the event's second probe, not its first
	{[]string{"p:kpwtest/x @@O a=%di", "p:kpwtest/x @@E a=%di", "p:kpwtest/x @@E a=%di"}, ErrSameProbe, 0},
}

func TestParseList(t *testing.T) {
	for _, c := range listCases {
		text := "# a comment\n\n" + ourDef(strings.Join(c.defs, "  # trailing comment\n"))
		ps, err := ParseList(text)
		if c.code == 0 {
			if err != nil || len(ps) != len(c.defs) {
				t.Errorf("ParseList(%q): %d probes, %v", text, len(ps), err)
			}
			continue
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Code != c.code || pe.Pos != c.pos || pe.Line != 2+len(c.defs) {
			t.Errorf("ParseList(%q): %v, want %q at %d on line %d", text, err, c.code.Error(), c.pos, 2+len(c.defs))
		}
	}
	ps, err := ParseList("p:a main\np:b main\n-:a\np:a main+1")
	if err != nil || len(ps) != 2 || ps[0].Event != "b" || ps[1].Offset != 1 {
		t.Errorf("delete in list: %v %v", ps, err)
	}
	if _, err := ParseList("-:nothere"); !errors.Is(err, ErrNoSuchEvent) {
		t.Errorf("deleting a missing event: %v", err)
	}
}

// BenchmarkParseList: a list of node's size (78,000 events, one per function) is read
// in time linear in its length.
func BenchmarkParseList(b *testing.B) {
	var sb strings.Builder
	for i := range 78000 {
		fmt.Fprintf(&sb, "p:all/f%d main+%d a=%%di\n", i, i%64)
	}
	text := sb.String()
	for b.Loop() {
		if _, err := ParseList(text); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseListMatchesKernel(t *testing.T) {
	needOracle(t)
	defer removeOracleEvents(t)
	for _, c := range listCases {
		var err error
		for _, d := range c.defs {
			err = writeUprobeEvents(kernelDef(d))
		}
		last := strings.Join(strings.Fields(kernelDef(c.defs[len(c.defs)-1])), " ")
		removeOracleEvents(t)
		if c.code == 0 {
			if err != nil {
				t.Errorf("kernel refused %v: %v", c.defs, err)
			}
			continue
		}
		msg, pos, ok := kernelError(last)
		if err == nil || !ok || msg != c.code.Error() || pos != c.pos {
			t.Errorf("kernel on %v: %v %q at %d, want %q at %d", c.defs, err, msg, pos, c.code.Error(), c.pos)
		}
	}
}

// TestParseLibSite: LIB:SITE probe points keep their library, name their events as
// the uprobe tracer does (the file's base name to its first '.', '-' or '_') and
// print back as given.
func TestParseLibSite(t *testing.T) {
	for _, c := range []struct{ def, lib, sym, name, str string }{
		{"p /usr/lib/x86_64-linux-gnu/libz.so.1:0xc1e0", "/usr/lib/x86_64-linux-gnu/libz.so.1", "", "p_libz_0xc1e0", "p:uprobes/p_libz_0xc1e0 /usr/lib/x86_64-linux-gnu/libz.so.1:0xc1e0"},
		{"p libc.so.6:malloc size=%di", "libc.so.6", "malloc", "p_libc_malloc_0", "p:uprobes/p_libc_malloc_0 libc.so.6:malloc+0 size=%di"},
		{"r:g/e ld-linux-x86-64.so.2:_dl_open", "ld-linux-x86-64.so.2", "_dl_open", "e", "r:g/e ld-linux-x86-64.so.2:_dl_open+0"},
		{"p ./lib_a.so:0x10%return", "./lib_a.so", "", "p_lib_0x10", "r:uprobes/p_lib_0x10 ./lib_a.so:0x10"},
	} {
		p, err := Parse(c.def)
		if err != nil {
			t.Errorf("%s: %v", c.def, err)
			continue
		}
		if p.Lib != c.lib || p.Symbol != c.sym || p.Event != c.name || p.String() != c.str {
			t.Errorf("%s: lib %q symbol %q event %q, %q", c.def, p.Lib, p.Symbol, p.Event, p.String())
		}
	}
}

// TestLibSiteNameMatchesKernel: the uprobe tracer names a PATH:OFFSET event it is not
// given a name for as Parse does.
func TestLibSiteNameMatchesKernel(t *testing.T) {
	needOracle(t)
	defer removeOracleEvents(t)
	for _, def := range []string{"p:kpwtest/ " + siteKernelE, "r:kpwtest/ " + siteKernelO} {
		p, err := Parse(def)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeUprobeEvents(def); err != nil {
			t.Fatalf("%s: %v", def, err)
		}
		b, err := os.ReadFile(tracefs + "/uprobe_events")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), ":kpwtest/"+p.Event+" ") {
			t.Errorf("%s: we name it %s, the kernel lists:\n%s", def, p.Event, b)
		}
	}
}
