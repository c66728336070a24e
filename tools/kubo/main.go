// Command ipfs is a stock Kubo daemon, built from the pinned Kubo module.
//
// Kubo releases from v0.40 carry `exclude` directives in their go.mod, which
// `go install module@version` refuses; this tiny module requires Kubo with the
// same directives and calls its entry point unchanged.
package main

import (
	"os"

	"github.com/ipfs/kubo/cmd/ipfs/kubo"
)

func main() {
	os.Exit(kubo.Start(kubo.BuildDefaultEnv))
}
