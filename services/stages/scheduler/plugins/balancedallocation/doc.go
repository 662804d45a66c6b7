// Package balancedallocation is kube-scheduler's
// NodeResourcesBalancedAllocation score: it prefers nodes whose cpu and
// memory would be used in balance with the pod. It does no I/O: it reads the
// pod, the NodeInfos and the Snapshot of the cycle (see package framework).
package balancedallocation
