// Package bus is filled in by its own issue.
package bus
