// Package sandbox confines vgpud's worker processes (package worker and
// its child) with what Linux gives an unprivileged process, so that guest
// code running natively in a worker (PoCL runs OpenCL kernels inside the
// process that launches them) reaches as little of the host as the OpenCL
// runtime allows (docs/sandbox.md).
//
// It owns both halves of that confinement:
//
//   - the main process's half: Probe, run once at start-up, finds which
//     protections this host can give and lists those that are weaker than
//     designed; Policy.Apply turns a Policy into the exec.Cmd settings of a
//     worker (new user, mount, network, PID, IPC and UTS namespaces where
//     the kernel allows them, the worker's uid and gid, a cgroup v2 of
//     its own where vgpud's parent cgroup is delegated, the policy in the
//     worker's environment); PrepareDir hands the worker its private
//     directory and PrivateDir finds it from outside; SetDataLimit moves
//     a running worker's memory limit.
//   - the worker's half: Enter, called before the worker loads the OpenCL
//     runtime or serves a request, makes its root a file view that holds
//     only the policy's paths (where the host allows: a tmpfs of bind
//     mounts, its own /proc, a size-capped tmpfs as its private
//     directory, pivot_root, the host's root detached),
//     drops the capability it needed for that, sets resource limits and
//     no_new_privs,
//     restricts its thread with Landlock (files, network, signals) and a
//     seccomp allowlist (system calls; no process but threads and the
//     linker's spawn), and executes the worker again from
//     that thread, so that the whole new image, every thread it starts and
//     the linker PoCL runs inherit all of it; the new image then makes
//     itself non-dumpable and goes on.
//
// It derives a worker's policy from the OpenCL platform the ICD loader
// finds (FindPlatforms, PlatformPolicy: vendor files, libraries and their
// dependency closure, each vendor's device nodes, driver files and
// system calls), and it diagnoses a policy: in a worker whose filter
// reports to the main process (Policy.Diagnose), Supervise records every
// system call refused and every file the worker could not have. It knows
// what each vendor's runtime needs (PoCL's measured with strace, NVIDIA's
// with the diagnosis); it must not know the worker protocol, instances,
// trust domains or vgpud's devices: the caller says which directory a
// worker may write and how much memory it may take.
//
// Linux only; on other systems Probe reports nothing available, Apply
// changes nothing and Enter fails.
package sandbox
