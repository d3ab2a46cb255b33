// Package usage marks the errors of vgpu's command-line tools that are the
// user's bad input (a flag, an argument, a file named on the command
// line), so that a tool tells them apart from failures and exits 2.
package usage
