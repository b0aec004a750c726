// A CoreDNS of our own for the real-node rig: CoreDNS's server with only the plugins the
// rig's Corefile uses (the kubernetes plugin answers Service names from the API server,
// as in a cluster; template answers NXDOMAIN for everything else, so nothing is
// forwarded off the machine). Importing coremain with a fixed directive list is how
// CoreDNS documents a build with selected plugins; the full default build would pull in
// every cloud provider's SDK.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// The order the plugins run in, as CoreDNS's plugin.cfg orders them.
var directives = []string{"bind", "ready", "health", "errors", "log", "template", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
