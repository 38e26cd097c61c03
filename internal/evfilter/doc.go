// Package evfilter is the kernel's event filter for kprewrite's events: its grammar
// and error messages, compiled into a program the runtime runs on each hit before a
// record is written.
//
// The filter is that of Documentation/trace/events.rst, section 5, with the kernel's
// error messages and their positions; the runtime runs the program in src/rt_filter.c,
// so a filtered-out hit writes nothing.
//
// The parser follows kernel/trace/trace_events_filter.c step for step (calc_stack,
// predicate_parse, parse_pred), so a filter the kernel's uprobe tracer refuses is
// refused here with the same message at the same place, and one it accepts means the
// same thing: the fields are those of the event's format file (the generic CPU, cpu,
// common_cpu, COMM and comm, the common fields, __probe_ip or __probe_func and
// __probe_ret_ip, the fetchargs), numbers compare at the field's size and signedness,
// strings match in full, by prefix, suffix, substring or glob.
//
// # Program
//
// The program is the kernel's: one entry per predicate with a branch taken when the
// predicate's result equals when, to target; falling off the end (index n) is a
// match, index n+1 is not. Little endian:
//
//	header  u8 'F', u8 version 1, u16 n, u8 needs (NeedCPU|NeedComm), u8 0, u16 size
//	entry   u8 fn, src, op, size, signed, not, when, match;
//	        u16 target, off, pattern offset, pattern length; u64 val, val2   (32 bytes)
//	patterns after the entries, each NUL-terminated
//
// fn says how the entry compares (FnNop never matches, FnEq, FnCmp, FnCPU, FnString,
// FnFunc), src where the field's value is (the record's data at off, the thread id,
// the CPU, the event id, the site's or the return address, zero); bit 1 of signed says
// val and val2 are link-time addresses (FnFunc) the load bias is added to. Match and the
// runtime's src/rt_filter.c interpret the same bytes; TestMatchesC runs both on
// thousands of programs and records and requires the same verdicts.
package evfilter
