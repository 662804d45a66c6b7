// Package nodename is kube-scheduler's NodeName filter: a pod that names a
// node in spec.nodeName runs only there. It does no I/O: it reads the pod,
// the NodeInfos and the Snapshot of the cycle (see package framework).
package nodename
