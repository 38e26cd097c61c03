package cli

import (
	"fmt"
	"io"

	"github.com/kprewrite/kprewrite/internal/progcache"
)

// runCache is `kprewrite cache clean|dir`: the cache of programs record rewrote.
func runCache(args []string, stdout, stderr io.Writer) error {
	fs := helpFlagSet("cache", "cache clean|dir", stdout)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "clean" && pos[0] != "dir" {
		return usageErr("want clean (remove every program record rewrote) or dir (print the cache's directory)")
	}
	c, err := progcache.Default()
	if err != nil {
		return err
	}
	if pos[0] == "dir" {
		fmt.Fprintln(stdout, c.Dir)
		return nil
	}
	n, bytes, err := c.Clean()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "kprewrite cache: %d rewritten program(s) (%s) removed from %s\n", n, sizeString(uint64(bytes)), c.Dir)
	return nil
}
