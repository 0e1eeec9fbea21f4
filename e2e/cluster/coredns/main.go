// CoreDNS with the three plugins the e2e real node's cluster DNS needs (bind, errors,
// kubernetes), as CoreDNS documents building a trimmed server: its own main setting the
// directive list, so the build leaves out the cloud and storage plugins of the full binary.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func init() {
	dnsserver.Directives = []string{"bind", "errors", "kubernetes"}
}

func main() { coremain.Run() }
