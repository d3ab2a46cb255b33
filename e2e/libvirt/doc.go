// Package libvirt holds the integration tests of vgpu with a real libvirt:
// a private libvirtd and virtlogd (Debian's packages, QEMU under TCG) run
// with vgpu-hook installed in their hook directory by `vgpuctl hook
// install`, vgpud runs on vgpusim (the simulated host over FUSE), and the
// tests drive domains with virsh and vgpuctl attach/detach. The package
// also holds the benchmarks of the time the hook adds to `virsh start`, and
// of vgpuctl migrate against virsh migrate.
//
// The daemons are private: they run in their own mount namespace, where a
// directory of the test's is mounted over each of /etc/libvirt/hooks,
// /etc/libvirt/qemu, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt,
// /var/log/libvirt and /run/vgpud. So the host's libvirt (running or not),
// its domains and its hooks are never touched, and the hook reaches the
// test's vgpud on the default socket path, as in production: libvirt
// clears a hook's environment, so no variable could point it elsewhere.
//
// The tests and benchmarks that time migrations put each of their two
// hosts in a network namespace of its own as well, joined by a veth pair
// shaped with tc (link_test.go): every pass of a migration, the last one
// with the guest stopped included, pays the link, which over 127.0.0.1 it
// would not. virsh and vgpuctl then run in the source's namespace.
//
// They need root, /dev/fuse and the packages scripts/deps.sh installs, and
// fail (never skip) without them.
package libvirt
