// Command vgpusim is a simulated GPU host: it serves the project's fake
// kernel (internal/sim/kernel) as a real filesystem over FUSE, so that the
// unmodified binaries run against it with --sysfs-root.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr}))
}
