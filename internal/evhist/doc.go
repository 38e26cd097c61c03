// Package evhist is the kernel's hist trigger for kprewrite's events: its grammar,
// the histogram the runtime keeps in the trace file, and the printer that shows it
// as the kernel's hist file does.
//
// The trigger is that of Documentation/trace/histogram.rst and
// kernel/trace/trace_events_hist.c: "hist:keys=...:vals=...:sort=...:size=...". The
// histogram is kept in the trace file's control area (src/rt_hist.c).
//
// # Table
//
// A histogram is a run of u64 words in the image's control area, at its trigger's
// slot, shared by every process writing into the trace file (a fork child adds to its
// parent's histogram) and left in the file when a program crashes:
//
//	word 0  flags (FlagPaused)
//	word 1  reserved (the kernel's map->hits is the entries' hitcounts plus the drops)
//	word 2  drops: hits whose key found no free entry
//	word 3  entries claimed (may pass the table's size: claims that failed count too)
//	then 2*size buckets of EntryWords words each:
//	  tag (0 empty, 1 being filled, else the key's hash with bit 63 set)
//	  the key (KeyWords words), hitcount, one sum per value, with variables a word of
//	  set bits and one word per variable, the comm of the thread that made the entry
//	  when a key is common_pid.execname (2 words)
//
// Variables ("ts0=common_timestamp.usecs") are kept in the entry of the hit's key;
// another event's histogram with the same keys reads them ($ts0) at the entry of its
// own hit's key, and adds nothing when that entry or variable is not there (the
// kernel's resolve_var_refs). An onmatch(GROUP.EVENT).trace(SYNTH,$v...) action
// generates the synthetic event SYNTH: its histograms get the parameters as their
// data, one 8-byte field each.
//
// # Program
//
// The runtime reads the histogram's shape from the trigger's program (Spec.Program;
// src/rt_hist.c checks it as CheckProgram does): little endian,
//
//	header   u8 nkeys, nvals, flags (FlagPaused, FlagComm), nvars; u32 entries;
//	         u16 key words, entry words; u8 noperands, nrefs, nparams, ntargets
//	fields   keys, values, then the variables' operand fields, 16 bytes each:
//	         u8 src, mod, size, signed|string<<1|comm<<2; u16 off, words; u64 arg
//	         (buckets, or the image's link-time limit for .sym)
//	vars     per variable 4 operands of 4 bytes: u8 kind (field, ref, const), u8
//	         minus, u16 index (the field, the reference, or the constant)
//	refs     per variable of another histogram: u32 slot of its table, u32 entries,
//	         u16 entry words, set-bits word, value word, bit
//	params   per parameter of the onmatch() action: u8 kind (ref, var), u8 0, u16 index
//	targets  per histogram of the synthetic event the action generates: u32 slot,
//	         u32 length, its program (no refs, params or targets of its own); with
//	         TargetFilter set in the length word, then its "if": u32 length, an
//	         evfilter program on the synthetic event's fields, to 4 bytes
//
// src is evfilter's Source, or SrcTimestamp (common_timestamp). Keys are transformed
// as the kernel transforms them before hashing (.log2: ceil(log2 v), .buckets=N:
// v/N*N, .usecs: ns/1000); .sym and .sym-offset keys inside the image are stored as
// link-time addresses, so that every run of a PIE adds to the same entry.
package evhist

//go:generate go run ./gen
