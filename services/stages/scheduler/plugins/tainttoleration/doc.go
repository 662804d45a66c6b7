// Package tainttoleration is kube-scheduler's TaintToleration: untolerated
// NoSchedule and NoExecute taints as a filter, PreferNoSchedule taints as a
// score. It does no I/O: it reads the pod, the NodeInfos and the Snapshot of
// the cycle (see package framework).
package tainttoleration
