// Command envdump is the rig's container image: it prints its
// environment, sorted, one variable a line, then a line that says it is
// done, and waits for SIGTERM or SIGINT.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

// Done is the line after the environment; the rig waits for it.
const Done = "envdump: done"

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	for _, e := range slices.Sorted(slices.Values(os.Environ())) {
		fmt.Println(e)
	}
	fmt.Println(Done)
	<-c
}
