// Package revert is the undo list of a multi-step change outside the
// carver: add an undo after each step that succeeds, run the list when a
// later step fails, drop it when the change is done. An undo that fails is
// reported with what it could not undo, never dropped. pkg/carve keeps its
// own plan/undo engine for the kernel.
package revert
