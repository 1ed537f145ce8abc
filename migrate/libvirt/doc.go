// Package libvirt gives libvirt-managed VMs their vGPU (docs/operating.md,
// "libvirt-managed VMs"). libvirt keeps each domain's QMP socket for
// itself, so everything goes through virsh, run as a child process (the
// go-libvirt module is not available here, and the virsh in
// libvirt-clients speaks every libvirt version's protocol):
//
//   - Monitor implements migrate.Monitor with `virsh qemu-monitor-command`:
//     getfd with the instance socket passed as descriptor 3 (--pass-fds),
//     device_add, device_del, and a wait for the guest's ejection that
//     polls query-pci under a context;
//   - Attacher decides, per domain, what giving it a vGPU takes (shut off:
//     start paused, plug, resume; running without the device: hot-plug;
//     running with the proxy device on a dead socket after vgpud
//     restarted: migrate.ReattachVia) and records the instance in the
//     domain's <metadata> (MetadataURI);
//   - Watcher runs `virsh event --loop --event lifecycle`, restarts it with
//     backoff when it ends, and on every domain start, at its own start
//     and every Resync, plugs the domains whose metadata names an instance
//     that has no VM connection.
//
// It owns the virsh invocations and the parsing of their output, which it
// treats as untrusted input: bounded, checked, and a malformed line or
// element is an error for that domain only. It knows the manager's
// instances only through mdev's exported API and QEMU only through
// migrate's plug and reattach; it must not know transports, register
// layouts or device state, and nothing below it (migrate, mdev) imports
// it.
package libvirt
