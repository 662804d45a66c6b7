// Package nodeports is kube-scheduler's NodePorts filter: the pod's host
// ports must be free on the node. It does no I/O: it reads the pod, the
// NodeInfos and the Snapshot of the cycle (see package framework).
package nodeports
