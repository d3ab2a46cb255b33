// Package testclock is a settable clock for tests: its time moves only when
// the test moves it, so lease expiry and timestamps are checked exactly and
// never depend on how fast the machine runs.
package testclock
