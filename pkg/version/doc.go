// Package version carries the build's version, set with -ldflags -X.
package version
