package kprt

import _ "embed" // for the object

//go:generate sh build.sh

// Object is kprewrite_rt.o, the runtime as one x86-64 relocatable object (built by
// build.sh from src/ and include/; see docs/runtime.md).
//
//go:embed kprewrite_rt.o
var Object []byte

// StackUsage is gcc's -fstack-usage output for the runtime's C functions (build.sh
// writes it beside the object): with the object's code it bounds the stack each
// runtime function can use, the HandlerAPI functions a handler calls included.
//
//go:embed stack_usage.txt
var StackUsage []byte
