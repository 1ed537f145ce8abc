package child

/*
#include <signal.h>
#include <stdlib.h>
#include <string.h>

// vgpud_fault is reached only for a fault outside Go code: a kernel of a
// CPU OpenCL device (PoCL) writing through a wild pointer, dividing by
// zero or reaching a trap, on one of the runtime's threads. The Go runtime
// forwards such a signal to the handler that was there before it (this
// one) instead of handling it on a thread it does not own, where it would
// wait for an M forever. It restores the default action and raises the
// signal again: the process ends by it at once, and the main process
// counts a crash (worker.CauseSignal).
static void vgpud_fault(int sig, siginfo_t *si, void *uc) {
	(void)si;
	(void)uc;
	signal(sig, SIG_DFL);
	raise(sig);
}

// vgpud_fault_init runs before the Go runtime installs its own handlers,
// in a worker only (VGPUD_WORKER set, worker/child.EnvWorker): the runtime
// then keeps these as the handlers it forwards faults in non-Go code to.
__attribute__((constructor)) static void vgpud_fault_init(void) {
	const char *w = getenv("VGPUD_WORKER");
	if (w == NULL || w[0] == '\0') {
		return;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = vgpud_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigfillset(&sa.sa_mask);
	int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
	for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		sigaction(sigs[i], &sa, NULL);
	}
}
*/
import "C"

// faultEnv is the variable the constructor above reads: EnvWorker.
const faultEnv = "VGPUD_WORKER"
