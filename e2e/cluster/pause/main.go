// The sandbox ("pause") image's one program, for the e2e real node where no registry serves
// registry.k8s.io/pause: it holds the pod's namespaces, reaps orphans (a pod sharing its
// process namespace makes it PID 1) and exits on SIGINT or SIGTERM, as upstream's does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
