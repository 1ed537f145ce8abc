package aggregator

// GuestMemory is guest RAM as the transport maps it. Every method checks
// that [gpa, gpa+len) lies inside guest RAM and returns an error wrapping
// abi.StatusBadAddress otherwise; ranges may span adjacent RAM regions.
// Implementations must be safe for concurrent use, including with a remap
// of guest RAM by the transport.
type GuestMemory interface {
	// ReadAt copies len(p) bytes at gpa into p.
	ReadAt(p []byte, gpa uint64) error
	// WriteAt copies p into guest RAM at gpa.
	WriteAt(p []byte, gpa uint64) error
	// Store64 stores v at the 8-byte aligned gpa atomically, after all
	// earlier writes through this GuestMemory are visible to the guest.
	Store64(gpa uint64, v uint64) error
}

// GuestViews is implemented by guest memory that can lend its own mapping
// of a range (internal/guestmem.Map.View): a copy then moves each
// contiguous run of guest RAM to or from the device in one transfer,
// without a staging copy. View calls f with the mapping of [gpa, gpa+n)
// and reports true, or reports false without calling f when it cannot
// lend that range (the copy then stages it). write says f writes b (the
// device's write to guest RAM, which a migration's write log must see).
// f must not keep b, and runs
// with the memory's remapping held off: it must not wait for the guest or
// for another ring of the instance.
type GuestViews interface {
	View(gpa, n uint64, write bool, f func(b []byte) error) (ok bool, err error)
}
