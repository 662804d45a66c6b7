// Command etcd is the etcd server of the suite's etcd image
// (registry.k8s.io/etcd, /usr/local/bin/etcd), built from
// go.etcd.io/etcd/server/v3: etcdmain is the main package of upstream's
// etcd binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
