package kprt

import _ "embed" // for the object

//go:generate sh build.sh

// Object is kprewrite_rt.o, the runtime as one x86-64 relocatable object (built by
// build.sh from src/ and include/; see docs/runtime.md).
//
//go:embed kprewrite_rt.o
var Object []byte
