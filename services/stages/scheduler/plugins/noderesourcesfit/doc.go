// Package noderesourcesfit is kube-scheduler's NodeResourcesFit: the pod's
// requests against what the node has left as a filter, LeastAllocated as a
// score. It does no I/O: it reads the pod, the NodeInfos and the Snapshot of
// the cycle (see package framework).
package noderesourcesfit
