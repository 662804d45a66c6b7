package manifest

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them; match with errors.Is, never by text.
var (
	// ErrTooLarge: the manifest is over Config.MaxBytes, holds more than
	// Config.MaxDocuments documents, or its YAML aliases expand to more than
	// Config.MaxAliasNodes nodes ("billion laughs").
	ErrTooLarge = errors.New("manifest: too large")
	// ErrUnknownField: a field the kind does not have (for Kubernetes kinds,
	// one k8s.io/api does not know; for podflow kinds, one the proto lacks).
	ErrUnknownField = errors.New("manifest: unknown field")
	// ErrDuplicateField: a field is given twice in one object.
	ErrDuplicateField = errors.New("manifest: duplicate field")
	// ErrUnsupportedKind: apiVersion/kind is missing or not one podflow knows.
	ErrUnsupportedKind = errors.New("manifest: unsupported kind")
	// ErrMalformed: not YAML or JSON, not an object, or a value of the wrong
	// type.
	ErrMalformed = errors.New("manifest: malformed")
	// ErrInvalidConfig: a Config failed Validate.
	ErrInvalidConfig = errors.New("manifest: invalid config")
)

// Error is a decoding failure located in the manifest. It wraps one of the
// sentinel errors above (errors.Is(err, ErrUnknownField) ...).
type Error struct {
	// Doc is the 0-based index of the document in the stream (documents
	// that are empty or only comments are not counted). Items of a
	// "kind: List" share their list's index; Field then starts with
	// "items[i]".
	Doc int
	// APIVersion, Kind, Namespace and Name identify the object when known.
	APIVersion, Kind, Namespace, Name string
	// Field is the path of the offending field in Kubernetes notation, e.g.
	// "spec.containers[0].imagePullPolcy"; empty when not about one field.
	Field string
	// Detail says what is wrong.
	Detail string
	// Err is the sentinel this error wraps.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "document %d", e.Doc)
	if e.Kind != "" {
		fmt.Fprintf(&b, " (%s", e.Kind)
		if e.Name != "" {
			b.WriteString(" ")
			if e.Namespace != "" {
				fmt.Fprintf(&b, "%q/", e.Namespace)
			}
			fmt.Fprintf(&b, "%q", e.Name)
		}
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "manifest: "))
	if e.Field != "" {
		fmt.Fprintf(&b, " %q", e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return "manifest: " + b.String()
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }
