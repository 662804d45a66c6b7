// Package nodeunschedulable is kube-scheduler's NodeUnschedulable filter: a
// cordoned node runs only pods that tolerate its unschedulable taint. It
// does no I/O: it reads the pod, the NodeInfos and the Snapshot of the cycle
// (see package framework).
package nodeunschedulable
