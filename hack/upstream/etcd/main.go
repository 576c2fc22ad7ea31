// Command etcd is etcd's own server entry point, built here at the release Kubernetes pins.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
