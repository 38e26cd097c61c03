// Package handlers compiles C handler files for `kprewrite rewrite --handlers FILE.c`
// and reads what they declare.
//
// A handler file includes kprewrite.h (runtime.HandlerHeader: the kernel's kprobes
// vocabulary for user space) and declares its probes statically with DEFINE_KPROBE and
// DEFINE_KRETPROBE, because every probe site is patched at rewrite time. Compile runs
// gcc with fixed flags that mirror the runtime's own build (runtime/build.sh): freestanding,
// no libc and no standard headers (-nostdinc; the compiler's freestanding headers such
// as <stdint.h> stay available), position-independent, general registers only, no red
// zone, no stack protector, -Werror=implicit-function-declaration, -fstack-usage. gcc's
// messages are reported as gcc wrote them (file:line:column), with the temporary
// include directory shown as plain kprewrite.h.
//
// From each object it reads, without evaluating anything but relocation presence:
//   - the ".kprewrite.decl" section the declaration macros fill: one line
//     "KIND\tNAME\tSITE\tFILE\tLINE" per DEFINE_KPROBE, DEFINE_KRETPROBE and
//     KPREWRITE_PROGRAM_SYMBOL;
//   - each declared struct's static initializer, at the offsets of kprewrite.h's struct
//     kprobe and struct kretprobe (runtime.Kprobe*): which handlers it sets (a
//     relocation or a non-zero word at the field; a post_handler makes the site one that
//     single-steps), .offset, .flags (KPROBE_FLAG_DISABLED), .maxactive, .data_size;
//   - its undefined symbols: each must be a runtime function (runtime.HandlerAPI), a
//     function of the support object (memcpy and friends, csrc/support.c), a global of
//     another handler file, or a program symbol named by KPREWRITE_PROGRAM_SYMBOL.
//     Anything else is a call into libc (or a libgcc helper), which handlers cannot make:
//     Compile fails with a message naming the symbol and the file.
//
// Every handler entry (a function of the files whose address is taken, kprewrite_init,
// kprewrite_exit) has its stack measured over its deepest call chain (internal/stackuse:
// gcc's .su frames, the calls read from the code, the runtime's API functions by the
// runtime's own stack_usage.txt); an entry over StackLimit, one that can recurse, or one
// with an unbounded dynamic frame is refused with the chain.
//
// The result (Set) is what the rewriter needs: the objects to link after the runtime
// (objlink), the declared probes with their sites (as kprobe-event sites, resolved like
// -e definitions) and struct symbols, the program symbols to resolve in the binary,
// whether kprewrite_init/kprewrite_exit exist, each entry's measured stack, and warnings
// (compiler warnings, calls of program functions whose stack cannot be measured).
package handlers
