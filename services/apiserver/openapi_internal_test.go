package apiserver

import "testing"

// TestOpenAPIEveryGroupVersion: the OpenAPI v3 document of every served
// group version builds (a definition one refers to that openapi-gen was
// not given fails the whole of /openapi/v3; OPENAPI_PKGS in the
// Makefile), and so does /openapi/v2.
func TestOpenAPIEveryGroupVersion(t *testing.T) {
	t.Parallel()
	for gv := range resources {
		if _, err := openAPIDoc(gv); err != nil {
			t.Errorf("%s: %v", gv, err)
		}
	}
	if _, err := openAPIV2Doc(); err != nil {
		t.Errorf("/openapi/v2: %v", err)
	}
}
