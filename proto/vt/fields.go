package vt

import "google.golang.org/protobuf/encoding/protowire"

// EachBytesField calls f with the number and value of every
// length-delimited field (strings, bytes, messages, packed repeated
// fields) of the encoded message b, in order, and steps over the others.
// It stops at f's first error and returns it, and returns the parse error
// of a malformed b. A reader that needs a few fields of a large message
// (a pod's metadata, a node's status) takes them so without decoding the
// rest; b is not checked further (Unmarshal checks what it decodes).
func EachBytesField(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
