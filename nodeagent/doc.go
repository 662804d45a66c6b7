// Package nodeagent is filled in by its own issue.
package nodeagent
