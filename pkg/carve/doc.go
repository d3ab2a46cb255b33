// Package carve turns a resolved profile into kernel changes: it plans the
// difference between what a GPU is and what the profile wants, refuses to
// destroy vGPUs in use, and applies the plan with an undo for every step.
package carve
