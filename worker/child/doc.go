// Package child is a worker process of vgpud (docs/isolation.md): it runs
// the device work of one trust domain on one physical device (the
// aggregator's instances, the domain's reuse table, an OpenCL context and
// compiler of its own) and serves the worker protocol (package wire) to
// vgpud's main process, which started it by executing its own binary with
// RoleWorker as the first argument: the program's main (or a test
// binary's TestMain) calls EnterRole first, which runs Main, or an
// executor, and exits. Nothing here runs from an init function.
//
// It maps only its own instances' guest RAM and instance pages, which the
// main process hands it; it asks the main process for every device turn
// and tells it when a build starts and ends, so the main process can
// bound both. It knows nothing of transports, register files or other
// domains.
package child
