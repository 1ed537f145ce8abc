// Package qmp speaks the QEMU Machine Protocol to one QEMU process over its
// QMP Unix socket (-qmp unix:PATH,server=on,wait=off, pretty=off, the
// default).
//
// It owns, in layers:
//
//   - the transport: a Monitor dials the socket (Dial) or adopts a connected
//     one (New), reads the greeting, negotiates capabilities, and then runs
//     one reader goroutine that matches replies to commands by id and keeps
//     asynchronous events in a bounded buffer. Execute and ExecuteFiles send
//     one command (ExecuteFiles with descriptors in the same sendmsg, as
//     SCM_RIGHTS, which is how getfd and add-fd receive them) and wait for
//     its reply under a context. WaitEvent takes the first buffered or
//     future event a caller asks for.
//   - raw commands: Raw passes an operator's JSON command through and
//     returns QEMU's JSON answer, like virsh qemu-monitor-command.
//   - typed calls: one thin method per QEMU command the migration code
//     needs (QueryStatus, Stop, Cont, GetFD, CloseFD, DeviceAdd, DeviceDel,
//     Migrate, MigrateIncoming, QueryMigrate, ...), each with its own result
//     type in QEMU 7.2's QAPI names, and waits built on them
//     (WaitDeviceDeleted, WaitMigration).
//
// Package qmptest is the fake QMP server for tests of code that drives QEMU.
//
// It knows nothing of vgpud: not instances, profiles, workers or guest
// memory. Whoever launches QEMU decides what the machine is; this package
// only carries commands and their answers.
//
// We do not use github.com/digitalocean/go-qemu, whose layering this
// follows: its SocketMonitor takes no context and sets no deadline on a
// command, so a QEMU that stops answering hangs the caller; its event
// channel is unbuffered, so an event nobody reads blocks the reader and with
// it every later command reply; and taking it would need a replace directive
// pointing go.mod at a system path.
//
// QEMU's QMP errors keep their class: a failed command returns an error
// that errors.As turns into *Error {Class, Desc}, and that errors.Is
// matches with ErrCommandNotFound or ErrDeviceNotFound for those classes. A
// monitor whose connection ends (QEMU exited, Close, or a message that is not
// QMP) fails every pending and later call with an error wrapping ErrClosed.
//
// Lock order: Monitor.wsem (one writer) before Monitor.mu; Monitor.mu is
// never held while writing to or reading from the socket, nor while a
// caller's code runs, except WaitEvent's matcher, which must not call the
// Monitor.
package qmp
