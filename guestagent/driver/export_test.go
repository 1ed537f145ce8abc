package driver

import "time"

// RoomSleeps is Stats.RoomSleeps, read without the device's mutex (which
// the waiting submission holds).
func RoomSleeps(d *Device) uint64 { return d.roomSleeps.Load() }

// SetIRQRearm sets how long Interrupts waits for an interrupt before it
// enables the cause again, and returns a function that restores it.
func SetIRQRearm(d time.Duration) func() {
	old := irqRearm
	irqRearm = d
	return func() { irqRearm = old }
}
