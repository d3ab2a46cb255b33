// Package change ties a change to the client that asked for it, up to the
// change's point of no return.
//
// A request that changes the host or the ledger runs with the context Bind
// returns. Until the change begins (Begin, called right before the first
// ledger or kernel write, inside the write transaction where there is one)
// that context ends when the client hangs up: a request whose caller gave
// up while it waited for a lock, the ledger or a slot changes nothing.
// From Begin on it never ends on a hang-up: a change cut short between two
// kernel writes would leave the host half-changed, so a begun change
// finishes (or undoes itself) whoever waits for the answer.
package change
