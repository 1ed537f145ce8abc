// Package control is vgpud's operator API: JSON over HTTP on a Unix
// socket, served by the daemon and used by vgpuctl. It exposes the
// manager's devices, profiles and instances (create, list, show, destroy)
// with their live counters.
//
//	GET    /v1/devices
//	GET    /v1/profiles
//	GET    /v1/instances
//	POST   /v1/instances            {"profile": "...", "uuid": "...", "device": N}
//	GET    /v1/instances/{uuid}
//	DELETE /v1/instances/{uuid}
//	PUT    /v1/instances/{uuid}/share {"share": N}   fixed-share weight, at run time
//	GET    /v1/devices/{index}/policy
//	PUT    /v1/devices/{index}/policy {"policy": "fixed-share"}
//	GET    /v1/stats                  schedulers and counters in one snapshot
//
// Errors are {"error": "..."} with a status code that says which case it
// is (404 unknown instance, 409 exists or full, 400 bad request).
// The package knows the manager's API, nothing of transports or commands.
package control
