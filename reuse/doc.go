// Package reuse is vgpud's result-reuse engine: a lookup table of kernel
// launches keyed by what determines their results, and a shadow result
// memory holding those results, bounded in bytes per reuse domain.
//
// It owns: launch keys and content digests (Digest, KeyBuilder), the
// reading of OpenCL C kernel signatures to decide what a kernel writes and
// whether it may be reused at all (ParseProgram), reuse domains with their
// byte budgets and LRU eviction (Engine, Domain), and the counters.
//
// It knows nothing of transports, guest memory, the command ring or
// scheduling: the aggregator asks it for keys, probes and records, and
// decides itself when device work runs. Package docs/reuse.md states the
// rules (which kernels are reused, how digests are formed, domains).
//
// Lock order: Engine.mu before Domain.mu; neither is held while calling
// out of the package.
package reuse
