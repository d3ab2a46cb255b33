// Package daemontest runs a vgpud in process for the tests of its clients
// (vgpuctl, vgpu-hook), as net/http/httptest runs a server: on a fake
// kernel or any sysfs.FS, with its config, ledger and socket in a temp
// directory removed when the test ends.
package daemontest
