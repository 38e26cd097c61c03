// Package ldso finds the shared libraries a program loads the way glibc's dynamic
// loader (ld.so) finds them, without running it.
//
// A path is taken as given; a name is looked for among the program's DT_NEEDED
// closure, each searched in the loading object's DT_RPATH (when it has no DT_RUNPATH)
// and the executable's, its DT_RUNPATH, /etc/ld.so.cache, then the system
// directories. $ORIGIN in a search path is the loading object's directory.
//
// What it leaves out, on purpose: LD_LIBRARY_PATH and LD_PRELOAD (the environment of
// the rewrite is not the program's, and the same input must give the same output),
// and the hwcaps subdirectories (glibc-hwcaps/x86-64-v3...), which Debian does not
// populate. A name with $LIB or $PLATFORM in a search path skips that entry.
package ldso
