// Package agentmsg defines the wire format of the control channel between
// vgpud and the guest agent (docs/agent-channel.md): a versioned stream of
// length-prefixed frames carried by a virtio-serial port.
//
// Every frame is an 8-byte header (magic, type, payload length) followed by
// the payload; fields are fixed width and little-endian. Decode takes
// hostile bytes: it bounds the length before reading, never panics, and
// returns an error wrapping ErrMalformed for anything out of range. Frames of
// types it does not know are returned as *Unknown so a receiver can skip
// them: that is how later versions add messages without breaking older
// peers (the migration messages, Quiesce/Quiesced/Resume/Resumed, and the
// reconfiguration messages, Resources/Checkpoint/Checkpointed/Reconfigure/
// Reconfigured, were added that way).
//
// This package is a leaf: it imports only the standard library and knows
// nothing of sockets, ports, the driver or the aggregator. Host and guest
// share it, so the two ends cannot disagree.
package agentmsg
