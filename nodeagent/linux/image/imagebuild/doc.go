// Package imagebuild assembles OCI images in Go, without Docker: layers are
// tarballs built in memory from a list of files, images are
// mutate.AppendLayers on empty.Image with a config, and Push writes them to
// a registry. It builds podflow's own test images — the HTTP server of
// images/httpserver and a shell image from Debian's busybox-static — and
// the small images of tests.
//
// Builds are reproducible: every entry carries the same fixed modification
// time, so the same inputs give the same digests.
//
// Caller's obligations:
//
//  1. Name entries with clean relative paths; parents are not implied, list
//     the directories a layer needs (Layer does not add them).
//  2. Push to registries on loopback only (podflow never pushes elsewhere).
//
// Example:
//
//	img, err := imagebuild.HTTPServer("bin/httpserver")
//	if err != nil { ... }
//	err = imagebuild.Push(ctx, "127.0.0.1:5000", map[string]v1.Image{
//		"podflow/http:1": img, "library/nginx:latest": img,
//	})
package imagebuild
