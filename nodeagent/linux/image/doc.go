// Package image is a node's OCI image store: it pulls images with
// go-containerregistry, keeps their layers once in a content store under the
// node's data directory, and unpacks them into a root filesystem per
// container.
//
// Layout under Config.Dir:
//
//	blobs/sha256/<hex>        manifests and configs, by digest
//	layers/sha256/<hex>       uncompressed layer tarballs, by diffID
//	images.json               the image index: reference → image record
//	tmp/                      downloads in progress (cleared on start)
//
// References are normalised as Kubernetes and Docker do: "nginx" is
// "docker.io/library/nginx:latest". Config.Mirror stands in for docker.io
// (and so for every reference without a registry): "nginx" is fetched from
// the mirror as "library/nginx:latest". A reference naming another registry
// ("127.0.0.1:5000/podflow/http:1") is fetched from that registry.
//
// Caller's obligations:
//
//  1. Create one Store per node data directory with NewStore and Close it
//     when done; two Stores must not share a directory.
//  2. Pull before Rootfs: Rootfs unpacks only images already in the store.
//  3. Give Rootfs a dest that only it writes to until it returns; dest is
//     replaced wholesale unless the marker beside it (see Rootfs) says it
//     already holds this image.
//  4. Match failures by code: Pull fails with nodeagent.ErrImagePull or
//     nodeagent.ErrImageNeverPull, Rootfs with nodeagent.ErrCreateContainer;
//     the package sentinels (ErrNotPresent, ErrUnsafePath, ...) are wrapped
//     inside.
//
// Concurrency: every method is safe for concurrent use. Concurrent pulls of
// one reference share one download; pulls of different references run in
// parallel, with at most Config.Parallelism layer downloads at a time.
//
// Example:
//
//	s, err := image.NewStore(image.Config{Dir: "/var/lib/podflow/node-1/images",
//		Mirror: "127.0.0.1:5000", Parallelism: 4})
//	if err != nil { ... }
//	defer s.Close()
//	p, err := s.Pull(ctx, "nginx", "") // "" = Kubernetes' default policy
//	if err != nil { ... }              // errors.Is(err, nodeagent.ErrImagePull)
//	err = s.Rootfs(ctx, "nginx", "/var/lib/podflow/node-1/pods/<uid>/c/rootfs")
package image
