package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr}))
}
