// Package syncbuf is a bytes.Buffer that goroutines may write while
// another reads it: a child process's output copied by os/exec while a
// test looks at it.
package syncbuf
