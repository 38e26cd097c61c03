module example.com/apiuser

go 1.26.0

require github.com/kprewrite/kprewrite v0.0.0

require (
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b // indirect
	github.com/ianlancetaylor/demangle v0.0.0-20250417193237-f615e6bd150b // indirect
	golang.org/x/arch v0.32.0 // indirect
)

replace github.com/kprewrite/kprewrite => ../..
