// Package eventdef parses kprobe event definitions, compiles their fetch
// arguments into compact programs for the runtime, and prints trace records
// exactly as the kernel's probe tracer prints them.
//
// # Syntax
//
// A definition is the kernel's kprobe event syntax (see kprobetrace.rst),
// with the probe point a symbol of the binary being rewritten or an address:
//
//	p[:[GRP/][EVENT]] SYM[+offs]|0xADDR [FETCHARGS]
//	r[MAXACTIVE][:[GRP/][EVENT]] SYM[+0]|0xADDR [FETCHARGS]
//	p[:[GRP/][EVENT]] SYM[+0]%return [FETCHARGS]
//	-:[GRP/][EVENT] [SYM[+offs]|0xADDR [NAME=BODY...]]
//
// Fetch arguments are [NAME=]FETCHARG[:TYPE] with FETCHARG one of %REG,
// @ADDR, @SYM[+|-offs], $stackN, $stack, $argN, $retval, $comm,
// +|-[u]OFFS(FETCHARG), \IMM and \"STRING", and TYPE one of u8..u64,
// s8..s64, x8..x64, char, string, ustring, symbol, symstr,
// b<width>@<offset>/<container>, optionally as an array TYPE[N].
//
// Parsing follows the kernel's trace_probe.c step by step, so what it
// accepts, what it refuses and the error it gives (message text and caret
// position, see ParseError) match the kernel's uprobe tracer on the same
// arguments; parse_test.go lists what was checked against a live kernel
// (6.18). Where kprewrite differs, it is on purpose:
//   - the probe point is kprobe-style (a symbol or an address, as in
//     kprobe_events), not PATH:OFFSET; maxactive follows kprobes;
//   - @SYM is allowed (uprobes refuse it): the symbol's link-time address
//     comes from the resolve callback of Compile and the runtime adds the
//     load bias; @+FOFFS (uprobe file offsets) is refused;
//   - the symbol and symstr types are allowed (uprobes refuse them) and
//     print through FormatOptions.Symbolize;
//   - $argN works on function entries (SYM or SYM+0) and on return probes
//     (read from values saved at entry), as kprobes do; uprobes refuse it;
//   - $stackN stops at PARAM_MAX_STACK (2048), as kprobes' does
//     (kprobe_syntax_errors.tc); uprobes take any N;
//   - an immediate string prints its text (the kernel's uprobe tracer
//     prints "(fault)", reading the kernel pointer as a user one);
//   - a failed dereference stores zeros (the kernel leaves the slot stale)
//     and, in a string[N] array, fails only its own element.
//
// Defaults: the group is "uprobes"; an event without a name gets
// GeneratedEventName ("p_main_0", "r_parse_0", "p_0x401136"); an argument
// without a name is argN (1-based position); an argument without a type is
// x64. $comm and immediate strings are strings.
//
// # Fetch programs
//
// Compile produces one program per probe. All integers are little-endian.
// A program is a 24-byte header, the entry blocks, then one argument block
// per argument in order:
//
//	header:
//	  0  u8   magic 0x4B ('K')
//	  1  u8   version, 1
//	  2  u8   flags: 1 RETURN (return probe), 2 ENTRYDATA (run the entry
//	          blocks at function entry), 4 COMM ($comm used), 8 LOADBIAS
//	          (@SYM used)
//	  3  u8   0
//	  4  u16  nargs, argument blocks
//	  6  u16  nentry, entry blocks
//	  8  u32  fixed: size of the record's fixed area
//	  12 u32  recmax: largest record the program writes (fixed + strings)
//	  16 u32  edata: size of the entry data kept per return instance
//	  20 u32  total size of the program in bytes
//	block:
//	  0  u32  dest: offset of the slot written (in the record; in the entry
//	          data for entry blocks)
//	  4  u16  len: bytes of code
//	  6  code[len]
//
// The code of a block is a lone string store (STCOMM, STDATA), or a source,
// zero or more dereferences, one store, and an optional BITFIELD. A source
// sets a 64-bit value val:
//
//	0x01 REG    u8 off    val = u64 at (char *)regs + off (off = 8*k < 168)
//	0x02 STACK  u32 n     val = u64 at regs->sp + 8*n; 0 if unreadable
//	0x03 STACKP           val = regs->sp
//	0x04 IMM    u64 v     val = v
//	0x05 IMAGE  u64 v     val = load bias + v (v = link-time address of SYM + offs)
//	0x06 EDATA  u32 off   val = u64 at entry data + off
//	0x07 XMM    u8 n      val = the low 64 bits of xmm<n> (%xmmN, kprewrite)
//	0x10 DEREF  s32 off   val = u64 at val + off
//	0x11 UDEREF s32 off   the same, written +uOFFS(...)
//
// $retval is REG of ax. $argN at an entry is REG of di, si, dx, cx, r8, r9
// for N <= 6, and STACK N-6 above (the return address is STACK 0). A return
// probe with $argN has one entry block per distinct N, each "$argN source;
// STRAW 8" into entry data slot 8*k, and reads it back with EDATA 8*k.
//
// The registers are those of the probed thread as the kernel's uprobe
// tracer shows them (checked on 6.18): at a probe, ip is the probe's
// address (not the address after an int3), orig_ax is -1, cs 0x33 and
// ss 0x2b; at a return probe, the argument blocks see the registers after
// the function returned: ax its value, sp above the popped return address,
// ip the return address.
//
// Stores write the slot at dest:
//
//	0x20 STRAW    u8 size                 the low size (1,2,4,8) bytes of val
//	0x21 STMEM    s32 off, u8 size, u8 count, u8 user
//	                                      element i (i < count): size bytes
//	                                      read at val+off+i*size, to
//	                                      dest+i*size; zeros if unreadable
//	0x22 STSTR    s32 off, u8 user        the NUL-terminated string at
//	                                      val+off; u32 data_loc at dest
//	0x23 STSTRARR s32 poff, s32 soff, u8 count, u8 user
//	                                      element i: p = u64 at
//	                                      val+poff+8*i, the string at p+soff,
//	                                      its data_loc at dest+4*i
//	0x24 STCOMM                           the thread's comm (at most 15
//	                                      bytes) as a string
//	0x25 STDATA   u16 n, n bytes          the immediate string
//	0x26 STGOSTR  s32 off, u8 mode [, source, derefs]
//	                                      a Go string (gostring, kprewrite):
//	                                      mode 0, its {ptr, len} header at
//	                                      val+off; mode 1 (off 0), ptr is val
//	                                      and the block's rest (a source and
//	                                      its dereferences) gives len. The
//	                                      min(len, room) bytes at ptr, no NUL
//	                                      sought, as a string; a fault in the
//	                                      header, the length or the bytes, or
//	                                      a negative length, faults it
//	0x27 STMEMN   u8 size, u8 count, source, derefs
//	                                      (kprewrite) PTR,LEN:TYPE[N]: the
//	                                      rest of the block gives n; element
//	                                      i < n as STMEM reads it at
//	                                      val+i*size, zeros for i >= n
//	0x28 STGOERR  u8 flags, u16 n, n cases {u64 type, u8 kind, u64 a,
//	              u64 b}, source, derefs  (kprewrite) a Go error (goerr):
//	                                      val is its type word (0 if it
//	                                      faulted), the rest of the block
//	                                      gives its data word; the message
//	                                      the case of val says how to build
//	                                      (goerr.go), its NUL, a flag (1: a
//	                                      message) and val, as one data_loc;
//	                                      flags 1 (@image): the cases'
//	                                      addresses are link-time ones, type
//	                                      words are less the load bias
//	0x30 BITFIELD u8 lshift, u8 rshift    after STRAW/STMEM, each stored
//	                                      element x (unsigned, of the store's
//	                                      size) becomes (x << lshift) >> rshift
//	0x31 SBITFIELD u8 lshift, u8 rshift   BITFIELD with an arithmetic right
//	                                      shift (sb<w>@<o>/<c>)
//
// user marks user-space reads (+u, ustring); in user space they read like
// the others. If a source or dereference cannot read memory, the block's
// store runs in fault mode: STRAW and STMEM write zeros, string stores
// write a faulted data_loc for every element, and BITFIELD leaves zero.
//
// # Records
//
// A record is the fixed area, one slot per argument in order with no
// padding, followed by the strings. A slot is the element size times the
// array count (1 if none): 1, 2, 4 or 8 bytes for numbers and char, 8 for
// symbol and symstr (the address; symstr is printed as a string), 4 for
// string and ustring: a data_loc, (len << 16) | off, where off is the
// string's offset from the record start and len its length including the
// NUL; len 0 means the fetch faulted. Strings are appended in argument
// order. A string longer than the room left below recmax is cut to fit
// (keeping its NUL); with no room left it is stored as faulted, as the
// kernel does when its one-page buffer is full.
//
// Run and RunEntry are the reference interpreter of this format: the C
// runtime must write the same bytes for the same registers and memory.
package eventdef
