// Package tracectl changes the run-time switches of a trace file, which every program
// writing into it reads at each hit, the way writing into tracefs changes a running
// system: tracing on or off (the header's tracing_off, as tracefs's tracing_on and the
// traceon/traceoff triggers set it) and each event's soft-disable flag in its image's
// control area (as the event's enable file in soft mode and the
// enable_event/disable_event triggers set it). The file is mapped shared and written
// with atomic operations, as the runtime writes it.
package tracectl
