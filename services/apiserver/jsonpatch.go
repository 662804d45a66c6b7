package apiserver

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// jsonPatch applies an RFC 6902 JSON patch (add, remove, replace, move,
// copy, test) to doc.
func jsonPatch(doc, patch []byte) ([]byte, error) {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		From  string          `json:"from"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("decode the JSON patch: %w", err)
	}
	for i, op := range ops {
		var val any
		if len(op.Value) > 0 {
			if err := json.Unmarshal(op.Value, &val); err != nil {
				return nil, fmt.Errorf("operation %d: value: %w", i, err)
			}
		}
		var err error
		switch op.Op {
		case "add":
			root, err = pointerSet(root, op.Path, val, true)
		case "replace":
			if _, err = pointerGet(root, op.Path); err == nil {
				root, err = pointerSet(root, op.Path, val, false)
			}
		case "remove":
			root, err = pointerRemove(root, op.Path)
		case "test":
			var got any
			if got, err = pointerGet(root, op.Path); err == nil && !reflect.DeepEqual(got, val) {
				err = fmt.Errorf("test of %q failed", op.Path)
			}
		case "move", "copy":
			var v any
			if v, err = pointerGet(root, op.From); err == nil {
				if op.Op == "move" {
					root, err = pointerRemove(root, op.From)
				}
				if err == nil {
					root, err = pointerSet(root, op.Path, v, true)
				}
			}
		default:
			err = fmt.Errorf("unknown op %q", op.Op)
		}
		if err != nil {
			return nil, fmt.Errorf("operation %d (%s %s): %w", i, op.Op, op.Path, err)
		}
	}
	return json.Marshal(root)
}

func pointerTokens(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("path %q does not start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func pointerGet(root any, p string) (any, error) {
	toks, err := pointerTokens(p)
	if err != nil {
		return nil, err
	}
	cur := root
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, fmt.Errorf("%q not found", p)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("%q: index %q out of range", p, t)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%q not found", p)
		}
	}
	return cur, nil
}

// pointerSet sets (insert true: adds, inserting into arrays) the value at p
// and returns the new root.
func pointerSet(root any, p string, v any, insert bool) (any, error) {
	toks, err := pointerTokens(p)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return v, nil
	}
	parent, err := pointerGet(root, "/"+strings.Join(escape(toks[:len(toks)-1]), "/"))
	if len(toks) == 1 {
		parent, err = root, nil
	}
	if err != nil {
		return nil, err
	}
	last := toks[len(toks)-1]
	switch c := parent.(type) {
	case map[string]any:
		c[last] = v
	case []any:
		i := len(c)
		if last != "-" {
			if i, err = strconv.Atoi(last); err != nil || i < 0 || i > len(c) || (!insert && i == len(c)) {
				return nil, fmt.Errorf("%q: index %q out of range", p, last)
			}
		}
		var n []any
		if insert {
			n = append(append(append([]any{}, c[:i]...), v), c[i:]...)
		} else {
			n = append([]any{}, c...)
			n[i] = v
		}
		return pointerSet(root, "/"+strings.Join(escape(toks[:len(toks)-1]), "/"), n, false)
	default:
		return nil, fmt.Errorf("%q: parent is not an object or array", p)
	}
	return root, nil
}

func pointerRemove(root any, p string) (any, error) {
	toks, err := pointerTokens(p)
	if err != nil || len(toks) == 0 {
		return nil, fmt.Errorf("cannot remove %q", p)
	}
	parentPath := "/" + strings.Join(escape(toks[:len(toks)-1]), "/")
	var parent any = root
	if len(toks) > 1 {
		if parent, err = pointerGet(root, parentPath); err != nil {
			return nil, err
		}
	}
	last := toks[len(toks)-1]
	switch c := parent.(type) {
	case map[string]any:
		if _, ok := c[last]; !ok {
			return nil, fmt.Errorf("%q not found", p)
		}
		delete(c, last)
		return root, nil
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i < 0 || i >= len(c) {
			return nil, fmt.Errorf("%q: index %q out of range", p, last)
		}
		n := append(append([]any{}, c[:i]...), c[i+1:]...)
		if len(toks) == 1 {
			return n, nil
		}
		return pointerSet(root, parentPath, n, false)
	}
	return nil, fmt.Errorf("%q not found", p)
}

func escape(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
	}
	return out
}
