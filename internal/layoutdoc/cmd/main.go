// Command layoutdoc rewrites the layout table of docs/design.md from the package
// comments (package layoutdoc). Run it from the module root, as `go generate .` does:
//
//	go run ./internal/layoutdoc/cmd
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kprewrite/kprewrite/internal/layoutdoc"
)

func main() {
	want, have, err := layoutdoc.Generate(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "layoutdoc:", err)
		os.Exit(1)
	}
	if want == have {
		return
	}
	if err := os.WriteFile(filepath.FromSlash(layoutdoc.DocFile), []byte(want), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "layoutdoc:", err)
		os.Exit(1)
	}
	fmt.Println("layoutdoc: wrote", layoutdoc.DocFile)
}
