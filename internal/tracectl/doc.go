// Package tracectl changes a trace file's run-time switches, filters and triggers
// while programs write into it, the way writing into tracefs changes a running system.
//
// Every program writing into the file reads the switches at each hit: tracing on or
// off (the header's tracing_off, as tracefs's tracing_on and the traceon/traceoff
// triggers set it) and each event's soft-disable flag in its image's control area (as
// the event's enable file in soft mode and the enable_event/disable_event triggers set
// it). The file is mapped shared and written with atomic operations, as the runtime
// writes it.
//
// Filters and triggers changed without rewriting (an event's filter and trigger files)
// are control frames (Frame): an image's events whose filter or triggers differ from
// the rewrite's, compiled here against the events' fields (Controls), written into the
// file's counters area and linked (File.Commit); a program reads its image's newest at
// its next hit (runtime/src/rt_ctl.c). A KPREWRITE_CONTROL file holds frames too.
package tracectl
