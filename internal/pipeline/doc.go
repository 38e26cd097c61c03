// Package pipeline runs a rewrite and a check from files to results, in named phases:
// read the definitions (internal/probedefs, C handlers), open the input, find the
// libraries LIB:SITE definitions name (internal/ldso), analyse each image (analysis),
// resolve the definitions, assemble each image (internal/rewriter) and write the
// outputs atomically. The public package checks options and maps results; everything
// between goes through here and down, never back up.
package pipeline
