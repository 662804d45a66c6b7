// Package resourcequota is the ResourceQuota controller stage, as kube's
// (pkg/controller/resourcequota): it keeps each quota's status.hard equal
// to spec.hard and status.used equal to the usage of the objects of its
// namespace the store holds, computed with kube's evaluators
// (services/quota.Usage). It syncs a namespace when one of its quotas is
// created or changed, when an object of a namespace with quotas is
// deleted or a pod of it changes (a finished pod uses no compute
// resources), and on every resync. That watch of every write runs only
// while some quota exists (and Config.WatchIdle after the last went):
// when it starts, every namespace with quotas is recounted from reads
// made after its start, so a delete before it is never missed.
//
// A sync reads the quota, then the objects, and writes the status with a
// compare-and-swap on the revision it read, so a charge made by quota
// admission in between is never overwritten: the write conflicts and the
// namespace is synced again. A sync is idempotent (nothing is written
// when the status is already right), so replicas, redoing one another's
// work after a kill, agree.
package resourcequota
