package bus

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// pubAckByJSON is what nats.go's PublishMsg makes of a stream's answer.
func pubAckByJSON(data []byte) (*jetstream.PubAck, error) {
	var resp struct {
		Type  string              `json:"type"`
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if resp.PubAck == nil || resp.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return resp.PubAck, nil
}

var pubAckSeeds = []string{
	`{"stream":"PODFLOW_EVENTS","seq":1}`,
	`{"stream":"PODFLOW_EVENTS","seq":18446744073709551615,"duplicate":true}`,
	`{"stream":"S","domain":"hub","seq":0,"duplicate":false}`,
	`{"stream":"S","seq":18446744073709551616}`,
	`{"stream":"S","seq":01}`,
	`{"stream":"S","seq":-1}`,
	`{"stream":"S","seq":1.5}`,
	`{"stream":"S","seq":1,}`,
	`{"stream":"S", "seq":1}`,
	`{"Stream":"S","seq":1}`,
	`{"stream":"S\u0041","seq":1}`,
	`{"stream":"","seq":1}`,
	`{"stream":"S","stream":"","seq":1}`,
	`{"seq":3}`,
	`{"stream":"S","seq":1,"val":"7"}`,
	`{"error":{"code":503,"err_code":10077,"description":"maximum bytes exceeded"}}`,
	`{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"S"}`,
	`{}`,
	``,
	`null`,
	`{"stream":"S","seq":1`,
	`{"stream":"S","duplicate":tru}`,
	`{"stream":"S","duplicate":truex}`,
}

// TestParsePubAck: a stream's answer reads as nats.go reads it, whether
// scanPubAck reads it or encoding/json; the server's own PubAck is
// scanned.
func TestParsePubAck(t *testing.T) {
	for _, in := range pubAckSeeds {
		got, gerr := parsePubAck([]byte(in))
		want, werr := pubAckByJSON([]byte(in))
		switch {
		case (gerr == nil) != (werr == nil):
			t.Errorf("%s: error %v, want %v", in, gerr, werr)
		case werr != nil && !errors.Is(gerr, werr):
			t.Errorf("%s: error %v does not match %v", in, gerr, werr)
		case werr == nil && *got != *want:
			t.Errorf("%s: %+v, want %+v", in, *got, *want)
		}
	}
	for _, in := range []string{
		`{"stream":"PODFLOW_EVENTS","seq":42}`,
		`{"stream":"PODFLOW_EVENTS","seq":42,"duplicate":true}`,
		`{"stream":"PODFLOW_EVENTS","seq":42,"domain":"hub"}`,
	} {
		if _, ok := scanPubAck([]byte(in)); !ok {
			t.Errorf("%s is left to encoding/json", in)
		}
	}
}

// FuzzScanPubAck: whatever scanPubAck reads, encoding/json reads alike.
func FuzzScanPubAck(f *testing.F) {
	for _, s := range pubAckSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanPubAck(data)
		if !ok {
			return
		}
		want, err := pubAckByJSON(data)
		if err != nil {
			t.Fatalf("%q: scanned %+v, encoding/json refuses it: %v", data, *got, err)
		}
		if *got != *want {
			t.Fatalf("%q: scanned %+v, encoding/json reads %+v", data, *got, *want)
		}
	})
}

// BenchmarkParsePubAck: reading a PubAck by scanning, and as nats.go did
// (encoding/json).
func BenchmarkParsePubAck(b *testing.B) {
	in := []byte(`{"stream":"PODFLOW_EVENTS","seq":1234567,"duplicate":true}`)
	for _, bb := range []struct {
		name  string
		parse func([]byte) (*jetstream.PubAck, error)
	}{{"scan", parsePubAck}, {"encoding-json", pubAckByJSON}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.parse(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
