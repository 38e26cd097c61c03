// Package progcache keeps the programs `kprewrite record -e DEF -- PROGRAM` rewrote, so
// that a second run with the same inputs and options reuses them: one directory per
// key (the hash of the tool, the program, the files the options name and the options),
// checked against the libraries it copied, bounded in size by evicting the least
// recently used.
package progcache
