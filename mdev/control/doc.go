// Package control is vgpud's operator API: JSON over HTTP on a Unix
// socket, served by the daemon and used by vgpuctl. It exposes the
// manager's devices, profiles and instances (create, list, show, destroy)
// with their live counters.
//
//	GET    /v1/devices
//	GET    /v1/profiles
//	GET    /v1/instances
//	POST   /v1/instances            {"profile": "...", "uuid": "...", "device": N, "hint": {...}}
//	GET    /v1/instances/{uuid}
//	DELETE /v1/instances/{uuid}
//	PUT    /v1/instances/{uuid}/share {"share": N}   fixed-share weight, at run time
//	GET    /v1/devices/{index}/policy
//	PUT    /v1/devices/{index}/policy {"policy": "fixed-share"}
//	GET    /v1/stats                  schedulers and counters in one snapshot
//	PUT    /v1/instances/{uuid}/profile {"profile": "..."}   vGPU type, VM attached
//	PUT    /v1/instances/{uuid}/limits  {"kernel_timeout": "5m", "slice": "250ms", ...}
//	GET    /v1/reuse                  reuse domains and counters
//	PUT    /v1/instances/{uuid}/reuse {"domain": "...", "off": false}
//	PUT    /v1/reuse/domains/{name}/budget {"budget": N}   (negative: unpin)
//	POST   /v1/instances/{uuid}/migrate  {"to": "host:port", "uri": "tcp:..."}  (docs/migration.md)
//	POST   /v1/instances/{uuid}/reattach {"qmp": "...", "device_id": "..."}  re-plug after a restart (docs/operating.md)
//	POST   /v1/instances/{uuid}/attach {"libvirt": "DOMAIN"}  give a libvirt domain the vGPU (docs/operating.md)
//	GET    /v1/placement              placement policy, model, dataset summary (docs/placement.md)
//	PUT    /v1/placement              {"policy": "interference", "dataset": {...}}
//	GET    /v1/placement/dataset      the co-run dataset the model learned from
//	POST   /v1/placement/explain      {"profile": "...", "hint": {...}}  the score of every device
//
// A body is exactly one JSON value with no unknown fields; anything after
// it is refused. Errors are {"error": "..."} with a status code that says
// which case it is (404 unknown instance, 409 exists, full or attached,
// 400 bad request, 503 no worker or migration not set up).
// The package knows the manager's API and the entry points of the
// migration package and of migrate/libvirt, nothing of transports or
// commands.
package control
