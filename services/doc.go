// Package services is filled in by its own issue.
package services
