// Package ttlafterfinished is the TTL-after-finished controller stage,
// kube-controller-manager's pkg/controller/ttlafterfinished on
// services/controller: a Job with spec.ttlSecondsAfterFinished is deleted
// that many seconds after it finished (the lastTransitionTime of its
// Complete or Failed condition).
//
// # What it does, as kube's controller
//
//  1. It watches Jobs; a Job not finished, without a TTL or being deleted
//     is left alone.
//  2. A finished Job whose TTL has not run out is queued again for the
//     moment it runs out.
//  3. Once it ran out, the Job is read fresh from the store and checked
//     again (its TTL may have been changed meanwhile), then deleted
//     comparing the revision and uid read (kube's Preconditions{UID}):
//     a Job replaced by another of the same name is never deleted by
//     mistake.
//
// The deletion is foreground propagation, as kube's controller deletes
// (stage.DeleteObjectWith): the Job is marked with the foregroundDeletion
// finalizer and stays until the garbage collector stage deleted its pods.
//
// Replicas share the Jobs through the Runner's Leases, as every workload
// controller does; a sync is idempotent, so a replica killed mid-sync and
// its successor agree.
package ttlafterfinished
