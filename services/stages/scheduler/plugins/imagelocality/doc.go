// Package imagelocality is kube-scheduler's ImageLocality score: it prefers
// nodes that already have the pod's images, scaled by how many nodes have
// them. It does no I/O: it reads the pod, the NodeInfos and the Snapshot of
// the cycle (see package framework).
package imagelocality
