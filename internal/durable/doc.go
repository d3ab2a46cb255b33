// Package durable holds what makes a file replaced by rename survive a
// crash.
package durable
