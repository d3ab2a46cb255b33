// Package mdevctltest lays out mdevctl definition directories for tests,
// from the real definition files in pkg/mdevctl/testdata (its README says
// where each comes from).
package mdevctltest
