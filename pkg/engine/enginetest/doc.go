// Package enginetest holds the fixtures that the tests of the engine and
// of what runs it (pkg/daemon, pkg/deviceplugin) share: the config they
// give examples/hosts/mixed.yaml and their logger. It imports nothing of
// pkg/engine, so the engine's own tests can use it.
package enginetest
