// Package defaultpreemption is kube-scheduler's DefaultPreemption
// PostFilter: when no node fits a pod, it finds the node where deleting the
// fewest and least important pods of lower priority makes it fit. It decides
// only; the scheduler stage commits the preemption. It does no I/O: it reads
// the pod, the NodeInfos and the Snapshot of the cycle (see package
// framework).
package defaultpreemption
