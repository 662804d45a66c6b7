//go:build tools

// Package extra pins the modules of the conformance suite's extension API
// server images: k8s.io/sample-apiserver (the sample-apiserver image's
// binary, built by its main package) and go.etcd.io/etcd/server/v3 (the
// etcd image's, built by ./etcd).
package extra

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/sample-apiserver"
)
