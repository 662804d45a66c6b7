// Package image is a node's OCI image store: it pulls images with
// go-containerregistry, keeps their layers once in a content store under the
// node's data directory, and unpacks them into a root filesystem per
// container.
//
// Layout under Config.Dir:
//
//	blobs/sha256/<hex>        manifests and configs, by digest
//	layers/sha256/<hex>       uncompressed layer tarballs, by diffID
//	snapshots/<hex>           flattened root filesystem per image manifest
//	images.json               the image index: reference → image record
//	tmp/                      downloads and unpacks in progress (cleared on start)
//
// A container gets its root filesystem one of two ways:
//
//   - MountRootfs (the fast path, needs CAP_SYS_ADMIN): an overlay mount
//     with the image's snapshot, unpacked once per image, as its read-only
//     lower layer and the container's writes in dest+".rw". About a
//     millisecond, whatever the image's size.
//   - Rootfs: a full unpack of the layers into dest. No mount, no
//     privilege; costs one inode creation per file, which on slow disks is
//     hundreds of milliseconds for a busybox image.
//
// References are normalised as Kubernetes and Docker do: "nginx" is
// "docker.io/library/nginx:latest". Config.Mirror stands in for docker.io
// (and so for every reference without a registry): "nginx" is fetched from
// the mirror as "library/nginx:latest". A reference naming another registry
// ("127.0.0.1:5000/podflow/http:1") is fetched from that registry.
//
// Registry credentials: Pull with WithKeyring(KeyringFromSecrets(secrets))
// uses a pod's imagePullSecrets (kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg) as kubelet's keyring does: each credential
// whose key matches the image's registry (and repository prefix), more
// specific first, until one pulls; none matching, anonymously.
//
// Caller's obligations:
//
//  1. Create one Store per node data directory with NewStore and Close it
//     when done; two Stores must not share a directory.
//  2. Pull before Rootfs, Snapshot or MountRootfs: they use only images
//     already in the store.
//  3. Give Rootfs and MountRootfs a dest that only they write to until they
//     return; Rootfs replaces dest wholesale unless the marker beside it
//     (see Rootfs) says it already holds this image.
//  4. A mount made by MountRootfs belongs to the caller: remove it with
//     UnmountRootfs when the container is removed (also after a failure);
//     it survives a restart of the agent, and MountRootfs on the same dest
//     finds it again.
//  5. Match failures by class with errors.Is: Pull fails with ErrPull or
//     ErrNeverPull, Rootfs, Snapshot and MountRootfs with ErrRootfs; the
//     cause (ErrNotPresent, ErrUnsafePath, ...) is wrapped too. The node
//     agent maps the classes to its codes (nodeagent/linux).
//
// Concurrency: every method is safe for concurrent use. Concurrent pulls of
// one reference with the same credentials share one download; pulls of different references run in
// parallel, with at most Config.Parallelism layer downloads at a time.
//
// Example:
//
//	s, err := image.NewStore(image.Config{Dir: "/var/lib/podflow/node-1/images",
//		Mirror: "127.0.0.1:5000", Parallelism: 4})
//	if err != nil { ... }
//	defer s.Close()
//	p, err := s.Pull(ctx, "nginx", "") // "" = Kubernetes' default policy
//	if err != nil { ... }              // errors.Is(err, image.ErrPull)
//	rootfs := "/var/lib/podflow/node-1/pods/<uid>/c/rootfs"
//	err = s.MountRootfs(ctx, "nginx", rootfs) // or s.Rootfs without privilege
//	...
//	err = image.UnmountRootfs(rootfs)         // on container removal
package image
