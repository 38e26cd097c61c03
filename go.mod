module github.com/kprewrite/kprewrite

go 1.26.0

require golang.org/x/arch v0.32.0 // indirect
