// Package podtopologyspread is kube-scheduler's PodTopologySpread: the pod's
// DoNotSchedule spread constraints as a filter, ScheduleAnyway ones (or the
// system defaults) as a score. It does no I/O: it reads the pod, the
// NodeInfos and the Snapshot of the cycle (see package framework).
package podtopologyspread
