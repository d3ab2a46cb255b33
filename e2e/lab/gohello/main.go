// Command gohello is the smallest Go program: BenchmarkLab times its start
// next to /bin/true and vgpuctl --version, the floor any Go command pays on
// the lab's emulated CPU.
package main

import "os"

func main() { os.Stdout.WriteString("hello\n") }
