package main

import "testing"

// Each transport's keeper is started with a farewell its process knows:
// vfio-user's answers what QEMU waits on (docs/keeper.md "Farewells"),
// mpqemu has none.
func TestKeeperFarewellOfEachTransport(t *testing.T) {
	for _, tc := range []struct{ transport, want string }{
		{"", ""},
		{"mpqemu", ""},
		{"vfio-user", "vfio-user"},
	} {
		tr, err := socketTransport(tc.transport)
		if err != nil {
			t.Fatal(err)
		}
		got := keeperFarewell(tr)
		if got != tc.want {
			t.Errorf("transport %q: farewell %q, want %q", tc.transport, got, tc.want)
		}
		if got != "" && keeperFarewells[got] == nil {
			t.Errorf("transport %q: farewell %q is not one the keeper process knows", tc.transport, got)
		}
	}
}
