// Package interpodaffinity is kube-scheduler's InterPodAffinity: required
// pod affinity and anti-affinity (the pod's, and the existing pods' anti-
// affinity) as a filter, preferred terms both ways as a score. It does no
// I/O: it reads the pod, the NodeInfos and the Snapshot of the cycle (see
// package framework).
package interpodaffinity
