// Package daemon is vgpud, the process around the engine (pkg/engine): it
// loads the config and the catalog, opens the ledger, serves the HTTP API
// on a unix socket (peer credentials, the connection gate), follows
// signals and config reloads, tells systemd (sd_notify, watchdog), serves
// metrics, and starts the kubelet's device plugin that the config asks for
// (Options.DevicePlugin) beside the API.
package daemon
