// Package probedefs is the definitions front end shared by check and rewrite: it
// parses kprobe-event definitions, filters and triggers (ParseDefs), adds the C
// handlers' probes (HandlerDefs) and the --calls pairs (CallProbes), and resolves
// each definition to an address of its image (Resolve), refusing there what the
// rewrite would refuse later, so that check and rewrite answer alike.
//
// It also compiles what the assembly writes into the tables from a definition: the
// filter and trigger programs (CompileFilter, CompileTriggers).
package probedefs
