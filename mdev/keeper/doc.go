// Package keeper is the connection keeper: a small process of vgpud's own
// that holds a duplicate of each VM connection (the instance socket QEMU
// speaks vfio-user or mpqemu on), so that when vgpud dies the VMM sees its
// connection end in order, with an end of file, rather than with a reset.
//
// Why (docs/operating.md "After a crash or restart"): a Unix stream
// socket closed with bytes its owner had not read makes the peer's next
// read fail with ECONNRESET. A vgpud killed while a guest computes dies
// with the VM's register writes unread, and QEMU 11.1.3's vfio-user client
// aborts on that error (vfio_user_recv_hdr sets an error twice), taking
// the VM with it. At an end of file it marks the device broken and runs on,
// and a restarted vgpud re-plugs the device.
//
// The keeper never reads a connection while vgpud lives. When its control
// socket ends (every vgpud that held it has exited, whatever the cause) or
// it is told to stop (SIGTERM, SIGINT), it releases what it holds: a
// connection still open in another process (the new vgpud of an upgrade
// in place, which adopted it) is only closed; any other is shut for
// writing (the VMM reads its end of file), drained of what the VMM had
// sent and sends until it falls quiet, then closed with nothing unread.
// Before that, the keeper's Farewell, if it was started with one, has
// the last word: vfio-user's answers the requests QEMU is waiting on, so
// that no vCPU waits out QEMU's reply timeout (docs/keeper.md
// "Farewells").
//
// A keeper process that ends while vgpud runs is started again and handed
// every connection kept then (Keeper's supervisor).
//
// It owns the control protocol (msg.go, docs/keeper.md: a datagram per
// Keep or Drop, the connection's descriptor passed with Keep), the client
// (Keeper: Start, Keep, Drop, Close) and the process (Main, EnterRole).
// It knows nothing of instances, transports or QEMU: mdev tells it which
// connections to keep and when to let one go, and vgpud's main gives its
// process the farewells by name (cmd/vgpud keeperFarewells).
package keeper
