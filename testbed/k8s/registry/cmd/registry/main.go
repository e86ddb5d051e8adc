// The CNCF distribution registry with only the filesystem storage driver: the testbed's nodes
// pull the guest image from it as a cluster pulls a user's image.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// serve/garbage-collect report their own errors and exit non-zero.
	_ = registry.RootCmd.Execute()
}
