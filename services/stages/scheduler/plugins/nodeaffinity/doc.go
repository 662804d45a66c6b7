// Package nodeaffinity is kube-scheduler's NodeAffinity: spec.nodeSelector
// and required node affinity as a filter, preferred node affinity as a
// score. It does no I/O: it reads the pod, the NodeInfos and the Snapshot of
// the cycle (see package framework).
package nodeaffinity
