// Package handover is the format and the channel of an upgrade in place
// (docs/upgrade.md): the running vgpud (the old process) hands a newly
// started one everything that keeps its VMs running: the listening
// sockets, each instance's QEMU connection, guest agent connection,
// register file and config space, and the worker processes with their
// protocol sockets, eventfds, instance pages and guest-RAM fds.
//
// It owns State (versioned JSON, every descriptor named by its index in
// the descriptors that travel with it over SCM_RIGHTS), its validation,
// and the message exchange on the SOCK_SEQPACKET socket pair between the
// two processes (Hello, State, Ready or Fail, Commit or Abort, then, from
// protocol 2 on, the probation: Healthy, Fail or Stopping from the new
// process, Release from the old; Negotiate picks the protocol). It imports
// no other vgpud package: mdev and worker fill and read its structs, and
// cmd/vgpud runs the exchange. Everything the new process reads from the
// channel is checked as untrusted input.
package handover
