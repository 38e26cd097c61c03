// Package tracefile owns the formats kprewrite writes and reads back: trace files,
// image descriptions, the probe tables of a rewritten binary, and the trace and
// profile lines they are printed as.
//
// They are the trace file a rewritten program fills (ParseTrace: header, per-image
// counters and per-CPU shards, per-thread record blocks, the description frames the
// runtime copies in), the image description a rewritten binary carries at the start
// of .kprewrite.rodata (Desc, framed and compressed JSON, versions 1-4 read), the
// probe tables read back from a rewritten binary (ReadImage, for `kprewrite list`),
// and the text both are printed as: trace lines in the kernel tracer's format
// (Formatter, WriteTrace) and kprobe_profile lines (Profile, Violations).
//
// The byte layouts are the runtime's (kprewrite_abi.h, mirrored in package kprt); this
// package only reads them, validating every offset against the file's size.
package tracefile
