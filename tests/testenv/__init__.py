"""The real test environment: etcd, an S3 server, a Kubernetes control plane and helm, built by
hack/ from pinned sources and started on loopback ports."""
