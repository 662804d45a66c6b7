package apiserver

import (
	"net/url"
	"strings"
)

// queryBool reads a boolean query parameter as kube-apiserver's parameter
// codec does (apimachinery's Convert_Slice_string_To_bool): absent, "0"
// and "false" (any case) are false; anything else, the empty value
// included, is true. The Python client sends watch=True.
func queryBool(q url.Values, name string) bool {
	v, ok := q[name]
	if !ok || len(v) == 0 {
		return false
	}
	return v[0] != "0" && !strings.EqualFold(v[0], "false")
}
