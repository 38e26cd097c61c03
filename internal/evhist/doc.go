// Package evhist is the kernel's hist trigger (Documentation/trace/histogram.rst,
// kernel/trace/trace_events_hist.c) for kprewrite's events: the grammar of
// "hist:keys=...:vals=...:sort=...:size=...", the layout of the histogram the runtime
// keeps in the trace file's control area (src/rt_hist.c), and the printer that shows
// it as the kernel's hist file does.
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
//	  the key (KeyWords words), hitcount, one sum per value, the comm of the thread
//	  that made the entry when a key is common_pid.execname (2 words)
//
// # Program
//
// The runtime reads the histogram's shape from the trigger's program (see
// Spec.Program): little endian, 4-byte units,
//
//	u8 nkeys, u8 nvals, u8 flags (FlagPaused, FlagComm), u8 0; u32 size (entries)
//	u16 key words, u16 entry words; u32 0
//	per key, then per value: u8 src, u8 mod, u8 size, u8 signed|string<<1|comm<<2;
//	  u16 off, u16 words; u64 arg (buckets, or the image's link-time limit for .sym)
//
// src is evfilter's Source, or SrcTimestamp (common_timestamp). Keys are transformed
// as the kernel transforms them before hashing (.log2: ceil(log2 v), .buckets=N:
// v/N*N, .usecs: ns/1000); .sym and .sym-offset keys inside the image are stored as
// link-time addresses, so that every run of a PIE adds to the same entry.
package evhist

//go:generate go run ./gen
