package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kprewrite/kprewrite/internal/atomicfile"
	kprt "github.com/kprewrite/kprewrite/runtime"
)

// runInclude prints kprewrite.h, the header C handler files include, or writes it into a
// directory (-o DIR), so editors and other compilers see what `rewrite --handlers` uses.
func runInclude(args []string, stdout, _ io.Writer) error {
	fs := helpFlagSet("include", "include [-o DIR]", stdout)
	dir := fs.String("o", "", "write "+kprt.HandlerHeaderName+" into DIR (created if needed) instead of printing it")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErr("include takes no arguments, got %d (see kprewrite include -h)", len(pos))
	}
	if *dir == "" {
		_, err := stdout.Write(kprt.HandlerHeader)
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("include: %w", err)
	}
	path := filepath.Join(*dir, kprt.HandlerHeaderName)
	if err := atomicfile.WriteFile(path, bytes.NewReader(kprt.HandlerHeader), 0o644); err != nil {
		return fmt.Errorf("include: %w", err)
	}
	fmt.Fprintln(stdout, path)
	return nil
}
