package raftstore

import (
	"unicode/utf8"
	"unsafe"

	"github.com/podflow/podflow/proto/storev1"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeCommand decodes a raft entry's data (or a write request, which
// the leader proposes as the entry) into cmd as vt.Unmarshal does, except
// that it copies less:
//
//   - a put's value at least half the entry's size is not copied: it
//     aliases data. Followers decode every write; the copy of the values
//     (the pods) was most of their decoding and of what they allocated
//     per write. A smaller value is copied, so no small value keeps a
//     large entry alive.
//   - the keys of ops and compares alias data too: the state machine
//     looks them up and stores a key it holds already, or a copy of a new
//     one (txn), so none of them outlives the command.
//   - the Ops and Compares cmd holds already are decoded into again (the
//     state machine's scratch command, fsm.scratch).
//
// Entry data is never written after raft hands it over (the transport
// and the log store decode each entry into its own buffer, and a NATS
// message's data is its own), so what aliases it may keep it.
func decodeCommand(data []byte, cmd *storev1.Command) error {
	if decodeCommandFast(data, cmd) {
		return nil
	}
	*cmd = storev1.Command{}
	return vt.Unmarshal(data, cmd)
}

// The field numbers decodeCommandFast reads.
const (
	commandIdempotencyKey protowire.Number = 1
	commandKind           protowire.Number = 2
	commandOps            protowire.Number = 4
	opType                protowire.Number = 1
	opKey                 protowire.Number = 2
	opValue               protowire.Number = 3
	compareKey            protowire.Number = 1
	compareModRevision    protowire.Number = 2
)

// decodeCommandFast decodes data as written by a Command's encoder: the
// fields of Command and Op it knows, of their wire types, strings valid
// UTF-8. On anything else it reports false, leaving cmd partly filled,
// and the caller decodes with vt.Unmarshal, which decides.
func decodeCommandFast(data []byte, cmd *storev1.Command) bool {
	b := data
	cmd.IdempotencyKey, cmd.Kind = "", 0
	cmd.Ops, cmd.Compares = cmd.Ops[:0], cmd.Compares[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == commandKind {
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			cmd.Kind = storev1.WriteKind(int32(v))
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case commandIdempotencyKey:
			if !utf8.Valid(v) {
				return false
			}
			cmd.IdempotencyKey = string(v)
		case commandCompares:
			var c *storev1.Compare
			cmd.Compares, c = grow(cmd.Compares)
			if !decodeCompareFast(v, c) {
				return false
			}
		case commandOps:
			var op *storev1.Op
			cmd.Ops, op = grow(cmd.Ops)
			if !decodeOpFast(v, len(data), op) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// grow returns s one element longer and that element, zero: the one s's
// array held there, cleared, or a new one.
func grow[M any, P interface {
	*M
	Reset()
}](s []P) ([]P, P) {
	if len(s) < cap(s) {
		s = s[:len(s)+1]
		if m := s[len(s)-1]; m != nil {
			m.Reset()
			return s, m
		}
	} else {
		s = append(s, nil)
	}
	m := P(new(M))
	s[len(s)-1] = m
	return s, m
}

// alias is b as a string, without a copy: b must never change.
func alias(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// decodeCompareFast is decodeCommandFast's decode of one Compare.
func decodeCompareFast(b []byte, c *storev1.Compare) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == compareKey && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return false
			}
			c.Key = alias(v)
			b = b[n:]
		case num == compareModRevision && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			c.ModRevision = int64(v)
			b = b[n:]
		default:
			return false
		}
	}
	return true
}

// decodeOpFast is decodeCommandFast's decode of one Op, whose command
// takes entry bytes.
func decodeOpFast(b []byte, entry int, op *storev1.Op) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == opType {
			if typ != protowire.VarintType {
				return false
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			op.Type = storev1.OpType(int32(v))
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case opKey:
			if !utf8.Valid(v) {
				return false
			}
			op.Key = alias(v)
		case opValue:
			if 2*len(v) >= entry && len(v) > 0 {
				op.Value = v[:len(v):len(v)]
			} else {
				op.Value = append([]byte{}, v...)
			}
		default:
			return false
		}
	}
	return true
}
