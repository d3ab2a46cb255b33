// Command pause is the rig's pod sandbox image: it waits for SIGTERM or
// SIGINT and exits 0.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
