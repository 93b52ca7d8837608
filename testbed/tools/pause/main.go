// Command pause is the sandbox ("infra") container of the testbed's real nodes: it holds a
// pod's namespaces open and does nothing else. Built here because no registry is reachable.
//
// As PID 1 of the pod it must reap orphaned children (or they stay zombies) and exit on the
// termination signals the runtime sends, since PID 1 has no default signal handlers.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
