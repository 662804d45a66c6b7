// Package raftstore is filled in by its own issue.
package raftstore
