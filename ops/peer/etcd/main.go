// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain)
// at the release k8s.io/kubernetes pins, built from the module proxy for
// the peer benchmark.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
