// Package ledgertest grows and measures ledger files for the tests that
// cut them short, as a crash or a full disk while one is copied would:
// with bbolt itself, never through the ledger package under test.
package ledgertest
