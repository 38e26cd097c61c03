module example.com/apiuser

go 1.26.0

require github.com/kprewrite/kprewrite v0.0.0

require golang.org/x/arch v0.32.0 // indirect

replace github.com/kprewrite/kprewrite => ../..
