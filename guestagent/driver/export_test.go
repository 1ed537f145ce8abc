package driver

// RoomSleeps is Stats.RoomSleeps, read without the device's mutex (which
// the waiting submission holds).
func RoomSleeps(d *Device) uint64 { return d.roomSleeps.Load() }
