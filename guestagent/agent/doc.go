// Package agent is the guest end of the control channel to vgpud
// (docs/agent-channel.md): a Client that speaks abi/agentmsg over the
// virtio-serial port named PortName, reopens it whenever the host side
// goes away, blocks guest threads until the host reports a completion
// (it implements driver.Blocker), keeps the host's vCPU hints (for
// driver.SyncHybrid and SyncAuto) and reports the guest's /proc/stat.
//
// A virtio-serial port can be open in one process at a time, so the
// vgpu-agent daemon owns it and relays to other guest programs over a
// Unix socket (Relay) that speaks the same messages; a program uses the
// same Client on either, opened with OpenPort (in-process, when it is the
// only user) or DialRelay. For a migration that keeps the vGPU in place
// the Relay also saves the vGPU's PCI configuration at the Quiesce and
// writes it back before its programs resume (through the driver's
// SaveConfig; Linux's sysfs only).
//
// It knows the agent wire format and the driver's Blocker and SliceHints
// types, and nothing of dom0.
package agent
