// Package migrate moves a running domain with its vGPUs to another host:
// the convergence policy (policy.go, a pure function over job-stat
// samples), the checks before anything moves, and the run that drives a
// libvirt migration job through the policy, with rollback.
package migrate
