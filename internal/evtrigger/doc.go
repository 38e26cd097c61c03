// Package evtrigger reads event triggers in the kernel's grammar and encodes them for
// the runtime.
//
// The grammar is that of Documentation/trace/events.rst, section 6, and
// kernel/trace/trace_events_trigger.c.
//
// A trigger is "COMMAND[:COUNT] [if FILTER]" or, for enable_event and disable_event,
// "COMMAND:GROUP:EVENT[:COUNT] [if FILTER]"; a leading '!' removes the event's trigger
// of that command. Parse follows the kernel's parser step for step (where it splits,
// which numbers kstrtoul takes, which errors are EINVAL, EEXIST or ENOENT), so that a
// trigger this package accepts is one the kernel's trigger file accepts, with the
// same meaning. Set applies triggers to one event in order, as successive writes to
// its trigger file do, with the kernel's rule of one trigger per command (per target
// event for enable_event and disable_event), and keeps the kernel's list order
// (newest first), which decides in which order triggers run.
//
// Program encodes an event's triggers, with their filters compiled by
// internal/evfilter, into the blob the runtime decodes (runtime/src/rt_trigger.c);
// Decode reads it back (tests, fuzzing).
package evtrigger
